"""Engine-log events turned into metrics (labels: instance, lane; never a conversation or request).

Every counter is a sum of the events the agent stored, so it is monotone by construction: an engine
restart, a phantom process (forged stamps, a forged banner) or a forged cumulative value can neither
freeze nor rewind it. `spyglass_engine_evictions_total` counts evict events (the engine's own
`evictions=` stays in the stored event, for the forensic views); the metric state is committed with
the tailer's offsets, so an agent restart never doubles a count.

A line can be forged (a prompt the engine echoes may start a line with a valid prefix): each forged
line adds one event's worth, never more. A start banner resets `engine_ready` and the start time
only when the start sequence confirms it: a start banner alone (one echoed in a prompt) resets
nothing and is counted implausible.
Task lines of a task never queued are counted as orphans, not as requests.
Labels from the log (finish, cause, reason, origin, status, component) are checked against
the closed sets below; other values are exported as `other` and counted.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from spyglass.collectors.checkpoint_reuse import checkpoint_only  # H4's rule, stated once
from spyglass.collectors.engine_log import follows_a_start
from spyglass.collectors.event import Event
from spyglass.collectors.host import cpu_set
from spyglass.collectors.http_status import HTTP_STATUS_CODES
from spyglass.collectors.llama_outcome import OUTCOMES, REASONS
from spyglass.signals import LoadedModel, SignalsBase, SignalsLinks, SignalsSettings, signals_for
from spyglass.signals.buckets import LATENCY_SECONDS, PROMPT_TOKENS, SNAPSHOT_BYTES, TOKENS_PER_SECOND
from spyglass.signals.catalogue import spec_maker
from spyglass.signals.state import MetricState

INSTANCE_LANE = ("instance", "lane")
CLOSED = {  # label -> the values the engine writes; any other is exported as "other"
    "finish": frozenset(
        {"stop", "length", "tool_calls", "content_filter", "error", "abort", "unknown"}
    ),  # unknown: llama-server logs no finish reason
    "cause": frozenset({"stop", "length", "budget", "eos"}),
    "evict_reason": frozenset({"budget", "lru", "ttl", "manual", "shutdown"}),
    "rebuild_reason": frozenset({"new_shape", "resize", "invalidated"}),
    "origin": frozenset({"parked", "checkpoint", "disk", "none"}),
    "component": frozenset({"main", "load", "http", "slot", "cache", "graph", "stats", "sched", "pool"}),
    "status": HTTP_STATUS_CODES,
    "outcome": frozenset(OUTCOMES),
    "error_reason": frozenset(REASONS),
    "event": frozenset({"memory_slot", "batch_retry", "context_shift", "context_full", "restore_failed"}),
}
spec = spec_maker("engine_log", INSTANCE_LANE)
# What only Strata's engine writes (its CPU expert pool, thinking budgets, snapshots and checkpoints, graph rebuilds,
# refusals, md5 lines): no llama-server build logs it (tests/test_dashboards_engines.py reads every recorded llama
# log), so a llama.cpp deployment's dashboards leave out the panels that read only these.
STRATA_ONLY = frozenset(
    {
        "spyglass_engine_allowed_cpus",
        "spyglass_engine_cache_snapshot_bytes",
        "spyglass_engine_cpus_info",
        "spyglass_engine_experts",
        "spyglass_engine_experts_resident",
        "spyglass_engine_graph_rebuild_seconds_total",
        "spyglass_engine_graph_rebuilds_total",
        "spyglass_engine_long_prompts_checkpoint_only_total",
        "spyglass_engine_long_prompts_total",
        "spyglass_engine_model_checksum_mismatches_total",
        "spyglass_engine_pool_workers",
        "spyglass_engine_prompt_cache_every_tokens",
        "spyglass_engine_rejections_total",
        "spyglass_engine_shared_cpus",
        "spyglass_engine_thinking_budget_exhausted_total",
        "spyglass_engine_thinking_stops_total",
        "spyglass_engine_thinking_tokens_total",
        "spyglass_engine_tool_calls_total",
    }
)

SPECS = [
    spec(
        "spyglass_engine_evictions_total",
        "counter",
        "Conversation snapshots evicted: evict events stored (a sum, never lowered by a restart or a forged line).",
    ),
    spec(
        "spyglass_engine_implausible_values_total",
        "counter",
        "Lines not believed, by field; field start: a start line the start sequence did not follow (a"
        " banner echoed in a prompt), which reset nothing.",
        ("field",),
    ),
    spec(
        "spyglass_engine_orphan_lines_total",
        "counter",
        "Task lines (prompt, thinking, tool_call, done) of a task never seen queued: not counted as requests.",
        ("kind",),
    ),
    spec(
        "spyglass_engine_evicted_snapshots_total", "counter", "Evict lines seen, by the engine's reason.", ("reason",)
    ),
    spec("spyglass_engine_evicted_bytes_total", "counter", "Bytes of conversation snapshots evicted.", unit="bytes"),
    spec("spyglass_engine_cache_parked_snapshots", "gauge", "Conversation snapshots parked in the cache."),
    spec("spyglass_engine_cache_used_bytes", "gauge", "Bytes of parked conversation snapshots.", unit="bytes"),
    spec("spyglass_engine_cache_budget_bytes", "gauge", "Byte budget of the conversation cache.", unit="bytes"),
    spec(
        "spyglass_engine_cache_largest_snapshot_bytes",
        "gauge",
        "The largest entry in the cache at its last listing (llama-server's `- prompt 0x...: N tokens, ..., X MiB`"
        " under `- cache state:`, at -lv 4).",
        unit="bytes",
    ),
    spec(
        "spyglass_engine_cache_snapshot_bytes",
        "histogram",
        "Size of each conversation snapshot parked.",
        unit="bytes",
        buckets=SNAPSHOT_BYTES,
    ),
    spec(
        "spyglass_engine_prompt_tokens_total",
        "counter",
        "Prompt tokens, by part: reused from cache or read (prefilled).",
        ("part",),
        unit="tokens",
    ),
    spec(
        "spyglass_engine_request_prompt_tokens",
        "histogram",
        "Prompt length of each request in tokens.",
        unit="tokens",
        buckets=PROMPT_TOKENS,
    ),
    spec(
        "spyglass_engine_prompt_restores_total",
        "counter",
        "Prompts by where their cached prefix came from: parked snapshot, checkpoint, or none.",
        ("origin",),
    ),
    spec(
        "spyglass_engine_long_prompts_total",
        "counter",
        "Prompts at or above the long-prompt threshold (signals.long_prompt_tokens).",
    ),
    spec(
        "spyglass_engine_long_prompts_checkpoint_only_total",
        "counter",
        "Long prompts whose reuse was a positive multiple of prompt-cache-every: only a checkpoint saved them.",
    ),
    spec(
        "spyglass_engine_prompt_cache_every_tokens",
        "gauge",
        "The engine's --prompt-cache-every: tokens between prompt-cache checkpoints.",
        unit="tokens",
    ),
    spec(
        "spyglass_engine_prefill_read_seconds",
        "histogram",
        "Time to read (prefill) the uncached part of a prompt.",
        unit="seconds",
        buckets=LATENCY_SECONDS,
    ),
    spec(
        "spyglass_engine_ttft_seconds",
        "histogram",
        "Time to first token as the engine measures it, from the request's slot: the engine's prefill (llama-server:"
        " its prompt eval time). The client also waited for the slot: spyglass_engine_client_wait_seconds.",
        unit="seconds",
        buckets=LATENCY_SECONDS,
        exemplars=True,
    ),
    spec(
        "spyglass_engine_queue_wait_seconds",
        "histogram",
        "Time a request waited for a slot (llama-server: from its arrival to its slot; from the log's arrival line at"
        " -v, else bounded by the run of full slots it waited in: docs/llama-server.md).",
        unit="seconds",
        buckets=LATENCY_SECONDS,
    ),
    spec(
        "spyglass_engine_client_wait_seconds",
        "histogram",
        "The client's wait for its first token: the wait for a slot plus the engine's prefill (llama-server).",
        unit="seconds",
        buckets=LATENCY_SECONDS,
    ),
    spec(
        "spyglass_engine_request_decode_tokens_per_second",
        "histogram",
        "Decode rate of each finished request.",
        unit="tokens_per_second",
        buckets=TOKENS_PER_SECOND,
    ),
    spec("spyglass_engine_requests_finished_total", "counter", "Requests finished, by finish reason.", ("finish",)),
    spec(
        "spyglass_engine_request_outcomes_total",
        "counter",
        "Requests ended, by outcome: done, truncated (the context ran out), cancelled (the client went away) or"
        " error, and an error's reason (context_exceeded, invalid_request, internal, other; none otherwise).",
        ("outcome", "reason"),
    ),
    spec(
        "spyglass_engine_kv_pressure_events_total",
        "counter",
        "Signs of a full KV cache, by event: memory_slot (no room for a batch), batch_retry (the batch split and"
        " retried), context_shift (a slot's context shifted), context_full (a decode refused at batch size 1:"
        " its requests fail), restore_failed (a prompt from the host cache that did not fit back).",
        ("event",),
    ),
    spec(
        "spyglass_engine_last_progress_timestamp_seconds",
        "gauge",
        "Time (from the line) of the engine's last sign of progress: a finished request (done) or a [stats] line."
        " A hung engine's HTTP thread may still log queued requests; this stands still (H20).",
        unit="seconds",
    ),
    spec(
        "spyglass_engine_completion_tokens_total", "counter", "Completion tokens of finished requests.", unit="tokens"
    ),
    spec("spyglass_engine_tool_calls_total", "counter", "Tool calls the engine started writing."),
    spec("spyglass_engine_thinking_tokens_total", "counter", "Reasoning tokens used.", unit="tokens"),
    spec("spyglass_engine_thinking_stops_total", "counter", "Reasoning phases ended, by stop cause.", ("cause",)),
    spec(
        "spyglass_engine_thinking_budget_exhausted_total",
        "counter",
        "Reasoning phases that used their whole thinking budget.",
    ),
    spec("spyglass_engine_rejections_total", "counter", "Requests the engine refused, by HTTP status.", ("status",)),
    spec("spyglass_engine_graph_rebuilds_total", "counter", "Compute-graph rebuilds, by reason.", ("reason",)),
    spec(
        "spyglass_engine_graph_rebuild_seconds_total",
        "counter",
        "Time spent rebuilding compute graphs.",
        unit="seconds",
    ),
    spec("spyglass_engine_errors_total", "counter", "Error-level engine lines, by component.", ("component",)),
    spec("spyglass_engine_model_checksum_mismatches_total", "counter", "Model files whose md5 did not match."),
    spec("spyglass_engine_starts_total", "counter", "Engine process starts seen in the log."),
    spec("spyglass_engine_start_time_seconds", "gauge", "Unix time of the last engine process start.", unit="seconds"),
    spec(
        "spyglass_engine_ready",
        "gauge",
        "1 once the engine logged ready, 0 from its start line until then; for llama-server also as its /health"
        " answers: 0 while it does not answer or loads.",
    ),
    spec(
        "spyglass_engine_load_duration_seconds",
        "gauge",
        "How long the last model load took until ready.",
        unit="seconds",
    ),
    spec("spyglass_engine_experts_resident", "gauge", "Experts resident in the CPU expert arena."),
    spec("spyglass_engine_experts", "gauge", "Experts of the model."),
    spec("spyglass_engine_allowed_cpus", "gauge", "CPUs the engine process may run on (its affinity set size)."),
    spec("spyglass_engine_pool_workers", "gauge", "Worker threads of the CPU expert pool."),
    spec("spyglass_engine_cpus_info", "info", "The CPU list the engine logged at start, value 1.", ("cpus",)),
    spec(
        "spyglass_engine_shared_cpus",
        "gauge",
        "CPUs this engine shares with another, from both engines' start lines (incident 1).",
        ("other",),
    ),
    spec("spyglass_engine_slots", "gauge", "Request slots of the engine."),
    spec("spyglass_engine_slots_busy", "gauge", "Request slots in use."),
    spec("spyglass_engine_prefill_queue_depth", "gauge", "Requests waiting in the global serial prefill queue."),
    spec(
        "spyglass_engine_decode_tokens_per_second",
        "gauge",
        "Engine-wide decode rate from its stats line.",
        unit="tokens_per_second",
    ),
    spec("spyglass_engine_model_bytes", "gauge", "Size of the model file the engine loaded.", unit="bytes"),
    spec("spyglass_engine_build_info", "info", "Engine build, value 1.", ("build_name", "version", "build")),
    spec(
        "spyglass_engine_model_info",
        "info",
        "Model the engine loaded, value 1: file name the path resolved to, and md5.",
        ("model", "md5"),
    ),
]
SPECS = [replace(row, engines=frozenset({"strata"})) if row.name in STRATA_ONLY else row for row in SPECS]


# ---------------------------------------------------------------------------------------------
# Each kind's metric operations, declared once (OPS) and executed per event by `EngineSignals.apply`.
# ---------------------------------------------------------------------------------------------

Key = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Count:
    """+1 to `metric`; labelled, after the instance and lane, by the field `by` (its value in the closed
    set CLOSED[closed or by], else `other`, counted), or by the fixed `label`; only where `when(fields)`."""

    metric: str
    by: str = ""
    closed: str = ""
    label: str = ""
    when: Callable[[dict[str, Any]], bool] | None = None

    def __call__(self, s: MetricState, key: Key, e: Event) -> None:
        if self.when is not None and not self.when(e.fields):
            return
        if self.by:
            key = key + (s.listed(e.source, self.by, str(e.fields[self.by]), CLOSED[self.closed or self.by]),)
        elif self.label:
            key = key + (self.label,)
        s.inc(self.metric, key)


@dataclass(frozen=True, slots=True)
class Add:
    """+ the field's value (divided by `per`: milliseconds to seconds) to `metric`, labelled by `label` if any.
    `optional`: an event without the field (a llama task cancelled before its timings) adds nothing."""

    metric: str
    field: str
    per: float = 1.0
    label: str = ""
    optional: bool = False

    def __call__(self, s: MetricState, key: Key, e: Event) -> None:
        if self.optional and self.field not in e.fields:
            return
        value = e.fields[self.field]
        s.inc(self.metric, key + (self.label,) if self.label else key, value / self.per if self.per != 1.0 else value)


@dataclass(frozen=True, slots=True)
class Observe:
    """The field's value (divided by `per`) into histogram `metric`, with the request as its exemplar
    (kept where the catalogue declares the histogram with exemplars)."""

    metric: str
    field: str
    per: float = 1.0
    optional: bool = False  # an event without the field observes nothing

    def __call__(self, s: MetricState, key: Key, e: Event) -> None:
        if self.optional and self.field not in e.fields:
            return
        value = e.fields[self.field]
        s.observe(
            self.metric,
            key,
            value / self.per if self.per != 1.0 else value,
            (e.request_id, e.ts) if e.request_id else None,
        )


@dataclass(frozen=True, slots=True)
class Set:
    """Gauge `metric` := the field's value (times `times`), the event's time (field "ts") or `value`.
    `optional`: a field that is absent or not a number leaves the gauge as it was."""

    metric: str
    field: str = ""
    value: float = 0.0
    times: int = 1
    optional: bool = False

    def __call__(self, s: MetricState, key: Key, e: Event) -> None:
        if self.field == "ts":
            s.set(self.metric, key, e.ts)
        elif not self.field:
            s.set(self.metric, key, self.value)
        else:
            value: Any = e.fields.get(self.field) if self.optional else e.fields[self.field]
            if self.optional and value.__class__ not in (int, float):
                return
            s.set(self.metric, key, value * self.times if self.times != 1 else value)


Op = Count | Add | Observe | Set
CACHE = (
    Set("spyglass_engine_cache_parked_snapshots", "parked", optional=True),  # a llama-server evict line
    Set("spyglass_engine_cache_used_bytes", "used", optional=True),  # knows only what its
    Set("spyglass_engine_cache_budget_bytes", "budget", optional=True),
)  # command line told
PROGRESS = Set("spyglass_engine_last_progress_timestamp_seconds", "ts")
KV_PRESSURE = "spyglass_engine_kv_pressure_events_total"
OUTCOMES_TOTAL = "spyglass_engine_request_outcomes_total"
OPS: dict[str, tuple[Op, ...]] = {  # event kind -> its operations, in order; the custom rules follow them
    "args": (
        Set("spyglass_engine_prompt_cache_every_tokens", "prompt_cache_every", optional=True),
        Set("spyglass_engine_slots", "slots", optional=True),
        Set("spyglass_engine_cache_budget_bytes", "cache_ram_mib", times=2**20, optional=True),
    ),  # --cache-ram
    "model": (Set("spyglass_engine_model_bytes", "bytes"),),
    "cpus": (Set("spyglass_engine_pool_workers", "pool_workers"),),
    "experts_loaded": (Set("spyglass_engine_experts_resident", "resident"), Set("spyglass_engine_experts", "total")),
    "ready": (Set("spyglass_engine_ready", value=1.0), Set("spyglass_engine_load_duration_seconds", "seconds")),
    "checksum_mismatch": (Count("spyglass_engine_model_checksum_mismatches_total"),),
    "error": (Count("spyglass_engine_errors_total", by="component"),),
    "queued": (Set("spyglass_engine_prefill_queue_depth", "prefill_depth"),),
    "rejected": (Count("spyglass_engine_rejections_total", by="status"),),
    "prompt": (
        Add("spyglass_engine_prompt_tokens_total", "reused", label="reused"),
        Add("spyglass_engine_prompt_tokens_total", "read", label="read"),
        Observe("spyglass_engine_request_prompt_tokens", "prompt"),
        Observe("spyglass_engine_prefill_read_seconds", "ms", per=1000.0),
        Count("spyglass_engine_prompt_restores_total", label="none", when=lambda f: f["reused"] == 0),
    ),
    "restore": (Count("spyglass_engine_prompt_restores_total", by="origin"),),
    "thinking": (
        Add("spyglass_engine_thinking_tokens_total", "tokens"),
        Count("spyglass_engine_thinking_stops_total", by="cause"),
        Count(
            "spyglass_engine_thinking_budget_exhausted_total",
            when=lambda f: f["cause"] == "budget" or f["tokens"] >= f["max"],
        ),
    ),
    "tool_call": (Count("spyglass_engine_tool_calls_total"),),
    "done": (  # a llama task that was cancelled or failed has no timings
        Count("spyglass_engine_requests_finished_total", by="finish"),
        Add("spyglass_engine_completion_tokens_total", "completion", optional=True),
        Observe("spyglass_engine_ttft_seconds", "ttft_ms", per=1000.0, optional=True),
        Observe("spyglass_engine_request_decode_tokens_per_second", "decode_tps", optional=True),
        Observe("spyglass_engine_queue_wait_seconds", "queue_ms", per=1000.0, optional=True),
        Observe("spyglass_engine_client_wait_seconds", "client_wait_ms", per=1000.0, optional=True),
        PROGRESS,
    ),
    # llama-server's host prompt cache as listed after an update (-lv 4): entries, bytes, limit, largest entry
    "cache_inventory": CACHE + (Set("spyglass_engine_cache_largest_snapshot_bytes", "largest"),),
    "kv_no_slot": (Count(KV_PRESSURE, label="memory_slot"),),
    "kv_retry": (Count(KV_PRESSURE, label="batch_retry"),),
    "context_shift": (Count(KV_PRESSURE, label="context_shift"),),
    # One restore that did not fit back: libllama's reasons (`failed to find N available cells in kv cache`,
    # `failed to restore sequence state`) are events; the server's `failed to restore state with size N`,
    # one for each restore it tried, is counted.
    "cache_restore_failed": (
        Count(KV_PRESSURE, label="restore_failed", when=lambda f: "state_bytes" in f),
        Count("spyglass_engine_errors_total", label="cache", when=lambda f: "state_bytes" in f),
    ),
    # llama_decode's 1: no KV slot for the batch (llama.h); another code is no KV matter. The server's
    # `decode() failed: CAUSE` line that follows names no code and is counted once, by the line before it.
    "decode_failed": (
        Count(KV_PRESSURE, label="context_full", when=lambda f: f.get("ret") == 1),
        Count("spyglass_engine_errors_total", label="cache", when=lambda f: f.get("ret") == 1),
        Count("spyglass_engine_errors_total", label="main", when=lambda f: f.get("ret") not in (1, None)),
    ),
    "park": CACHE + (Observe("spyglass_engine_cache_snapshot_bytes", "bytes"),),
    "evict": CACHE
    + (
        Count("spyglass_engine_evictions_total"),
        Count("spyglass_engine_evicted_snapshots_total", by="reason", closed="evict_reason"),
        Add("spyglass_engine_evicted_bytes_total", "bytes"),
    ),
    "graph_rebuild": (
        Count("spyglass_engine_graph_rebuilds_total", by="reason", closed="rebuild_reason"),
        Add("spyglass_engine_graph_rebuild_seconds_total", "took_ms", per=1000.0),
    ),
    "stats": CACHE
    + (
        Set("spyglass_engine_slots_busy", "busy"),
        Set("spyglass_engine_slots", "slots"),
        Set("spyglass_engine_prefill_queue_depth", "prefill_queue"),
        Set("spyglass_engine_decode_tokens_per_second", "decode_tps"),
        PROGRESS,
    ),
}


# ---------------------------------------------------------------------------------------------
# What the engine signals remember between events, typed (saved under "engine_log").
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class EvictionsSeen:
    """What a checkpoint written before evictions were counted from events holds (restored, then unused)."""

    value: int | None = None
    evicts: int = 0
    run: tuple[int, int, int] | None = None


class Banner(BaseModel):
    """A start line waiting for the start sequence to confirm it."""

    model_config = ConfigDict(extra="forbid")

    ts: float
    build_name: str
    version: str
    build: str


class EngineSaved(BaseModel):
    model_config = ConfigDict(extra="forbid")

    evictions: dict[str, EvictionsSeen] = Field(default_factory=dict)  # read from old checkpoints, unused
    pending_starts: dict[str, Banner] = Field(default_factory=dict)
    loaded_models: dict[str, LoadedModel] = Field(default_factory=dict)


@signals_for("engine_log", SPECS)
class EngineSignals(SignalsBase):
    """Each event's kind's OPS, then its custom rule (start banners, the
    long-prompt rule, the model and CPU lines), on the series (instance, lane)."""

    Saved = EngineSaved

    def __init__(
        self, state: MetricState, settings: SignalsSettings = SignalsSettings(), links: SignalsLinks | None = None
    ) -> None:
        super().__init__(state, settings, links)
        self.lanes = settings.lanes
        self.long_prompt_tokens = settings.long_prompt_tokens
        self.default_every = settings.default_prompt_cache_every
        self.pending: dict[str, Banner] = {}
        self.rules: dict[str, Callable[[Event, Key], None]] = {  # the custom rules, after the kind's OPS
            "start": self.on_start,
            "model": self.on_model,
            "cpus": self.on_cpus,
            "prompt": self.on_prompt,
            "done": self.on_done,
        }

    def checkpoint(self) -> EngineSaved:
        return EngineSaved(pending_starts=self.pending, loaded_models=self.links.loaded_models)

    def restore(self, saved: EngineSaved) -> None:
        self.pending = dict(saved.pending_starts)
        self.links.loaded_models.update(saved.loaded_models)

    @staticmethod
    def from_memo(memo: dict[str, Any]) -> dict[str, Any]:
        """The memo's engine_log (instance -> value, evicts, run), engine_start_pending and model_loaded."""
        seen = {
            instance: {k: v for k, v in part.items() if k in ("value", "evicts", "run")}
            for instance, part in (memo.get("engine_log") or {}).items()
            if isinstance(part, dict)
        }
        return {
            "evictions": seen,
            "pending_starts": memo.get("engine_start_pending") or {},
            "loaded_models": memo.get("model_loaded") or {},
        }

    def apply(self, event: Event) -> None:
        kind = event.kind
        ops, rule = OPS.get(kind), self.rules.get(kind)
        if ops is None and rule is None:
            return
        key = (event.instance, self.lanes.get(event.instance, ""))
        if kind != "start" and event.instance in self.pending:
            self._resolve_start(event, key)
        if event.fields.get("orphan"):
            self.state.inc("spyglass_engine_orphan_lines_total", key + (kind,))
            return
        s = self.state
        for op in ops or ():
            op(s, key, event)
        if rule is not None:
            rule(event, key)

    # A start banner resets the instance's state only once the start sequence follows it: the next
    # event of the instance must be one of the load phase (args, model, cpus, ...) or an error of the
    # load phase, a start that dies at once (collectors.engine_log.follows_a_start). A banner forged
    # inside an echoed prompt is followed by the engine's ordinary work; it is then counted
    # implausible (field `start`) and resets nothing, so no exported counter goes down and
    # engine_ready stays as it was.

    def _resolve_start(self, e: Event, key: Key) -> None:
        banner = self.pending.pop(e.instance)
        if follows_a_start(e):
            self._started(banner, key, e.instance)
        else:
            self.state.inc("spyglass_engine_implausible_values_total", key + ("start",))

    def on_start(self, e: Event, key: Key) -> None:
        f = e.fields
        self.pending[e.instance] = Banner(
            ts=e.ts, build_name=str(f["build_name"]), version=str(f["version"]), build=str(f["build"])
        )

    def _started(self, banner: Banner, key: Key, instance: str) -> None:
        """A start the start sequence confirmed: the one moment counters of the process reset."""
        s = self.state
        s.inc("spyglass_engine_starts_total", key)
        s.set("spyglass_engine_start_time_seconds", key, banner.ts)
        s.set("spyglass_engine_ready", key, 0.0)
        s.set_info("spyglass_engine_build_info", key + (banner.build_name, banner.version, banner.build), 2)

    def on_model(self, e: Event, key: Key) -> None:
        # The file name, not the path: labels stay bounded; full paths are in the stored event.
        real = str(e.fields["real"])
        self.state.set_info("spyglass_engine_model_info", key + (os.path.basename(real), str(e.fields["md5"])), 2)
        # What the running process loaded, for the model-path watch (signals/model_path.py).
        self.links.loaded_models[e.instance] = LoadedModel(real=real, bytes=e.fields["bytes"], ts=e.ts)

    def on_cpus(self, e: Event, key: Key) -> None:
        s, cpus = self.state, str(e.fields["cpus"])
        s.set("spyglass_engine_allowed_cpus", key, len(cpu_set(cpus)))
        s.set_info("spyglass_engine_cpus_info", key + (cpus,), 2)
        # Overlap with every other instance's last start line: a replayed window shows incident 1.
        for instance, lane, theirs in list(s.series("spyglass_engine_cpus_info")):
            if instance != key[0]:
                shared = len(cpu_set(cpus) & cpu_set(theirs))
                s.set("spyglass_engine_shared_cpus", key + (instance,), shared)
                s.set("spyglass_engine_shared_cpus", (instance, lane, key[0]), shared)

    def on_done(self, e: Event, key: Key) -> None:
        """The request's outcome: llama's `done` names it; Strata's is read off its finish reason (a Strata
        refusal before queueing, 400 #545, is counted in spyglass_engine_rejections_total: H10, H11)."""
        f = e.fields
        finish = f.get("finish")
        outcome = f.get("outcome") or {"error": "error", "abort": "cancelled"}.get(str(finish), "done")
        reason = f.get("error_reason") or ("other" if outcome == "error" else "none")
        self._outcome(e, key, str(outcome), str(reason))

    def _outcome(self, e: Event, key: Key, outcome: str, reason: str) -> None:
        s = self.state
        labels = (
            s.listed(e.source, "outcome", outcome, CLOSED["outcome"]),
            s.listed(e.source, "error_reason", reason, CLOSED["error_reason"]),
        )
        s.inc(OUTCOMES_TOTAL, key + labels)

    def on_prompt(self, e: Event, key: Key) -> None:
        """The long-prompt rule: long prompts, and those only a checkpoint saved (H4)."""
        prompt = e.fields["prompt"]
        if prompt >= self.long_prompt_tokens:
            s = self.state
            s.inc("spyglass_engine_long_prompts_total", key)
            every = int(s.values["spyglass_engine_prompt_cache_every_tokens"].get(key, self.default_every))
            if checkpoint_only(prompt, e.fields["reused"], every):
                s.inc("spyglass_engine_long_prompts_checkpoint_only_total", key)
