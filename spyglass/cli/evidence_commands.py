"""`spyglass evidence ALERTNAME --label k=v ... [--at T] [--from T]`: an alert's evidence page as text (and
`--html FILE`), the page the agent serves at the notification's evidence_url. Exit 0 with the page, 1 when
the alert never notified (and no --at was given), 2 on a usage error."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from spyglass.cli.forensics_commands import ConfigOption, Tz, fail, load

Labels = Annotated[
    list[str] | None,
    typer.Option(
        "--label", "-l", help="An identifying label of the alert, NAME=VALUE (repeat it): instance=strata-b, lane=fast."
    ),
]
At = Annotated[
    str | None,
    typer.Option(
        "--at",
        help="The window ends here (forms as --from of `diagnose`); default: the"
        " window of the alert's latest notification.",
    ),
]
Start = Annotated[
    str | None,
    typer.Option("--from", help="With --at: the window starts here (default: the rule's lookback before --at)."),
]
Html = Annotated[Path | None, typer.Option("--html", help="Also write the page as self-contained HTML here.")]


def parse_labels(given: list[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in given:
        name, sep, value = item.partition("=")
        if not sep:
            raise fail(f"--label {item!r}: expected NAME=VALUE", 2)
        labels[name.strip()] = value
    return labels


def evidence(
    config: ConfigOption,
    alertname: Annotated[str, typer.Argument(help="The alert's name, e.g. EngineEvictionStorm.")],
    label: Labels = None,
    at: At = None,
    start: Start = None,
    tz: Tz = "UTC",
    html: Html = None,
) -> None:
    """Print an alert's evidence: its heuristic's figures, the comparison, the requests behind them."""
    from datetime import UTC, datetime

    from spyglass.forensics.evidence import NotFound, build
    from spyglass.forensics.evidence_page import html as page_html
    from spyglass.forensics.evidence_page import text
    from spyglass.forensics.times import parse_time
    from spyglass.query.bounded import QueryError
    from spyglass.terminal.console import console_for, plain

    cfg = load(config)
    now = datetime.now(UTC)
    try:
        end = parse_time(at, tz, now) if at else None
        first = parse_time(start, tz, now) if start else None
    except ValueError as exc:
        raise fail(str(exc), 2) from None
    if first is not None and end is None:
        raise fail("--from needs --at (without it the window is the latest notification's)", 2)
    try:
        page = build(cfg, alertname, parse_labels(label or []), end, first, now)
    except NotFound as exc:
        raise fail(str(exc), 1) from None
    except QueryError as exc:
        raise fail(str(exc), 2 if "not an alert name" in str(exc) or "label" in str(exc) else 1) from None
    if html:
        base = cfg.alerts.evidence_base_url or cfg.exporters.prometheus.client_url()
        html.write_text(page_html(page, base.rstrip("/")), encoding="utf-8")
        typer.echo(f"wrote {html.resolve()}", err=True)
    lines = [plain(line) for line in text(page)]
    console = console_for(None, *lines)
    for line in lines:
        console.print(line)
