"""The `spyglass diagnose` command: options in, the diagnosis out (a rich table, JSON, an HTML page).

Exit status: 0 no findings, 1 warnings only (or a window with nothing stored: nothing to judge),
2 a critical finding or a usage error. The heavy modules load when the command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from spyglass.cli.forensics_commands import ConfigOption, From, Parquet, Since, To, Tz, fail, load, the_window
from spyglass.terminal.console import json_line, shown

Html = Annotated[Path | None, typer.Option("--html", help="Also write a self-contained HTML report page here.")]


def when(start, end) -> str:
    """The date, then `07:24:10-07:59:40 UTC` and the same in the display zone (dates added where they differ),
    unless that is UTC."""
    from spyglass.collectors.clock import display_zone, is_utc, zone_label
    from spyglass.forensics.times import local_text, utc_text

    if not start:
        return ""
    lines = [utc_text(start)[:10]]
    clocks = [(utc_text, "UTC")] + ([] if is_utc(display_zone()) else [(local_text, zone_label(display_zone(), start))])
    for text, zone in clocks:
        a, b = text(start), text(end) if end else ""
        head = a[11:19] if a[:10] == lines[0] else a[:19].replace("T", " ")
        tail = b[11:19] if b[:10] == a[:10] else b[:19].replace("T", " ")
        lines.append(f"{head}-{tail} {zone}")
    return "\n".join(lines)


def print_table(diagnosis, out=None, config: Path | None = None) -> None:
    """The findings as tables. Every value is data (spyglass.terminal.console.plain): a `[/x]` or an escape
    sequence in a log line, an instance name or a figure prints as written and is never obeyed."""
    from rich.table import Table
    from rich.text import Text

    from spyglass.forensics.times import describe
    from spyglass.terminal.cells import number
    from spyglass.terminal.console import console_for, plain, terminal_width

    count = len(diagnosis.findings)
    copied: set[int] = set()  # the parts printed as they are, never wrapped by rich: the evidence SQL
    parts: list = [
        plain(
            f"{count} finding{'' if count == 1 else 's'} {describe(diagnosis.window)}"
            f" ({diagnosis.events:,} events; checked {', '.join(diagnosis.checked)})"
        )
    ]
    if diagnosis.not_applicable:
        parts.append(
            plain("not applicable here: " + "; ".join(f"{h} ({why})" for h, why in diagnosis.not_applicable.items()))
        )
    if diagnosis.not_checked:
        parts.append(plain("could not check: " + "; ".join(f"{h} ({why})" for h, why in diagnosis.not_checked.items())))
    if diagnosis.unchecked:  # no probe over the store for them: Prometheus's rules watch them
        parts.append(plain(f"watched by the alerts only (no probe of the store): {', '.join(diagnosis.unchecked)}"))
    if diagnosis.findings:
        table = Table(title_justify="left")
        table.add_column("severity", no_wrap=True, min_width=8)
        table.add_column("heuristic", no_wrap=True, min_width=4)
        table.add_column("where", no_wrap=True)
        table.add_column("when", no_wrap=True)
        table.add_column("summary", overflow="fold", ratio=1)
        for f in diagnosis.findings:
            table.add_row(
                plain(f.severity),
                plain(f.heuristic),
                plain(f.instance or (f"lane {f.lane}" if f.lane else "")),
                Text(when(f.start, f.end)),
                plain(f.summary),
            )
        parts.append(table)
    for f in diagnosis.findings:
        detail = Table(
            title=plain(f"{f.heuristic} {f.title} — {f.alert} ({f.instance or f.lane or 'window'})"),
            title_justify="left",
            show_header=False,
        )
        detail.add_column("what", style="bold", no_wrap=True)
        detail.add_column("value", overflow="fold")
        for name, value in f.figures.items():
            detail.add_row(plain(name), plain(number(value)))
        if f.trace_request_id:
            detail.add_row("trace", plain(f"spyglass trace {f.trace_request_id}"))
        detail.add_row("not", plain(f.wrong_guess))
        detail.add_row("check", plain(f.check))
        detail.add_row("knobs", plain("; ".join(f.knobs)))
        sql = Text("\n").join(plain(line) for line in f.evidence.splitlines())
        copied.add(id(sql))
        parts += [
            detail,
            Text("evidence (runs as printed; the SQL is read from stdin):", style="dim"),
            Text("\n").join(
                plain(line) for line in evidence_command(diagnosis.window, config, terminal_width(out)).splitlines()
            ),
            sql,
            Text("SQL"),
        ]
    console = console_for(out, *(p for p in parts if not isinstance(p, Text)))  # to a pipe: as wide as the tables
    for part in parts:  # the SQL to copy is never broken by rich (a terminal wraps it, and copies it whole)
        console.print(part, soft_wrap=id(part) in copied)


def evidence_command(w, config: Path | None, width: int | None = None) -> str:
    """`spyglass views -c CONFIG --from ... --to ... - <<'SQL'`: the evidence query (the lines after it, then
    `SQL`) over the diagnosis's window, as a shell runs it pasted whole (continued with ` \\` past `width`)."""
    import shlex

    from spyglass.forensics.times import utc_text
    from spyglass.terminal.console import command, shell_lines

    words = [
        command(),
        "views",
        f"-c {shlex.quote(str(config)) if config else 'CONFIG'}",
        *(f"--{name} {utc_text(t)}" for name, t in (("from", w.start), ("to", w.end)) if t),
        "- <<'SQL'",
    ]
    return shell_lines(words, width, indent="")


