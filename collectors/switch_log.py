"""Switch log (switch-engine.log, sources.md §5): operator engine switches and restarts, Beijing time.

Fixture: tests/fixtures/switch_log/switch-engine.log
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from spyglass.collectors import LineSourceBase, SourceOptions, register
from spyglass.collectors.clock import BEIJING_ZONE_NAME
from spyglass.collectors.dated_log import DatedLogParser, handle_lines
from spyglass.collectors.event import Event
from spyglass.collectors.fields import declare, from_patterns
from spyglass.collectors.grammar import PatternOverride, build_kinds

PREFIX = r"(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) "
PATTERNS: dict[str, tuple[str, str, str]] = {
    "switch": (
        "",
        "switch ",
        r"switch (?P<instance>\S+) engine=(?P<from_build>\S+) -> (?P<to_build>\S+)"
        r" by=(?P<by>\S+)",
    ),
    "restart": ("", "restart ", r"restart (?P<instance>\S+) reason=(?P<reason>\S+) by=(?P<by>\S+)"),
}
TEXT_FIELDS = frozenset({"instance", "from_build", "to_build", "by", "reason"})

declare("switch_log", from_patterns(PATTERNS, TEXT_FIELDS, {kind: {"unlisted_instance": "bool"} for kind in PATTERNS}))


class SwitchLogOptions(SourceOptions):
    kind: Literal["switch_log"] = "switch_log"
    tz: str = BEIJING_ZONE_NAME
    patterns: dict[str, str | PatternOverride] = Field(
        default_factory=dict, description="Per-kind message regex overrides."
    )
    instances: list[str] = Field(
        default_factory=list,
        description="The instances a line may name; another name is exported as `other`"
        " and counted. Empty: the instances the config's other sources name.",
    )

    def complete(self, others: list[SourceOptions]) -> None:
        if not self.instances:
            self.instances = sorted(set().union(*(o.instances_named() for o in others)))


@register("switch_log", SwitchLogOptions)
class SwitchLogSource(LineSourceBase):
    """Switch-log lines in; each event's instance is the one the line names if configuration lists
    it (`instances`), else `other` with `unlisted_instance` set: a label value never comes from a
    line unchecked (the name the line gave stays in the event's fields, cut to 80 characters)."""

    def __init__(self, name: str, options: SwitchLogOptions, host: str = "") -> None:
        kinds = build_kinds(PATTERNS, options.patterns, f"sources.{name}.patterns", TEXT_FIELDS)
        self.parser = DatedLogParser(PREFIX, kinds, options.tz, name, options.instance, host)
        self.instances = frozenset(options.instances)

    def handle(self, line: bytes) -> Event | str:
        event = self.parser.parse_line(line)
        if isinstance(event, Event):
            named = str(event.fields.get("instance") or "")[:80]
            event.fields["instance"] = named
            if named not in self.instances:
                event.instance = "other"
                event.fields["unlisted_instance"] = True
        return event

    def handle_lines(self, lines: list[bytes]) -> tuple[list[Event], dict[str, int], bytes]:
        return handle_lines(self.handle, lines)
