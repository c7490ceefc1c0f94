"""Switch log (switch-engine.log, sources.md §5): operator engine switches and restarts, Beijing time.

Fixture: tests/fixtures/switch_log/switch-engine.log
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from collectors import LineSourceBase, SourceOptions, register
from collectors.dated_log import DatedLogParser, handle_lines
from collectors.event import Event
from collectors.grammar import PatternOverride, build_kinds

PREFIX = r"(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) "
PATTERNS: dict[str, tuple[str, str, str]] = {
    "switch": ("", "switch ", r"switch (?P<instance>\S+) engine=(?P<from_build>\S+) -> (?P<to_build>\S+)"
                              r" by=(?P<by>\S+)"),
    "restart": ("", "restart ", r"restart (?P<instance>\S+) reason=(?P<reason>\S+) by=(?P<by>\S+)"),
}
TEXT_FIELDS = frozenset({"instance", "from_build", "to_build", "by", "reason"})


class SwitchLogOptions(SourceOptions):
    kind: Literal["switch_log"] = "switch_log"
    tz: str = "Asia/Shanghai"
    patterns: dict[str, str | PatternOverride] = Field(default_factory=dict,
                                                       description="Per-kind message regex overrides.")


@register("switch_log", SwitchLogOptions)
class SwitchLogSource(LineSourceBase):
    """Switch-log lines in; each event's instance is the one the line names."""

    def __init__(self, name: str, options: SwitchLogOptions, host: str = "") -> None:
        kinds = build_kinds(PATTERNS, options.patterns, f"sources.{name}.patterns", TEXT_FIELDS)
        self.parser = DatedLogParser(PREFIX, kinds, options.tz, name, options.instance, host)

    def handle(self, line: bytes) -> Event | str:
        return self.parser.parse_line(line)

    def handle_lines(self, lines: list[bytes]) -> tuple[list[Event], dict[str, int], bytes]:
        return handle_lines(self.handle, lines)
