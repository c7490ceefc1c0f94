"""llama-server's own HTTP endpoints, polled: `/health`, `/metrics` (`llamacpp:*`, with `--metrics`),
`/slots` and `/props` (its build, which its log does not name).

One poll is a `llama_status` event: `health` (ok, loading, or http_NNN), `metrics` (the known
`llamacpp:` families, by name without the prefix; numbers checked), `slots` (total, busy, and the prompt
tokens the busy slots took from cache and processed), `build` (`/props` build_info, e.g. b1-0c1e570),
`invalid` (the samples refused: negative, beyond 2**53, a ratio outside 0..1), `unavailable` (each endpoint
that answered other than 200, with its status: `{"metrics": "http_501"}`). An endpoint that is switched
off (`/metrics` without `--metrics` answers 501, `/slots` with `--no-slots`, `/props` or `/slots` on a build
without them 404) is left out of the event, never reported as 0, and named in `unavailable`: a counted poll
error, one warning in the agent's log with its fix (`FIXES`), and a line of the agent's /health; so is a
family the build does not write (the families came and went between builds:
`kv_cache_*` until mid-2025, `n_busy_slots_per_decode` from late 2024, `prompt_tokens_cached_total`,
`n_tokens_max` and `spec_decode_*` in late-2025 builds; tests/fixtures/llama/ has each build's bodies).
`/slots` has two shapes: `state` until early 2025 (0 idle, else busy), later `is_processing`.

A poll with no answer from /health is a `poll_error` event (timeout, refused, ...) and the pipeline backs
off. So is a body a decoder chokes on (`invalid_json`: not JSON, or nested deeper than Python's decoder
goes) or one of another shape (`bad_body`): the gauges of a server answering that are not kept standing.
One poll has one deadline over its requests, and each body a size cap. The instance label is the
configured one. A stopped process answers nothing (a timeout). The source keeps one connection to
llama-server (collectors/http_poll.py), and a body that did not change since the last poll is not parsed again.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from loguru import logger
from pydantic import Field

from spyglass.collectors import PolledOptions, PolledSourceBase, PollPolicy, PollResult, bounded_json, register
from spyglass.collectors.event import Event
from spyglass.collectors.fields import POLL_ERROR, declare
from spyglass.collectors.grammar import number_ok
from spyglass.collectors.http_poll import HttpPoller
from spyglass.collectors.serve_status import error_kind

METRICS = (
    "prompt_tokens_total",
    "prompt_tokens_cached_total",
    "prompt_seconds_total",
    "tokens_predicted_total",
    "tokens_predicted_seconds_total",
    "n_decode_total",
    "n_tokens_max",
    "prompt_tokens_seconds",
    "predicted_tokens_seconds",
    "requests_processing",
    "requests_deferred",
    "n_busy_slots_per_decode",
    "kv_cache_usage_ratio",
    "kv_cache_tokens",
    "spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens_total",
    "spec_decode_num_drafts_total",
)
RATIOS = frozenset({"kv_cache_usage_ratio"})  # a share: 0..1
DRAFTS = tuple(name for name in METRICS if name.startswith("spec_decode_"))

declare(
    "llama_server",
    {
        "llama_status": {
            "health": "text",
            "metrics": "json",
            "slots": "json",
            "build": "text",
            "invalid": "json",
            "unavailable": "json",
            "poll_ms": "int",
        },
        **POLL_ERROR,
    },
)


ENDPOINTS = ("metrics", "slots", "props")  # polled after /health answered 200
# What to do about an endpoint that answered this status: the fix the agent's log, /health and check-log name.
FIXES = {
    ("metrics", 501): "start llama-server with --metrics (its llamacpp:* counters)",
    ("slots", 501): "start llama-server without --no-slots (per-slot state)",
    ("metrics", 404): "this build has no /metrics: a newer llama-server build (with --metrics)",
    ("slots", 404): "this build has no /slots: a newer llama-server build",
    ("props", 404): "this build has no /props (its build name): a newer llama-server build",
    ("props", 501): "this build has no /props (its build name): a newer llama-server build",
}


def fix_for(endpoint: str, status: str) -> str:
    """The fix for an endpoint's answer (`http_501`), or what it means when there is no known fix."""
    code = int(status.removeprefix("http_")) if status.removeprefix("http_").isdigit() else 0
    return FIXES.get(
        (endpoint, code), f"/{endpoint} answers {status.replace('_', ' ').upper()}: see llama-server's log"
    )


def unavailable_text(name: str, url: str, endpoint: str, status: str) -> str:
    """One line naming a switched-off endpoint and its fix (the agent's log, /health, check-log)."""
    return f"source {name}: {url}/{endpoint} answers {status.replace('_', ' ').upper()}: {fix_for(endpoint, status)}"


