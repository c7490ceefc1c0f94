"""The columnar block path of a line grammar: the same prefix, literal prefilters, kinds, kind order
and converters as the per-line path (collectors/grammar.py), run with RE2 over a pyarrow binary
array of a whole block of lines, and held equal to it (tests/test_columnar.py).

Python's `re` on bytes and RE2 (pyarrow, Latin-1 mode on binary arrays) differ in a few places;
each pattern is translated where the difference is mechanical and refused (`NotRe2`) where it is
not, so a source whose patterns RE2 cannot run exactly stays on the per-line path:

- `\\s` includes `\\v` in Python, not in RE2: `\\s` and `\\S` are spelled out as classes;
- an absent optional group is None in Python and b"" in RE2: b"" means absent for a group that
  cannot match empty; a row where a group that can match empty is b"" is parsed per line;
- `{,n}` is silently literal in RE2; lookaround, backreferences, possessive and atomic groups,
  inline flags (`(?x)`, `(?i)`), `\\Z`, `\\A` and POSIX classes are refused, as are `^` and `\\b`
  in a message pattern (the per-line fast path matches the message inside the whole line);
- `$` also matches before a final newline in Python: a line holding a newline (the tailer never
  returns one) is parsed per line.
"""

from __future__ import annotations

import functools
import re
import re._parser as _sre  # the stdlib's own regex parser (Python 3.11+, which spyglass requires)
from array import array
from collections.abc import Callable
from itertools import accumulate
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spyglass.collectors.clock import MICROS, fraction_micros
from spyglass.collectors.event import Event
from spyglass.collectors.grammar import Grammar, LineKind, Miss, _float, _int

MESSAGE = "spyglass_message"
FIRST_DAY = -62135596800  # 0001-01-01, the first day datetime() takes
STAMP_SHAPE = r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$"
STAMP_PARTS = {
    "year": (0, 4),
    "month": (5, 7),
    "day": (8, 10),
    "hour": (11, 13),
    "minute": (14, 16),
    "second": (17, 19),
}
_QUANT = re.compile(r"\{(\d*),?(\d*)\}")
_SPACE = r"\t\n\x0b\f\r "


class NotRe2(ValueError):
    """A pattern RE2 cannot run with Python `re`'s meaning: the reason, for /debug/sources."""


@functools.lru_cache(maxsize=1024)  # every source of a kind translates the same patterns
def to_re2(regex: str, *, message: bool) -> str:
    """`regex` (Python syntax) in RE2 syntax with the same meaning on bytes, or NotRe2."""
    out: list[str] = []
    i, n, in_class = 0, len(regex), False
    while i < n:
        c = regex[i]
        if c == "\\":
            out.append(_escape(regex, i, in_class, message))
            i += 4 if regex[i + 1 : i + 2] == "x" else 2
            continue
        if in_class:
            if c == "[" and regex[i + 1 : i + 2] in (":", "=", "."):
                raise NotRe2("a POSIX class [: :] (a literal set in Python)")
            in_class = c != "]"
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class, j = True, i + 1
            j += regex[j : j + 1] == "^"
            out.append(regex[i:j] + ("\\]" if regex[j : j + 1] == "]" else ""))  # a leading ] is literal
            i = j + (regex[j : j + 1] == "]")
            continue
        if c == "(":
            if regex.startswith("(?:", i) or regex.startswith("(?P<", i):
                out.append(regex[i : i + 3])
                i += 3
                continue
            if regex.startswith("(?", i):
                raise NotRe2(f"{regex[i : i + 4]!r}: lookaround, a backreference, an atomic group or inline flags")
            out.append("(?:")  # only named groups are read: the others need not capture
            i += 1
            continue
        if c in "*+?}" and regex[i + 1 : i + 2] == "+":
            raise NotRe2("a possessive quantifier")
        if c == "{":
            found = _QUANT.match(regex, i)
            if found and not found.group(1) and "," in found.group(0):
                raise NotRe2(f"{found.group(0)!r}: {{,n}} is a quantifier in Python, literal text in RE2")
        if c == "^" and message:
            raise NotRe2("'^' in a message pattern")
        out.append(c)
        i += 1
    return "".join(out)


