"""Engine-log events turned into metrics (labels: instance, lane; never a conversation or request).

Counters the engine reports cumulatively (`evictions=`) are exported as the engine's own value:
an agent restart cannot double them, and an engine restart shows as a reset to 0 next to a new
`spyglass_engine_start_time_seconds`. Everything else is counted from events.

A line can be forged (a prompt the engine echoes may start a line with a valid prefix), so the
engine's value is exported only when plausible: it may grow by at most the evict lines seen
since the last accepted value. Anything else is counted in spyglass_engine_implausible_values_total
and not exported, until RESYNC_LINES values in a row agree with each other (lines were lost, the
engine moved on). Task lines of a task never queued are counted as orphans, not as requests.
Labels from the log (finish, cause, reason, origin, status, component) are checked against
the closed sets below; other values are exported as `other` and counted.
"""
from __future__ import annotations

import os
from collections.abc import Callable

from collectors.event import Event
from collectors.host import cpu_set
from exporters import SignalsBase, SignalsSettings, signals_for
from exporters.buckets import LATENCY_SECONDS, PROMPT_TOKENS, SNAPSHOT_BYTES, TOKENS_PER_SECOND
from exporters.catalogue import spec_maker
from exporters.state import MetricState

INSTANCE_LANE = ("instance", "lane")
RESYNC_LINES = 3
STATUS_CODES = frozenset(str(code) for code in range(100, 600))
CLOSED = {  # label -> the values the engine writes; any other is exported as "other"
    "finish": frozenset({"stop", "length", "tool_calls", "content_filter", "error", "abort"}),
    "cause": frozenset({"stop", "length", "budget", "eos"}),
    "evict_reason": frozenset({"budget", "lru", "ttl", "manual", "shutdown"}),
    "rebuild_reason": frozenset({"new_shape", "resize", "invalidated"}),
    "origin": frozenset({"parked", "checkpoint", "disk", "none"}),
    "component": frozenset({"main", "load", "http", "slot", "cache", "graph", "stats", "sched", "pool"}),
    "status": STATUS_CODES,
}


spec = spec_maker("engine_log", INSTANCE_LANE)

