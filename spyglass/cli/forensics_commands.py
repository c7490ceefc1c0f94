"""The analyst's commands (`timeline`, `requests`, `report`, `views`): options in, one query out, printed.

spyglass/cli/app.py registers these functions; everything they ask of the store goes through
spyglass.forensics.run.query. Exit status: 0 with rows, 1 when the window holds nothing (said on
stderr), 2 for a usage error (a bad time, --from after --to, an unknown report).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from spyglass.config import Config, ConfigError, load_config

if TYPE_CHECKING:
    from spyglass.forensics.changes import Deploy

# The query and tracing modules load DuckDB and OpenTelemetry: each command imports them when it
# runs, so that registering the commands costs every other `spyglass` command nothing.

ConfigOption = Annotated[Path, typer.Option("--config", "-c", help="The agent's TOML config file.")]
From = Annotated[
    str | None,
    typer.Option(
        "--from",
        help="Window start: '2026-10-19 04:45' (UTC unless it names a"
        " zone or --tz says otherwise), 2026-10-19T04:45:00Z,"
        " epoch seconds, or now-1h. Default: everything stored.",
    ),
]
To = Annotated[
    str | None, typer.Option("--to", help="Window end (exclusive), in the same forms. Default: everything stored.")
]
Since = Annotated[
    str | None,
    typer.Option(
        "--since", help="The window from this long ago to now (15m, 2h, 1d), or from a time as --from takes it."
    ),
]
Tz = Annotated[str, typer.Option("--tz", help="Zone of --from/--to/--since times that name none, e.g. Asia/Shanghai.")]
Format = Annotated[str, typer.Option("--format", "-f", help="table, json (one object a line) or csv.")]
Parquet = Annotated[
    str | None,
    typer.Option(
        "--parquet",
        help="Run over published Parquet segments instead of the store, e.g. 'seg/host=*/date=*/hour=*/*.parquet'.",
    ),
]
FORMATS = ("table", "json", "csv")
PUSHED = ("otlp", "alertmanager", "smoke")  # the sources of events posted to the agent (spans, alerts, smoke runs)


def fail(message: str, status: int) -> typer.Exit:
    typer.echo(f"error: {message}" if status == 2 else message, err=True)
    return typer.Exit(status)


def load(path: Path) -> Config:
    try:
        return load_config(path)
    except ConfigError as exc:
        raise fail(str(exc), 2) from None


def the_window(start: str | None, end: str | None, tz: str, since: str | None = None):
    """The window the options give (an open end: everything stored that way); exit 2 on a bad time."""
    from datetime import UTC

    from spyglass.forensics.times import window

    try:
        return window(start, end, tz, since, now=datetime.now(UTC))  # the present, read here at the edge
    except ValueError as exc:
        raise fail(str(exc), 2) from None


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise fail(f"--format: expected one of {', '.join(FORMATS)} (got {fmt!r})", 2)


def fetch(config: Config, q, parquet: str | None = None) -> tuple[list[str], list[tuple]]:
    from spyglass.forensics.run import query
    from spyglass.query.bounded import QueryError

    try:
        return query(config, q, parquet)
    except QueryError as exc:
        raise fail(str(exc), 1) from None


def load_deploys(
    cfg: Config, instance: str | None, until: datetime | None = None, parquet: str | None = None
) -> list[Deploy]:
    """The deploy records (engine starts, with what each said) up to `until`, of one instance or all;
    exit 1 on a query error. `timeline` merges them as changes; `changes` lists them."""
    from spyglass.collectors.serve_status import ServeStatusOptions
    from spyglass.forensics import changes as ch
    from spyglass.forensics.run import Window

    serve = frozenset(o.instance for o in cfg.sources_of(ServeStatusOptions).values() if o.instance)
    columns, rows = fetch(cfg, ch.deploys_query(Window(None, until), instance), parquet)
    return ch.deploys(ch.as_rows(columns, rows), cfg.alerts.probe_budget_seconds, serve)


def nothing(config: Config, w, what: str, parquet: str | None = None, hint: str = "") -> typer.Exit:
    """Exit 1, saying whether the window holds no events at all or only none of `what` (and `hint`: why it may be)."""
    from spyglass.forensics.run import Query
    from spyglass.forensics.times import describe

    _, rows = fetch(config, Query("SELECT count(*) FROM ev WHERE ts >= $from AND ts < $to", w.params()), parquet)
    stored = rows[0][0] if rows else 0
    detail = "no events are stored" if not stored else f"{stored} events are stored, but {what}"
    return fail(f"{detail} {describe(w)}" + (f"; {hint}" if stored and hint else ""), 1)


def timeline(
    config: ConfigOption,
    start: From = None,
    end: To = None,
    since: Since = None,
    tz: Tz = "UTC",
    source: Annotated[list[str] | None, typer.Option("--source", help="Only this source (repeatable).")] = None,
    instance: Annotated[list[str] | None, typer.Option("--instance", help="Only this instance (repeatable).")] = None,
    kind: Annotated[list[str] | None, typer.Option("--kind", help="Only this event kind (repeatable).")] = None,
    exclude_kind: Annotated[
        list[str] | None,
        typer.Option("--exclude-kind", help="Leave this event kind out (repeatable), e.g. --exclude-kind span."),
    ] = None,
    contains: Annotated[
        list[str] | None,
        typer.Option(
            "--contains",
            help="Only events whose source, instance,"
            " kind, request id or fields contain this text"
            " (case-sensitive, like LogQL's |=; repeatable:"
            " all must).",
        ),
    ] = None,
    request: Annotated[
        str | None, typer.Option("--request", help="One request's events (and its conversation's cache lines).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=100_000, help="At most this many events.")] = 1000,
    every_poll: Annotated[
        bool,
        typer.Option(
            "--every-poll",
            help="Every status poll (llama-server's, the serve's, supervisord's, the host's), not only those"
            " that changed what their source said.",
        ),
    ] = False,
    fmt: Format = "table",
    parquet: Parquet = None,
) -> None:
    """Every source's events of a window (default: everything stored) in time order, UTC and the display zone,
    one line an event (fields as key=value, cut to the terminal's width; whole to a pipe). A status poll is shown
    where it changed what its source said (health, state, build, pid) and at the window's start; --every-poll
    shows each."""
    from spyglass.forensics import output
    from spyglass.forensics.run import Window
    from spyglass.forensics.timeline import Filters, change_rows, merged, starts_query, timeline_query
    from spyglass.forensics.times import request_id_zones, request_window

    check_format(fmt)
    cfg = load(config)
    check_sources(cfg, source or [])
    w = the_window(start, end, tz, since)
    if request:
        try:
            around = request_window(request, request_id_zones(cfg))
        except ValueError as exc:
            raise fail(str(exc), 2) from None
        w = Window(w.start or around.start, w.end or around.end)
    polled = [] if every_poll else sorted({o.kind for o in cfg.sources.values()})
    f = Filters(source or [], instance or [], kind or [], exclude_kind or [], contains or [], request, polled)
    columns, rows = fetch(cfg, timeline_query(w, f, limit), parquet)
    changes: list = []
    if wants_changes(f) and fetch(cfg, starts_query(w), parquet)[1][0][0]:
        deploys = load_deploys(cfg, None, w.end, parquet)
        changes = [
            r for r in change_rows(deploys, w, f.sources, f.instances, f.kinds) if f.keeps(r[2], r[3], r[4], r[6])
        ]
        rows = merged(rows, changes)
    if not rows:
        filtered = source or instance or kind or exclude_kind or contains or request
        raise nothing(cfg, w, "none matches" if filtered else "none is in it", parquet)
    records = output.records(columns, rows[:limit], json_columns=("fields",))
    if fmt != "table":
        output.emit(records, fmt)
    else:
        total = rows_total(cfg, w, f, parquet, len(rows), limit) + len(changes)
        print_timeline(records, total, w, " (status polls: changes only)" if f.thinned_polls() else "")
    if len(rows) > limit:
        typer.echo(f"(stopped at --limit {limit:,}; narrow the window or raise the limit)", err=True)


def wants_changes(f) -> bool:
    from spyglass.forensics.timeline import wants_changes as wanted

    return wanted(f.sources, f.kinds, f.request) and not ({"build_changed", "model_changed"} <= set(f.exclude_kinds))


def rows_total(cfg: Config, w, f, parquet: str | None, fetched: int, limit: int) -> int:
    """How many events match: what was fetched, or (past the limit) a count."""
    from spyglass.forensics.timeline import count_query

    if fetched <= limit:
        return fetched
    return int(fetch(cfg, count_query(w, f), parquet)[1][0][0])


def print_timeline(records: list[dict], total: int, w, note: str = "") -> None:
    """One line an event, cut to the terminal's width; to a pipe or a file, whole. `note` ends the header."""
    import sys
    import textwrap

    from spyglass.forensics.timeline import event_lines
    from spyglass.forensics.times import describe
    from spyglass.terminal.console import terminal_width

    width = terminal_width(sys.stdout)
    shown = f"the first {len(records):,} of {total:,}" if total > len(records) else f"{total:,}"
    title = f"{shown} event{'' if total == 1 else 's'} {describe(w)}{note}"
    sys.stdout.write((textwrap.fill(title, width) if width else title) + "\n")
    for line in event_lines(records, width):
        sys.stdout.write(line + "\n")


def check_sources(cfg: Config, sources: list[str]) -> None:
    """Exit 2 naming the valid sources when --source names none of the config's."""
    unknown = [s for s in sources if s not in cfg.sources and s not in PUSHED]
    if unknown:
        raise fail(
            f"--source {unknown[0]}: no such source; the config's are {', '.join(sorted(cfg.sources))},"
            f" and {', '.join(PUSHED)} for what is pushed to the agent",
            2,
        )


def requests(
    config: ConfigOption,
    start: From = None,
    end: To = None,
    since: Since = None,
    tz: Tz = "UTC",
    slowest: Annotated[int | None, typer.Option(min=1, help="The N slowest, by gateway duration.")] = None,
    status: Annotated[str | None, typer.Option(help="429, 200, or a class: 4xx, 5xx.")] = None,
    session: Annotated[str | None, typer.Option(help="One session, e.g. auto:15eb3770f7f979bf.")] = None,
    lane: Annotated[str | None, typer.Option(help="fast or normal.")] = None,
    instance: Annotated[str | None, typer.Option(help="Engine instance, e.g. strata-b.")] = None,
    mode: Annotated[str | None, typer.Option(help="assembled, no_rag or passthrough.")] = None,
    finish: Annotated[str | None, typer.Option(help="stop, tool_calls, length.")] = None,
    outcome: Annotated[
        str | None, typer.Option(help="done, truncated, cancelled, error, or open (no end logged yet).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=100_000, help="At most this many requests.")] = 200,
    fmt: Format = "table",
    parquet: Parquet = None,
) -> None:
    """Find request ids (for `spyglass trace ID` and `spyglass timeline --request ID`)."""
    from spyglass.forensics import output
    from spyglass.forensics.finder import Filters, clock_note, requests_query, with_values
    from spyglass.forensics.times import describe

    check_format(fmt)
    cfg = load(config)
    w = the_window(start, end, tz, since)
    try:
        q = requests_query(w, Filters(session, lane, instance, mode, finish, status, outcome, slowest, limit))
    except ValueError as exc:
        raise fail(str(exc), 2) from None
    columns, rows = fetch(cfg, q, parquet)
    if not rows:
        raise nothing(cfg, w, "no request matches", parquet)
    matched = rows[0][-1]
    columns, rows = columns[:-1], [row[:-1] for row in rows]
    records = output.records(columns, rows)
    title = f"{output.counted(len(rows), 'request')} {describe(w)}"
    note = clock_note(records)
    if note:  # a line of its own, not wrapped to the table's width; json and csv stay data on stdout
        typer.echo(note, err=fmt != "table")
    if fmt == "table":  # the table shows the columns with a value; json and csv keep every column
        records = with_values(records)
    output.emit(records, fmt, title=title if fmt == "table" else None)
    if matched > len(rows) and not slowest:
        more(matched - len(rows), "request")


def more(n: int, noun: str) -> None:
    """The line under a list cut at its limit (on stderr: json and csv stay data)."""
    from spyglass.forensics.output import counted

    typer.echo(f"... {counted(n, 'more ' + noun)} match: raise --limit, or narrow the window or the filters", err=True)


def report(
    name: Annotated[str | None, typer.Argument(help="The report; none (or an unknown name) lists them.")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="The agent's TOML config file.")] = None,
    start: From = None,
    end: To = None,
    since: Since = None,
    tz: Tz = "UTC",
    request: Annotated[str | None, typer.Option(help="One request id (only four-counts takes one).")] = None,
    fmt: Format = "table",
    sql: Annotated[bool, typer.Option("--sql", help="Print the SQL that would run, and stop.")] = False,
    parquet: Parquet = None,
    html: Annotated[Path | None, typer.Option("--html", help="Also write a self-contained HTML page here.")] = None,
    limit: Annotated[
        int, typer.Option(min=1, max=1_000_000, help="At most this many rows (the page has them all).")
    ] = 200,
) -> None:
    """A canned report over a window (default: everything stored)."""
    from spyglass.forensics import output, reports
    from spyglass.forensics.times import describe

    check_format(fmt)
    if name is None:
        typer.echo(
            f"the reports (spyglass report NAME -c CONFIG [--from ...] [--to ...]):\n"
            f"{reports.listing(reports.load_all())}"
        )
        return
    try:
        chosen = reports.get(name)
    except reports.UnknownReport as exc:
        raise fail(str(exc.args[0]), 2) from None
    if request and not chosen.takes_request:
        takers = ", ".join(n for n, r in reports.load_all().items() if r.takes_request)
        raise fail(
            f"--request: report {name} covers the whole window and takes no request id (only {takers}"
            " does; `spyglass trace ID` and `timeline --request ID` show one request)",
            2,
        )
    if config is None:
        raise fail("give the store's config with --config (-c)", 2)
    cfg = load(config)
    w = the_window(start, end, tz, since)
    q = chosen.query(cfg, w, request)
    if sql:
        from spyglass.forensics.run import over_parquet

        typer.echo(over_parquet(q.text(cfg), parquet) if parquet else q.text(cfg))
        return
    columns, rows = fetch(cfg, q, parquet)
    if not rows:
        raise nothing(cfg, w, f"report {name} found nothing", parquet, chosen.when_empty)
    if html:
        from spyglass.forensics.page import report_page

        html.write_text(report_page(cfg, chosen.title, chosen.doc, w, columns, rows, parquet), encoding="utf-8")
        typer.echo(f"wrote {html.resolve()}", err=True)
    output.emit(
        output.records(columns, rows[:limit]), fmt, title=f"{chosen.title}\n{describe(w)}" if fmt == "table" else None
    )
    if len(rows) > limit:
        more(len(rows) - limit, "row")


def views(
    sql: Annotated[
        str | None,
        typer.Argument(
            help="A SELECT over the views; - reads it from stdin"
            " (a query that starts with a -- comment, as diagnose prints it)."
        ),
    ] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="The agent's TOML config file.")] = None,
    start: From = None,
    end: To = None,
    since: Since = None,
    tz: Tz = "UTC",
    fmt: Format = "table",
    parquet: Parquet = None,
) -> None:
    """Run a SELECT over the forensic views (docs/forensics.md) in a window, or list the views."""
    from spyglass.forensics import output
    from spyglass.forensics.run import Query
    from spyglass.forensics.views import VIEWS

    if sql is None:
        typer.echo('the views (spyglass views "SELECT ... FROM VIEW" -c CONFIG [--from ...] [--to ...]):')
        for name, view in VIEWS.items():
            typer.echo(f"  {name:<18} {view.doc}")
        return
    if config is None:
        raise fail("give the store's config with --config (-c) to run a query; without a query, views lists them", 2)
    check_format(fmt)
    cfg = load(config)
    w = the_window(start, end, tz, since)
    if sql == "-":
        import sys

        sql = sys.stdin.read()
    columns, rows = fetch(cfg, Query(sql, w.params()), parquet)
    if not rows:
        raise nothing(cfg, w, "the query returned no rows", parquet)
    output.emit(output.records(columns, rows), fmt)
