"""Gateway log (rag-proxy.log, sources.md §4): `[HH:MM:SS] message`, UTC, with no date.

The date is recovered (DateRecovery), in the log's zone (`tz`, UTC by default): a line with a
request id takes its date from the id's Beijing time; a line without one takes the date of the
line before, a new day when the clock goes back more than 12 hours; lines before the first id
take the file's mtime. The source also carries each request's lane, mode and token estimate
from its first line to the later ones (precheck, done, overfit, reject), which do not repeat
them, and lets go of it at the request's last line. A lane or mode outside the configured
`lanes` / `modes` is carried as `other` (the line's value stays in the stored event).
Fixture: tests/fixtures/gateway_log/rag-proxy.log
"""

from __future__ import annotations

import re
from collections import OrderedDict
from datetime import date, datetime, timedelta
from typing import Any, Literal

from pydantic import Field

from spyglass.collectors import LineSourceBase, SourceOptions, register
from spyglass.collectors.clock import BEIJING_ZONE_NAME, local_to_epoch, zone
from spyglass.collectors.dated_log import handle_lines
from spyglass.collectors.event import Event
from spyglass.collectors.fields import FieldType, SourceFields, declare, from_patterns
from spyglass.collectors.grammar import Miss, PatternOverride, build_kinds

PREFIX = re.compile(rb"\[(\d\d):(\d\d):(\d\d)\] ")
REQ_ID = re.compile(rb"req=(\d{8})-(\d{6})-")
# kind: (component, literal, regex); the gateway has no component, so all share "".
PATTERNS: dict[str, tuple[str, str, str]] = {
    "started": ("", "rag-proxy started", r"rag-proxy started pid=(?P<pid>\d+) version=(?P<version>\S+)"),
    "request": (
        "",
        " session=",
        r"req=(?P<req>\S+) session=(?P<session>\S+) lane=(?P<lane>\S+) mode=(?P<mode>\S+)"
        r" client_msgs=(?P<client_msgs>\d+) sent_msgs=(?P<sent_msgs>\d+) chars=(?P<chars>\d+)"
        r" cjk=(?P<cjk>[\d.]+) est_tokens=(?P<est_tokens>\d+) max_tokens=(?P<max_tokens>\d+)",
    ),
    "precheck": (
        "",
        "precheck ",
        r"precheck req=(?P<req>\S+) count_tokens=(?P<count_tokens>\d+)"
        r" window=(?P<window>\d+) room=(?P<room>-?\d+)",
    ),
    "clamp": (
        "",
        "clamp ",
        r"clamp req=(?P<req>\S+) max_tokens (?P<max_from>\d+) -> (?P<max_to>\d+)"
        r"(?: thinking_budget (?P<thinking_budget>\d+))?",
    ),
    "done": (
        "",
        "done ",
        r"done req=(?P<req>\S+) status=(?P<status>\d{3}) engine_prompt=(?P<engine_prompt>\d+)"
        r" completion=(?P<completion>\d+) finish=(?P<finish>\w+) tool_calls=(?P<tool_calls>\d+)"
        r" content_chars=(?P<content_chars>\d+) ttft_ms=(?P<ttft_ms>\d+) dur_ms=(?P<dur_ms>\d+)",
    ),
    "overfit": (
        "",
        "overfit ",
        r"overfit req=(?P<req>\S+) status=(?P<status>\d{3}) prompt=(?P<prompt>\d+)"
        r" max=(?P<max>\d+) upstream=\"(?P<upstream>[^\"]*)\"",
    ),
    "retry_on_overfit": (
        "",
        "retry_on_overfit ",
        r"retry_on_overfit req=(?P<req>\S+) max_tokens"
        r" (?P<max_from>\d+) -> (?P<max_to>\d+)",
    ),
    "reject": ("", "reject ", r"reject req=(?P<req>\S+) status=(?P<status>\d{3}) reason=\"(?P<reason>[^\"]*)\""),
}
TEXT_FIELDS = frozenset({"req", "session", "lane", "mode", "version", "finish", "upstream", "reason"})
CARRIED = ("lane", "mode", "est_tokens", "client_msgs", "sent_msgs")
LAST_LINES = ("done", "reject", "retry_on_overfit")  # a request writes nothing after these
MAX_UNLISTED = 120  # characters kept of a label value outside its list


def _declared() -> SourceFields:
    """The kinds' own fields, then those carried from the request line to the later lines of a request."""
    own = from_patterns(PATTERNS, TEXT_FIELDS, {"request": {"unlisted": "json"}})
    carried: dict[str, FieldType] = {name: own["request"][name] for name in CARRIED}
    return {
        kind: {**carried, **found} if "req" in found and kind != "request" else found for kind, found in own.items()
    }


declare("gateway_log", _declared())


class GatewayLogOptions(SourceOptions):
    kind: Literal["gateway_log"] = "gateway_log"
    tz: str = "UTC"
    request_id_tz: str = Field(BEIJING_ZONE_NAME, description="Zone of the time inside request ids.")

    def request_id_zone(self) -> str | None:
        return self.request_id_tz

    patterns: dict[str, str | PatternOverride] = Field(
        default_factory=dict, description="Per-kind message regex overrides."
    )
    lanes: list[str] = Field(["fast", "normal"], description="Lanes exported as labels; any other is `other`.")
    modes: list[str] = Field(
        ["assembled", "passthrough", "no_rag"], description="Modes exported as labels; any other is `other`."
    )


