"""What ran, and what changed: process starts, exits and operator actions, start banners, the serve's status polls."""

from __future__ import annotations

from spyglass.forensics.views.schema import ENGINE, GATEWAY, PROCESS, SERVE, TS, View, clock_columns, clocks, cols

PROCESS_EVENTS = View(
    "process_events",
    "Process lifecycle: supervisord's log (spawns, exits with their cause, FATAL,"
    " stops, SIGKILL escalations), restarts seen by its API, and operator actions from the switch"
    " log.",
    f"""
SELECT {clocks("ts")}, source, source_kind,
  coalesce({PROCESS("program")}, CASE WHEN source_kind = 'supervisord_log' THEN NULL ELSE instance END) AS program,
  CASE WHEN source_kind = 'switch_log' AND kind = 'restart' THEN 'operator_restart' ELSE kind END AS event,
  {PROCESS("pid")} AS pid, {PROCESS("status")} AS exit_status, {PROCESS("signal")} AS signal,
  coalesce({PROCESS("core")}, false) AS core_dumped,
  CASE {PROCESS("expected")} WHEN 'expected' THEN true WHEN 'not expected' THEN false END AS expected,
  CASE WHEN kind = 'stop_kill' THEN 'killed with ' || {PROCESS("signal")}
       WHEN {PROCESS("signal")} IS NOT NULL THEN 'terminated by ' || {PROCESS("signal")}
            || CASE WHEN {PROCESS("core")} THEN ' (core dumped)' ELSE '' END
       WHEN {PROCESS("status")} IS NOT NULL THEN 'exit status ' || {PROCESS("status")}::VARCHAR END AS cause,
  coalesce({PROCESS("error")}, {PROCESS("reason")}, {PROCESS("from_build")} || ' -> ' || {PROCESS("to_build")}) AS detail, {PROCESS("by")} AS by
FROM (SELECT * FROM ev_supervisord_log WHERE kind IN ('supervisord_started', 'spawned', 'running', 'exited', 'fatal',
                                                     'stopping', 'stopped', 'stop_kill', 'spawn_error')
      UNION ALL BY NAME SELECT * FROM ev_supervisord_rpc WHERE kind = 'restarted'
      UNION ALL BY NAME SELECT * FROM ev_switch_log WHERE kind IN ('switch', 'restart'))""",
    (
        *TS,
        *cols("""
    source text: supervisord-log, supervisord-API or switch-log source
    source_kind text: supervisord_log, supervisord_rpc or switch_log
    program text: The program (strata-a, strata-b, rag-proxy); NULL for supervisord's own lines
    event text: spawned, running, exited, fatal, stopping, stopped, stop_kill, spawn_error, supervisord_started, restarted (API), switch or operator_restart (switch log)
    pid int: Process id, where the line names one
    exit_status int: Exit status of an exit
    signal text: Signal that ended it, or the escalation signal of stop_kill
    core_dumped bool: The exit dumped core
    expected bool: supervisord's own expected / not expected
    cause text: The cause as one phrase: exit status 134, terminated by SIGABRT (core dumped), killed with SIGKILL
    detail text: spawnerr text, the operator's reason, or the build switch
    by text: Operator named by the switch log
"""),
    ),
)

BOOT_LINES = "('start', 'args', 'model', 'cpus', 'experts_loaded', 'ready', 'checksum_mismatch')"

