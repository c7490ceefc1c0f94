"""A line grammar: an anchored prefix, then message patterns chosen by component and literal.

Only a line that matches the prefix can become an event, so text inside a prompt echoed on a
continuation line can never forge one; a message pattern must match to the end of the line, so
no text may follow a valid message. Every number is range-checked where it is converted. After the
prefix, a cheap dispatch on the component and
a literal `in` test run before any regex. Every pattern can be replaced from configuration.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from spyglass.collectors.fields import capture_type, group_bodies


class Miss:
    """Why a line produced no event (plain strings: they are counted per line on the hot path)."""

    IGNORED = "ignored"  # prefixed, but of a level we skip on purpose
    UNMATCHED = "unmatched"  # prefixed, but no pattern matched: format drift shows up here
    UNPREFIXED = "unprefixed"  # no line prefix: a continuation, a stack trace, an echoed prompt
    INVALID = "invalid"  # matched, but a value is unusable: "invalid:FIELD" names the field

    @staticmethod
    def invalid(field: str) -> str:
        return f"{Miss.INVALID}:{field}"


def split_outcome(outcome: str) -> tuple[str, str]:
    """("invalid", "decode_tps") for "invalid:decode_tps"; (outcome, "") for the other misses."""
    outcome, _, field = outcome.partition(":")
    return outcome, field


# The largest magnitude a parsed number may have: every value up to it is exact in the float
# metric state and fits the store's 64-bit integers. A larger one is a forged or broken line.
MAX_NUMBER = 2**53

_text = functools.partial(str, encoding="utf-8", errors="replace")  # C-level: called per text field


def number_ok(value: object) -> bool:
    """True for an int or float (not bool) of magnitude at most MAX_NUMBER; NaN and inf fail."""
    return value.__class__ in (int, float) and -MAX_NUMBER <= value <= MAX_NUMBER


def _int(raw: bytes) -> int:
    value = int(raw)
    if not -MAX_NUMBER <= value <= MAX_NUMBER:
        raise ValueError("out of range")
    return value


def _float(raw: bytes) -> float:
    value = float(raw)  # ValueError for "1.2.3" or "." ([\d.]+ matches both)
    if not value <= MAX_NUMBER:  # inf for 400 digits
        raise ValueError("out of range")
    return value


_NUMBERS = {"int": _int, "float": _float}


def converters(regex: str, text_fields: frozenset[str]) -> dict[str, Callable[[bytes], Any]]:
    """Per named group: int, float or text, read off the group's regex once instead of per value, by
    the same rule the store's columns are typed by (collectors/fields.capture_type).

    Groups of another shape are typed by their value (see _auto)."""
    found: dict[str, Callable[[bytes], Any]] = {}
    for name, body in group_bodies(regex).items():
        number = capture_type(body)
        if name in text_fields:
            found[name] = _text
        elif number is not None:
            found[name] = _NUMBERS[number]
    return found


@dataclass(frozen=True)
class LineKind:
    """One kind of message: the component it comes from, a literal it must contain, a regex."""

    kind: str
    component: str  # first word of the bracketed component ("slot" matches "[slot 3]")
    literal: bytes
    pattern: re.Pattern[bytes]
    convert: dict[str, Callable[[bytes], Any]] = field(default_factory=dict)

    @functools.cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(self.pattern.groupindex)

    @functools.cached_property
    def plan(self) -> tuple[tuple[str, Callable[[bytes], Any]], ...]:
        """(name, converter) per named group; a group of no fixed type is typed by its value."""
        return tuple((name, self.convert.get(name) or functools.partial(_auto, name)) for name in self.names)

    def typed(self, found: re.Match[bytes]) -> dict[str, Any] | str:
        """The named groups of `found`, converted, absent ones left out; or Miss.invalid(field)
        when a number is malformed or out of range (the line is then not an event at all)."""
        try:
            return self._typed_common(found)
        except (TypeError, ValueError, OverflowError):  # an absent group, a malformed or long number
            return self._typed_any(found)

    @functools.cached_property
    def _typed_common(self) -> Callable[[re.Match[bytes]], dict[str, Any]]:
        """typed() of the common line as one generated function: every group present and every
        number at most 15 characters long (so below MAX_NUMBER), converted by direct C calls. Any
        other line raises (TypeError, ValueError, OverflowError) and takes _typed_any, which gives
        the same value for the common line (tests/test_grammar_typed.py holds the two equal)."""
        if not self.names:
            return lambda found: {}
        env: dict[str, Any] = {"names": self.names}
        values, checks, items = [], [], []
        for i, (name, conv) in enumerate(self.plan):
            value = f"v{i}"
            values.append(value)
            if conv is _int or conv is _float:
                checks.append(f"len({value}) > 15")
                items.append(f"{name!r}: {'int' if conv is _int else 'float'}({value})")
            elif conv is _text:
                items.append(f"{name!r}: str({value}, 'utf-8', 'replace')")
            else:  # typed by its look (_auto): a Python call, as on the general path
                env[f"c{i}"] = conv
                checks.append(f"{value} is None")  # absent: _auto would fail on None in its own way
                items.append(f"{name!r}: c{i}({value})")
        unpack = (
            f"({values[0]},) = (found.group(names[0]),)"
            if len(values) == 1
            else f"{', '.join(values)} = found.group(*names)"
        )
        check = f"    if {' or '.join(checks)}:\n        raise OverflowError\n" if checks else ""
        code = f"def typed(found):\n    {unpack}\n{check}    return {{{', '.join(items)}}}\n"
        exec(code, env)  # noqa: S102 - the text above, from this kind's group names and converters
        return env["typed"]

    def _typed_any(self, found: re.Match[bytes]) -> dict[str, Any] | str:
        names = self.names
        values = found.group(*names) if len(names) > 1 else (found.group(names[0]),) if names else ()
        try:
            return {name: conv(raw) for (name, conv), raw in zip(self.plan, values) if raw is not None}
        except ValueError:
            return self._refused(values)

    def _refused(self, values: tuple[bytes | None, ...]) -> str:
        for (name, conv), raw in zip(self.plan, values):
            try:
                if raw is not None:
                    conv(raw)
            except ValueError:
                return Miss.invalid(name)
        return Miss.INVALID


def compile_pattern(text: str, where: str) -> re.Pattern[bytes]:
    """Compile a configured pattern; ValueError naming `where` if it is not a valid regex."""
    try:
        return re.compile(text.encode())
    except re.error as exc:
        raise ValueError(f"{where}: invalid regular expression: {exc}") from exc


def _auto(name: str, raw: bytes) -> Any:
    """A value typed by its look: digits are int, digits with one dot float, the rest text;
    a number beyond MAX_NUMBER is refused (ValueError), as for a typed group."""
    if raw.isdigit():
        return _int(raw)
    if raw.count(b".") == 1 and raw.replace(b".", b"", 1).isdigit():
        return _float(raw)
    return _text(raw)


class Grammar:
    """Prefix regex (group ts; optional ms, level, component) plus message kinds."""

    def __init__(
        self,
        prefix: str,
        kinds: Iterable[LineKind],
        *,
        ignore_levels: Iterable[str] = (),
        error_level: str | None = "E",
    ) -> None:
        self.prefix = compile_pattern(prefix, "grammar.prefix")
        if "ts" not in self.prefix.groupindex:
            raise ValueError("grammar.prefix: needs a named group ts")
        self.has_level = "level" in self.prefix.groupindex
        self.has_component = "component" in self.prefix.groupindex
        self.ignore_levels = frozenset(level.encode() for level in ignore_levels)
        self.error_level = error_level.encode() if error_level else None
        self.by_component: dict[bytes, list[LineKind]] = {}
        for kind in kinds:
            self.by_component.setdefault(kind.component.encode(), []).append(kind)

    def match(self, line: bytes) -> tuple[re.Match[bytes], str, dict[str, Any]] | str:
        """The prefix match, the kind and its typed fields, or why there is none (a Miss)."""
        head = self.prefix.match(line)
        if head is None:
            return Miss.UNPREFIXED
        level = head.group("level") if self.has_level else None
        if level in self.ignore_levels:
            return Miss.IGNORED
        component = head.group("component") if self.has_component else b""
        message = line[head.end() :]
        for kind in self.by_component.get(component.split(b" ", 1)[0], ()):
            if kind.literal in message:
                found = kind.pattern.match(message)
                if found is not None:
                    fields = kind.typed(found)
                    return fields if isinstance(fields, str) else (head, kind.kind, fields)
        if level == self.error_level:
            return head, "error", self.error_fields(component, message)
        return Miss.UNMATCHED

    def error_fields(self, component: bytes, message: bytes) -> dict[str, Any]:
        return {"component": _text(component.split(b" ", 1)[0]), "message": _text(message[:240])}


class PatternOverride(BaseModel):
    """A kind's pattern from config: the regex, and optionally its component and literal prefilter."""

    model_config = ConfigDict(extra="forbid")

    regex: str
    component: str | None = None
    literal: str = ""