class BadBody(ValueError):
    """A body of the right syntax and the wrong shape (a /slots that is not a list)."""


class LlamaServerOptions(PolledOptions):
    kind: Literal["llama_server"] = "llama_server"
    url: str = Field(description="llama-server's base URL, e.g. http://127.0.0.1:8080 (/health, /metrics, /slots).")
    interval_seconds: float = Field(
        1.0,
        gt=0,
        description="Seconds between polls while it answers: each second by default, so a queue of deferred"
        " requests (llamacpp:requests_deferred) of a second or more is seen.",
    )
    timeout_seconds: float = Field(2.0, gt=0, description="Deadline of one whole poll (all three requests).")
    max_body_bytes: int = Field(1 << 20, ge=1024, description="A longer body is a poll error (too_large).")
    max_backoff_seconds: float = Field(60.0, gt=0, description="Longest wait between polls while it fails.")

    def next_poll_within(self) -> float:
        """Seconds within which the next poll is due, even while the endpoint fails (the longest backoff):
        the poller's events are llama-server's liveness (SpyglassSourceSilent), its idle log says nothing."""
        return max(self.interval_seconds, self.max_backoff_seconds) + self.timeout_seconds


def value_ok(name: str, value: object) -> bool:
    """Every llamacpp family counts or measures something that is never negative; a ratio is at most 1."""
    if not number_ok(value) or not isinstance(value, int | float):
        return False
    return value >= 0 and (name not in RATIOS or value <= 1)


def short_name(sample: str) -> str:
    """The family's llamacpp name: prometheus_client names the sample of a counter typed without `_total`
    (llama-server's `n_busy_slots_per_decode` in late-2024 builds, `n_tokens_max`) with `_total` added."""
    name = sample.removeprefix("llamacpp:")
    if name not in METRICS and name.endswith("_total") and name.removesuffix("_total") in METRICS:
        return name.removesuffix("_total")
    return name


def parse_metrics(text: str, invalid: list[str] | None = None) -> dict[str, float]:
    """The known `llamacpp:` samples of a Prometheus text body (prometheus_client's parser), by short name.
    A sample no llama-server can write (negative, NaN, beyond 2**53) is left out and its name added to
    `invalid`: a counter is never moved by it."""
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = short_name(sample.name)
            if name not in METRICS or sample.labels:
                continue
            if value_ok(name, sample.value):
                found[name] = float(sample.value)
            elif invalid is not None:
                invalid.append(f"metrics.{name}")
    return found


def slot_busy(slot: dict[str, Any]) -> bool:
    """`is_processing` (2025 on), or `state`: 0 idle, else busy (2024's 1 processing; late 2024's 1-3,
    processing the prompt, done with it, generating)."""
    if "is_processing" in slot:
        return slot["is_processing"] is True
    state = slot.get("state")
    return state.__class__ is int and state != 0


def summarise_slots(body: Any) -> dict[str, int]:
    """Slots in total and busy, and the prompt tokens of the busy ones (from cache, processed)."""
    if not isinstance(body, list):
        raise BadBody("/slots is not a list")
    busy = [s for s in body if isinstance(s, dict) and slot_busy(s)]
    summary = {"total": len(body), "busy": len(busy)}
    for key, name in (("n_prompt_tokens_cache", "cached_tokens"), ("n_prompt_tokens_processed", "processed_tokens")):
        values = [s.get(key) for s in busy]
        total = sum(v for v in values if isinstance(v, int) and number_ok(v))
        if number_ok(total):  # a sum past 2^53 (2,000 slots of 2^53 reach 2^64) is no count: left out, not the poll
            summary[name] = int(total)
    return summary


class _Parsed:
    """The last body of each endpoint and what it parsed to: a body that has not changed since the last
    poll (most of them, on an idle server) is not parsed again."""

    def __init__(self) -> None:
        self.last: dict[str, tuple[bytes, Any]] = {}

    def __call__(self, path: str, body: bytes, parse: Any) -> Any:
        seen = self.last.get(path)
        if seen is not None and seen[0] == body:
            return seen[1]
        value = parse(body)
        self.last[path] = (body, value)
        return value


def drafting(props: Any, metrics: dict[str, float]) -> bool:
    """Whether the server drafts (speculative decoding with a draft model): /props's `speculative.types`
    other than none (late-2025 builds), or a draft counter that moved (older builds name no type)."""
    settings = props.get("default_generation_settings") if isinstance(props, dict) else None
    params = settings.get("params") if isinstance(settings, dict) else None
    types = params.get("speculative.types") if isinstance(params, dict) else None
    return (isinstance(types, str) and types not in ("", "none")) or any(metrics.get(n) for n in DRAFTS)


