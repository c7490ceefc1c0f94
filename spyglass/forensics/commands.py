"""The analyst's commands (`timeline`, `requests`, `report`, `views`): options in, one query out, printed.

spyglass/cli.py registers these functions; everything they ask of the store goes through
spyglass.forensics.run.query. Exit status: 0 with rows, 1 when the window holds nothing (said on
stderr), 2 for a usage error (a bad time, --from after --to, an unknown report).
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from spyglass.config import Config, ConfigError, load_config

# The query and tracing modules load DuckDB and OpenTelemetry: each command imports them when it
# runs, so that registering the commands costs every other `spyglass` command nothing.

ConfigOption = Annotated[Path, typer.Option("--config", "-c", help="The agent's TOML config file.")]
From = Annotated[str | None, typer.Option("--from", help="Window start, e.g. '2026-10-19 04:45' (UTC unless it"
                                                          " names a zone or --tz says otherwise).")]
To = Annotated[str | None, typer.Option("--to", help="Window end (exclusive).")]
Tz = Annotated[str, typer.Option("--tz", help="Zone of --from/--to times that name none, e.g. Asia/Shanghai.")]
Format = Annotated[str, typer.Option("--format", "-f", help="table, json (one object a line) or csv.")]
Parquet = Annotated[str | None, typer.Option("--parquet", help="Run over published Parquet segments instead"
                                             " of the store, e.g. 'seg/host=*/date=*/hour=*/*.parquet'.")]
FORMATS = ("table", "json", "csv")


def fail(message: str, status: int) -> typer.Exit:
    typer.echo(f"error: {message}" if status == 2 else message, err=True)
    return typer.Exit(status)


def load(path: Path) -> Config:
    try:
        return load_config(path)
    except ConfigError as exc:
        raise fail(str(exc), 2) from None


def the_window(start: str | None, end: str | None, tz: str, required: bool = True):
    from spyglass.forensics.times import window

    if required and not (start and end):
        raise fail("give the window with --from and --to", 2)
    try:
        return window(start, end, tz)
    except ValueError as exc:
        raise fail(str(exc), 2) from None


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise fail(f"--format: expected one of {', '.join(FORMATS)} (got {fmt!r})", 2)


def fetch(config: Config, q, parquet: str | None = None) -> tuple[list[str], list[tuple]]:
    from spyglass.forensics.run import query
    from spyglass.query import QueryError

    try:
        return query(config, q, parquet)
    except QueryError as exc:
        raise fail(str(exc), 1) from None


def nothing(config: Config, w, what: str, parquet: str | None = None) -> typer.Exit:
    """Exit 1, saying whether the window holds no events at all or only none of `what`."""
    from spyglass.forensics.run import Query
    from spyglass.forensics.times import describe

    _, rows = fetch(config, Query("SELECT count(*) FROM ev WHERE ts >= $from AND ts < $to", w.params()), parquet)
    stored = rows[0][0] if rows else 0
    detail = "no events are stored" if not stored else f"{stored} events are stored, but {what}"
    return fail(f"{detail} {describe(w)}", 1)


def timeline(config: ConfigOption, start: From = None, end: To = None, tz: Tz = "UTC",
             source: Annotated[list[str] | None, typer.Option("--source", help="Only this source (repeatable).")] = None,
             instance: Annotated[list[str] | None, typer.Option("--instance", help="Only this instance (repeatable).")] = None,
             kind: Annotated[list[str] | None, typer.Option("--kind", help="Only this event kind (repeatable).")] = None,
             request: Annotated[str | None, typer.Option("--request", help="One request's events (and its"
                                                                            " conversation's cache lines).")] = None,
             limit: Annotated[int, typer.Option(min=1, max=100_000, help="At most this many events.")] = 1000,
             fmt: Format = "table", parquet: Parquet = None) -> None:
    """Every source's events of a window in time order, UTC and Beijing time, one line an event."""
    from spyglass.forensics import output
    from spyglass.forensics.run import Window
    from spyglass.forensics.timeline import change_rows, merged, starts_query, timeline_query, wants_changes
    from spyglass.forensics.times import describe, request_window

    check_format(fmt)
    cfg = load(config)
    w = the_window(start, end, tz, required=not request)
    if request:
        try:
            around = request_window(request)
        except ValueError as exc:
            raise fail(str(exc), 2) from None
        w = Window(w.start or around.start, w.end or around.end)
    columns, rows = fetch(cfg, timeline_query(w, source or [], instance or [], kind or [], request, limit), parquet)
    if wants_changes(source or [], kind or [], request) and fetch(cfg, starts_query(w), parquet)[1][0][0]:
        from spyglass.forensics.upgrades import load_deploys

        records = load_deploys(cfg, None, w.end, parquet)
        rows = merged(rows, change_rows(records, w, source or [], instance or [], kind or []))
    if not rows:
        raise nothing(cfg, w, "none matches" if (source or instance or kind or request) else "none is in it", parquet)
    records = output.records(columns, rows[:limit], json_columns=("fields",))
    output.emit(records, fmt, title=f"{len(records)} events {describe(w)}" if fmt == "table" else None, fold=False)
    if len(rows) > limit:
        typer.echo(f"(stopped at --limit {limit}; narrow the window or raise the limit)", err=True)