SPECS = [
    spec("spyglass_engine_evictions_total", "counter",
         "Conversation snapshots evicted, as the engine's own cumulative evictions= value (resets with the engine)."),
    spec("spyglass_engine_implausible_values_total", "counter",
         "Cumulative values from the log not exported because the lines between cannot explain them (a forged"
         " or damaged line), by field.", ("field",)),
    spec("spyglass_engine_orphan_lines_total", "counter",
         "Task lines (prompt, thinking, tool_call, done) of a task never seen queued: not counted as requests.",
         ("kind",)),
    spec("spyglass_engine_evicted_snapshots_total", "counter", "Evict lines seen, by the engine's reason.", ("reason",)),
    spec("spyglass_engine_evicted_bytes_total", "counter", "Bytes of conversation snapshots evicted.", unit="bytes"),
    spec("spyglass_engine_cache_parked_snapshots", "gauge", "Conversation snapshots parked in the cache."),
    spec("spyglass_engine_cache_used_bytes", "gauge", "Bytes of parked conversation snapshots.", unit="bytes"),
    spec("spyglass_engine_cache_budget_bytes", "gauge", "Byte budget of the conversation cache.", unit="bytes"),
    spec("spyglass_engine_cache_snapshot_bytes", "histogram", "Size of each conversation snapshot parked.",
         unit="bytes", buckets=SNAPSHOT_BYTES),
    spec("spyglass_engine_prompt_tokens_total", "counter",
         "Prompt tokens, by part: reused from cache or read (prefilled).", ("part",), unit="tokens"),
    spec("spyglass_engine_request_prompt_tokens", "histogram", "Prompt length of each request in tokens.",
         unit="tokens", buckets=PROMPT_TOKENS),
    spec("spyglass_engine_prompt_restores_total", "counter",
         "Prompts by where their cached prefix came from: parked snapshot, checkpoint, or none.", ("origin",)),
    spec("spyglass_engine_long_prompts_total", "counter",
         "Prompts at or above the long-prompt threshold (signals.long_prompt_tokens)."),
    spec("spyglass_engine_long_prompts_checkpoint_only_total", "counter",
         "Long prompts whose reuse was a positive multiple of prompt-cache-every: only a checkpoint saved them."),
    spec("spyglass_engine_prompt_cache_every_tokens", "gauge",
         "The engine's --prompt-cache-every: tokens between prompt-cache checkpoints.", unit="tokens"),
    spec("spyglass_engine_prefill_read_seconds", "histogram", "Time to read (prefill) the uncached part of a prompt.",
         unit="seconds", buckets=LATENCY_SECONDS),
    spec("spyglass_engine_ttft_seconds", "histogram", "Time to first token, as the engine measured it.",
         unit="seconds", buckets=LATENCY_SECONDS),
    spec("spyglass_engine_request_decode_tokens_per_second", "histogram", "Decode rate of each finished request.",
         unit="tokens_per_second", buckets=TOKENS_PER_SECOND),
    spec("spyglass_engine_requests_finished_total", "counter", "Requests finished, by finish reason.", ("finish",)),
    spec("spyglass_engine_completion_tokens_total", "counter", "Completion tokens of finished requests.",
         unit="tokens"),
    spec("spyglass_engine_tool_calls_total", "counter", "Tool calls the engine started writing."),
    spec("spyglass_engine_thinking_tokens_total", "counter", "Reasoning tokens used.", unit="tokens"),
    spec("spyglass_engine_thinking_stops_total", "counter", "Reasoning phases ended, by stop cause.", ("cause",)),
    spec("spyglass_engine_thinking_budget_exhausted_total", "counter",
         "Reasoning phases that used their whole thinking budget."),
    spec("spyglass_engine_rejections_total", "counter", "Requests the engine refused, by HTTP status.", ("status",)),
    spec("spyglass_engine_graph_rebuilds_total", "counter", "Compute-graph rebuilds, by reason.", ("reason",)),
    spec("spyglass_engine_graph_rebuild_seconds_total", "counter", "Time spent rebuilding compute graphs.",
         unit="seconds"),
    spec("spyglass_engine_errors_total", "counter", "Error-level engine lines, by component.", ("component",)),
    spec("spyglass_engine_model_checksum_mismatches_total", "counter", "Model files whose md5 did not match."),
    spec("spyglass_engine_starts_total", "counter", "Engine process starts seen in the log."),
    spec("spyglass_engine_start_time_seconds", "gauge", "Unix time of the last engine process start.",
         unit="seconds"),
    spec("spyglass_engine_ready", "gauge", "1 once the engine logged ready, 0 from its start line until then."),
    spec("spyglass_engine_load_duration_seconds", "gauge", "How long the last model load took until ready.",
         unit="seconds"),
    spec("spyglass_engine_experts_resident", "gauge", "Experts resident in the CPU expert arena."),
    spec("spyglass_engine_experts", "gauge", "Experts of the model."),
    spec("spyglass_engine_allowed_cpus", "gauge", "CPUs the engine process may run on (its affinity set size)."),
    spec("spyglass_engine_pool_workers", "gauge", "Worker threads of the CPU expert pool."),
    spec("spyglass_engine_cpus_info", "info", "The CPU list the engine logged at start, value 1.", ("cpus",)),
    spec("spyglass_engine_shared_cpus", "gauge",
         "CPUs this engine shares with another, from both engines' start lines (incident 1).", ("other",)),
    spec("spyglass_engine_slots", "gauge", "Request slots of the engine."),
    spec("spyglass_engine_slots_busy", "gauge", "Request slots in use."),
    spec("spyglass_engine_prefill_queue_depth", "gauge", "Requests waiting in the global serial prefill queue."),
    spec("spyglass_engine_decode_tokens_per_second", "gauge", "Engine-wide decode rate from its stats line.",
         unit="tokens_per_second"),
    spec("spyglass_engine_model_bytes", "gauge", "Size of the model file the engine loaded.", unit="bytes"),
    spec("spyglass_engine_build_info", "info", "Engine build, value 1.", ("build_name", "version", "build")),
    spec("spyglass_engine_model_info", "info",
         "Model the engine loaded, value 1: file name the path resolved to, and md5.", ("model", "md5")),
]


