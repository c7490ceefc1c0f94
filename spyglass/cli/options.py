"""What the commands share: the --config option, and the config it names (exit 2 when it is not one)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from spyglass.config import Config, ConfigError, load_config

ConfigOption = Annotated[Path, typer.Option("--config", "-c", help="The agent's TOML config file.")]


def read_config(path: Path) -> Config:
    try:
        return load_config(path)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
