"""Serve status (sources.md §2): `GET /v1/status` of each engine's serve layer, polled over one kept-alive
connection (collectors/http_poll.py).

A successful poll is a `status` event holding a bounded snapshot of the body (`snapshot`: the
known keys, numbers checked, strings cut, at most MAX_STATUSES status codes); a failed one is a
`poll_error` event naming the error kind, and the pipeline backs off the next poll. One poll
has a total deadline (`timeout_seconds` covers connect, headers and body: a server dripping a
byte at a time cannot hold it longer) and a body cap (the body is streamed and the poll stops
at `max_body_bytes`). Absent keys stay absent: an old serve build without `prompt_escapes` has
it "not measured", never 0. The instance label comes from configuration, never from the body.
With `path` instead of `url`, a JSONL file of recorded snapshots ({"ts", "url", "body"} a line)
is tailed instead, for replay and backfill.
Fixture: tests/fixtures/serve_status/snapshots.jsonl
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from http.client import HTTPException
from typing import Any, Literal

from loguru import logger
from pydantic import Field, model_validator

from spyglass.collectors import (
    LineBatch,
    LineSourceBase,
    PolledOptions,
    PolledSourceBase,
    PollPolicy,
    PollResult,
    bounded_json,
    register,
)
from spyglass.collectors.dated_log import handle_lines
from spyglass.collectors.event import Event
from spyglass.collectors.fields import POLL_ERROR, declare
from spyglass.collectors.grammar import Miss, number_ok
from spyglass.collectors.http_poll import BodyTooLarge, HttpPoller, HttpStatusError

__all__ = ["BodyTooLarge", "ServeStatusReplay", "ServeStatusSource", "error_kind", "fetch", "snapshot"]

MAX_TEXT = 120  # characters kept of a text value of the body
MAX_STATUSES = 64  # entries of requests.by_status kept
NUMBERS = {
    "uptime_s": (),
    "prefill_queue": (),
    "stops_while_reasoning": (),
    "slots": ("total", "busy"),
    "prompt_escapes": ("calls", "literals"),
}
TEXTS = ("engine", "build", "serve_version", "state")
declare(
    "serve_status",
    {
        "status": {
            "engine": "text",
            "build": "text",
            "serve_version": "text",
            "state": "text",
            "uptime_s": "float",
            "prefill_queue": "int",
            "stops_while_reasoning": "int",
            "slots": "json",
            "prompt_escapes": "json",
            "requests": "json",
            "invalid": "json",
        },
        **POLL_ERROR,
    },
)
LAST_TS = 4_102_444_800  # 2100-01-01: a recorded stamp beyond it is not a time


class ServeStatusOptions(PolledOptions):
    kind: Literal["serve_status"] = "serve_status"
    url: str | None = Field(None, description="e.g. http://127.0.0.1:8081/v1/status; or `path` for replay.")
    interval_seconds: float = Field(5.0, gt=0, description="Seconds between polls while the endpoint answers.")
    timeout_seconds: float = Field(2.0, gt=0, description="Deadline of one whole poll: connect, headers and body.")
    max_body_bytes: int = Field(1 << 20, ge=1024, description="A longer status body is a poll error (too_large).")
    max_backoff_seconds: float = Field(60.0, gt=0, description="Longest wait between polls while it fails.")
    instances: dict[str, str] = Field(
        default_factory=dict, description="Replay: instance per recorded url; other urls take `instance`."
    )

    def instances_named(self) -> set[str]:
        return super().instances_named() | set(self.instances.values())

    def next_poll_within(self) -> float:
        """Seconds within which the next poll is due, even while the endpoint fails (the longest backoff)."""
        return max(self.interval_seconds, self.max_backoff_seconds) + self.timeout_seconds

    @model_validator(mode="after")
    def _url_or_path(self) -> ServeStatusOptions:
        if (self.url is None) == (self.path is None):
            raise ValueError("give exactly one of url (poll) or path (replay a JSONL file)")
        return self


def snapshot(body: dict[str, Any]) -> dict[str, Any]:
    """The known keys of a status body, bounded: numbers must pass `number_ok`, texts are cut to
    MAX_TEXT, by_status keeps MAX_STATUSES entries. Refused values are named in `invalid`."""
    kept: dict[str, Any] = {}
    invalid: list[str] = []
    for key in TEXTS:
        if key in body:
            if isinstance(body[key], str):
                kept[key] = body[key][:MAX_TEXT]
            else:
                invalid.append(key)
    for key, parts in NUMBERS.items():
        if key not in body:
            continue
        value = body[key]
        if not parts:
            if number_ok(value):
                kept[key] = value
            else:
                invalid.append(key)
        elif isinstance(value, dict):
            kept[key] = {part: value[part] for part in parts if part in value and number_ok(value[part])}
            invalid += [f"{key}.{part}" for part in parts if part in value and not number_ok(value[part])]
        else:
            invalid.append(key)
    requests = body.get("requests")
    if isinstance(requests, dict):
        kept["requests"] = _requests(requests, invalid)
    elif "requests" in body:
        invalid.append("requests")
    if invalid:
        kept["invalid"] = invalid
    return kept


def _requests(requests: dict[str, Any], invalid: list[str]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    if "total" in requests:
        if number_ok(requests["total"]):
            kept["total"] = requests["total"]
        else:
            invalid.append("requests.total")
    by_status = requests.get("by_status")
    if isinstance(by_status, dict):
        good = {str(k)[:8]: v for k, v in by_status.items() if number_ok(v)}
        if len(good) < len(by_status):
            invalid.append("requests.by_status")
        if len(good) > MAX_STATUSES:  # the largest counts are the ones that matter
            good = dict(sorted(good.items(), key=lambda item: -item[1])[:MAX_STATUSES])
            kept["by_status_truncated"] = True
        kept["by_status"] = good
    elif "by_status" in requests:
        invalid.append("requests.by_status")
    return kept


def snapshot_event(ts: float, body: Any, source: str, instance: str, host: str) -> Event:
    """A status event, or a poll_error when the body is not a status object."""
    if not isinstance(body, dict):
        return Event(ts, source, "poll_error", instance, {"error": "not_an_object"}, None, host)
    return Event(ts, source, "status", instance, snapshot(body), None, host)


def fetch(http: HttpPoller, url: str, deadline: float, cap: int) -> Any:
    """The JSON body of `url`, with everything (connect, headers, body) inside `deadline`, over the
    source's kept-alive connection."""
    http.start(deadline)
    _, body = http.get(url, cap, ok_only=True)
    return bounded_json.loads(body, cap)


