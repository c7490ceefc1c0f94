"""Serve status (sources.md §2): `GET /v1/status` of each engine's serve layer, polled with httpx.

A successful poll is a `status` event holding the raw snapshot (stored whole); a failed one is a
`poll_error` event naming the error kind, and the pipeline backs off the next poll. Absent keys
stay absent: an old serve build without `prompt_escapes` has it "not measured", never 0. With
`path` instead of `url`, a JSONL file of recorded snapshots ({"ts", "url", "body"} a line) is
tailed instead, for replay and backfill.
Fixture: tests/fixtures/serve_status/snapshots.jsonl
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Literal

import httpx
from pydantic import Field, model_validator

from collectors import (LineBatch, LineSourceBase, PolledSourceBase, PollPolicy, PollResult, SourceOptions,
                        register)
from collectors.dated_log import handle_lines
from collectors.event import Event
from collectors.grammar import Miss


class ServeStatusOptions(SourceOptions):
    kind: Literal["serve_status"] = "serve_status"
    url: str | None = Field(None, description="e.g. http://127.0.0.1:8081/v1/status; or `path` for replay.")
    interval_seconds: float = Field(5.0, gt=0, description="Seconds between polls while the endpoint answers.")
    timeout_seconds: float = Field(2.0, gt=0, description="Connect and read timeout of one poll.")
    max_backoff_seconds: float = Field(60.0, gt=0, description="Longest wait between polls while it fails.")

    @model_validator(mode="after")
    def _url_or_path(self) -> ServeStatusOptions:
        if (self.url is None) == (self.path is None):
            raise ValueError("give exactly one of url (poll) or path (replay a JSONL file)")
        return self


def snapshot_event(ts: float, body: Any, source: str, instance: str, host: str) -> Event:
    """A status event, or a poll_error when the body is not a status object."""
    if not isinstance(body, dict):
        return Event(ts, source, "poll_error", instance, {"error": "not_an_object"}, None, host)
    return Event(ts, source, "status", str(body.get("engine") or instance), body, None, host)


def error_kind(exc: Exception) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, httpx.ConnectError):
        return "refused"
    if isinstance(exc, httpx.HTTPStatusError):
        return f"http_{exc.response.status_code}"
    if isinstance(exc, ValueError):
        return "invalid_json"
    return "transport"


@register("serve_status", ServeStatusOptions)
class ServeStatusSource(PolledSourceBase):
    """Polls one serve's /v1/status, or replays recorded snapshots from a file."""

    def __init__(self, name: str, options: ServeStatusOptions, host: str = "") -> None:
        self.name, self.options, self.host = name, options, host
        self._client: httpx.Client | None = None

    def poll_policy(self) -> PollPolicy:
        return PollPolicy(self.options.interval_seconds, self.options.max_backoff_seconds)

    def poll(self, now: float) -> PollResult:
        """One poll: a status event, or a poll_error event naming the error kind (and not ok)."""
        self._client = self._client or httpx.Client(timeout=self.options.timeout_seconds)
        try:
            response = self._client.get(str(self.options.url))
            response.raise_for_status()
            event = snapshot_event(now, response.json(), self.name, self.options.instance, self.host)
        except (httpx.HTTPError, ValueError) as exc:
            event = Event(now, self.name, "poll_error", self.options.instance, {"error": error_kind(exc)}, None,
                          self.host)
        return PollResult([event], ok=event.kind == "status")

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


@register("serve_status", ServeStatusOptions)
class ServeStatusReplay(LineSourceBase):
    """Replays snapshots recorded in a JSONL file (`path` instead of `url`)."""

    def __init__(self, name: str, options: ServeStatusOptions, host: str = "") -> None:
        self.name, self.options, self.host = name, options, host

    def handle(self, line: bytes) -> Event | str:
        """One recorded snapshot: {"ts": ISO-8601 or epoch seconds, "url": ..., "body": {...}}."""
        try:
            record = json.loads(line)
            ts = record["ts"]
            if not isinstance(ts, (int, float)):
                stamp = datetime.fromisoformat(ts)
                ts = (stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)).timestamp()  # naive: UTC
        except (ValueError, KeyError, TypeError):
            return Miss.UNMATCHED if line.strip() else Miss.UNPREFIXED
        return snapshot_event(ts, record.get("body"), self.name, self.options.instance, self.host)

    def handle_lines(self, lines: list[bytes]) -> LineBatch:
        return handle_lines(self.handle, lines)