def _escape(regex: str, i: int, in_class: bool, message: bool) -> str:
    d = regex[i + 1 : i + 2]
    if d == "s":
        return _SPACE if in_class else f"[{_SPACE}]"
    if d == "S":
        if in_class:
            raise NotRe2("\\S inside a class")
        return f"[^{_SPACE}]"
    if d in ("d", "D", "w", "W", "t", "n", "r", "f", "v"):
        return "\\" + d
    if d in ("b", "B") and not in_class and not message:
        return "\\" + d
    if d == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", regex[i + 2 : i + 4]):
        return regex[i : i + 4]
    if d and not d.isalnum() and d.isascii():
        return "\\" + d
    raise NotRe2(f"'\\{d}' has no RE2 equivalent here")


@functools.lru_cache(maxsize=1024)
def re2_checked(pattern: str) -> str:
    """`pattern` if RE2 compiles it, else NotRe2 with RE2's reason."""
    try:
        pc.match_substring_regex(pa.nulls(1, pa.binary()), pattern)  # an empty array compiles nothing
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise NotRe2(f"RE2: {exc}") from None
    return pattern


@functools.lru_cache(maxsize=1024)
def _groups(pattern: re.Pattern[bytes]) -> dict[str, tuple[int, bool]]:
    """Per named group: its minimum width, and whether it sits in an optional or repeated part."""
    names = {index: name for name, index in pattern.groupindex.items()}
    found: dict[str, tuple[int, bool]] = {}

    def walk(sub: Any, optional: bool) -> None:
        for op, av in sub:
            if op is _sre.SUBPATTERN:
                if av[0] in names:
                    found[names[av[0]]] = (av[-1].getwidth()[0], optional)
                walk(av[-1], optional)
                continue
            inner = optional or op is _sre.BRANCH or (op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT) and av[0] != 1)
            for part in av if isinstance(av, (tuple, list)) else ():
                for sub_part in part if isinstance(part, list) else (part,):
                    if isinstance(sub_part, _sre.SubPattern):
                        walk(sub_part, inner or (op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT) and av[1] != 1))

    walk(_sre.parse(pattern.pattern, pattern.flags), False)
    return found