def build_kinds(
    defaults: Mapping[str, tuple[str, str, str]],
    overrides: Mapping[str, str | PatternOverride],
    where: str,
    text_fields: frozenset[str] = frozenset(),
) -> list[LineKind]:
    """Default (component, literal, regex) per kind, with config overrides applied.

    A plain regex override keeps the kind's component and drops its literal prefilter (the old
    literal may be what drifted); a table gives all three. A new kind needs a component.
    """
    kinds = []
    for name in sorted(set(defaults) | set(overrides)):
        component, literal, regex = defaults.get(name, (None, "", ""))
        override = overrides.get(name)
        if isinstance(override, str):
            override = PatternOverride(regex=override)
        if override is not None:
            component = override.component or component
            literal, regex = override.literal, override.regex
        if component is None:
            if any(c for c, _, _ in defaults.values()):
                raise ValueError(
                    f"{where}.{name}: a new kind needs a component, e.g. {{ regex = '...', component = 'cache' }}"
                )
            component = ""  # a format without components
        # Anchored at both ends: text after a valid message (a prompt running on) is no event.
        kinds.append(
            LineKind(
                name,
                component,
                literal.encode(),
                compile_pattern(f"(?:{regex})$", f"{where}.{name}"),
                converters(regex, text_fields),
            )
        )
    return kinds