@signals_for("engine_log", SPECS)
class EngineSignals(SignalsBase):
    def __init__(self, state: MetricState, settings: SignalsSettings = SignalsSettings()) -> None:
        super().__init__(state, settings)
        self.lanes = settings.lanes
        self.long_prompt_tokens = settings.long_prompt_tokens
        self.default_every = settings.default_prompt_cache_every
        self.handlers: dict[str, Callable[[Event, tuple[str, str]], None]] = {  # event kind -> its handler
            "start": self.on_start,
            "args": self.on_args,
            "model": self.on_model,
            "cpus": self.on_cpus,
            "experts_loaded": self.on_experts_loaded,
            "ready": self.on_ready,
            "checksum_mismatch": self.on_checksum_mismatch,
            "error": self.on_error,
            "queued": self.on_queued,
            "rejected": self.on_rejected,
            "prompt": self.on_prompt,
            "restore": self.on_restore,
            "thinking": self.on_thinking,
            "tool_call": self.on_tool_call,
            "done": self.on_done,
            "park": self.on_park,
            "evict": self.on_evict,
            "graph_rebuild": self.on_graph_rebuild,
            "stats": self.on_stats,
        }

    def apply(self, event: Event) -> None:
        handler = self.handlers.get(event.kind)
        if handler is not None:
            key = (event.instance, self.lanes.get(event.instance, ""))
            if event.fields.get("orphan"):
                self.state.inc("spyglass_engine_orphan_lines_total", key + (event.kind,))
                return
            handler(event, key)

    def _label(self, e: Event, label: str, closed: str = "") -> str:
        """The field `label` of `e` if it is in its closed set, else "other" (counted)."""
        value = str(e.fields[label])
        if value in CLOSED[closed or label]:
            return value
        self.state.inc("spyglass_source_unlisted_labels_total", (e.source, label))
        return "other"

    def _memo(self, instance: str) -> dict:
        memos = self.state.memo.setdefault("engine_log", {})
        memo = memos.get(instance)
        if not isinstance(memo, dict):
            memo = memos[instance] = {}
        return memo

    def on_start(self, e: Event, key: tuple[str, str]) -> None:
        s = self.state
        s.inc("spyglass_engine_starts_total", key)
        s.set("spyglass_engine_start_time_seconds", key, e.ts)
        s.set("spyglass_engine_ready", key, 0.0)
        s.set("spyglass_engine_evictions_total", key, 0.0)  # a new process counts from 0
        self.state.memo.setdefault("engine_log", {})[e.instance] = {"value": 0, "evicts": 0}
        f = e.fields
        s.set_info("spyglass_engine_build_info", key + (str(f["build_name"]), str(f["version"]), str(f["build"])), 2)

    def on_args(self, e: Event, key: tuple[str, str]) -> None:
        every = e.fields.get("prompt_cache_every")
        if isinstance(every, int):
            self.state.set("spyglass_engine_prompt_cache_every_tokens", key, every)
        if isinstance(e.fields.get("slots"), int):
            self.state.set("spyglass_engine_slots", key, e.fields["slots"])

    def on_model(self, e: Event, key: tuple[str, str]) -> None:
        # The file name, not the path: labels stay bounded; full paths are in the stored event.
        model = os.path.basename(str(e.fields["real"]))
        self.state.set_info("spyglass_engine_model_info", key + (model, str(e.fields["md5"])), 2)
        self.state.set("spyglass_engine_model_bytes", key, e.fields["bytes"])
        # What the running process loaded, for the model-path watch (exporters/model_path_signals.py).
        self.state.memo.setdefault("model_loaded", {})[e.instance] = {"real": str(e.fields["real"]),
                                                                      "bytes": e.fields["bytes"], "ts": e.ts}

    def on_cpus(self, e: Event, key: tuple[str, str]) -> None:
        s, cpus = self.state, str(e.fields["cpus"])
        s.set("spyglass_engine_allowed_cpus", key, len(cpu_set(cpus)))
        s.set("spyglass_engine_pool_workers", key, e.fields["pool_workers"])
        s.set_info("spyglass_engine_cpus_info", key + (cpus,), 2)
        # Overlap with every other instance's last start line: a replayed window shows incident 1.
        for (instance, lane, theirs) in list(s.series("spyglass_engine_cpus_info")):
            if instance != key[0]:
                shared = len(cpu_set(cpus) & cpu_set(theirs))
                s.set("spyglass_engine_shared_cpus", key + (instance,), shared)
                s.set("spyglass_engine_shared_cpus", (instance, lane, key[0]), shared)

    def on_experts_loaded(self, e: Event, key: tuple[str, str]) -> None:
        self.state.set("spyglass_engine_experts_resident", key, e.fields["resident"])
        self.state.set("spyglass_engine_experts", key, e.fields["total"])

    def on_ready(self, e: Event, key: tuple[str, str]) -> None:
        self.state.set("spyglass_engine_ready", key, 1.0)
        self.state.set("spyglass_engine_load_duration_seconds", key, e.fields["seconds"])

    def on_checksum_mismatch(self, e: Event, key: tuple[str, str]) -> None:
        self.state.inc("spyglass_engine_model_checksum_mismatches_total", key)

    def on_error(self, e: Event, key: tuple[str, str]) -> None:
        self.state.inc("spyglass_engine_errors_total", key + (self._label(e, "component"),))

    def on_queued(self, e: Event, key: tuple[str, str]) -> None:
        self.state.set("spyglass_engine_prefill_queue_depth", key, e.fields["prefill_depth"])

    def on_rejected(self, e: Event, key: tuple[str, str]) -> None:
        self.state.inc("spyglass_engine_rejections_total", key + (self._label(e, "status"),))

    def on_prompt(self, e: Event, key: tuple[str, str]) -> None:
        s, f = self.state, e.fields
        prompt, reused = f["prompt"], f["reused"]
        s.inc("spyglass_engine_prompt_tokens_total", key + ("reused",), reused)
        s.inc("spyglass_engine_prompt_tokens_total", key + ("read",), f["read"])
        s.observe("spyglass_engine_request_prompt_tokens", key, prompt)
        s.observe("spyglass_engine_prefill_read_seconds", key, f["ms"] / 1000.0)
        if reused == 0:
            s.inc("spyglass_engine_prompt_restores_total", key + ("none",))
        if prompt >= self.long_prompt_tokens:
            s.inc("spyglass_engine_long_prompts_total", key)
            every = int(s.values["spyglass_engine_prompt_cache_every_tokens"].get(key, self.default_every))
            if reused > 0 and every > 0 and reused % every == 0 and reused < prompt:
                s.inc("spyglass_engine_long_prompts_checkpoint_only_total", key)

    def on_restore(self, e: Event, key: tuple[str, str]) -> None:
        self.state.inc("spyglass_engine_prompt_restores_total", key + (self._label(e, "origin"),))

    def on_thinking(self, e: Event, key: tuple[str, str]) -> None:
        s, f = self.state, e.fields
        s.inc("spyglass_engine_thinking_tokens_total", key, f["tokens"])
        s.inc("spyglass_engine_thinking_stops_total", key + (self._label(e, "cause"),))
        if f["cause"] == "budget" or f["tokens"] >= f["max"]:
            s.inc("spyglass_engine_thinking_budget_exhausted_total", key)

    def on_tool_call(self, e: Event, key: tuple[str, str]) -> None:
        self.state.inc("spyglass_engine_tool_calls_total", key)

    def on_done(self, e: Event, key: tuple[str, str]) -> None:
        s, f = self.state, e.fields
        s.inc("spyglass_engine_requests_finished_total", key + (self._label(e, "finish"),))
        s.inc("spyglass_engine_completion_tokens_total", key, f["completion"])
        s.observe("spyglass_engine_ttft_seconds", key, f["ttft_ms"] / 1000.0,
                  (e.request_id, e.ts) if e.request_id else None)  # the exemplar: a trace to follow
        s.observe("spyglass_engine_request_decode_tokens_per_second", key, f["decode_tps"])

    def on_park(self, e: Event, key: tuple[str, str]) -> None:
        self._cache_state(e, key)
        self.state.observe("spyglass_engine_cache_snapshot_bytes", key, e.fields["bytes"])

    def on_evict(self, e: Event, key: tuple[str, str]) -> None:
        memo = self._memo(e.instance)
        memo["evicts"] = memo.get("evicts", 0) + 1 if isinstance(memo.get("evicts"), int) else 1
        self._cache_state(e, key)
        self.state.inc("spyglass_engine_evicted_snapshots_total", key + (self._label(e, "reason", "evict_reason"),))
        self.state.inc("spyglass_engine_evicted_bytes_total", key, e.fields["bytes"])

    def on_graph_rebuild(self, e: Event, key: tuple[str, str]) -> None:
        self.state.inc("spyglass_engine_graph_rebuilds_total", key + (self._label(e, "reason", "rebuild_reason"),))
        self.state.inc("spyglass_engine_graph_rebuild_seconds_total", key, e.fields["took_ms"] / 1000.0)

    def on_stats(self, e: Event, key: tuple[str, str]) -> None:
        s, f = self.state, e.fields
        self._cache_state(e, key)
        s.set("spyglass_engine_slots_busy", key, f["busy"])
        s.set("spyglass_engine_slots", key, f["slots"])
        s.set("spyglass_engine_prefill_queue_depth", key, f["prefill_queue"])
        s.set("spyglass_engine_decode_tokens_per_second", key, f["decode_tps"])

    def _cache_state(self, e: Event, key: tuple[str, str]) -> None:
        s, f = self.state, e.fields
        if self._plausible(e.instance, f["evictions"]):
            s.set("spyglass_engine_evictions_total", key, f["evictions"])
        else:
            s.inc("spyglass_engine_implausible_values_total", key + ("evictions",))
        s.set("spyglass_engine_cache_parked_snapshots", key, f["parked"])
        s.set("spyglass_engine_cache_used_bytes", key, f["used"])
        s.set("spyglass_engine_cache_budget_bytes", key, f["budget"])


    def _plausible(self, instance: str, value: int) -> bool:
        """Is the engine's evictions= `value` explained by the evict lines since the last one?

        Accepted: the first value ever seen, and one that grew by at most the evict lines since
        the last accepted value. Otherwise RESYNC_LINES values in a row that agree with each
        other (each explained by the evict lines since the one before) are accepted."""
        memo = self._memo(instance)
        last, evicts = memo.get("value"), memo.get("evicts", 0)
        if not isinstance(evicts, int):
            evicts = 0
        if not isinstance(last, int) or last <= value <= last + evicts:
            memo.clear()
            memo.update(value=value, evicts=0)
            return True
        run = memo.get("run")
        if isinstance(run, list) and len(run) == 3 and all(isinstance(x, int) for x in run) \
                and run[0] <= value <= run[0] + evicts - run[1]:
            run = [value, evicts, run[2] + 1]
        else:
            run = [value, evicts, 1]
        if run[2] >= RESYNC_LINES:
            memo.clear()
            memo.update(value=value, evicts=0)
            return True
        memo["run"] = run
        return False
