"""One table layout for every command: which columns a person acts on, and what gives way first.

A column is a key (an alert, an instance, a request or trace id, a UTC time, a figure: what a user
copies into the next command or quotes), the second clock (the display zone's time, beside UTC), a label (a
set of labels, a session: context), or text (a summary, fields). A table wider than the terminal
gives way in this order, and a key is never cut:
  1. the second clock and columns that hold one value in every row move to a header line;
  2. text and labels wrap (headers break after an underscore);
  3. labels drop, said under the table (`--format json` has them);
  4. only then one block a row (a row of keys wider than the terminal).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from spyglass.collectors.clock import display_zone, offset_note

KEY_NAME = re.compile(
    r"(^|_)(alert|alertname|instance|request_id|trace_id|id|severity|program|deploy|utc"
    r"|fired|resolved|since|status|exit_status|pid|port)$|^(at|when|where|figure|value|n|count)$"
)
LABEL_NAME = re.compile(r"(^|_)(labels|session|tags|missing|heuristic)$")
SECOND_CLOCK = re.compile(r"(^|_)local$")
WRAP_FLOOR = 8  # the narrowest a wrapped column gets, in cells
BORDER = 3  # a column's padding and rule


@dataclass(frozen=True)
class Column:
    name: str
    role: str  # key, clock, label or text


def role(name: str, values: Sequence[Any], names: Sequence[str] = ()) -> str:
    """What a column is to its reader: `key` (never cut), `clock` (the display zone's time beside its UTC column in `names`),
    `label` or `text`. A display-zone column with no UTC beside it (a report's `day_local`) is a key."""
    if SECOND_CLOCK.search(name):
        return "clock" if SECOND_CLOCK.sub(lambda m: f"{m[1]}utc", name) in names else "key"
    if KEY_NAME.search(name):
        return "key"
    if LABEL_NAME.search(name):
        return "label"
    present = [v for v in values if v is not None and v != ""]
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return "key"  # a figure
    return "text"


def text_width(text: str) -> int:
    from rich.cells import cell_len

    return max((cell_len(line) for line in text.split("\n")), default=0)


def header_lines(name: str, width: int) -> str:
    """A column name broken after underscores into lines of at most `width` cells (a part longer stays whole)."""
    parts = re.findall(r"[^_]*_|[^_]+$", name) or [name]
    lines = [""]
    for part in parts:
        if lines[-1] and text_width(lines[-1] + part) > width:
            lines.append("")
        lines[-1] += part
    return "\n".join(lines)


def header_floor(name: str) -> int:
    return max(text_width(p) for p in (re.findall(r"[^_]*_|[^_]+$", name) or [name]))


@dataclass
class Layout:
    """What a table of `columns` (cells as text) shows at a width: the columns kept with their roles,
    the header lines above it, and whether each row is a block of its own."""

    shown: list[Column]
    header: list[str]
    dropped: list[str]
    cards: bool = False
    whole: bool = False  # as it is: it fits
    undated: tuple[str, ...] = ()  # time columns shown without their date: every row's is the header's
    widths: dict[str, int] = field(default_factory=dict)  # a key column's width, its header broken to fit


DATED = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d")


def one_date(cells: Sequence[str]) -> str | None:
    """The date every time in `cells` has (texts that are no time, such as `(still firing)`, aside)."""
    dates = {t[:10] for t in cells if DATED.match(t)}
    return next(iter(dates)) if len(dates) == 1 else None


def plan(
    names: Sequence[str], rows: Sequence[Sequence[Any]], texts: Sequence[Sequence[str]], width: int | None, natural: int
) -> Layout:
    """The layout of a table whose natural width is `natural` at `width` (None: any width, a pipe): the first
    of the module's steps that fits."""
    columns = [Column(n, role(n, [r[i] for r in rows], names)) for i, n in enumerate(names)]
    if width is None or natural <= width:
        return Layout(columns, [], [], whole=True)
    kept, header, undated = to_header(columns, texts)
    cards = Layout(kept, list(header), [], cards=True)  # a block a row keeps the dates
    for date in dict.fromkeys(undated.values()):
        header.append(f"{date}: the date of every {', '.join(n for n, d in undated.items() if d == date)}")
    wrapped = Layout(kept, header, [], undated=tuple(undated))
    labels = [c.name for c in kept if c.role == "label"]
    unlabelled = Layout([c for c in kept if c.role != "label"], header, labels, undated=tuple(undated))
    for layout in (wrapped, unlabelled) if labels else (wrapped,):
        if needed(layout, names, texts) <= width:
            return widened(layout, names, texts, width)
    return cards


def to_header(columns: list[Column], texts: Sequence[Sequence[str]]) -> tuple[list[Column], list[str], dict[str, str]]:
    """The first step: the columns kept; the header lines of those moved out (the second clock, a column with one
    value in every row, those empty in every row); and the one date of each key column whose times all have it."""
    kept: list[Column] = []
    header: list[str] = []
    empty: list[str] = []
    undated: dict[str, str] = {}
    for i, c in enumerate(columns):
        cells = [t[i] for t in texts]
        values = set(cells)
        date = one_date(cells) if c.role == "key" else None
        if date:
            undated[c.name] = date
        if c.role == "clock":
            header.append(f"{c.name} left out: {offset_note(display_zone())}")
        elif c.role != "key" and len(texts) > 1 and len(values) == 1:
            if values == {""}:
                empty.append(c.name)
            else:
                header.append(f"{c.name}: {next(iter(values))}")
        else:
            kept.append(c)
    if empty:
        header.append(f"empty in every row: {', '.join(empty)}")
    return kept, header, undated


def key_width(name: str, cells: list[str]) -> int:
    return max([header_floor(name), *(text_width(t) for t in cells)])


def shown_text(text: str, column: str, layout: Layout) -> str:
    return text[11:] if column in layout.undated and DATED.match(text) else text


def floor(column: Column, cells: list[str]) -> int:
    """The narrowest a column gets: a key its widest cell (or header part); another its widest word, at most
    WRAP_FLOOR wider words fold), and never less than it needs whole if that is narrower."""
    if column.role == "key":
        return key_width(column.name, cells)
    words = max((text_width(w) for t in cells for w in t.split()), default=0)
    return min(key_width(column.name, cells), max(WRAP_FLOOR, header_floor(column.name), min(words, 2 * WRAP_FLOOR)))


def widened(layout: Layout, names: Sequence[str], texts: Sequence[Sequence[str]], width: int) -> Layout:
    """`layout` with every column's width at `width`: each at its floor, then the room left given to the
    wrapped columns in turn (up to their whole width), then to the keys' headers (narrowest first, up to the
    header's length: a header breaks after an underscore only where the table needs it to)."""
    cells = {c.name: [shown_text(t[names.index(c.name)], c.name, layout) for t in texts] for c in layout.shown}
    spare = width - needed(layout, names, texts)
    for c in layout.shown:
        layout.widths[c.name] = floor(c, cells[c.name])
    others = [c for c in layout.shown if c.role != "key"]
    while spare > 0 and others:  # the wrapped columns first, in turn, up to their whole width
        for c in list(others):
            if spare <= 0:
                break
            if layout.widths[c.name] >= max(key_width(c.name, cells[c.name]), text_width(c.name)):
                others.remove(c)
                continue
            layout.widths[c.name], spare = layout.widths[c.name] + 1, spare - 1
    for c in sorted((c for c in layout.shown if c.role == "key"), key=lambda c: len(c.name)):
        grow = max(0, min(spare, text_width(c.name) - layout.widths[c.name]))
        layout.widths[c.name], spare = layout.widths[c.name] + grow, spare - grow
    return layout


def needed(layout: Layout, names: Sequence[str], texts: Sequence[Sequence[str]]) -> int:
    """The narrowest table of `layout` that cuts no key: keys whole, other columns at their floor."""
    return 1 + sum(
        BORDER + floor(c, [shown_text(t[names.index(c.name)], c.name, layout) for t in texts]) for c in layout.shown
    )


def whole(names: Sequence[str]) -> Layout:
    """Every column, as it is."""
    return Layout([Column(n, "text") for n in names], [], [])


def table_of(
    layout: Layout,
    names: Sequence[str],
    cells: Sequence[Sequence[Any]],
    texts: Sequence[Sequence[str]],
    title: Any = None,
    wrap: bool = False,
) -> Any:
    """The rich Table of `layout`: keys never wrapped nor cut (their header broken to fit them), the rest folded."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, title_justify="left")
    for c in layout.shown:
        i = names.index(c.name)
        if not wrap:
            table.add_column(Text(c.name), no_wrap=c.role in ("key", "clock"))
            continue
        w = layout.widths.get(c.name) or floor(c, [shown_text(t[i], c.name, layout) for t in texts])
        if c.role == "key":
            table.add_column(Text(header_lines(c.name, w)), no_wrap=True, width=w)
        else:
            table.add_column(Text(header_lines(c.name, w)), overflow="fold", width=w)
    for row, text in zip(cells, texts or cells):
        table.add_row(
            *(undated(row[names.index(c.name)], text[names.index(c.name)], c.name, layout) for c in layout.shown)
        )
    return table


def undated(cell: Any, text: Any, column: str, layout: Layout) -> Any:
    """The cell without its date when the layout moved the column's date to the header."""
    if column in layout.undated and isinstance(text, str) and DATED.match(text):
        return cell[11:]
    return cell


def row_groups(widths: Sequence[int], room: int) -> list[list[int]]:
    """Consecutive row numbers in groups whose widths add up to at most `room` (a wider row alone)."""
    groups: list[list[int]] = []
    used = room + 1
    for n, w in enumerate(widths):
        if used + w > room:
            groups.append([])
            used = 0
        groups[-1].append(n)
        used += w
    return groups


def render(
    names: Sequence[str], rows: Sequence[Sequence[Any]], cells: Sequence[Sequence[Any]], console: Any, title: Any = None
) -> list[Any]:
    """The renderables that show a table of `names` (`rows` the values, `cells` as printed) on `console`: the
    table whole when it fits; else its header lines, the table, and what was left out under it; one block a
    row only when its keys alone do not fit side by side."""
    from rich.table import Table
    from rich.text import Text

    from spyglass.terminal.console import natural_width

    texts = [[c.plain if isinstance(c, Text) else str(c) for c in row] for row in cells]
    table = table_of(whole(names), names, cells, texts, title)
    layout = plan(names, rows, texts, console.width, natural_width(console, table))
    if layout.whole:
        return [table]
    parts: list[Any] = [title] if title else []
    parts += [Text(line, style="dim") for line in layout.header]
    if layout.cards:  # turned: a column a row, as many rows side by side as fit (psql's \x, grouped)
        shown = [names.index(c.name) for c in layout.shown]
        label = max(text_width(names[i]) for i in shown) + BORDER + 1
        keys = {names.index(c.name) for c in layout.shown if c.role == "key"}
        widths = [
            max(text_width(t[i]) if i in keys else min(text_width(t[i]), 3 * WRAP_FLOOR) for i in shown) + BORDER
            for t in texts
        ]  # a key whole; a text folds past three times the wrap floor
        for group in row_groups(widths, console.width - label):
            block = Table("column", *(f"row {n + 1}" for n in group))
            for column, n in zip(block.columns[1:], group):
                column.overflow, column.width = "fold", max(widths[n] - BORDER, len(f"row {n + 1}"))
            for i in shown:
                block.add_row(Text(names[i]), *(cells[n][i] for n in group))
            parts.append(block)
        return parts
    parts.append(table_of(layout, names, cells, texts, None, wrap=True))
    if layout.dropped:
        parts.append(
            Text(
                f"left out to fit {console.width} columns: {', '.join(layout.dropped)}"
                " (--format json has every column)",
                style="dim",
            )
        )
    return parts


def show(
    names: Sequence[str],
    values: Sequence[Sequence[Any]],
    cells: Sequence[Sequence[Any]],
    title: Any = None,
    out: Any = None,
) -> None:
    """Print a table (`values` its data, `cells` as printed, rich Texts) on `out`: to a terminal as `render` lays
    it out; to a pipe or a file (no terminal, no COLUMNS), as wide as it is."""
    from spyglass.terminal.console import console_for

    console = console_for(out, table_of(whole(names), names, cells, [], title))
    for part in render(names, values, cells, console, title):
        console.print(part)