def decode_json(body: bytes) -> Any:
    """A JSON body (/slots, /props); one nested deeper than bounded_json.MAX_DEPTH is a ValueError like any bad
    one (its size is the poll's cap)."""
    return bounded_json.loads(body, len(body))


def _metrics(body: bytes) -> tuple[dict[str, float], list[str]]:
    invalid: list[str] = []
    return parse_metrics(body.decode("utf-8", "replace"), invalid), invalid


def _poll(http: HttpPoller, base: str, cap: int, parsed: _Parsed) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    invalid: list[str] = []
    status, _ = http.get(base + "/health", cap)
    fields["health"] = {200: "ok", 503: "loading"}.get(status, f"http_{status}")
    if status != 200:
        return fields
    bodies, unavailable = {}, {}
    for endpoint in ENDPOINTS:
        status, body = http.get(f"{base}/{endpoint}", cap)
        if status == 200:
            bodies[endpoint] = body
        else:
            unavailable[endpoint] = f"http_{status}"
    if "metrics" in bodies:
        metrics, refused = parsed("/metrics", bodies["metrics"], _metrics)
        fields["metrics"] = dict(metrics)  # a copy: one event's fields are never another's
        invalid += refused
    if "slots" in bodies:
        fields["slots"] = dict(parsed("/slots", bodies["slots"], lambda b: summarise_slots(decode_json(b))))
    props = parsed("/props", bodies["props"], decode_json) if "props" in bodies else None
    if isinstance(props, dict) and isinstance(props.get("build_info"), str):
        fields["build"] = props["build_info"][:64]
    if "metrics" in fields and not drafting(props, fields["metrics"]):
        for name in DRAFTS:  # written as 0 by a server without a draft model: a series it cannot move
            fields["metrics"].pop(name, None)
    if invalid:
        fields["invalid"] = invalid
    if unavailable:
        fields["unavailable"] = unavailable
    return fields


def poll_error_kind(exc: Exception) -> str:
    return "bad_body" if isinstance(exc, BadBody) else error_kind(exc)


@register("llama_server", LlamaServerOptions)
class LlamaServerSource(PolledSourceBase):
    """Polls one llama-server's /health, /metrics and /slots."""

    def __init__(self, name: str, options: LlamaServerOptions, host: str = "") -> None:
        self.name, self.options, self.host = name, options, host
        self.instance = options.instance or name
        self.base = options.url.rstrip("/")
        self.http = HttpPoller(self.base)  # one kept-alive connection for the source's life
        self.parsed = _Parsed()
        self.unavailable: dict[str, str] = {}  # endpoint -> its last answer other than 200 (/health's problems)
        self.logged: set[tuple[str, str]] = set()  # (endpoint, status) said once in the agent's log

    def problems(self) -> list[str]:
        """Each polled endpoint that answers other than 200, with its fix: lines of the agent's /health."""
        return [unavailable_text(self.name, self.base, e, s) for e, s in sorted(self.unavailable.items())]

    def _note(self, unavailable: dict[str, str]) -> None:
        self.unavailable = dict(unavailable)
        for endpoint, status in unavailable.items():
            if (endpoint, status) not in self.logged:  # once a source and answer: not a line every poll
                self.logged.add((endpoint, status))
                logger.warning(
                    "{}; counted in spyglass_llama_poll_errors_total",
                    unavailable_text(self.name, self.base, endpoint, status),
                )

    def poll_policy(self) -> PollPolicy:
        return PollPolicy(self.options.interval_seconds, self.options.max_backoff_seconds)

    def poll(self, now: float) -> PollResult:
        started = time.monotonic()
        self.http.start(self.options.timeout_seconds)
        try:
            fields = _poll(self.http, self.base, self.options.max_body_bytes, self.parsed)
        except Exception as exc:  # noqa: BLE001 - whatever a body does to a decoder, up must not stay at 1
            kind = poll_error_kind(exc)
            if kind == "unexpected":
                logger.opt(exception=exc).error(
                    "{}: poll of {} failed unexpectedly; counted as a failed poll", self.name, self.base
                )
            error = Event(now, self.name, "poll_error", self.instance, {"error": kind}, None, self.host)
            return PollResult([error], ok=False)
        fields["poll_ms"] = round((time.monotonic() - started) * 1000)
        if fields.get("health") == "ok":  # the others are asked only then
            self._note(fields.get("unavailable") or {})
        return PollResult([Event(now, self.name, "llama_status", self.instance, fields, None, self.host)])

    def close(self) -> None:
        self.http.close()
