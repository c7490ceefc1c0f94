"""The alerting commands: rules (write them for a deployment), backfill and backtest (replay the store)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from spyglass.cli.options import ConfigOption, read_config


def rules(
    config: ConfigOption,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the rule files.")] = Path("alerts"),
) -> None:
    """Write the Prometheus rules, runbooks and Alertmanager config for this deployment."""
    from spyglass.alerting.heuristics import Deployment
    from spyglass.alerting.rules import write

    paths = write(Deployment.of(read_config(config)), out)
    typer.echo(f"wrote {len(paths)} files to {out}")


def dashboards(
    config: ConfigOption,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the dashboards' JSON.")] = Path("dashboards"),
) -> None:
    """Write the Grafana dashboards for this deployment: the panels its sources and engines can fill (for a
    llama-server, in llama.cpp's figures), for Grafana's file provisioning."""
    from spyglass.alerting.heuristics import Deployment
    from spyglass.dashboards.model import write

    paths = write(out, Deployment.of(read_config(config)))
    typer.echo(f"wrote {len(paths)} dashboards to {out}")


FromOption = Annotated[str, typer.Option("--from", help="Start: RFC 3339 (no offset: UTC), epoch seconds, or now-1h.")]
ToOption = Annotated[str, typer.Option("--to", help="End: RFC 3339 (no offset: UTC), epoch seconds, or now.")]


def backfill(
    config: ConfigOption,
    start: FromOption,
    end: ToOption,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for spyglass.om.")],
    step: Annotated[str, typer.Option(help="Sample the replayed state this often.")] = "15s",
) -> None:
    """Replay the stored events into OpenMetrics with timestamps, for promtool tsdb create-blocks-from openmetrics.

    Exit 2 on a usage error (the bounds of `spyglass backtest`: at most 31 days, a step of at least 1s)."""
    from spyglass.alerting.backfill import (
        OPENMETRICS_FILE,
        BackfillError,
        UsageError,
        parse_duration,
        parse_time,
        replay,
    )
    from spyglass.alerting.backtest import check_bounds

    cfg = read_config(config)
    try:
        first, last, every = parse_time(start), parse_time(end), parse_duration(step)
        check_bounds(first, last, every, 0.0)
        result = replay(cfg, first, last, every, out / OPENMETRICS_FILE)
    except UsageError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except BackfillError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(
        f"wrote {result.samples} samples at {result.times} times from {result.events} events to {result.path};"
        f" blocks: promtool tsdb create-blocks-from openmetrics {result.path} DATA_DIR"
    )


def backtest(
    config: ConfigOption,
    start: FromOption,
    end: ToOption,
    rules: Annotated[
        Path | None,
        typer.Option(
            help="A rule file or a folder of them (default: the rules `spyglass rules` makes of --config, in memory)."
        ),
    ] = None,
    step: Annotated[str, typer.Option(help="Backfill sample interval (at least 1s).")] = "15s",
    lookback: Annotated[str, typer.Option(help="History replayed before --from for windows and baselines.")] = "2h",
    as_json: Annotated[
        bool, typer.Option("--json", help='Print {"alerts": [...], "pending": [...]} instead of tables.')
    ] = False,
) -> None:
    """Which alerts would have fired over a stored window: replay, blocks, Prometheus, for: applied.

    Exit 0 with the result; 1 when it cannot run (no store, nothing stored in the window, a bad rule file);
    2 on a usage error (a bad or out-of-range time, --from after --to, a window over 31 days, a step
    under 1s, more than 200,000 sample times)."""
    from spyglass.alerting.backfill import BackfillError, UsageError, parse_duration, parse_time
    from spyglass.alerting.backtest import backtest as run_backtest
    from spyglass.alerting.backtest_report import dumps, show

    cfg = read_config(config)
    try:
        first, last = parse_time(start), parse_time(end)
        result = run_backtest(cfg, first, last, rules, parse_duration(step), parse_duration(lookback))
    except UsageError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except BackfillError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if as_json:
        typer.echo(dumps(result))
    else:
        show(result, first, last)
