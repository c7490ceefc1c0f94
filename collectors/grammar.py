"""A line grammar: an anchored prefix, then message patterns chosen by component and literal.

Only a line that matches the prefix can become an event, so text inside a prompt echoed on a
continuation line can never forge one. After the prefix, a cheap dispatch on the component and
a literal `in` test run before any regex. Every pattern can be replaced from configuration.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict


class Miss(str, Enum):
    """Why a line produced no event."""

    IGNORED = "ignored"  # prefixed, but of a level or kind we skip on purpose
    UNMATCHED = "unmatched"  # prefixed, but no pattern matched: format drift shows up here
    UNPREFIXED = "unprefixed"  # no line prefix: a continuation, a stack trace, an echoed prompt


@dataclass(frozen=True)
class LineKind:
    """One kind of message: the component it comes from, a literal it must contain, a regex."""

    kind: str
    component: str  # first word of the bracketed component ("slot" matches "[slot 3]")
    literal: bytes
    pattern: re.Pattern[bytes]


def compile_pattern(text: str, where: str) -> re.Pattern[bytes]:
    """Compile a configured pattern; ValueError naming `where` if it is not a valid regex."""
    try:
        return re.compile(text.encode())
    except re.error as exc:
        raise ValueError(f"{where}: invalid regular expression: {exc}") from exc


def _typed(name: str, raw: bytes, text_fields: frozenset[str]) -> Any:
    if name not in text_fields:
        if raw.isdigit():
            return int(raw)
        if raw.count(b".") == 1 and raw.replace(b".", b"", 1).isdigit():
            return float(raw)
    return raw.decode("utf-8", "replace")


class Grammar:
    """Prefix regex (groups ts, ms, level, component) plus message kinds."""

    def __init__(self, prefix: str, kinds: Iterable[LineKind], *, ignore_levels: Iterable[str] = (),
                 error_level: str | None = "E", text_fields: Iterable[str] = ()) -> None:
        self.prefix = compile_pattern(prefix, "grammar.prefix")
        missing = {"ts", "level", "component"} - set(self.prefix.groupindex)
        if missing:
            raise ValueError(f"grammar.prefix: missing named groups {sorted(missing)}")
        self.ignore_levels = frozenset(level.encode() for level in ignore_levels)
        self.error_level = error_level.encode() if error_level else None
        self.text_fields = frozenset(text_fields)
        self.by_component: dict[bytes, list[LineKind]] = {}
        for kind in kinds:
            self.by_component.setdefault(kind.component.encode(), []).append(kind)

    def match(self, line: bytes) -> tuple[re.Match[bytes], str, dict[str, Any]] | Miss:
        """The prefix match, the kind and its typed fields, or why there is none."""
        head = self.prefix.match(line)
        if head is None:
            return Miss.UNPREFIXED
        level = head.group("level")
        if level in self.ignore_levels:
            return Miss.IGNORED
        component = head.group("component")
        message = line[head.end():]
        for kind in self.by_component.get(component.split(b" ", 1)[0], ()):
            if kind.literal in message:
                found = kind.pattern.match(message)
                if found is not None:
                    return head, kind.kind, self.fields(found.groupdict())
        if level == self.error_level:
            return head, "error", {"component": component.split(b" ", 1)[0].decode("utf-8", "replace"),
                                   "message": message[:240].decode("utf-8", "replace")}
        return Miss.UNMATCHED

    def fields(self, groups: Mapping[str, bytes | None]) -> dict[str, Any]:
        return {k: _typed(k, v, self.text_fields) for k, v in groups.items() if v is not None}


class PatternOverride(BaseModel):
    """A kind's pattern from config: the regex, and optionally its component and literal prefilter."""

    model_config = ConfigDict(extra="forbid")

    regex: str
    component: str | None = None
    literal: str = ""


def build_kinds(defaults: Mapping[str, tuple[str, str, str]],
                overrides: Mapping[str, str | PatternOverride], where: str) -> list[LineKind]:
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
        if not component:
            raise ValueError(f"{where}.{name}: a new kind needs a component, e.g."
                             f" {{ regex = '...', component = 'cache' }}")
        kinds.append(LineKind(name, component, literal.encode(), compile_pattern(regex, f"{where}.{name}")))
    return kinds
