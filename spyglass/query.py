"""Read-only SQL over the store, from the CLI or through the running agent.

DuckDB lets no other process open the file while the agent writes it (duckdb-forensics.md §1),
so `spyglass sql` opens it read-only when it can and otherwise asks the agent's /api/sql, which
runs the query on a cursor of the agent's own connection. Either way only one SELECT or EXPLAIN
statement runs, file access is off, and a watchdog interrupts a query past its time limit.
"""
from __future__ import annotations

import csv
import datetime as dt
import json
import sys
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import httpx

ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
Result = tuple[list[str], list[tuple[Any, ...]]]


class QueryError(Exception):
    """A query that was refused or failed, phrased for the analyst."""


def check_readonly(con: duckdb.DuckDBPyConnection, query: str) -> None:
    try:
        statements = con.extract_statements(query)
    except duckdb.Error as exc:
        raise QueryError(str(exc)) from None
    if len(statements) != 1 or statements[0].type not in ALLOWED:
        kinds = ", ".join(s.type.name for s in statements) or "nothing"
        raise QueryError(f"only one SELECT or EXPLAIN statement is allowed (got {kinds})")


def execute(con: duckdb.DuckDBPyConnection, query: str, timeout: float = 60.0,
            max_rows: int = 100_000) -> Result:
    """Run one read-only statement on `con` (a cursor of its own), interrupted after `timeout`."""
    check_readonly(con, query)
    watchdog = threading.Timer(timeout, con.interrupt)
    watchdog.start()
    try:
        result = con.execute(query)
        columns = [d[0] for d in result.description or []]
        return columns, result.fetchmany(max_rows)
    except duckdb.InterruptException:
        raise QueryError(f"query interrupted after {timeout:.0f} s") from None
    except duckdb.Error as exc:
        raise QueryError(str(exc).splitlines()[0]) from None
    finally:
        watchdog.cancel()


def run_readonly(path: Path, query: str, api_url: str | None = None) -> Result:
    """Query the store file read-only, or through the agent that holds it."""
    if not path.exists():
        raise QueryError(f"no store at {path}: run `spyglass ingest` or `spyglass run` first")
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.IOException as exc:
        if "lock" not in str(exc).lower() or api_url is None:
            raise QueryError(str(exc).splitlines()[0]) from None
        return _via_agent(api_url, query)
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.execute("SET enable_external_access = false")
        return execute(con, query)
    finally:
        con.close()


def _via_agent(api_url: str, query: str) -> Result:
    try:
        response = httpx.post(api_url, json={"query": query}, timeout=120.0)
    except httpx.HTTPError as exc:
        raise QueryError(f"the store is locked by a running agent, and {api_url} did not answer: {exc}") from None
    body = response.json()
    if response.status_code != 200:
        raise QueryError(body.get("error", response.text))
    return body["columns"], [tuple(row) for row in body["rows"]]


def jsonable(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    return value


def nested(value: Any) -> Any:
    """A JSON column's value as JSON, not as a string of JSON: DuckDB hands JSON back as text."""
    value = jsonable(value)
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def show(columns: list[str], rows: list[tuple[Any, ...]], fmt: str) -> None:
    """Print a result as a rich table, CSV (LF line ends) or JSON lines (JSON columns nested)."""
    if fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[jsonable(v) for v in row] for row in rows])
    elif fmt == "json":
        for row in rows:
            print(json.dumps({c: nested(v) for c, v in zip(columns, row)}, default=str, ensure_ascii=False))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(*columns)
        for row in rows:
            table.add_row(*("" if v is None else str(jsonable(v)) for v in row))
        Console().print(table)