class DateRecovery:
    """The date, in the log's zone, of each `[HH:MM:SS]` line (rules in the module docstring)."""

    def __init__(self, id_zone: str, log_zone: str = "UTC") -> None:
        self.id_zone, self.log_zone = zone(id_zone), zone(log_zone)
        self.day: date | None = None
        self.last_seconds = -1

    def resolve(self, seconds_of_day: int, line: bytes) -> date | None:
        found = REQ_ID.search(line)
        if found is not None:
            self.day = self._from_request_id(found, seconds_of_day) or self.day
        elif self.day is not None and self.last_seconds - seconds_of_day > 12 * 3600:
            self.day += timedelta(days=1)
        self.last_seconds = seconds_of_day
        return self.day

    def _from_request_id(self, found: re.Match[bytes], seconds_of_day: int) -> date | None:
        try:
            local = datetime.strptime((found.group(1) + found.group(2)).decode(), "%Y%m%d%H%M%S")
        except ValueError:
            return None
        arrived = local.replace(tzinfo=self.id_zone).astimezone(self.log_zone)
        arrived_seconds = arrived.hour * 3600 + arrived.minute * 60 + arrived.second
        # A line is written at or after its request arrived: an earlier time of day is the next day.
        return arrived.date() + timedelta(days=1 if seconds_of_day < arrived_seconds - 60 else 0)

    def state(self) -> dict[str, Any]:
        return {"day": self.day.isoformat() if self.day else None, "last_seconds": self.last_seconds}

    def restore(self, saved: dict[str, Any]) -> None:
        self.day = date.fromisoformat(saved["day"]) if saved.get("day") else None
        self.last_seconds = int(saved.get("last_seconds", -1))


@register("gateway_log", GatewayLogOptions)
class GatewayLogSource(LineSourceBase):
    """Gateway lines in, events out, with the date recovered and request context carried."""

    def __init__(self, name: str, options: GatewayLogOptions, host: str = "", max_requests: int = 2000) -> None:
        self.name, self.options, self.host = name, options, host
        self.kinds = build_kinds(PATTERNS, options.patterns, f"sources.{name}.patterns", TEXT_FIELDS)
        self.dates = DateRecovery(options.request_id_tz, options.tz)
        self.log_zone = zone(options.tz)
        # Requests between their first and last line: few at a time (the model takes two), but
        # checkpointed every step, so a bound and a release at the last line both matter.
        self.requests: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.max_requests = max_requests
        self.listed = {"lane": frozenset(options.lanes), "mode": frozenset(options.modes)}

    def file_mtime(self, mtime: float) -> None:
        """The date for lines before the first request id (the pipeline passes the file's mtime)."""
        if self.dates.day is None:
            self.dates.day = datetime.fromtimestamp(mtime, tz=self.log_zone).date()

    def handle_lines(self, lines: list[bytes]) -> tuple[list[Event], dict[str, int], bytes]:
        return handle_lines(self.handle, lines)

    def handle(self, line: bytes) -> Event | str:
        head = PREFIX.match(line)
        if head is None:
            return Miss.UNPREFIXED
        hour, minute, second = (int(g) for g in head.groups())
        if hour > 23 or minute > 59 or second > 60:
            return Miss.UNMATCHED
        day = self.dates.resolve(hour * 3600 + minute * 60 + second, line)
        for kind in self.kinds:
            if kind.literal in line:
                found = kind.pattern.match(line, head.end())
                if found is not None and day is not None:
                    fields = kind.typed(found)
                    if isinstance(fields, str):
                        return fields
                    wall = datetime(day.year, day.month, day.day, hour, minute, min(second, 59))
                    return self._event(local_to_epoch(wall, self.log_zone), kind.kind, fields)
        return Miss.UNMATCHED

    def _event(self, ts: float, kind: str, fields: dict[str, Any]) -> Event:
        req = fields.get("req")
        if kind == "request":
            self._bound_labels(fields)
        if kind == "request" and req:
            self.requests[req] = {k: fields[k] for k in CARRIED}
            if len(self.requests) > self.max_requests:
                self.requests.popitem(last=False)
        elif req is not None and req in self.requests:
            context = self.requests.pop(req) if kind in LAST_LINES else self.requests[req]
            fields = {**context, **fields}
        return Event(ts, self.name, kind, self.options.instance or "rag-proxy", fields, req, self.host)

    def _bound_labels(self, fields: dict[str, Any]) -> None:
        """A lane or mode outside the configured lists becomes "other"; the value the line gave is
        kept (cut) under `unlisted` for the store, and the signals count it."""
        for label, allowed in self.listed.items():
            value = fields.get(label)
            if value is not None and value not in allowed:
                fields.setdefault("unlisted", {})[label] = str(value)[:MAX_UNLISTED]
                fields[label] = "other"

    def checkpoint(self) -> dict[str, Any]:
        return {"dates": self.dates.state(), "requests": dict(self.requests)}

    def restore(self, saved: dict[str, Any]) -> None:
        self.dates.restore(saved.get("dates", {}))
        self.requests = OrderedDict(saved.get("requests", {}))
