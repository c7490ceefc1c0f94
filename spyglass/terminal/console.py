"""The rich Console every command prints its tables and trees on, and how data is made safe to print:
as text (never rich markup), with control characters escaped, and CSV cells no spreadsheet runs."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TextIO


@dataclass(frozen=True)
class Terminal:
    """The terminal of a client whose command the agent runs (spyglass/agent/command_route.py): what rich
    would read off its own stdout and environment, so the output is what the command prints itself."""

    environ: Mapping[str, str]  # the client's TERM, COLORTERM, NO_COLOR, FORCE_COLOR, COLUMNS, LINES ...
    size: tuple[int, int] | None = None  # columns, lines, when its stdout is a terminal


CLIENT: ContextVar[Terminal | None] = ContextVar("client_terminal", default=None)


def console(out: TextIO | None = None, width: int | None = None) -> Any:
    """A rich Console on `out` (stdout by default): this process's terminal, or the client's."""
    from rich.console import Console

    client = CLIENT.get()
    if client is None:
        return Console(file=out or sys.stdout, width=width)
    columns, lines = client.size or (None, None)
    return Console(
        file=out or sys.stdout,
        width=width or columns,
        height=lines,
        force_terminal=True if client.size else None,
        _environ=client.environ,
    )


def has_columns() -> bool:
    """Whether COLUMNS is set, in this process's environment or the client's."""
    client = CLIENT.get()
    return "COLUMNS" in (os.environ if client is None else client.environ)


def command() -> str:
    """How to call `spyglass` from here, as a hint prints it: the script beside this interpreter (relative when it
    can be: `.venv/bin/spyglass` in a clone), or `spyglass` when there is none."""
    from pathlib import Path

    script = Path(sys.executable).parent / "spyglass"
    if not script.exists():
        return "spyglass"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


def terminal_width(out: TextIO | None = None) -> int | None:
    """The width a text printed on `out` is wrapped at: a terminal's (or COLUMNS'); None for a pipe or a file."""
    shown = console(out)
    return shown.width if shown.is_terminal or has_columns() else None


def shell_lines(words: list[str], width: int | None = None, indent: str = "  ") -> str:
    """A command as a shell reads it pasted whole: `words` (quoted already) joined by spaces, and where a line
    would pass `width`, continued with ` \\` on the next line (never broken inside a word, nor by the terminal
    in the middle of a path or a query)."""
    lines = [indent]
    for word in words:
        if width and lines[-1].strip() and len(lines[-1]) + 1 + len(word) + 2 > width:
            lines[-1] += " \\"
            lines.append(indent + "    ")
        lines[-1] += ("" if not lines[-1].strip() else " ") + word
    return "\n".join(lines)


def natural_width(console: Any, renderable: Any) -> int:
    """The columns `renderable` takes when nothing limits it."""
    return int(console.measure(renderable, options=console.options.update(max_width=100_000)).maximum)


def console_for(out: TextIO | None, *renderables: Any) -> Any:
    """A rich Console on `out` (stdout by default) for printing `renderables`: a terminal's width
    (or COLUMNS'); to a pipe or a file, which have no width, as wide as the widest of them, so that
    nothing is cut to "…" or folded a word a line (`spyglass timeline ... > incident.txt`)."""
    shown = console(out)
    if shown.is_terminal or has_columns() or not renderables:
        return shown
    return console(out, width=max(1, *(natural_width(shown, r) for r in renderables)))


# Data that reaches a terminal is shown, never obeyed: C0 and C1 control characters (ESC starts
# colour, screen-clearing and OSC 8 hyperlink sequences; CSI is one C1 byte), DEL, and the
# invisible or direction-changing format characters are written as escapes.
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2069\ufeff]")
NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(found: re.Match[str]) -> str:
    char = found.group()
    return NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def shown(value: object) -> str:
    """`value` as text safe for a terminal: every control or format character written as an escape
    (`\\x1b`, `\\n`, `\\u202e`), everything else as it is."""
    return UNSAFE.sub(_escaped, str(value))


def plain(value: object, style: str = "") -> Any:
    """A rich Text of `value` as data: no markup read (`[/x]`, `[link=...]` print as written) and
    control characters escaped (`shown`)."""
    from rich.text import Text

    return Text(shown(value), style=style)


def json_line(record: Any, default: Any = str) -> str:
    """One JSON object as a line, UTF-8 kept. JSON escapes C0 characters itself; DEL, C1 and the
    format characters it leaves raw are written as \\u escapes too, so a terminal obeys none."""
    text = json.dumps(record, ensure_ascii=False, default=default)
    return UNSAFE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


FORMULA = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet reads as the start of a formula (OWASP)


def csv_cell(value: Any) -> Any:
    """A CSV cell as data: a text that a spreadsheet would run as a formula (`=2+5+cmd|...`, `@SUM`,
    `-1+...`) is prefixed with `'`, and control characters are escaped; numbers stay numbers."""
    if not isinstance(value, str):
        return value
    return shown("'" + value if value.startswith(FORMULA) else value)
