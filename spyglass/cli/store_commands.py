"""The commands that query the store (sql, trace) and keep its schema (store migrate); the forensic
commands are registered from spyglass.forensics and spyglass.upgrades."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from spyglass.cli.options import ConfigOption, read_config


def _request_id(value: str) -> str:
    # An id pasted from `--format csv` or a terminal may carry a \r or spaces; an id never does.
    return value.strip()


RequestId = Annotated[
    str,
    typer.Argument(
        help="a request id (e.g. 20261019-124900-7aa82c), or its trace id"
        " (32 hex digits, e.g. from an exemplar on /metrics)",
        callback=_request_id,
    ),
]


class Format(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"


def sql(
    config: ConfigOption,
    query: Annotated[
        str | None,
        typer.Argument(
            help="One SELECT statement over the store's tables (events, checkpoints); - reads it from stdin."
        ),
    ] = None,
    file: Annotated[Path | None, typer.Option("--file", help="Read the query from this file.")] = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="table, csv or json")] = Format.table,
) -> None:
    """Run a read-only query on the store's tables. The forensic views (requests, cache_events, ...) are
    `spyglass views`'s: it puts them in front of a query, over a window."""
    from spyglass.forensics.run import ask_store
    from spyglass.query.bounded import QueryError, show

    text = query_text(query, file)
    cfg = read_config(config)
    try:
        answer = ask_store(cfg, text)  # in the agent (the warm path), on its copy; else the file or /api/sql
    except QueryError as exc:
        typer.echo(f"error: {exc}{views_hint(str(exc))}", err=True)
        raise typer.Exit(1) from None
    show(answer.columns, answer.rows, fmt.value)
    if answer.truncated:
        typer.echo(f"note: {answer.truncated}", err=True)


def query_text(query: str | None, file: Path | None) -> str:
    """The query: the argument, stdin for `-`, or --file's text; exit 2 unless exactly one gives it."""
    if (query is None) == (file is None):
        typer.echo("error: give one query: as the argument, - for stdin, or --file FILE", err=True)
        raise typer.Exit(2)
    if file is not None:
        try:
            return file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            typer.echo(f"error: --file {file}: {exc}", err=True)
            raise typer.Exit(2) from None
    return sys.stdin.read() if query == "-" else str(query)


def views_hint(error: str) -> str:
    """When a query names a forensic view as a table: say that `spyglass views` runs it."""
    import re

    from spyglass.forensics.views import VIEWS

    missing = re.search(r"Table with name (\w+) does not exist", error)
    if missing and missing.group(1) in VIEWS:
        return (
            f'\n{missing.group(1)} is a forensic view: `spyglass views "<the query>" -c CONFIG [--from ...]`'
            " runs a query over the views (`spyglass views` lists them)"
        )
    return ""


def trace_command(config: ConfigOption, request_id: RequestId) -> None:
    """Print one request's trace from the store: gateway, engine and its phases, with durations.

    The request is named by its id or by its trace id (a TTFT or duration exemplar's trace_id)."""
    from spyglass.forensics.trace import print_trace
    from spyglass.query.bounded import QueryError

    try:
        print_trace(read_config(config), request_id)
    except QueryError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


store_app = typer.Typer(no_args_is_help=True, help="The DuckDB store: its schema.")


@store_app.command("migrate")
def store_migrate(
    config: ConfigOption,
    batch: Annotated[int, typer.Option(min=1, help="Events read, typed and written per step.")] = 50_000,
) -> None:
    """Bring the store to the current schema (a table per event kind, the per-request rows) in one transaction; a
    kill leaves the old store whole. The agent does it at start; this does it without starting one (no agent may hold the file)."""
    import duckdb

    from spyglass.exporters.event_schema import SCHEMA_VERSION
    from spyglass.exporters.store import DuckDBStore

    cfg = read_config(config)
    try:
        store = DuckDBStore(cfg.store_path())
    except duckdb.IOException as exc:
        typer.echo(f"error: {cfg.store_path()}: {str(exc).splitlines()[0]}", err=True)
        raise typer.Exit(1) from None
    try:
        before = store.schema_version()

        def progress(done: int, total: int) -> None:
            typer.echo(f"migrated {done} of {total} events", err=True)

        store.sources = {**store.sources, **cfg.source_kinds()}
        moved = store.migrate(progress, batch)
    finally:
        store.close()
    typer.echo(
        f"{cfg.store_path()}: schema {before} -> {SCHEMA_VERSION}, {moved} events migrated"
        if before != SCHEMA_VERSION
        else f"{cfg.store_path()}: already at schema {SCHEMA_VERSION}"
    )
