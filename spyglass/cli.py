"""The `spyglass` command: run, ingest, sql, trace, the forensic commands, rules, demo."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from loguru import logger

from spyglass.config import ConfigError, load_config

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Observability and blind-spot monitoring for a self-hosted MoE inference stack.")
ConfigOption = Annotated[Path, typer.Option("--config", "-c", help="The agent's TOML config file.")]


def _config(path: Path):
    try:
        return load_config(path)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command()
def run(config: ConfigOption) -> None:
    """Run the agent until SIGTERM or Ctrl-C."""
    from spyglass.agent import Agent

    agent = Agent(_config(config))
    agent.stop_on_signals()
    agent.serve()


@app.command()
def ingest(config: ConfigOption) -> None:
    """Read every file source to its current end, commit, exit. Run again: it adds nothing."""
    from spyglass.agent import open_store
    from collectors.clock import SystemClock
    from spyglass.pipeline import Pipeline

    cfg = _config(config)
    pipeline = Pipeline(cfg, SystemClock(), open_store(cfg))
    try:
        lines = pipeline.run_until_idle()
    finally:
        pipeline.close()
    typer.echo(f"ingested {lines} lines from {len(cfg.sources)} sources")


@app.command()
def sql(config: ConfigOption, query: Annotated[str, typer.Argument(help="One SELECT statement.")],
        fmt: Annotated[str, typer.Option("--format", "-f", help="table, csv or json")] = "table") -> None:
    """Run a read-only query on the store."""
    from spyglass.query import QueryError, run_readonly, show

    cfg = _config(config)
    try:
        api = f"http://{cfg.exporters.prometheus.listen}/api/sql" if cfg.exporters.prometheus.enabled else None
        columns, rows = run_readonly(cfg.store_path(), query, api)
    except QueryError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    show(columns, rows, fmt)


@app.command("trace")
def trace_command(config: ConfigOption, request_id: Annotated[str, typer.Argument(help="e.g. 20261019-124900-7aa82c")]) -> None:
    """Print one request's trace from the store: gateway, engine and its phases, with durations."""
    from spyglass.query import QueryError
    from spyglass.trace import print_trace

    try:
        print_trace(_config(config), request_id)
    except QueryError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


from spyglass.forensics import commands as forensics  # noqa: E402 - registered where they belong in --help

app.command("timeline")(forensics.timeline)
app.command("requests")(forensics.requests)
app.command("report")(forensics.report)
app.command("views")(forensics.views)
from spyglass.forensics import diagnose_cli  # noqa: E402

app.command("diagnose")(diagnose_cli.diagnose)


@app.command()
def rules(config: ConfigOption,
          out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the rule files.")] = Path("alerts")) -> None:
    """Write the Prometheus rules, runbooks and Alertmanager config for this deployment."""
    from spyglass.heuristics import Deployment
    from spyglass.rules import write

    paths = write(Deployment.of(_config(config)), out)
    typer.echo(f"wrote {len(paths)} files to {out}")


@app.command()
def demo(seconds: Annotated[float, typer.Option(help="Stop after this long; 0 runs until Ctrl-C.")] = 0.0,
         listen: Annotated[str, typer.Option(help="host:port for /metrics.")] = "127.0.0.1:9464",
         scenario: Annotated[str | None, typer.Option(help="Run one scenario (healthy, eviction-storm, ...)"
                                                          " instead of the mix.")] = None) -> None:
    """Run the emulated stack under supervisord with incident scenarios, and the agent on it."""
    from spyglass.demo import run_demo

    try:
        run_demo(seconds=seconds, listen=listen, scenario=scenario)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def main() -> None:  # pragma: no cover - console entry point
    logger.remove()
    logger.add(sys.stderr, level="INFO")
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
