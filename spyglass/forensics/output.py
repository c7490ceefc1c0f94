"""Results as a person or a pipe wants them: a rich table, JSON lines, or CSV.

Values are normalised first (`records`), so an answer read from the file and one that came
through the agent's JSON API print the same: instants as ISO-8601 (`Z` for UTC, `+08:00` for the
`_local` columns), JSON columns nested in JSON output.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from datetime import datetime
from decimal import Decimal
from typing import Any, TextIO

from spyglass.forensics.times import local_text, utc_text
from spyglass.terminal.console import csv_cell, json_line, plain

ISO = re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?([+-]\d\d:?\d\d|Z)?$")


def counted(n: int, noun: str) -> str:
    """`1 finding`, `2 findings`, `11,894 events`."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def value_of(column: str, value: Any) -> Any:
    if isinstance(value, str) and ISO.match(value):
        value = datetime.fromisoformat(value)  # a timestamp that came through the agent's API as text
    if isinstance(value, datetime):
        return local_text(value) if column.endswith("_local") else utc_text(value)
    if isinstance(value, Decimal):
        return float(value)
    return value


def records(columns: list[str], rows: list[tuple[Any, ...]], json_columns: tuple[str, ...] = ()) -> list[dict]:
    out = []
    for row in rows:
        record = {c: value_of(c, v) for c, v in zip(columns, row)}
        for c in json_columns:
            if isinstance(record.get(c), str):
                record[c] = json.loads(record[c])
        out.append(record)
    return out


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


def emit(rows: list[dict], fmt: str, title: str | None = None, out: TextIO | None = None) -> None:
    """Print records as `table` (rich), `json` (one object a line, nested) or `csv`. A table wider than the
    terminal keeps its key columns whole and gives way in its others (spyglass.terminal.layout). To a pipe or a
    file (no terminal, no COLUMNS) a table is as wide as its longest row: nothing cut."""
    out = out or sys.stdout
    if fmt == "json":
        for record in rows:
            out.write(json_line(record) + "\n")
    elif fmt == "csv":
        if rows:
            writer = csv.writer(out)
            writer.writerow([csv_cell(c) for c in rows[0]])
            writer.writerows(
                [[csv_cell(json.dumps(v) if isinstance(v, (dict, list)) else v) for v in r.values()] for r in rows]
            )
    elif rows:
        from rich.text import Text

        print_table(list(rows[0]), [list(r.values()) for r in rows], Text(title) if title else None, out)


def print_table(names: list[str], values: list[list[Any]], title: Any = None, out: TextIO | None = None) -> None:
    """A table of `values` (rows, in `names`' order) on a terminal or a pipe, as spyglass.terminal.layout lays it out;
    every cell is data (table_cell)."""
    from spyglass.terminal.layout import show

    show(names, values, [[table_cell(v, c) for c, v in zip(names, row)] for row in values], title, out)
