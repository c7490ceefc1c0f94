"""A picture of a dashboard from real data, without Grafana: every panel's queries (variables
substituted) run through Prometheus's HTTP API, laid out as an HTML page in the dashboard's grid
(titles, units, thresholds, value mappings, per-query colours and the table's column transformations,
as the generated JSON says), and photographed by headless Chromium (Debian's `chromium`). The page
says it is a preview of the queries, not Grafana.

    python -m spyglass.cli.preview_commands --prometheus http://127.0.0.1:9090 --from now-1h --to now --out wall.png

Querying (`run_queries`, preview_query), laying out (`page`, preview_page, with the panels of
preview_panels and the units and colours of preview_format) and photographing (`screenshot`,
preview_page) are separate: the tests check the first's results and read what the browser rendered
of the second, all in dashboards/. This module is their command line, in cli/ with every typer command.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from spyglass.dashboards.model import GENERATED
from spyglass.dashboards.preview_page import draw
from spyglass.dashboards.preview_query import parse_time, run_queries


def load(dashboard: str) -> dict[str, Any]:
    path = Path(dashboard)
    if not path.exists():
        path = GENERATED / f"{dashboard}.json"
    return json.loads(path.read_text())


def main(
    prometheus: Annotated[str, typer.Option(help="Prometheus base URL")],
    out: Annotated[Path, typer.Option(help="PNG file to write (the HTML page goes next to it)")],
    start: Annotated[str, typer.Option("--from", help="unix seconds, ISO 8601 or now-1h")] = "now-1h",
    end: Annotated[str, typer.Option("--to", help="unix seconds, ISO 8601 or now")] = "now",
    dashboard: Annotated[str, typer.Option(help="uid in dashboards/generated or a JSON file")] = "spyglass-wall",
    scrape_interval: Annotated[float, typer.Option(help="seconds; for $__rate_interval")] = 15.0,
    var: Annotated[list[str] | None, typer.Option(help="NAME=VALUE, a template variable (default All)")] = None,
) -> None:
    """Draw a dashboard from Prometheus data: a preview of its queries, not Grafana."""
    now = time.time()
    t0, t1 = parse_time(start, now), parse_time(end, now)
    if t1 <= t0:
        raise typer.BadParameter("--to must be after --from")
    values = dict(v.split("=", 1) for v in var or [])
    board = load(dashboard)
    results = run_queries(board, prometheus, t0, t1, scrape_seconds=scrape_interval, values=values)
    try:
        draw(board, results, t0, t1, out)
    except (FileNotFoundError, RuntimeError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    failed = sum(1 for rs in results.values() for r in rs if r.error)
    typer.echo(f"{out}: {len(results)} panels, {failed} queries failed")


if __name__ == "__main__":
    typer.run(main)
