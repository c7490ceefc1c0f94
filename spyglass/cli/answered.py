"""The commands the running agent may answer for a client (spyglass/cli/warm.py names them; POST /api/command
runs them), in one table: spyglass/cli/app.py registers them with the rest, and `answered_app` alone, for
the agent, which must not import the commands that start agents."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import typer

from spyglass.cli import diagnose_commands, store_commands
from spyglass.cli import forensics_commands as forensics
from spyglass.forensics.run import one_connection

COMMANDS: dict[str, Callable[..., None]] = {
    "sql": store_commands.sql,
    "trace": store_commands.trace_command,
    "timeline": one_connection(forensics.timeline),
    "requests": one_connection(forensics.requests),
    "report": one_connection(forensics.report),
    "views": one_connection(forensics.views),
    "diagnose": one_connection(diagnose_commands.diagnose),
}


def register(app: typer.Typer) -> None:
    for name, command in COMMANDS.items():
        app.command(name)(command)


@cache
def answered_app() -> typer.Typer:
    """A typer app of these commands only, as `spyglass` parses and runs them."""
    app = typer.Typer(add_completion=False, no_args_is_help=True)
    register(app)
    return app


def run(argv: list[str]) -> None:
    """Run one of these commands as `spyglass` would: what the agent's POST /api/command is handed to run."""
    answered_app()(args=argv, prog_name="spyglass")
