"""`spyglass example NAME`: a complete config the package ships (examples/*.toml), printed to start from, so an
installed spyglass (a wheel, pipx, the container) has its examples without a checkout."""

from __future__ import annotations

from typing import Annotated

import typer

from spyglass import resources

EXAMPLES = "spyglass", "examples"


def names() -> list[str]:
    return sorted(
        f.name.removesuffix(".toml") for f in resources.folder(*EXAMPLES).iterdir() if f.name.endswith(".toml")
    )


def example(
    name: Annotated[str, typer.Argument(help="Which example: llama-server or strata.")] = "",
) -> None:
    """Print a complete example config (`spyglass example llama-server > spyglass.toml`); no name lists them."""
    known = names()
    if not name:
        typer.echo("\n".join(known))
        return
    if name not in known:
        typer.echo(f"error: no example named {name!r}; the examples are: {', '.join(known)}", err=True)
        raise typer.Exit(2)
    typer.echo(resources.text(*EXAMPLES, f"{name}.toml"), nl=False)
