"""llama-server's /health, /metrics and /slots polls turned into metrics (labels: instance, lane).

Where llama.cpp measures what the Strata engine's catalogue already names, the same metric is set:
busy and total slots (`/slots`), the engine-wide decode rate (`llamacpp:predicted_tokens_seconds`).
The rest is llama.cpp's own and named `spyglass_llama_*`: deferred requests (waiting for a slot), prompt
tokens processed against taken from its cache, and its time and decode counters. Its counters reset with
the process; they are exported as increments since the last poll (a new process's whole count after a
reset), so they never go down, and `spyglass_llama_restarts_total` counts the resets seen; a sample no
llama-server writes (negative, beyond 2**53, a ratio above 1) moves nothing and is counted in
`spyglass_source_invalid_fields_total`. While a poll fails (no answer, or a body that is not what
llama-server answers), the gauges are dropped (no stale value is shown as current). A family the build does
not write is not exported (no invented zero): kv_cache_* exist only on builds of 2024 to mid-2025. The log's events (evictions, TTFT,
prompt reuse, starts) go through the engine log's signals (signals/engine_log.py).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from spyglass.collectors.event import Event
from spyglass.collectors.grammar import number_ok
from spyglass.collectors.llama_server import value_ok
from spyglass.signals import SavedNumber, SignalsBase, signals_for
from spyglass.signals.catalogue import spec_maker
from spyglass.signals.engine_log import SPECS as ENGINE_SPECS

INSTANCE_LANE = ("instance", "lane")
SHARED = {s.name: s for s in ENGINE_SPECS}
COUNTERS = {  # llamacpp name -> (metric, extra label values)
    "prompt_tokens_total": ("spyglass_llama_prompt_tokens_total", ("processed",)),
    "prompt_tokens_cached_total": ("spyglass_llama_prompt_tokens_total", ("cached",)),
    "prompt_seconds_total": ("spyglass_llama_prompt_processing_seconds_total", ()),
    "tokens_predicted_total": ("spyglass_llama_generated_tokens_total", ()),
    "tokens_predicted_seconds_total": ("spyglass_llama_generation_seconds_total", ()),
    "n_decode_total": ("spyglass_llama_decode_calls_total", ()),
    "spec_decode_num_draft_tokens_total": ("spyglass_llama_draft_tokens_total", ("drafted",)),
    "spec_decode_num_accepted_tokens_total": ("spyglass_llama_draft_tokens_total", ("accepted",)),
    "spec_decode_num_drafts_total": ("spyglass_llama_draft_verifications_total", ()),
}
GAUGES = {
    "requests_deferred": "spyglass_llama_requests_deferred",
    "predicted_tokens_seconds": "spyglass_engine_decode_tokens_per_second",
    "kv_cache_usage_ratio": "spyglass_llama_kv_cache_usage_ratio",
    "kv_cache_tokens": "spyglass_llama_kv_cache_tokens",
    "n_busy_slots_per_decode": "spyglass_llama_busy_slots_per_decode",
}
DRAFTS = ("spec_decode_num_draft_tokens_total", "spec_decode_num_accepted_tokens_total", "spec_decode_num_drafts_total")
BUILD = re.compile(r"b(\d+)-")
MAX_PER_SECOND = 1e7  # most a llama-server counter (tokens, seconds, decodes) grows in a second: far past any build
WHEN = "@polled"  # the poll time kept with an instance's last counters
DROPPED_ON_ERROR = ("spyglass_llama_ready", "spyglass_engine_slots", "spyglass_engine_slots_busy", *GAUGES.values())

spec = spec_maker("llama_server", INSTANCE_LANE)

SPECS = [
    SHARED["spyglass_engine_ready"],
    SHARED["spyglass_engine_build_info"],
    SHARED["spyglass_engine_slots"],
    SHARED["spyglass_engine_slots_busy"],
    SHARED["spyglass_engine_decode_tokens_per_second"],
    spec("spyglass_llama_up", "gauge", "1 when the last poll of llama-server's /health answered, else 0."),
    spec(
        "spyglass_llama_poll_errors_total",
        "counter",
        "Failed polls of llama-server, by kind: timeout, refused, http_NNN (no answer from /health),"
        " invalid_json (a body not JSON, or nested too deeply), bad_body (JSON of another shape), and"
        " ENDPOINT_http_NNN for an endpoint switched off or missing (metrics_http_501: no --metrics), each poll.",
        ("error",),
    ),
    spec("spyglass_llama_ready", "gauge", "1 when llama-server's /health says ok, 0 while it loads (503)."),
    spec(
        "spyglass_llama_requests_deferred",
        "gauge",
        "Requests waiting for a free slot (llamacpp:requests_deferred): the llama.cpp queue.",
    ),
    spec(
        "spyglass_llama_queue_seconds_total",
        "counter",
        "Time with at least one request waiting for a slot, from the polls of llamacpp:requests_deferred (each"
        " second by default; a queue shorter than the interval between polls is missed).",
        unit="seconds",
    ),
    spec(
        "spyglass_llama_queued_request_seconds_total",
        "counter",
        "Request-seconds spent waiting for a slot, from the same polls: its rate over the rate of requests"
        " finished is the mean wait.",
        unit="seconds",
    ),
    spec(
        "spyglass_llama_prompt_tokens_total",
        "counter",
        "Prompt tokens by part: processed (prefilled) or cached (reused), from llamacpp:prompt_tokens_total and"
        " llamacpp:prompt_tokens_cached_total.",
        ("part",),
        unit="tokens",
    ),
    spec(
        "spyglass_llama_prompt_processing_seconds_total",
        "counter",
        "Time llama-server spent processing prompts.",
        unit="seconds",
    ),
    spec("spyglass_llama_generated_tokens_total", "counter", "Tokens llama-server generated.", unit="tokens"),
    spec(
        "spyglass_llama_generation_seconds_total",
        "counter",
        "Time llama-server spent generating tokens.",
        unit="seconds",
    ),
    spec("spyglass_llama_decode_calls_total", "counter", "llama_decode() calls of llama-server."),
    spec(
        "spyglass_llama_kv_cache_usage_ratio",
        "gauge",
        "Share of the KV cache in use (llamacpp:kv_cache_usage_ratio: builds of 2024 to mid-2025 only).",
        unit="ratio",
    ),
    spec(
        "spyglass_llama_kv_cache_tokens",
        "gauge",
        "Tokens in the KV cache (llamacpp:kv_cache_tokens: builds of 2024 to mid-2025 only).",
        unit="tokens",
    ),
    spec(
        "spyglass_llama_busy_slots_per_decode",
        "gauge",
        "Average busy slots per llama_decode() call (llamacpp:n_busy_slots_per_decode, from late 2024).",
    ),
    spec(
        "spyglass_llama_draft_tokens_total",
        "counter",
        "Speculative decoding's draft tokens, by outcome: drafted or accepted (llamacpp:spec_decode_*, late 2025"
        " on, with a draft model).",
        ("outcome",),
        unit="tokens",
    ),
    spec(
        "spyglass_llama_draft_verifications_total",
        "counter",
        "Speculative decoding's verification steps (llamacpp:spec_decode_num_drafts_total).",
    ),
    spec(
        "spyglass_llama_build_info",
        "info",
        "llama-server's build (/props build_info, e.g. b1-0c1e570), value 1.",
        ("build",),
    ),
    spec(
        "spyglass_llama_restarts_total", "counter", "llama-server restarts seen: a counter of /metrics went backwards."
    ),
]


QUEUE_STEP = 10.0  # seconds between two polls at most for the queue seen at the first to count until the second


class LlamaSaved(BaseModel):
    model_config = ConfigDict(extra="forbid")

    counters: dict[str, dict[str, SavedNumber]] = Field(default_factory=dict)  # instance -> llamacpp name -> value


@signals_for("llama_server", SPECS)
class LlamaServerSignals(SignalsBase):
    mirrored_counters = frozenset(metric for metric, _ in COUNTERS.values())
    Saved = LlamaSaved

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.last: dict[str, dict[str, float]] = {}  # instance -> each llamacpp counter at the last poll
        self.deferred: dict[str, tuple[float, float]] = {}  # instance -> (time, requests deferred) at the last poll

    def checkpoint(self) -> LlamaSaved:
        return LlamaSaved.model_construct(counters=self.last)

    def restore(self, saved: LlamaSaved) -> None:
        self.last = dict(saved.counters)

    @staticmethod
    def from_memo(memo: dict[str, Any]) -> dict[str, Any]:
        return {"counters": memo.get("llama_server") or {}}

    def apply(self, e: Event) -> None:
        s, key = self.state, (e.instance, self.settings.lanes.get(e.instance, ""))
        if e.kind == "poll_error":
            s.set("spyglass_llama_up", key, 0.0)
            s.set("spyglass_engine_ready", key, 0.0)  # a server that does not answer serves nothing
            s.inc("spyglass_llama_poll_errors_total", key + (str(e.fields.get("error", "")),))
            for metric in DROPPED_ON_ERROR:
                s.drop(metric, key)
            return
        if e.kind != "llama_status":
            return
        f = e.fields
        for name in f.get("invalid") or ():
            s.inc("spyglass_source_invalid_fields_total", (e.source, str(name)[:64]))
        s.set("spyglass_llama_up", key, 1.0)
        ready = 1.0 if f.get("health") == "ok" else 0.0
        s.set("spyglass_llama_ready", key, ready)
        s.set("spyglass_engine_ready", key, ready)
        for endpoint, status in sorted((f.get("unavailable") or {}).items()):
            s.inc("spyglass_llama_poll_errors_total", key + (f"{endpoint}_{status}"[:32],))
        if isinstance(f.get("build"), str):
            self._build(key, f["build"])
        slots = f.get("slots")
        if isinstance(slots, dict):
            for metric, part in (("spyglass_engine_slots", "total"), ("spyglass_engine_slots_busy", "busy")):
                if number_ok(slots.get(part)):
                    s.set(metric, key, slots[part])
        metrics = f.get("metrics")
        if not isinstance(metrics, dict):
            return
        for name, metric in GAUGES.items():
            if value_ok(name, metrics.get(name)):
                s.set(metric, key, metrics[name])
            else:  # not written by this build, or refused: not shown at an old value
                s.drop(metric, key)
        if value_ok("requests_deferred", metrics.get("requests_deferred")):
            self._queue(key, e.instance, e.ts, float(metrics["requests_deferred"]))
        if "slots" not in f and number_ok(metrics.get("requests_processing")):
            s.set("spyglass_engine_slots_busy", key, metrics["requests_processing"])
        self._counters(e, key, metrics)

    def _queue(self, key: tuple[str, str], instance: str, ts: float, deferred: float) -> None:
        """The queue the last poll saw, held until this one: time with a queue, and request-seconds waited. A
        gap longer than QUEUE_STEP (polls failing, the agent stopped) counts nothing."""
        last = self.deferred.get(instance)
        self.deferred[instance] = (ts, deferred)
        if last is None or not 0 < ts - last[0] <= QUEUE_STEP or last[1] <= 0:
            return
        self.state.inc("spyglass_llama_queue_seconds_total", key, ts - last[0])
        self.state.inc("spyglass_llama_queued_request_seconds_total", key, (ts - last[0]) * last[1])

    def _build(self, key: tuple[str, str], build: str) -> None:
        """/props's build names the engine's build too: the log's start line does not (build info is filled)."""
        self.state.set_info("spyglass_llama_build_info", key + (build,), 2)
        version = m.group(1) if (m := BUILD.match(build)) else ""
        self.state.set_info("spyglass_engine_build_info", key + ("llama.cpp", version, build), 2)

    def _counters(self, e: Event, key: tuple[str, str], metrics: dict) -> None:
        """Each llamacpp counter as increments since the last poll; a counter that went backwards means a
        new process: its whole count is added, and the restart counted once. An increment no server can
        make in the time since the last poll (MAX_PER_SECOND) is refused, counted invalid by its name, and
        the counter keeps its last value: a body alternating 0 and 9e15 moves nothing after its first 0."""
        instance, ts = e.instance, e.ts
        last = self.last.get(instance, {})
        then = last.get(WHEN)
        most = MAX_PER_SECOND * max(1.0, ts - then) if number_ok(then) and ts >= then else None  # type: ignore[operator]
        raw = {name: float(metrics[name]) for name in COUNTERS if value_ok(name, metrics.get(name))}
        if most is not None:
            for name, value in list(raw.items()):
                before = last.get(name)
                step = value - before if number_ok(before) and value >= before else value  # type: ignore[operator]
                if number_ok(before) and step > most:
                    del raw[name]
                    self.state.inc("spyglass_source_invalid_fields_total", (e.source, f"metrics.{name}"))
        restarted = any(value < last[name] for name, value in raw.items() if number_ok(last.get(name)))
        if restarted:
            self.state.inc("spyglass_llama_restarts_total", key)
        for name, value in raw.items():
            metric, extra = COUNTERS[name]
            before = last.get(name)
            if before is None:  # first sight: the process's count, never below what was exported
                series = key + extra
                self.state.set(metric, series, max(self.state.series(metric).get(series, 0.0), value))
            else:
                self.state.inc(metric, key + extra, value if restarted else value - before)
        kept = {name: value for name, value in last.items() if name != WHEN}
        self.last[instance] = {**(raw if restarted else {**kept, **raw}), WHEN: ts}
