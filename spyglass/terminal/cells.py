"""A value as a table cell: numbers as a person reads them (`2,508`, `0.8712`), an instant without the zone its
column's header names, a dict as `k=v` pairs, and every cell data, never markup (spyglass.terminal.console.plain).
What the forensic commands print (spyglass.forensics.output) and the backtest's report lay out alike."""

from __future__ import annotations

import json
import re
from typing import Any, TextIO

from spyglass.terminal.console import plain

ISO = re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?([+-]\d\d:?\d\d|Z)?$")


def cell(value: Any, column: str = "") -> str:
    if isinstance(value, str) and column.endswith(("_utc", "_local")) and ISO.match(value):
        return value.replace("T", " ", 1).removesuffix("Z").removesuffix("+08:00")  # the header names the zone
    if value is None:
        return ""
    if isinstance(value, dict):
        return " ".join(f"{k}={cell(v, k)}" for k, v in value.items() if v is not None)
    if isinstance(value, list):
        return json.dumps(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value) if is_label(column) else number(value)
    return str(value)


LABEL = re.compile(r"(^|_)(pid|port|task|deploy|seq|id|code|signal|status|exit_status|year)$")


def is_label(column: str) -> bool:
    """A column whose numbers name something (a pid, a port, a deploy, a status) rather than count it."""
    return bool(LABEL.search(column))


def number(value: int | float) -> str:
    """A quantity as a person reads it: thousands separated (`2,508`, `75,677,700`), never `7.56777e+07`;
    a fraction to four significant digits (`0.8712`, `8.93`)."""
    if isinstance(value, int) or (value.is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


class Lines(list):
    """A value printed one item a line in a table (evidence), as a JSON list elsewhere."""


def table_cell(value: Any, column: str = "") -> Any:
    """A table cell as data (spyglass.terminal.console.plain): a log line's `[load]` or `[/x]` prints as written,
    an escape sequence as `\\x1b[2J`."""
    if isinstance(value, Lines):
        from rich.text import Text

        return Text("\n").join(plain(cell(item)) for item in value)
    return plain(cell(value, column))


def print_table(names: list[str], values: list[list[Any]], title: Any = None, out: TextIO | None = None) -> None:
    """A table of `values` (rows, in `names`' order) on a terminal or a pipe, as spyglass.terminal.layout lays it out;
    every cell is data (table_cell)."""
    from spyglass.terminal.layout import show

    show(names, values, [[table_cell(v, c) for c, v in zip(names, row)] for row in values], title, out)
