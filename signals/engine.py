"""Engine-log events turned into metrics (labels: instance, lane; never a conversation or request).

Counters the engine reports cumulatively (`evictions=`) are exported as the engine's own value:
an agent restart cannot double them, and an engine restart shows as a reset to 0 next to a new
`spyglass_engine_start_time_seconds`. Everything else is counted from events.

A line can be forged (a prompt the engine echoes may start a line with a valid prefix), so the
engine's value is exported only when plausible: it may grow by at most the evict lines seen
since the last accepted value. Anything else is counted in spyglass_engine_implausible_values_total
and not exported, until RESYNC_LINES values in a row agree with each other and are not lower (lines
were lost, the engine moved on). Only a start the start sequence confirms resets the counter:
a start banner alone (one echoed in a prompt) resets nothing and is counted implausible.
Task lines of a task never queued are counted as orphans, not as requests.
Labels from the log (finish, cause, reason, origin, status, component) are checked against
the closed sets below; other values are exported as `other` and counted.
"""
from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable
from itertools import chain
from operator import itemgetter

from collectors.event import Event
from collectors.host import cpu_set
from signals import SignalsBase, SignalsSettings, signals_for
from signals.buckets import LATENCY_SECONDS, PROMPT_TOKENS, SNAPSHOT_BYTES, TOKENS_PER_SECOND
from signals.catalogue import spec_maker
from signals.state import MAX_VALUE, MetricState

INSTANCE_LANE = ("instance", "lane")
RESYNC_LINES = 3
STATUS_CODES = frozenset(str(code) for code in range(100, 600))
CLOSED = {  # label -> the values the engine writes; any other is exported as "other"
    "finish": frozenset({"stop", "length", "tool_calls", "content_filter", "error", "abort",
                        "unknown"}),  # unknown: llama-server logs no finish reason
    "cause": frozenset({"stop", "length", "budget", "eos"}),
    "evict_reason": frozenset({"budget", "lru", "ttl", "manual", "shutdown"}),
    "rebuild_reason": frozenset({"new_shape", "resize", "invalidated"}),
    "origin": frozenset({"parked", "checkpoint", "disk", "none"}),
    "component": frozenset({"main", "load", "http", "slot", "cache", "graph", "stats", "sched", "pool"}),
    "status": STATUS_CODES,
}
# apply_many: the kinds it applies column-wise (the others, rare, one by one in their place), the
# fields each one's handler uses as numbers, and its labelled field (closed set name).
BATCHED = frozenset({"queued", "rejected", "prompt", "restore", "thinking", "tool_call", "done", "park", "evict",
                     "graph_rebuild", "stats", "error", "checksum_mismatch"})
CACHE_STATE = ("evictions", "parked", "used", "budget")
# What may follow a real `start`: the load phase, or the error of a start that dies at once (a crash loop)
START_SEQUENCE = frozenset({"args", "model", "cpus", "experts_loaded", "checksum_mismatch", "ready", "error"})
NUMBERS: dict[str, tuple[str, ...]] = {
    "queued": ("prefill_depth",), "prompt": ("prompt", "reused", "read", "ms"), "thinking": ("tokens", "max"),
    "done": ("completion", "ttft_ms", "decode_tps"), "park": ("bytes",) + CACHE_STATE,
    "evict": ("bytes",) + CACHE_STATE, "graph_rebuild": ("took_ms",),
    "stats": ("busy", "slots", "prefill_queue", "decode_tps") + CACHE_STATE,
}
LABELS = {"rejected": ("status", "status"), "restore": ("origin", "origin"), "thinking": ("cause", "cause"),
          "done": ("finish", "finish"), "evict": ("reason", "evict_reason"),
          "graph_rebuild": ("reason", "rebuild_reason"), "error": ("component", "component")}
INC, SET, OBSERVE = 0, 1, 2
CACHE_GAUGES = (("spyglass_engine_cache_parked_snapshots", "parked"), ("spyglass_engine_cache_used_bytes", "used"),
                ("spyglass_engine_cache_budget_bytes", "budget"))


spec = spec_maker("engine_log", INSTANCE_LANE)

