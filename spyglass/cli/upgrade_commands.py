"""The upgrade commands (`changes`, `crashes`): options in, queries out through run.query, printed.

spyglass/cli/app.py registers them. Exit status as for the other forensic commands: 0 with rows, 1 when
there is nothing to show (said on stderr), 2 for a usage error.
"""

from __future__ import annotations

from typing import Annotated

import typer

from spyglass.cli.forensics_commands import (
    ConfigOption,
    Format,
    From,
    Since,
    To,
    Tz,
    check_format,
    fail,
    load,
    load_deploys,
    the_window,
)

Instance = Annotated[str | None, typer.Option("--instance", help="Engine instance, e.g. strata-b (default: all).")]
StartsSince = Annotated[
    str | None,
    typer.Option(
        "--since",
        help="Only starts from this time on (their predecessor"
        " is still compared): '2026-10-19 06:00', now-1h,"
        " or a duration back from now (2h).",
    ),
]


def show(rows: list[dict], fmt: str, title: str) -> None:
    """Print rows (as data: output.emit reads no markup); in a table a list (evidence) is one item a line."""
    from spyglass.forensics import output
    from spyglass.terminal.cells import Lines

    rows = [
        {k: Lines(v) if isinstance(v, list) and fmt == "table" else output.value_of(k, v) for k, v in r.items()}
        for r in rows
    ]
    output.emit(rows, fmt, title=title if fmt == "table" else None)


def counted(n: int, noun: str) -> str:
    from spyglass.forensics.output import counted as plural

    return plural(n, noun)


SinceTz = Annotated[str, typer.Option("--tz", help="Zone of a --since time that names none, e.g. Asia/Shanghai.")]


def changes(
    config: ConfigOption,
    instance: Instance = None,
    since: StartsSince = None,
    tz: SinceTz = "UTC",
    show_deploys: Annotated[bool, typer.Option("--deploys", help="List the deploy records instead.")] = False,
    fmt: Format = "table",
) -> None:
    """What changed between consecutive starts of an instance: model md5, real file, build, every argument,
    serve and gateway version, CPUs; and what a start's banner did not say."""
    from spyglass.forensics import changes as ch

    check_format(fmt)
    cfg = load(config)
    w = the_window(None, None, tz, since)
    records = load_deploys(cfg, instance)
    if show_deploys:
        rows = [ch.deploy_dict(d) for d in records if w.start is None or d.at >= w.start]
        what = "deploy"
    else:
        rows = [ch.as_dict(c) for c in ch.change_list(records, w.start)]
        what = "change"
    if not rows:
        raise fail(
            f"no engine start is stored{' for ' + instance if instance else ''}{' since ' + since if since else ''}", 1
        )
    show(rows, fmt, counted(len(rows), what))


def crashes(
    config: ConfigOption, start: From = None, end: To = None, since: Since = None, tz: Tz = "UTC", fmt: Format = "table"
) -> None:
    """Every unexpected exit, failed start or latency avalanche of the window, as one of the upgrade seed's four
    appearances (process exit, restart loop, latency avalanche, resource growth), with evidence and the first check."""
    from spyglass.upgrades import crashes as cr

    check_format(fmt)
    cfg = load(config)
    w = the_window(start, end, tz, since)
    from spyglass.query.bounded import QueryError

    try:
        found = cr.classify(cfg, w)
    except QueryError as exc:
        raise fail(str(exc), 1) from None
    if not found:
        raise fail("no crash, failed start or latency avalanche in the window", 1)
    show([cr.as_dict(f) for f in found], fmt, counted(len(found), "finding"))


def baseline(
    config: ConfigOption,
    instance: Annotated[str, typer.Option("--instance", help="Engine instance, e.g. strata-b.")],
    deploy: Annotated[
        int | None, typer.Option("--deploy", min=1, help="Deploy number (`spyglass changes`); default: the last.")
    ] = None,
    fmt: Format = "table",
) -> None:
    """The hour after a deploy against the previous steady state (H18): TTFT p50/p99, decode rate, error share,
    prefill queue, graph rebuilds a minute, memory; a metric past the heuristic's factor is marked worse."""
    from spyglass.forensics import baseline as bl
    from spyglass.query.bounded import QueryError

    check_format(fmt)
    cfg = load(config)
    try:
        w, rows = bl.baseline(cfg, instance, deploy)
    except ValueError as exc:
        raise fail(f"{instance}: {exc}", 1) from None
    except QueryError as exc:
        raise fail(str(exc), 1) from None
    show(rows, fmt, bl.describe(w))
