"""supervisord's main log (sources.md §3): `YYYY-MM-DD HH:MM:SS,mmm LEVEL message`, naive local time.

Every template of supervisor 4.3.0 (research/process-lifecycle.md §1). Lines without the prefix
are continuations (child output copied at debug level) and are never events.
Fixture: tests/fixtures/supervisord_log/supervisord.log
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from spyglass.collectors import LineSourceBase, SourceOptions, register
from spyglass.collectors.dated_log import DatedLogParser, handle_lines
from spyglass.collectors.event import Event
from spyglass.collectors.fields import ERROR_KIND, declare, from_patterns
from spyglass.collectors.grammar import PatternOverride, build_kinds

PREFIX = r"(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(?P<ms>\d{3}) (?P<level>CRIT|ERRO|WARN|INFO|DEBG|TRAC|BLAT) "
HOW = r"(?:exit status (?P<status>\d+)|terminated by (?P<signal>SIG\w+)(?P<core> \(core dumped\))?)"

PATTERNS: dict[str, tuple[str, str, str]] = {
    "supervisord_started": ("", "supervisord started", r"supervisord started with pid (?P<pid>\d+)"),
    "spawned": ("", "spawned: ", r"spawned: '(?P<program>[^']+)' with pid (?P<pid>\d+)"),
    "running": (
        "",
        "entered RUNNING",
        r"success: (?P<program>\S+) entered RUNNING state, process has stayed"
        r" up for > than (?P<startsecs>\d+) seconds \(startsecs\)",
    ),
    "exited": ("", "exited: ", r"exited: (?P<program>\S+) \(" + HOW + r"; (?P<expected>expected|not expected)\)"),
    "fatal": ("", "gave up: ", r"gave up: (?P<program>\S+) entered FATAL state, too many start retries too quickly"),
    "stopping": ("", " to stop", r"waiting for (?P<program>\S+) to stop$"),
    "stopped": ("", "stopped: ", r"stopped: (?P<program>\S+) \(" + HOW + r"\)"),
    "stop_kill": ("", "killing '", r"killing '(?P<program>[^']+)' \((?P<pid>\d+)\) with (?P<signal>SIG\w+)"),
    "spawn_error": ("", "spawnerr: ", r"spawnerr: (?P<error>.*)"),
    "signal": ("", "indicating", r"received (?P<signal>SIG\w+) indicating (?P<request>\w+) request"),
    "shutdown_wait": ("", " to die", r"waiting for (?P<programs>.+) to die"),
    "event_overflow": (
        "",
        "overflowed",
        r"pool (?P<pool>\S+) event buffer overflowed, discarding event (?P<event>\d+)",
    ),
    "reaped": ("", "reaped unknown", r"reaped unknown pid (?P<pid>\d+)"),
    # start-up notices: known, so that they never count as format drift
    "rpc_ready": ("", "RPC interface", r"RPC interface '(?P<interface>[^']+)' initialized"),
    "included": ("", "Included extra file", r"Included extra file \"(?P<file>[^\"]+)\""),
    "daemonizing": ("", "daemonizing", r"daemonizing the supervisord process"),
}
TEXT_FIELDS = frozenset(
    {"program", "signal", "core", "expected", "error", "request", "programs", "pool", "interface", "file"}
)

declare(
    "supervisord_log",
    {**from_patterns(PATTERNS, TEXT_FIELDS, {"exited": {"core": "bool"}, "stopped": {"core": "bool"}}), **ERROR_KIND},
)


class SupervisordLogOptions(SourceOptions):
    kind: Literal["supervisord_log"] = "supervisord_log"
    tz: str = "UTC"
    patterns: dict[str, str | PatternOverride] = Field(
        default_factory=dict, description="Per-kind message regex overrides."
    )
    ignore_levels: list[str] = Field(["DEBG", "TRAC", "BLAT"], description="Levels skipped on purpose.")


@register("supervisord_log", SupervisordLogOptions)
class SupervisordLogSource(LineSourceBase):
    """supervisord lines in, process lifecycle events out."""

    def __init__(self, name: str, options: SupervisordLogOptions, host: str = "") -> None:
        kinds = build_kinds(PATTERNS, options.patterns, f"sources.{name}.patterns", TEXT_FIELDS)
        self.parser = DatedLogParser(
            PREFIX,
            kinds,
            options.tz,
            name,
            options.instance or "supervisord",
            host,
            options.ignore_levels,
            error_level="CRIT",
        )

    def handle(self, line: bytes) -> Event | str:
        event = self.parser.parse_line(line)
        if event.__class__ is Event and "core" in event.fields:
            event.fields["core"] = True  # the text " (core dumped)" becomes a flag
        return event

    def handle_lines(self, lines: list[bytes]) -> tuple[list[Event], dict[str, int], bytes]:
        return handle_lines(self.handle, lines)
