"""The `spyglass` command: run, ingest, sql, trace, the forensic commands, rules, backfill, backtest, demo."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from loguru import logger

from spyglass import __version__
from spyglass.cli import (
    agent_commands,
    alert_commands,
    answered,
    evidence_commands,
    example_commands,
    store_commands,
    upgrade_commands,
)
from spyglass.forensics.run import one_connection

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Observability and blind-spot monitoring for a self-hosted MoE inference stack.",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"spyglass {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Observability and blind-spot monitoring for a self-hosted MoE inference stack."""


# Registered in the order --help lists them.
app.command()(agent_commands.run)
app.command()(agent_commands.ingest)
app.command("check-log")(agent_commands.check_log)
answered.register(app)  # sql, trace, timeline, requests, report, views, diagnose: what the agent answers (cli/warm.py)
app.command("evidence")(one_connection(evidence_commands.evidence))
app.command("changes")(one_connection(upgrade_commands.changes))
app.command("crashes")(one_connection(upgrade_commands.crashes))
app.command("baseline")(one_connection(upgrade_commands.baseline))
app.command()(alert_commands.rules)
app.command()(alert_commands.dashboards)
app.command()(example_commands.example)
app.add_typer(store_commands.store_app, name="store")
app.command()(alert_commands.backfill)
app.command()(alert_commands.backtest)
app.command()(agent_commands.smoke)
app.command()(agent_commands.demo)


def main() -> None:  # pragma: no cover - console entry point
    logger.remove()
    logger.add(sys.stderr, level="INFO")
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