SPECS = [
    spec("spyglass_engine_evictions_total", "counter",
         "Conversation snapshots evicted, as the engine's own cumulative evictions= value (resets with the engine)."),
    spec("spyglass_engine_implausible_values_total", "counter",
         "Cumulative values from the log not exported because the lines between cannot explain them (a forged"
         " or damaged line), by field; field start: a start line the start sequence did not follow (a"
         " banner echoed in a prompt), which reset nothing.", ("field",)),
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
    spec("spyglass_engine_last_progress_timestamp_seconds", "gauge",
         "Time (from the line) of the engine's last sign of progress: a finished request (done) or a [stats] line."
         " A hung engine's HTTP thread may still log queued requests; this stands still (H20).", unit="seconds"),
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
    # Fewer events than this go one by one: apply_many's fixed cost per kind (grouping, checks,
    # one call per series) outweighs it below about 200 (a live step is about 50 events; measured:
    # 50 events 2x slower column-wise, 200 even, 1,000 1.3x faster, 16k 1.75x faster).
    min_batch = 256
    mirrored_counters = frozenset({"spyglass_engine_evictions_total"})

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
            if event.kind != "start" and event.instance in self.state.memo.get("engine_start_pending", ()):
                self._resolve_start(event, key)
            if event.fields.get("orphan"):
                self.state.inc("spyglass_engine_orphan_lines_total", key + (event.kind,))
                return
            handler(event, key)

    def apply_many(self, events: list[Event]) -> list[tuple[int, Exception]] | None:
        """`apply` of every event, in order, with the same resulting state (values, series order,
        memo, dropped counts), column-wise for runs of the common kinds; returns the events that
        raised (index, exception), as `apply` would have raised for them, or None when it leaves the
        batch to `apply` one by one (fewer than `min_batch` events; histogram hooks, which want every
        observation in order)."""
        if self.state.histogram_hooks or len(events) < self.min_batch:
            return None
        failures: list[tuple[int, Exception]] = []
        handlers, start = self.handlers, 0
        slow = sorted({i for i, e in enumerate(events) if e.kind in handlers and e.kind not in BATCHED}
                      | set(self._resolving(events)))
        for i in slow + [len(events)]:
            if i > start:
                self._apply_run(events[start:i], start, failures)
            if i < len(events):
                self._apply_one(events[i], i, failures)
            start = i + 1
        return failures

    def _apply_one(self, event: Event, index: int, failures: list[tuple[int, Exception]]) -> None:
        try:
            self.apply(event)
        except Exception as exc:  # noqa: BLE001 - reported to the caller, as apply would raise it
            failures.append((index, exc))

    def _apply_run(self, run: list[Event], offset: int, failures: list[tuple[int, Exception]]) -> None:
        """Events of BATCHED kinds only: checked first (any field a handler would refuse sends the
        run to `apply` one by one), then applied per kind and series, in event order."""
        handlers, by_kind = self.handlers, defaultdict(list)
        for i, e in enumerate(run):
            by_kind[e.kind].append(i)
        groups: dict[tuple[str, str, bool], list[int]] = {}
        for kind, positions in by_kind.items():
            if kind not in handlers:
                continue
            instances = [run[i].instance for i in positions]
            orphans = [bool(run[i].fields.get("orphan")) for i in positions]
            if instances.count(instances[0]) == len(instances) and not any(orphans):
                groups[kind, instances[0], False] = positions
                continue
            for i, instance, orphan in zip(positions, instances, orphans):
                groups.setdefault((kind, instance, orphan), []).append(i)
        columns = self._columns(run, groups)
        if columns is None:
            for i, e in enumerate(run):
                self._apply_one(e, offset + i, failures)
            return
        ops = _Ops()
        keys = {instance: (instance, self.lanes.get(instance, "")) for _, instance, _ in groups}
        for (kind, instance, orphan), positions in groups.items():
            key = keys[instance]
            if orphan:
                ops.count(INC, "spyglass_engine_orphan_lines_total", key + (kind,), positions, 0)
                continue
            self._kind(ops, run, kind, key, positions, columns[kind, instance])
        cache = sorted(chain.from_iterable(positions for (kind, _, orphan), positions in groups.items()
                                           if not orphan and kind in ("park", "evict", "stats")))
        if cache:
            self._evictions(ops, run, cache, keys)
        ops.apply(self.state, run)

    def _evictions(self, ops: _Ops, run: list[Event], cache: list[int], keys: dict[str, tuple[str, str]]) -> None:
        """The plausibility of evictions= is a walk over the cache lines in order: on_evict's count of
        evict lines, then `_cache_state`'s check (its common case inline, the rest by `_plausible`)."""
        memos = self.state.memo.setdefault("engine_log", {})
        accepted: dict[tuple[str, str], tuple[list[int], list]] = {}
        refused: dict[tuple[str, str], list[int]] = {}
        plausible = self._plausible
        for i in cache:
            e = run[i]
            instance = e.instance
            memo = memos.get(instance)
            if not isinstance(memo, dict):
                memo = memos[instance] = {}
            if e.kind == "evict":
                memo["evicts"] = memo.get("evicts", 0) + 1 if isinstance(memo.get("evicts"), int) else 1
            value, last, evicts = e.fields["evictions"], memo.get("value"), memo.get("evicts", 0)
            if not isinstance(evicts, int):
                evicts = 0
            if not isinstance(last, int) or last <= value <= last + evicts:
                memo.clear()
                memo.update(value=value, evicts=0)
                ok = True
            else:
                ok = plausible(instance, value)
            if ok:
                where, values = accepted.setdefault(keys[instance], ([], []))
                where.append(i)
                values.append(value)
            else:
                refused.setdefault(keys[instance], []).append(i)
        for key, (where, values) in accepted.items():
            ops.put(SET, "spyglass_engine_evictions_total", key, where, values, 0)
        for key, where in refused.items():
            ops.count(INC, "spyglass_engine_implausible_values_total", key + ("evictions",), where, 0)

    def _columns(self, run: list[Event], groups: dict[tuple[str, str, bool], list[int]]
                 ) -> dict[tuple[str, str], dict[str, list]] | None:
        """Per kind and instance, the fields its handler reads, a column each; None if any field is
        missing or any number is one `inc`/`set`/`observe` would refuse."""
        columns: dict[tuple[str, str], dict[str, list]] = {}
        for (kind, instance, orphan), positions in groups.items():
            if orphan:
                continue
            fields = [run[i].fields for i in positions]
            found: dict[str, list] = {}
            try:
                for name in NUMBERS.get(kind, ()):
                    column = found[name] = [f[name] for f in fields]
                    classes = set(map(type, column))
                    if not classes <= {int, float}:
                        return None
                    if float in classes:
                        if not all(-MAX_VALUE <= v <= MAX_VALUE for v in column):  # NaN fails too
                            return None
                    elif not (min(column) >= -MAX_VALUE and max(column) <= MAX_VALUE):
                        return None
                if kind in LABELS:
                    found["label"] = [f[LABELS[kind][0]] for f in fields]
            except KeyError:
                return None
            columns[kind, instance] = found
        return columns

    def _labels(self, ops: _Ops, run: list[Event], kind: str, positions: list[int], raw: list, seq: int) -> list[str]:
        """`_label` of each event: the value if in its closed set, else "other" (counted)."""
        label, closed = LABELS[kind]
        allowed = CLOSED[closed]
        values = [str(value) for value in raw]
        for j, value in enumerate(values):
            if value not in allowed:
                values[j] = "other"
                ops.put(INC, "spyglass_source_unlisted_labels_total", (run[positions[j]].source, label),
                        [positions[j]], [1.0], seq)
        return values

    def _by_label(self, ops: _Ops, name: str, key: tuple[str, ...], positions: list[int], labels: list[str],
                  seq: int) -> None:
        split: dict[str, list[int]] = {}
        for p, label in zip(positions, labels):
            split.setdefault(label, []).append(p)
        for label, where in split.items():
            ops.count(INC, name, key + (label,), where, seq)

    def _kind(self, ops: _Ops, run: list[Event], kind: str, key: tuple[str, str], positions: list[int],
              c: dict[str, list]) -> None:
        """What the kind's handler does, for all of its events of one instance at once."""
        put = ops.put
        if kind == "queued":
            put(SET, "spyglass_engine_prefill_queue_depth", key, positions, c["prefill_depth"], 0)
        elif kind == "rejected":
            labels = self._labels(ops, run, kind, positions, c["label"], 0)
            self._by_label(ops, "spyglass_engine_rejections_total", key, positions, labels, 1)
        elif kind == "prompt":
            prompt, reused = c["prompt"], c["reused"]
            put(INC, "spyglass_engine_prompt_tokens_total", key + ("reused",), positions, reused, 0)
            put(INC, "spyglass_engine_prompt_tokens_total", key + ("read",), positions, c["read"], 1)
            put(OBSERVE, "spyglass_engine_request_prompt_tokens", key, positions, prompt, 2)
            put(OBSERVE, "spyglass_engine_prefill_read_seconds", key, positions, [ms / 1000.0 for ms in c["ms"]], 3)
            ops.count(INC, "spyglass_engine_prompt_restores_total", key + ("none",),
                      [p for p, r in zip(positions, reused) if r == 0], 4)
            long = self.long_prompt_tokens
            longs = [j for j, n in enumerate(prompt) if n >= long]
            ops.count(INC, "spyglass_engine_long_prompts_total", key, [positions[j] for j in longs], 5)
            if longs:
                s = self.state
                every = int(s.values["spyglass_engine_prompt_cache_every_tokens"].get(key, self.default_every))
                ops.count(INC, "spyglass_engine_long_prompts_checkpoint_only_total", key,
                          [positions[j] for j in longs if reused[j] > 0 and every > 0 and reused[j] % every == 0
                           and reused[j] < prompt[j]], 6)
        elif kind == "restore":
            labels = self._labels(ops, run, kind, positions, c["label"], 0)
            self._by_label(ops, "spyglass_engine_prompt_restores_total", key, positions, labels, 1)
        elif kind == "thinking":
            tokens, top = c["tokens"], c["max"]
            put(INC, "spyglass_engine_thinking_tokens_total", key, positions, tokens, 0)
            labels = self._labels(ops, run, kind, positions, c["label"], 1)
            self._by_label(ops, "spyglass_engine_thinking_stops_total", key, positions, labels, 2)
            ops.count(INC, "spyglass_engine_thinking_budget_exhausted_total", key,
                      [p for p, cause, n, m in zip(positions, c["label"], tokens, top) if cause == "budget" or n >= m],
                      3)
        elif kind == "tool_call":
            ops.count(INC, "spyglass_engine_tool_calls_total", key, positions, 0)
        elif kind == "done":
            labels = self._labels(ops, run, kind, positions, c["label"], 0)
            self._by_label(ops, "spyglass_engine_requests_finished_total", key, positions, labels, 1)
            put(INC, "spyglass_engine_completion_tokens_total", key, positions, c["completion"], 2)
            put(OBSERVE, "spyglass_engine_ttft_seconds", key, positions, [ms / 1000.0 for ms in c["ttft_ms"]], 3)
            put(OBSERVE, "spyglass_engine_request_decode_tokens_per_second", key, positions, c["decode_tps"], 4)
            put(SET, "spyglass_engine_last_progress_timestamp_seconds", key, positions, [run[i].ts for i in positions], 5)
        elif kind in ("park", "evict", "stats"):  # evictions= itself: the walk in _apply_run
            put(SET, "spyglass_engine_cache_parked_snapshots", key, positions, c["parked"], 1)
            put(SET, "spyglass_engine_cache_used_bytes", key, positions, c["used"], 2)
            put(SET, "spyglass_engine_cache_budget_bytes", key, positions, c["budget"], 3)
            if kind == "park":
                put(OBSERVE, "spyglass_engine_cache_snapshot_bytes", key, positions, c["bytes"], 4)
            elif kind == "evict":
                labels = self._labels(ops, run, kind, positions, c["label"], 4)
                self._by_label(ops, "spyglass_engine_evicted_snapshots_total", key, positions, labels, 5)
                put(INC, "spyglass_engine_evicted_bytes_total", key, positions, c["bytes"], 6)
            else:
                put(SET, "spyglass_engine_slots_busy", key, positions, c["busy"], 4)
                put(SET, "spyglass_engine_slots", key, positions, c["slots"], 5)
                put(SET, "spyglass_engine_prefill_queue_depth", key, positions, c["prefill_queue"], 6)
                put(SET, "spyglass_engine_decode_tokens_per_second", key, positions, c["decode_tps"], 7)
                put(SET, "spyglass_engine_last_progress_timestamp_seconds", key, positions, [run[i].ts for i in positions], 8)
        elif kind == "graph_rebuild":
            labels = self._labels(ops, run, kind, positions, c["label"], 0)
            self._by_label(ops, "spyglass_engine_graph_rebuilds_total", key, positions, labels, 1)
            put(INC, "spyglass_engine_graph_rebuild_seconds_total", key, positions,
                [ms / 1000.0 for ms in c["took_ms"]], 2)
        elif kind == "error":
            labels = self._labels(ops, run, kind, positions, c["label"], 0)
            self._by_label(ops, "spyglass_engine_errors_total", key, positions, labels, 1)
        elif kind == "checksum_mismatch":
            ops.count(INC, "spyglass_engine_model_checksum_mismatches_total", key, positions, 0)

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

    # A start banner resets the instance's state only once the start sequence follows it: the next
    # event of the instance must be one of the load phase (START_SEQUENCE: args, model, cpus, ...),
    # or the error of a start that dies at once.
    # A banner forged inside an echoed prompt is followed by the engine's ordinary work; it is then
    # counted implausible (field `start`) and resets nothing, so no exported counter goes down and
    # engine_ready stays as it was.

    def _pending_starts(self) -> dict:
        return self.state.memo.setdefault("engine_start_pending", {})

    def _resolving(self, events: list[Event]) -> list[int]:
        """The positions of the events that confirm or refute a pending start: the first of each
        instance after its start line (or after a start left pending by an earlier batch)."""
        pending, found = set(self.state.memo.get("engine_start_pending", ())), []
        for i, e in enumerate(events):
            if e.kind == "start":
                pending.add(e.instance)
            elif e.instance in pending and e.kind in self.handlers:
                pending.discard(e.instance)
                found.append(i)
        return found

    def _resolve_start(self, e: Event, key: tuple[str, str]) -> None:
        banner = self._pending_starts().pop(e.instance)
        if e.kind in START_SEQUENCE:
            self._started(banner, key, e.instance)
        else:
            self.state.inc("spyglass_engine_implausible_values_total", key + ("start",))

    def on_start(self, e: Event, key: tuple[str, str]) -> None:
        f = e.fields
        self._pending_starts()[e.instance] = {"ts": e.ts, "build_name": str(f["build_name"]),
                                              "version": str(f["version"]), "build": str(f["build"])}

    def _started(self, banner: dict, key: tuple[str, str], instance: str) -> None:
        """A start the start sequence confirmed: the one moment counters of the process reset."""
        s = self.state
        s.inc("spyglass_engine_starts_total", key)
        s.set("spyglass_engine_start_time_seconds", key, banner["ts"])
        s.set("spyglass_engine_ready", key, 0.0)
        s.set("spyglass_engine_evictions_total", key, 0.0)  # a new process counts from 0
        self.state.memo.setdefault("engine_log", {})[instance] = {"value": 0, "evicts": 0}
        s.set_info("spyglass_engine_build_info", key + (banner["build_name"], banner["version"], banner["build"]), 2)

    def on_args(self, e: Event, key: tuple[str, str]) -> None:
        every = e.fields.get("prompt_cache_every")
        if isinstance(every, int):
            self.state.set("spyglass_engine_prompt_cache_every_tokens", key, every)
        if isinstance(e.fields.get("slots"), int):
            self.state.set("spyglass_engine_slots", key, e.fields["slots"])
        if isinstance(e.fields.get("cache_ram_mib"), int):  # llama-server's --cache-ram, from its command line
            self.state.set("spyglass_engine_cache_budget_bytes", key, e.fields["cache_ram_mib"] * 2**20)

    def on_model(self, e: Event, key: tuple[str, str]) -> None:
        # The file name, not the path: labels stay bounded; full paths are in the stored event.
        model = os.path.basename(str(e.fields["real"]))
        self.state.set_info("spyglass_engine_model_info", key + (model, str(e.fields["md5"])), 2)
        self.state.set("spyglass_engine_model_bytes", key, e.fields["bytes"])
        # What the running process loaded, for the model-path watch (signals/model_path.py).
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
        s.observe("spyglass_engine_ttft_seconds", key, f["ttft_ms"] / 1000.0, exemplar_of(e))
        s.observe("spyglass_engine_request_decode_tokens_per_second", key, f["decode_tps"])
        s.set("spyglass_engine_last_progress_timestamp_seconds", key, e.ts)

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
        s.set("spyglass_engine_last_progress_timestamp_seconds", key, e.ts)

    def _cache_state(self, e: Event, key: tuple[str, str]) -> None:
        s, f = self.state, e.fields
        if self._plausible(e.instance, f["evictions"]):
            s.set("spyglass_engine_evictions_total", key, f["evictions"])
        else:
            s.inc("spyglass_engine_implausible_values_total", key + ("evictions",))
        for name, part in CACHE_GAUGES:  # a llama-server evict line knows only what its command line told
            if part in f:
                s.set(name, key, f[part])


    def _plausible(self, instance: str, value: int) -> bool:
        """Is the engine's evictions= `value` explained by the evict lines since the last one?

        Accepted: the first value ever seen, and one that grew by at most the evict lines since
        the last accepted value. Otherwise RESYNC_LINES values in a row that agree with each
        other (each explained by the evict lines since the one before) are accepted, if not lower
        than the last accepted one: only a confirmed start lowers the exported counter."""
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
        if run[2] >= RESYNC_LINES and value >= last:  # a counter never goes down but at a confirmed start
            memo.clear()
            memo.update(value=value, evicts=0)
            return True
        memo["run"] = run
        return False


EXEMPLARS = frozenset({"spyglass_engine_ttft_seconds"})  # histograms whose buckets link to a trace


def exemplar_of(e: Event) -> tuple[str, float] | None:
    """The exemplar of an observation: the request's id (its trace) and the event's time."""
    return (e.request_id, e.ts) if e.request_id else None


class _Ops:
    """The state calls of a run of events, gathered per (call, metric, series) with the position of
    each event that made them, then made in the order the events would have made them first (so new
    series are inserted, and capped, in the same order), each series' values in event order."""

    def __init__(self) -> None:
        self.ops: dict[tuple[int, str, tuple[str, ...]], list] = {}

    def put(self, op: int, name: str, key: tuple[str, ...], positions: list[int], values: list, seq: int) -> None:
        """`values[j]` from the event at `positions[j]` (ascending); `seq`: the call's order in its handler."""
        if not positions:
            return
        entry = self.ops.get((op, name, key))
        if entry is None:
            self.ops[op, name, key] = [positions[0], seq, [positions], [values]]
            return
        if (positions[0], seq) < (entry[0], entry[1]):
            entry[0], entry[1] = positions[0], seq
        entry[2].append(positions)
        entry[3].append(values)

    def count(self, op: int, name: str, key: tuple[str, ...], positions: list[int], seq: int) -> None:
        self.put(op, name, key, positions, [1.0] * len(positions), seq)

    def apply(self, state: MetricState, run: list[Event]) -> None:
        for (op, name, key), (_, _, positions, values) in sorted(self.ops.items(), key=lambda item: item[1][:2]):
            if len(values) == 1:
                ordered, at = values[0], positions[0]
            else:
                pairs = sorted(zip(chain.from_iterable(positions), chain.from_iterable(values)), key=itemgetter(0))
                ordered, at = [value for _, value in pairs], [position for position, _ in pairs]
            if op == INC:
                state.inc_each(name, key, ordered)
            elif op == SET:
                state.set_last(name, key, ordered[-1], len(ordered))
            elif name in EXEMPLARS:
                state.observe_each(name, key, ordered, [exemplar_of(run[i]) for i in at])
            else:
                state.observe_each(name, key, ordered)