def binary_array(lines: list[bytes], data: bytes) -> pa.BinaryArray:
    """The lines as one Arrow binary array over `data`, their concatenation (pa.array is 5x slower)."""
    offsets = array("i", accumulate(map(len, lines), initial=0))
    return pa.Array.from_buffers(pa.binary(), len(lines), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


class _Kind:
    """A LineKind's RE2 form, and per group whether b"" from RE2 means absent (the group cannot
    match empty) or needs the per-line path to tell absent from empty."""

    def __init__(self, kind: LineKind) -> None:
        self.kind = kind
        try:
            self.regex = re2_checked("^" + to_re2(kind.pattern.pattern.decode(), message=True))
        except NotRe2 as exc:
            raise NotRe2(f"patterns.{kind.kind}: {exc}") from None
        groups = _groups(kind.pattern)
        self.empty_is_absent = [groups[name][0] > 0 for name in kind.names]
        self.dicts: Callable | None = None
        self.events: Callable | None = None
        if kind.names:
            self.dicts, self.events = _builders(kind.names)


class _Block:
    """One block's prefixed rows: their prefix groups and line numbers."""

    def __init__(self, heads: pa.StructArray, rows: pa.Array) -> None:
        self.heads, self.rows = heads, rows

    def filter(self, mask: pa.Array) -> _Block:
        return _Block(self.heads.filter(mask), self.rows.filter(mask))

    def take(self, positions: pa.Array) -> _Block:
        return _Block(self.heads.take(positions), self.rows.take(positions))


class BlockGrammar:
    """The columnar form of a Grammar. Guarantees: `outcomes(lines)` gives, for every line, the same
    Event or Miss as `parse_line` of the per-line parser it was built from (`event` is that parser's
    own method, so zones, `args` and date checks are shared); construction raises NotRe2 when a
    pattern cannot run in RE2 with Python's meaning."""

    def __init__(
        self,
        grammar: Grammar,
        event: Callable[[bytes, str, dict, int], Event | str],
        parse_line: Callable[[bytes], Event | str],
        *,
        source: str,
        instance: str,
        host: str,
        utc: bool,
        special: frozenset[str] = frozenset(),
        ignored_prefix: str | None = None,
    ) -> None:
        self.grammar, self.event, self.parse_line = grammar, event, parse_line
        self.source, self.instance, self.host = source, instance, host
        self.utc = utc  # stamps converted column-wise; otherwise by the parser's zone, per event
        self.special = special  # kinds whose event() does more than build the Event (the engine's args)
        groups = _groups(grammar.prefix)
        for name in ("ts", "level", "component"):
            if name in groups and (groups[name][0] == 0 or groups[name][1]):
                raise NotRe2(f"prefix: the group {name} may be empty or absent")
        prefix = to_re2(grammar.prefix.pattern.decode(), message=False)
        self.prefix = re2_checked(f"^(?:{prefix})(?P<{MESSAGE}>(?s:.*))")
        self.ignored = re2_checked(ignored_prefix) if ignored_prefix else None
        self.kinds = {component: [_Kind(kind) for kind in kinds] for component, kinds in grammar.by_component.items()}

    def outcomes(self, lines: list[bytes]) -> tuple[list[tuple[int, Event]], dict[str, int], int]:
        """Events with their line index, in line order; miss counts; the index of the last line no
        pattern matched (-1: none)."""
        data = b"".join(lines)
        lines_array = binary_array(lines, data)
        misses = {Miss.IGNORED: 0, Miss.UNMATCHED: 0, Miss.UNPREFIXED: 0}
        if b"\n" in data:  # never from the tailer: one memchr instead of a kernel
            newline = pc.match_substring(lines_array, b"\n")
            per_line: list[int] = pc.indices_nonzero(newline).to_pylist()
            keep = pc.invert(newline)
        else:
            per_line, keep = [], pa.nulls(len(lines), pa.bool_()).fill_null(True)
        if self.ignored:
            ignored = pc.match_substring_regex(lines_array, self.ignored)
            misses[Miss.IGNORED] = pc.sum(pc.and_(ignored, keep)).as_py() or 0
            keep = pc.and_not(keep, ignored)
        # The kept lines' numbers: one kernel, not an array("q", range(n)) built in Python and filtered.
        lines_array, rows = lines_array.filter(keep), pc.indices_nonzero(keep).cast(pa.int64())
        heads = pc.extract_regex(lines_array, self.prefix)
        prefixed = heads.is_valid()
        misses[Miss.UNPREFIXED] = len(heads) - (pc.sum(prefixed).as_py() or 0)
        block = _Block(heads, rows).filter(prefixed)
        if self.grammar.has_level and self.grammar.ignore_levels:
            skip = pc.is_in(block.heads.field("level"), pa.array(sorted(self.grammar.ignore_levels), pa.binary()))
            misses[Miss.IGNORED] += pc.sum(skip).as_py() or 0
            block = block.filter(pc.invert(skip))
        found: list[tuple[int, Event | str]] = []
        rows = _Rows(self, block)
        taken = self._kinds(block, rows, found, per_line)
        self._leftovers(block, rows, [j for j in range(len(rows.rows)) if j not in taken], found)
        found += [(i, self.parse_line(lines[i])) for i in per_line]
        found.sort(key=lambda item: item[0])
        events, last_unmatched = [], -1
        for i, result in found:
            if isinstance(result, str):
                try:
                    misses[result] += 1
                except KeyError:  # Miss.invalid(field)
                    misses[result] = 1
                if result == Miss.UNMATCHED:
                    last_unmatched = i
            else:
                events.append((i, result))
        return events, misses, last_unmatched

    def _words(self, heads: pa.StructArray) -> pa.Array:
        """The component's first word, as the per-line path looks it up."""
        if not self.grammar.has_component:
            return pa.nulls(len(heads), pa.binary()).fill_null(b"")
        return pc.extract_regex(heads.field("component"), r"^(?P<w>[^ ]*)").field("w")

    def _kinds(self, block: _Block, rows: _Rows, found: list, per_line: list[int]) -> set[int]:
        """Match every kind, in the per-line order, on the rows of its component; returns the
        positions some kind took (matched, or refused as invalid)."""
        words = self._words(block.heads)
        messages = block.heads.field(MESSAGE)
        taken: set[int] = set()
        for component, kinds in self.kinds.items():
            open_rows = pc.indices_nonzero(pc.equal(words, pa.scalar(component, pa.binary())))
            for kind in kinds:
                if not len(open_rows):
                    break
                if kind.kind.literal:
                    candidates = open_rows.filter(pc.match_substring(messages.take(open_rows), kind.kind.literal))
                else:
                    candidates = open_rows
                if not len(candidates):
                    continue
                matched = pc.extract_regex(messages.take(candidates), kind.regex)
                hit = matched.is_valid()
                took = candidates.filter(hit)
                if len(took):
                    positions = took.to_pylist()
                    self._emit(kind, matched.filter(hit), positions, rows, found, per_line)
                    taken.update(positions)
                    open_rows = open_rows.filter(pc.invert(pc.is_in(open_rows, took)))
        return taken

    def _emit(
        self, kind: _Kind, matched: pa.StructArray, positions: list[int], rows: _Rows, found: list, per_line: list[int]
    ) -> None:
        """The rows one kind matched, as (line, Event or Miss) into `found`; rows with an empty group that the
        per-line parser reads differently go to `per_line` instead."""
        raw = [matched.field(name).to_pylist() for name in kind.kind.names]
        redo = _empty_groups(kind, raw)
        results = self._results(kind, raw, positions, rows)
        lines = rows.rows
        if redo:
            per_line += [lines[positions[j]] for j in sorted(redo)]
            found += [(lines[p], result) for j, (p, result) in enumerate(zip(positions, results)) if j not in redo]
        else:
            found += [(lines[p], result) for p, result in zip(positions, results)]

    def _results(self, kind: _Kind, raw: list[list[Any]], positions: list[int], rows: _Rows) -> list[Any]:
        name, plan = kind.kind.kind, kind.kind.plan
        times = None if name in self.special else rows.times
        columns = _typed_columns(plan, raw, kind.empty_is_absent) if raw and times is not None else None
        epochs = [times[p] for p in positions] if columns is not None and times is not None else [None]
        if None not in epochs and kind.events is not None:  # every row an Event: typed columns into Events
            return kind.events(epochs, columns, self.source, name, self.instance, self.host, Event)
        values = _convert(plan, raw, kind.empty_is_absent, kind.dicts) if raw else [{} for _ in positions]
        if times is None:  # the parser's own event(): a zone, a special kind
            return self._own_events(name, positions, values, rows)
        return self._events(name, positions, values, times)

    def _own_events(self, name: str, positions: list[int], values: list[Any], rows: _Rows) -> list[Any]:
        stamps, micros = rows.stamps, rows.micros
        return [
            fields if isinstance(fields, str) else self.event(stamps[p], name, fields, micros[p])
            for p, fields in zip(positions, values)
        ]

    def _events(self, name: str, positions: list[int], values: list[Any], times: list[float | None]) -> list[Any]:
        source, instance, host = self.source, self.instance, self.host
        return [
            fields
            if isinstance(fields, str)
            else Event(ts, source, name, fields.get("instance") or instance, fields, fields.get("req"), host)
            if (ts := times[p]) is not None
            else Miss.UNMATCHED
            for p, fields in zip(positions, values)
        ]

    def _micros(self, heads: pa.StructArray) -> pa.Array:
        """clock.fraction_micros of each row's ms group, column-wise: its first six digits, padded with zeros."""
        if "ms" not in self.grammar.prefix.groupindex:
            return pa.array([0] * len(heads), pa.int64())
        ms = pc.cast(pc.binary_slice(heads.field("ms"), 0, 6), pa.string())
        present = pc.greater(pc.utf8_length(ms), 0)
        padded = pc.utf8_rpad(pc.if_else(present, ms, pa.scalar("0", pa.string())), width=6, padding="0")
        return pc.cast(padded, pa.int64())

    def _timestamps(self, heads: pa.StructArray) -> list[float | None] | None:
        """Epoch seconds per row as the per-line parser computes them (UTC stamps only; None for a
        stamp it would refuse, such as 02-30: its row takes the parser's own `event`); None for
        all rows when the block cannot be done column-wise."""
        if not self.utc:
            return None
        try:
            micros = self._micros(heads)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # an ms group that is no number
            return None
        ts = heads.field("ts")
        # The clock reads fixed slices with int() and datetime(): column-wise only for stamps of
        # exactly its layout, and only where strptime did not normalise (02-30, :60) or take year 0.
        shaped = pc.match_substring_regex(ts, STAMP_SHAPE)
        ts = pc.if_else(shaped, ts, pa.scalar(b"1970-01-01 00:00:00", pa.binary()))
        seconds = pc.strptime(pc.cast(ts, pa.string()), format="%Y-%m-%d %H:%M:%S", unit="s", error_is_null=True)
        exact = shaped
        for part, (start, end) in STAMP_PARTS.items():
            stamped = pc.cast(pc.cast(pc.binary_slice(ts, start, end), pa.string()), pa.int64())
            exact = pc.and_(exact, pc.equal(getattr(pc, part)(seconds), stamped))
        instant = pc.add(pc.multiply(pc.cast(seconds, pa.int64()), MICROS), micros)
        # As DatedLogParser.event: float(micros) / MICROS (a year-0 row, beyond float's exact integers, is masked below).
        epoch = pc.divide(pc.cast(instant, pa.float64(), safe=False), float(MICROS))
        return pc.if_else(
            pc.and_(exact, pc.greater_equal(pc.cast(seconds, pa.int64()), FIRST_DAY)), epoch, None
        ).to_pylist()

    def _micros_list(self, heads: pa.StructArray) -> list[int]:
        try:
            return self._micros(heads).to_pylist()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # an ms group that is no number
            return [fraction_micros(ms) for ms in heads.field("ms").to_pylist()]

    def _leftovers(self, block: _Block, rows: _Rows, positions: list[int], found: list) -> None:
        """Prefixed rows no kind took: an error-level line is an `error` event, the rest unmatched."""
        if not positions:
            return
        heads, error = block.heads.take(pa.array(positions, pa.int64())), self.grammar.error_level
        n = len(positions)
        levels = heads.field("level").to_pylist() if self.grammar.has_level else [None] * n
        components = heads.field("component").to_pylist() if self.grammar.has_component else [b""] * n
        for p, level, component, message in zip(positions, levels, components, heads.field(MESSAGE).to_pylist()):
            if error is not None and level == error:
                fields = self.grammar.error_fields(component, message)
                found.append((rows.rows[p], self.event(rows.stamps[p], "error", fields, rows.micros[p])))
            else:
                found.append((rows.rows[p], Miss.UNMATCHED))


class _Rows:
    """Per prefixed row of a block, as Python lists computed once: line number, stamp, microseconds into
    its second, and the epoch seconds where they could be computed column-wise."""

    def __init__(self, grammar: BlockGrammar, block: _Block) -> None:
        self._grammar, self._block = grammar, block
        self.rows: list[int] = block.rows.to_pylist()

    @functools.cached_property
    def times(self) -> list[float | None] | None:
        return self._grammar._timestamps(self._block.heads)

    @functools.cached_property
    def stamps(self) -> list[bytes]:
        return self._block.heads.field("ts").to_pylist()

    @functools.cached_property
    def micros(self) -> list[int]:
        return self._grammar._micros_list(self._block.heads)


def _convert(
    plan: tuple,
    raw: list[list[bytes]],
    empty_is_absent: list[bool],
    build: Callable[[list[list[Any]]], list[dict[str, Any]]] | None = None,
) -> list[dict[str, Any] | str]:
    """Typed fields per row, converted a column at a time; a row with a malformed or out-of-range
    number is Miss.invalid(its first such field), exactly as LineKind.typed says. `build`: the
    kind's generated dict builder (_Kind.dicts), for rows with every group present."""
    n = len(raw[0]) if raw else 0
    if not plan:
        return [{} for _ in range(n)]
    names = [name for name, _ in plan]
    columns, absent = [], False
    try:
        for (_, conv), column, absent_ok in zip(plan, raw, empty_is_absent):
            if absent_ok and b"" in column:
                absent = True
                columns.append([None if value == b"" else conv(value) for value in column])
            else:
                columns.append(_column(conv, column))
    except ValueError:
        return [_row(plan, row, empty_is_absent) for row in zip(*raw)]
    if absent:
        return [{name: value for name, value in zip(names, row) if value is not None} for row in zip(*columns)]
    if build is not None:
        return list(build(columns))
    return [dict(zip(names, row)) for row in zip(*columns)]


def _typed_columns(plan: tuple, raw: list[list[bytes]], empty_is_absent: list[bool]) -> list[list[Any]] | None:
    """The typed columns when every row has every group and every number converts; else None
    (then _convert says per row what it is)."""
    try:
        columns = []
        for (_, conv), column, absent_ok in zip(plan, raw, empty_is_absent):
            if absent_ok and b"" in column:
                return None
            columns.append(_column(conv, column))
        return columns
    except ValueError:
        return None


@functools.lru_cache(maxsize=1024)  # 10,000 sources of one kind compile their builders once, not 10,000 times
def _builders(names: tuple[str, ...]) -> tuple[Callable, Callable]:
    """Two functions generated for one kind's group names: the fields dicts of typed columns, and
    its Events (`Event(ts, source, kind, fields.get("instance") or instance, fields, fields.get("req"),
    host)` per row, every group present). A dict display in a generated comprehension costs a
    third of dict(zip(names, row)); the names only enter the code as string literals (repr)."""
    values = [f"v{i}" for i in range(len(names))]
    row = ", ".join(values) + ("," if len(values) == 1 else "")
    fields = "{" + ", ".join(f"{name!r}: {value}" for name, value in zip(names, values)) + "}"
    instance = f"({values[names.index('instance')]} or instance)" if "instance" in names else "instance"
    req = values[names.index("req")] if "req" in names else "None"
    code = (
        f"def dicts(columns):\n    return [{fields} for {row} in zip(*columns)]\n"
        f"def events(ts, columns, source, kind, instance, host, Event):\n"
        f"    return [Event(t, source, kind, {instance}, {fields}, {req}, host) for t, {row} in zip(ts, *columns)]\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(code, f"<columnar builders {','.join(names)}>", "exec"), namespace)  # noqa: S102 - see above
    return namespace["dicts"], namespace["events"]


def _column(conv: Callable[[bytes], Any], column: list[bytes]) -> list[Any]:
    if conv is _int and max(map(len, column)) <= 15:  # under 2**53: int() is the whole check
        return list(map(int, column))
    if conv is _float:
        values = list(map(float, column))
        if not max(values) <= 2**53:  # inf or NaN somewhere: name the field per row
            raise ValueError("out of range")
        return values
    return list(map(conv, column))


def _row(plan: tuple, row: tuple[bytes, ...], empty_is_absent: list[bool]) -> dict[str, Any] | str:
    values = [None if absent_ok and value == b"" else value for value, absent_ok in zip(row, empty_is_absent)]
    for (name, conv), value in zip(plan, values):
        if value is not None:
            try:
                conv(value)
            except ValueError:
                return Miss.invalid(name)
    return {name: conv(value) for (name, conv), value in zip(plan, values) if value is not None}


def _empty_groups(kind: _Kind, raw: list[list[Any]]) -> set[int]:
    """Rows where a group matched empty text that the per-line parser does not read as absent."""
    redo: set[int] = set()
    for empty_is_absent, column in zip(kind.empty_is_absent, raw):
        if not empty_is_absent and b"" in column:
            redo.update(j for j, value in enumerate(column) if value == b"")
    return redo