def error_kind(exc: Exception) -> str:
    if isinstance(exc, TimeoutError):  # socket.timeout is TimeoutError
        return "timeout"
    if isinstance(exc, BodyTooLarge):
        return "too_large"
    if isinstance(exc, ConnectionRefusedError | socket.gaierror):
        return "refused"
    if isinstance(exc, HttpStatusError):
        return f"http_{exc.status}"
    if isinstance(exc, ValueError | RecursionError):  # RecursionError: nested deeper than the decoder goes
        return "invalid_json"
    if isinstance(exc, OSError | HTTPException):
        return "transport"
    return "unexpected"


@register("serve_status", ServeStatusOptions)
class ServeStatusSource(PolledSourceBase):
    """Polls one serve's /v1/status; the instance label is the configured one, never the body's."""

    def __init__(self, name: str, options: ServeStatusOptions, host: str = "") -> None:
        self.name, self.options, self.host = name, options, host
        self.instance = options.instance or name
        self.http = HttpPoller(str(options.url))  # one kept-alive connection for the source's life

    def poll_policy(self) -> PollPolicy:
        return PollPolicy(self.options.interval_seconds, self.options.max_backoff_seconds)

    def poll(self, now: float) -> PollResult:
        """One poll: a status event, or a poll_error event naming the error kind (and not ok).
        Any error is a failed poll, the unforeseen ones too (kind `unexpected`, logged): the serve's
        up goes to 0 and its gauges are dropped, never left standing at their last values."""
        options = self.options
        try:
            if self.http.url != options.url:  # options replaced (a test does): a connection to the new URL
                self.http.close()
                self.http = HttpPoller(str(options.url))
            body = fetch(self.http, str(options.url), options.timeout_seconds, options.max_body_bytes)
            event = snapshot_event(now, body, self.name, self.instance, self.host)
        except Exception as exc:  # noqa: BLE001 - a body a decoder chokes on must not keep up at 1
            kind = error_kind(exc)
            if kind == "unexpected":
                logger.opt(exception=exc).error(
                    "{}: poll of {} failed unexpectedly; counted as a failed poll", self.name, options.url
                )
            event = Event(now, self.name, "poll_error", self.instance, {"error": kind}, None, self.host)
        return PollResult([event], ok=event.kind == "status")

    def close(self) -> None:
        self.http.close()


@register("serve_status", ServeStatusOptions)
class ServeStatusReplay(LineSourceBase):
    """Replays snapshots recorded in a JSONL file (`path` instead of `url`)."""

    def __init__(self, name: str, options: ServeStatusOptions, host: str = "") -> None:
        self.name, self.options, self.host = name, options, host
        self.instance = options.instance or name

    def handle(self, line: bytes) -> Event | str:
        """One recorded snapshot: {"ts": ISO-8601 or epoch seconds, "url": ..., "body": {...}}."""
        try:
            record = bounded_json.loads(line, bounded_json.MAX_LINE_BYTES)
            ts = record["ts"]
            if not isinstance(ts, (int, float)):
                stamp = datetime.fromisoformat(ts)
                ts = (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()  # naive: UTC
        except bounded_json.TooLarge:
            return Miss.invalid("json")  # nested or sized past the bound: one invalid line
        except (ValueError, KeyError, TypeError):
            return Miss.UNMATCHED if line.strip() else Miss.UNPREFIXED
        if not number_ok(ts) or not 0 <= ts < LAST_TS:
            return Miss.invalid("ts")
        instance = self.options.instances.get(str(record.get("url")), self.instance)
        return snapshot_event(ts, record.get("body"), self.name, instance, self.host)

    def handle_lines(self, lines: list[bytes]) -> LineBatch:
        return handle_lines(self.handle, lines)