DEPLOYS = View(
    "deploys",
    "Start banners: one row per engine process start (build, model file and md5, flags, CPUs,"
    " load and ready times) and per gateway start.",
    f"""
SELECT {clocks("ts")}, source, instance, lane, component, build_name, version, build, pid, model_path, model_real,
  model_md5, model_bytes, port, slots, ctx, pool_workers, cache_mib, prompt_cache_every, cpus, experts_resident,
  load_seconds, {clocks("ready_ts", "ready")}, ready_seconds, checksum_mismatch
FROM (
  SELECT min(ts) FILTER (WHERE kind = 'start') AS ts, source, any_value(instance) AS instance,
    any_value(lane) AS lane, 'engine' AS component,
    {ENGINE("build_name", "start")} AS build_name, {ENGINE("version", "start")} AS version,
    {ENGINE("build", "start")} AS build, {ENGINE("pid", "start")} AS pid, {ENGINE("path", "model")} AS model_path,
    {ENGINE("real", "model")} AS model_real, {ENGINE("md5", "model")} AS model_md5,
    {ENGINE("bytes", "model")} AS model_bytes, {ENGINE("port", "args")} AS port, {ENGINE("slots", "args")} AS slots,
    {ENGINE("ctx", "args")} AS ctx, {ENGINE("pool_workers", "args")} AS pool_workers,
    {ENGINE("conversation_cache_mib", "args")} AS cache_mib,
    {ENGINE("prompt_cache_every", "args")} AS prompt_cache_every, {ENGINE("cpus", "cpus")} AS cpus,
    {ENGINE("resident", "experts_loaded")} AS experts_resident, {ENGINE("seconds", "experts_loaded")} AS load_seconds,
    max(ts) FILTER (WHERE kind = 'ready') AS ready_ts, {ENGINE("seconds", "ready")} AS ready_seconds,
    bool_or(kind = 'checksum_mismatch') AS checksum_mismatch
  FROM (SELECT *, sum(CASE WHEN kind = 'start' THEN 1 ELSE 0 END) OVER (PARTITION BY source ORDER BY ts, seq
                      ROWS UNBOUNDED PRECEDING) AS boot
        FROM ev_engine_log WHERE kind IN {BOOT_LINES})
  WHERE boot > 0
  GROUP BY source, boot
  UNION ALL BY NAME
  SELECT ts, source, instance, NULL AS lane, 'gateway' AS component, 'rag-proxy' AS build_name,
    {GATEWAY("version")} AS version, {GATEWAY("pid")} AS pid
  FROM ev_gateway_log WHERE kind = 'started'
)""",
    (
        *TS,
        *cols("""
    source text: Engine-log or gateway-log source
    instance text: The instance that started
    lane text: Lane of an engine instance
    component text: engine or gateway
    build_name text: Strata or SSEStraBed; rag-proxy for the gateway
    version text: Engine or gateway version
    build text: Engine build hash
    pid int: Process id it printed
    model_path text: The configured model path (may be a symlink)
    model_real text: What the path resolved to at start
    model_md5 text: The model file's md5 at start
    model_bytes int: The model file's size
    port int: --port
    slots int: --slots
    ctx int: --ctx, the context window
    pool_workers int: --pool-workers
    cache_mib int: --conversation-cache-mib, the conversation cache's budget
    prompt_cache_every int: --prompt-cache-every, tokens between checkpoints
    cpus text: CPUs allowed to the process
    experts_resident int: Experts resident after loading
    load_seconds float: Seconds to load the experts
"""),
        *clock_columns("ready", "When it said ready"),
        *cols("""
    ready_seconds float: Seconds from start to ready, the engine's figure
    checksum_mismatch bool: A checksum mismatch was logged while loading
"""),
    ),
)

STATUS_SNAPSHOTS = View(
    "status_snapshots",
    "The serve's /v1/status, one row a poll (or a failed poll); absent counters are NULL (not measured), never 0.",
    f"""
SELECT {clocks("ts")}, source, instance, kind = 'status' AS up, {SERVE("error")} AS poll_error, {SERVE("build")} AS build,
  {SERVE("serve_version")} AS serve_version, {SERVE("state")} AS state, {SERVE("uptime_s")} AS uptime_s,
  TRY_CAST({SERVE("slots")}->>'total' AS BIGINT) AS slots_total, TRY_CAST({SERVE("slots")}->>'busy' AS BIGINT) AS slots_busy,
  {SERVE("prefill_queue")} AS prefill_queue, {SERVE("prompt_escapes")} IS NOT NULL AS has_escape_fix,
  TRY_CAST({SERVE("prompt_escapes")}->>'calls' AS BIGINT) AS escape_calls,
  TRY_CAST({SERVE("prompt_escapes")}->>'literals' AS BIGINT) AS escape_literals,
  {SERVE("stops_while_reasoning")} AS stops_while_reasoning,
  TRY_CAST({SERVE("requests")}->>'total' AS BIGINT) AS requests_total,
  {SERVE("requests")}->'by_status' AS requests_by_status
FROM ev_serve_status WHERE kind IN ('status', 'poll_error')""",
    (
        *TS,
        *cols("""
    source text: Serve-status source
    instance text: Engine instance the serve fronts
    up bool: The poll answered with a status
    poll_error text: Why the poll failed (timeout, refused, http_503, ...)
    build text: Engine build
    serve_version text: Serve build (before 2026.10.18: no special-token escape)
    state text: loading, ready or draining
    uptime_s float: Serve uptime
    slots_total int: Slots
    slots_busy int: Busy slots
    prefill_queue int: Prefill queue depth
    has_escape_fix bool: The serve reports prompt_escapes, i.e. it escapes special-token literals
    escape_calls int: Prompts escaped, cumulative since the serve started
    escape_literals int: Literals escaped, cumulative
    stops_while_reasoning int: Responses that stopped inside reasoning, cumulative
    requests_total int: Requests served, cumulative
    requests_by_status json: Requests by HTTP status, cumulative
"""),
    ),
)