def requests(config: ConfigOption, start: From = None, end: To = None, tz: Tz = "UTC",
             slowest: Annotated[int | None, typer.Option(min=1, help="The N slowest, by gateway duration.")] = None,
             status: Annotated[str | None, typer.Option(help="429, 200, or a class: 4xx, 5xx.")] = None,
             session: Annotated[str | None, typer.Option(help="One session, e.g. auto:15eb3770f7f979bf.")] = None,
             lane: Annotated[str | None, typer.Option(help="fast or normal.")] = None,
             instance: Annotated[str | None, typer.Option(help="Engine instance, e.g. strata-b.")] = None,
             mode: Annotated[str | None, typer.Option(help="assembled, no_rag or passthrough.")] = None,
             finish: Annotated[str | None, typer.Option(help="stop, tool_calls, length.")] = None,
             limit: Annotated[int, typer.Option(min=1, max=100_000)] = 200, fmt: Format = "table",
             parquet: Parquet = None) -> None:
    """Find request ids (for `spyglass trace ID` and `spyglass timeline --request ID`)."""
    from spyglass.forensics import output
    from spyglass.forensics.finder import Filters, requests_query
    from spyglass.forensics.times import describe

    check_format(fmt)
    cfg = load(config)
    w = the_window(start, end, tz)
    try:
        q = requests_query(w, Filters(session, lane, instance, mode, finish, status, slowest, limit))
    except ValueError as exc:
        raise fail(str(exc), 2) from None
    columns, rows = fetch(cfg, q, parquet)
    if not rows:
        raise nothing(cfg, w, "no request matches", parquet)
    output.emit(output.records(columns, rows), fmt, title=f"{len(rows)} requests {describe(w)}"
                if fmt == "table" else None)


def report(name: Annotated[str, typer.Argument(help="The report; an unknown name lists them all.")],
           config: ConfigOption, start: From = None, end: To = None, tz: Tz = "UTC",
           request: Annotated[str | None, typer.Option(help="One request id (four-counts).")] = None,
           fmt: Format = "table",
           sql: Annotated[bool, typer.Option("--sql", help="Print the SQL that would run, and stop.")] = False,
           parquet: Parquet = None,
           html: Annotated[Path | None, typer.Option("--html", help="Also write a self-contained HTML page here.")]
           = None) -> None:
    """A canned report over a window (default: everything stored)."""
    from spyglass.forensics import output, reports
    from spyglass.forensics.times import describe

    check_format(fmt)
    try:
        chosen = reports.get(name)
    except reports.UnknownReport as exc:
        raise fail(str(exc.args[0]), 2) from None
    cfg = load(config)
    w = the_window(start, end, tz, required=False)
    q = chosen.query(cfg, w, request)
    if sql:
        from spyglass.forensics.run import over_parquet

        typer.echo(over_parquet(q.text(cfg), parquet) if parquet else q.text(cfg))
        return
    columns, rows = fetch(cfg, q, parquet)
    if not rows:
        raise nothing(cfg, w, f"report {name} found nothing", parquet)
    if html:
        from spyglass.forensics.page import report_page

        html.write_text(report_page(cfg, chosen.title, chosen.doc, w, columns, rows, parquet), encoding="utf-8")
    output.emit(output.records(columns, rows), fmt, title=f"{chosen.title}\n{describe(w)}" if fmt == "table" else None)


def views(sql: Annotated[str | None, typer.Argument(help="A SELECT over the views.")] = None,
          config: Annotated[Path | None, typer.Option("--config", "-c", help="The agent's TOML config file.")] = None,
          start: From = None, end: To = None, tz: Tz = "UTC", fmt: Format = "table",
          parquet: Parquet = None) -> None:
    """Run a SELECT over the forensic views (docs/forensics.md) in a window, or list the views."""
    from spyglass.forensics import output
    from spyglass.forensics.run import Query
    from spyglass.forensics.views import VIEWS

    if sql is None or config is None:
        for name, view in VIEWS.items():
            typer.echo(f"{name:<18} {view.doc}")
        return
    check_format(fmt)
    cfg = load(config)
    w = the_window(start, end, tz, required=False)
    columns, rows = fetch(cfg, Query(sql, w.params()), parquet)
    if not rows:
        raise nothing(cfg, w, "the query returned no rows", parquet)
    output.emit(output.records(columns, rows), fmt)
