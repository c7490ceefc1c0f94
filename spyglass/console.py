"""The rich Console every command prints its tables and trees on."""
from __future__ import annotations

import os
import sys
from typing import Any, TextIO


def natural_width(console: Any, renderable: Any) -> int:
    """The columns `renderable` takes when nothing limits it."""
    return int(console.measure(renderable, options=console.options.update(max_width=100_000)).maximum)


def console_for(out: TextIO | None, *renderables: Any) -> Any:
    """A rich Console on `out` (stdout by default) for printing `renderables`: a terminal's width
    (or COLUMNS'); to a pipe or a file, which have no width, as wide as the widest of them, so that
    nothing is cut to "…" or folded a word a line (`spyglass timeline ... > incident.txt`)."""
    from rich.console import Console

    console = Console(file=out or sys.stdout)
    if console.is_terminal or "COLUMNS" in os.environ or not renderables:
        return console
    return Console(file=out or sys.stdout, width=max(1, *(natural_width(console, r) for r in renderables)))
