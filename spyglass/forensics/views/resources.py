"""What the engine's memory and CPUs were doing: its conversation cache and the host's samples of its processes."""

from __future__ import annotations

from spyglass.forensics.views.schema import ENGINE, HOST, TS, View, clocks, cols

CACHE_EVENTS = View(
    "cache_events",
    "The conversation cache, from the engine log: snapshots parked, evicted and"
    " restored, and the 10-second [stats] samples of its state.",
    f"""
SELECT {clocks("ts")}, source, instance, lane, kind AS event, {ENGINE("conv")} AS conv, {ENGINE("bytes")} AS snapshot_bytes,
  {ENGINE("reason")} AS evict_reason, {ENGINE("origin")} AS restored_from, {ENGINE("tokens")} AS restored_tokens,
  {ENGINE("parked")} AS parked, {ENGINE("used")} AS used_bytes, {ENGINE("budget")} AS budget_bytes,
  {ENGINE("evictions")} AS evictions, {ENGINE("busy")} AS busy_slots, {ENGINE("slots")} AS slots,
  {ENGINE("prefill_queue")} AS prefill_queue, {ENGINE("decode_tps")} AS decode_tps
FROM ev_engine_log WHERE kind IN ('park', 'evict', 'restore', 'stats')""",
    (
        *TS,
        *cols("""
    source text: Engine-log source
    instance text: Engine instance
    lane text: Lane of the instance
    event text: park, evict, restore or stats
    conv text: Conversation parked, evicted or restored
    snapshot_bytes int: Size of the snapshot parked or evicted
    evict_reason text: Why it was evicted (budget)
    restored_from text: parked or checkpoint
    restored_tokens int: Tokens restored
    parked int: Snapshots parked after the event
    used_bytes int: Bytes parked after the event
    budget_bytes int: The cache's byte budget (--conversation-cache-mib)
    evictions int: The engine process's cumulative eviction counter (restarts at 0 with the process)
    busy_slots int: Busy slots ([stats] only)
    slots int: Slots ([stats] only)
    prefill_queue int: Prefill queue depth ([stats] only)
    decode_tps float: Decode rate ([stats] only)
"""),
    ),
)

HOST_SAMPLES = View(
    "host_samples",
    "The host source's samples: per engine process, its CPU list, memory, threads,"
    " CPU time and run-queue wait, its cgroup's throttling and OOM kills (kind process, or"
    " process_missing when its pid is gone); per pair of engines, the CPUs they share (shared_cpus).",
    f"""
SELECT {clocks("ts")}, source, instance, kind AS event, {HOST("pid")} AS pid, {HOST("cpus")} AS cpus,
  {HOST("rss_bytes")} AS rss_bytes, {HOST("rss_anon_bytes")} AS rss_anon_bytes, {HOST("threads")} AS threads,
  {HOST("cpu_seconds")} AS cpu_seconds, {HOST("runqueue_wait_seconds")} AS runqueue_wait_seconds,
  {HOST("throttled_seconds")} AS throttled_seconds, {HOST("memory_bytes")} AS memory_bytes,
  {HOST("oom_kills")} AS oom_kills, {HOST("other")} AS other, {HOST("shared")} AS shared_cpus
FROM ev_host WHERE kind IN ('process', 'process_missing', 'shared_cpus')""",
    (
        *TS,
        *cols("""
    source text: Host source
    instance text: The engine instance sampled (for shared_cpus: the first of the pair)
    event text: process, process_missing or shared_cpus
    pid int: Process id sampled
    cpus text: Cpus_allowed_list of the process
    rss_bytes int: Resident memory (VmRSS)
    rss_anon_bytes int: Anonymous resident memory (RssAnon)
    threads int: Threads
    cpu_seconds float: CPU time of all threads, cumulative
    runqueue_wait_seconds float: Time its threads waited for a CPU, cumulative
    throttled_seconds float: Time its cgroup was throttled, cumulative
    memory_bytes int: Its cgroup's memory
    oom_kills int: OOM kills in its cgroup, cumulative
    other text: The other engine of a shared_cpus pair
    shared_cpus int: CPUs the pair shares
"""),
    ),
)