def stored_span(cfg, w, parquet: str | None = None):
    """An open end of the window closed at the stored events' first or last instant (the last included), as
    report and views read an open window as everything stored; None when nothing is stored in it."""
    from datetime import timedelta

    from spyglass.forensics.run import Query, Window, query
    from spyglass.forensics.timeline import instant

    _, rows = query(
        cfg, Query("SELECT min(ts), max(ts) FROM events WHERE ts >= $from AND ts < $to", w.params()), parquet
    )
    first, last = rows[0] if rows else (None, None)
    if first is None:
        return None
    return Window(w.start or instant(first), w.end or instant(last) + timedelta(milliseconds=1))


def diagnose(
    config: ConfigOption,
    start: From = None,
    end: To = None,
    since: Since = None,
    tz: Tz = "UTC",
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object: window and findings.")] = False,
    html: Html = None,
    parquet: Parquet = None,
) -> None:
    """Run every heuristic of the catalogue over the window (default: everything stored); exit 0 healthy,
    1 warnings, 2 critical."""
    from spyglass.forensics.diagnose import diagnose as run_diagnosis
    from spyglass.forensics.times import describe
    from spyglass.query.bounded import QueryError

    cfg = load(config)
    w = the_window(start, end, tz, since)
    try:
        if w.start is None or w.end is None:
            span = stored_span(cfg, w, parquet)
            if span is None:
                raise fail(f"no events are stored {describe(w)}: nothing to diagnose", 1)
            w = span
        result = run_diagnosis(cfg, w, parquet)
    except QueryError as exc:
        raise fail(str(exc), 1) from None
    if not result.events:  # one message, not "0 findings ... checked H1, ..." over nothing
        if as_json:  # a program reading --json still gets its document
            typer.echo(json_line(result.as_json()))
        raise fail(f"no events are stored {describe(w)}: nothing to diagnose", 1)
    status = result.exit_status()  # decided by the findings, before and whatever the printing does
    if html:
        write_page(cfg, result, html)
    try:
        if as_json:
            typer.echo(json_line(result.as_json()))
        else:
            print_table(result, config=config)
    except Exception as exc:  # noqa: BLE001 - a deploy gate must still see a critical finding's 2
        typer.echo(
            f"error: printing the diagnosis failed ({type(exc).__name__}: {shown(exc)}); the exit status"
            f" is still the findings' ({status})",
            err=True,
        )
    raise typer.Exit(status)


def write_page(cfg, result, html: Path) -> None:
    """Write the HTML page and say where; a page that cannot be written is said, and changes no exit status."""
    from spyglass.forensics.page import diagnosis_page
    from spyglass.query.bounded import QueryError

    try:
        html.write_text(diagnosis_page(cfg, result), encoding="utf-8")
    except (OSError, QueryError) as exc:
        typer.echo(f"error: --html {html}: not written ({shown(exc)})", err=True)
        return
    typer.echo(f"wrote {html.resolve()}", err=True)
