"""Results as a person or a pipe wants them: a rich table, JSON lines, or CSV.

Values are normalised first (`records`), so an answer read from the file and one that came
through the agent's JSON API print the same: instants as ISO-8601 (`Z` for UTC, `+08:00` for the
`_local` columns), JSON columns nested in JSON output.
"""

from __future__ import annotations

import csv
import json
import sys
from datetime import datetime
from decimal import Decimal
from typing import Any, TextIO

from spyglass.forensics.times import local_text, utc_text
from spyglass.terminal.cells import ISO, print_table
from spyglass.terminal.console import csv_cell, json_line


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
