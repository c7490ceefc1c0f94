"""The forensic schema: one typed view per kind of thing an analyst asks about, over the store's typed tables.

Each view is one SQL definition in VIEWS, registered once; docs/forensics.md is generated from
this table. Views are never written into the store: a query that names them gets them as CTEs
in front of it (`with_views`), so they work on a read-only file and through the agent's
read-only query path alike. Every view reads the events of a window widened by PAD on each
side (a request that began before the window still joins its lines) and returns the rows whose
`ts_utc` falls in [$from, $to). Every timestamp comes as a `_utc` (TIMESTAMPTZ) and `_beijing`
(naive Asia/Shanghai wall time) pair; nothing depends on the session's TimeZone.

A view reads the typed columns of one source kind's events (`ev_<source kind>`: the window of the
store's `events_<source kind>`, exporters/event_schema.py) and names each field through `Fields`,
which refuses, when the view is defined (at import), a field no kind of that source kind declares
(collectors/fields.py): a renamed regex group fails the build, it does not become a NULL column.
Only the timeline reads `ev`, every event with its fields as JSON.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from spyglass.collectors.clock import BEIJING_ZONE_NAME
from spyglass.collectors.fields import columns as declared_fields_of
from spyglass.collectors.fields import fields as declared_fields
from spyglass.collectors.received import RECEIVED
from spyglass.exporters.event_schema import column_name, json_typed_select, quoted, source_kinds, source_view

PAD = "INTERVAL 1 HOUR"
BEIJING = BEIJING_ZONE_NAME
TZ, BJ, INT, FLOAT, TEXT, BOOL, JSON = ("TIMESTAMP WITH TIME ZONE", "TIMESTAMP", "BIGINT", "DOUBLE", "VARCHAR",
                                        "BOOLEAN", "JSON")


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    doc: str


@dataclass(frozen=True)
class View:
    """A named SELECT over `ev` (the window's events) and other views' `NAME__all`; its documented
    columns are exactly what it returns (tests/test_forensics_views.py checks names and types)."""
    name: str
    doc: str
    sql: str
    columns: tuple[Column, ...]


def clocks(expr: str, name: str = "ts") -> str:
    """`expr` as the pair NAME_utc, NAME_beijing."""
    return f"{expr} AS {name}_utc, timezone('{BEIJING}', {expr}) AS {name}_beijing"


def clock_columns(name: str, what: str) -> tuple[Column, Column]:
    return (Column(f"{name}_utc", TZ, f"{what} (UTC)"), Column(f"{name}_beijing", BJ, f"{what}, Beijing wall time"))


class UnknownField(ValueError):
    """A view, report or probe names a field that no kind of its source kind declares."""


class Fields:
    """The typed columns of one or more source kinds' events, by field name: `F('ttft_ms')` is the column,
    `F('ttft_ms', 'done')` its value on the group's `done` row. A field no kind declares (or that kind
    `where` does not) raises UnknownField when the SQL is built."""

    def __init__(self, *source_kinds: str) -> None:
        table = declared_fields()
        self.source_kinds = source_kinds
        self.kinds = {kind: set(found) for sk in source_kinds for kind, found in table[sk].items()}
        self.names = set().union(*self.kinds.values())

    def __call__(self, key: str, where: str | None = None) -> str:
        owner = ", ".join(self.source_kinds)
        if key not in self.names:
            raise UnknownField(f"no kind of {owner} declares a field {key!r}")
        if where is not None and key not in self.kinds.get(where, ()):
            raise UnknownField(f"kind {where!r} of {owner} declares no field {key!r}")
        column = quoted(column_name(key))
        return f"max({column}) FILTER (WHERE kind = '{where}')" if where else column


ENGINE, GATEWAY, INFER, SERVE = Fields("engine_log"), Fields("gateway_log"), Fields("infer_store"), Fields("serve_status")
PROCESS = Fields("supervisord_log", "supervisord_rpc", "switch_log")
ALERT, SMOKE, SPAN, HOST = Fields("alertmanager"), Fields("smoke"), Fields("otlp"), Fields("host")


def instant(value: str) -> str:
    """A time given as epoch seconds (as the agent stores Alertmanager's times); NULL past what a
    timestamp holds."""
    return f"CASE WHEN {value} BETWEEN 0 AND 253402300799 THEN to_timestamp({value}) END"


def cols(spec: str) -> tuple[Column, ...]:
    """Columns from 'name TYPE: doc' lines (TYPE one of the short names above)."""
    kinds = {"tz": TZ, "bj": BJ, "int": INT, "float": FLOAT, "text": TEXT, "bool": BOOL, "json": JSON}
    out = []
    for line in filter(None, (raw.strip() for raw in spec.strip().splitlines())):
        head, doc = line.split(":", 1)
        name, kind = head.split()
        out.append(Column(name, kinds[kind], doc.strip()))
    return tuple(out)


TS = clock_columns("ts", "When it happened")

TIMELINE = View("timeline", "Every stored event of the window, one row an event, in the order it was stored.", f"""
SELECT {clocks('ts')}, seq, source, source_kind, kind, instance, host, request_id, fields FROM ev""", (*TS, *cols("""
    seq int: Order of storage (ties of ts keep the order the lines were read in)
    source text: The configured source name, e.g. engine-b
    source_kind text: The collector kind of that source (engine_log, gateway_log, ...); NULL for spans, alerts and smoke results
    kind text: The event kind, e.g. park, done, exited
    instance text: strata-a, strata-b, rag-proxy, supervisord, ...
    host text: Host that stored it
    request_id text: The gateway's request id, where the event belongs to one
    fields json: Every typed field of the event (the collector's named groups)
""")))

ENGINE_REQUESTS = View("engine_requests", "One row per engine task, from the engine log: queued, prompt reused/read,"
                       " thinking, tool call, done, or the engine's own 400.", f"""
SELECT {clocks('t.ts')}, t.source, t.instance, t.lane, t.request_id, t.task, t.conv, t.prefill_depth,
  t.prompt_tokens, t.reused_tokens, t.read_tokens, t.prefill_ms,
  CASE WHEN r.ts >= t.ts THEN r.origin END AS reuse_origin,
  t.thinking_tokens, t.thinking_max, t.thinking_cause, t.wrote_tool_call, t.finish, t.completion_tokens,
  t.ttft_ms, t.decode_tps, {clocks('t.done_ts', 'done')},
  round(epoch(t.done_ts - t.ts) * 1000)::BIGINT AS duration_ms,
  t.rejected_status, t.rejected_code, t.rejected_prompt, t.rejected_window
FROM (
  SELECT source, any_value(instance) AS instance, any_value(lane) AS lane, request_id, {ENGINE('task')} AS task,
    min(ts) AS ts, {ENGINE('conv', 'queued')} AS conv, {ENGINE('prefill_depth', 'queued')} AS prefill_depth,
    {ENGINE('prompt', 'prompt')} AS prompt_tokens, {ENGINE('reused', 'prompt')} AS reused_tokens,
    {ENGINE('read', 'prompt')} AS read_tokens, {ENGINE('ms', 'prompt')} AS prefill_ms,
    {ENGINE('tokens', 'thinking')} AS thinking_tokens, {ENGINE('max', 'thinking')} AS thinking_max,
    {ENGINE('cause', 'thinking')} AS thinking_cause, bool_or(kind = 'tool_call') AS wrote_tool_call,
    {ENGINE('finish', 'done')} AS finish, {ENGINE('completion', 'done')} AS completion_tokens,
    {ENGINE('ttft_ms', 'done')} AS ttft_ms, {ENGINE('decode_tps', 'done')} AS decode_tps,
    max(ts) FILTER (WHERE kind = 'done') AS done_ts, max(ts) FILTER (WHERE kind = 'prompt') AS prompt_ts,
    {ENGINE('status', 'rejected')} AS rejected_status, {ENGINE('code', 'rejected')}::VARCHAR AS rejected_code,
    {ENGINE('prompt', 'rejected')} AS rejected_prompt, {ENGINE('window', 'rejected')} AS rejected_window
  FROM ev_engine_log
  WHERE kind IN ('queued', 'prompt', 'thinking', 'tool_call', 'done', 'rejected')
  GROUP BY source, request_id, {ENGINE('task')}, CASE WHEN request_id IS NULL THEN seq END
) t
ASOF LEFT JOIN (SELECT source, ts, {ENGINE('conv')} AS conv, {ENGINE('origin')} AS origin FROM ev_engine_log
                WHERE kind = 'restore') r
  ON r.source = t.source AND r.conv = t.conv AND coalesce(t.prompt_ts, t.ts) >= r.ts""", (*TS, *cols("""
    source text: Engine-log source
    instance text: Engine instance
    lane text: Lane of the instance (its source's `lane`)
    request_id text: The gateway's request id (NULL for a 400 the engine refused before queueing)
    task int: The engine's task number (restarts with the process)
    conv text: Conversation id whose cache the task used
    prefill_depth int: Requests ahead of it in the global serial prefill queue when queued
    prompt_tokens int: Prompt tokens, counted by the engine (the authority)
    reused_tokens int: Prompt tokens served from the conversation cache
    read_tokens int: Prompt tokens prefilled (read) this turn
    prefill_ms int: The engine's time to reuse and read the prompt
    reuse_origin text: Where the reused prefix came from (parked, checkpoint), from the restore line
    thinking_tokens int: Reasoning tokens used
    thinking_max int: The thinking budget
    thinking_cause text: Why thinking ended: stop, length, budget
    wrote_tool_call bool: The engine logged `writing a tool call`
    finish text: Finish reason of the done line
    completion_tokens int: Completion tokens, counted by the engine
    ttft_ms int: Time to first token, the engine's own figure
    decode_tps float: Decode rate, the engine's own figure
"""), *clock_columns("done", "When the engine finished it"), *cols("""
    duration_ms int: From queued to done, on the engine's clock
    rejected_status int: Status of the engine's refusal (400), if refused
    rejected_code text: The refusal's code (545: prompt too long)
    rejected_prompt int: Prompt tokens the engine counted when refusing it
    rejected_window int: The context window it refused against
""")))

CACHE_EVENTS = View("cache_events", "The conversation cache, from the engine log: snapshots parked, evicted and"
                    " restored, and the 10-second [stats] samples of its state.", f"""
SELECT {clocks('ts')}, source, instance, lane, kind AS event, {ENGINE('conv')} AS conv, {ENGINE('bytes')} AS snapshot_bytes,
  {ENGINE('reason')} AS evict_reason, {ENGINE('origin')} AS restored_from, {ENGINE('tokens')} AS restored_tokens,
  {ENGINE('parked')} AS parked, {ENGINE('used')} AS used_bytes, {ENGINE('budget')} AS budget_bytes,
  {ENGINE('evictions')} AS evictions, {ENGINE('busy')} AS busy_slots, {ENGINE('slots')} AS slots,
  {ENGINE('prefill_queue')} AS prefill_queue, {ENGINE('decode_tps')} AS decode_tps
FROM ev_engine_log WHERE kind IN ('park', 'evict', 'restore', 'stats')""", (*TS, *cols("""
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
""")))

PROCESS_EVENTS = View("process_events", "Process lifecycle: supervisord's log (spawns, exits with their cause, FATAL,"
                      " stops, SIGKILL escalations), restarts seen by its API, and operator actions from the switch"
                      " log.", f"""
SELECT {clocks('ts')}, source, source_kind,
  coalesce({PROCESS('program')}, CASE WHEN source_kind = 'supervisord_log' THEN NULL ELSE instance END) AS program,
  CASE WHEN source_kind = 'switch_log' AND kind = 'restart' THEN 'operator_restart' ELSE kind END AS event,
  {PROCESS('pid')} AS pid, {PROCESS('status')} AS exit_status, {PROCESS('signal')} AS signal,
  coalesce({PROCESS('core')}, false) AS core_dumped,
  CASE {PROCESS('expected')} WHEN 'expected' THEN true WHEN 'not expected' THEN false END AS expected,
  CASE WHEN kind = 'stop_kill' THEN 'killed with ' || {PROCESS('signal')}
       WHEN {PROCESS('signal')} IS NOT NULL THEN 'terminated by ' || {PROCESS('signal')}
            || CASE WHEN {PROCESS('core')} THEN ' (core dumped)' ELSE '' END
       WHEN {PROCESS('status')} IS NOT NULL THEN 'exit status ' || {PROCESS('status')}::VARCHAR END AS cause,
  coalesce({PROCESS('error')}, {PROCESS('reason')}, {PROCESS('from_build')} || ' -> ' || {PROCESS('to_build')}) AS detail, {PROCESS('by')} AS by
FROM (SELECT * FROM ev_supervisord_log WHERE kind IN ('supervisord_started', 'spawned', 'running', 'exited', 'fatal',
                                                     'stopping', 'stopped', 'stop_kill', 'spawn_error')
      UNION ALL BY NAME SELECT * FROM ev_supervisord_rpc WHERE kind = 'restarted'
      UNION ALL BY NAME SELECT * FROM ev_switch_log WHERE kind IN ('switch', 'restart'))""", (*TS, *cols("""
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
""")))

BOOT_LINES = "('start', 'args', 'model', 'cpus', 'experts_loaded', 'ready', 'checksum_mismatch')"
DEPLOYS = View("deploys", "Start banners: one row per engine process start (build, model file and md5, flags, CPUs,"
               " load and ready times) and per gateway start.", f"""
SELECT {clocks('ts')}, source, instance, lane, component, build_name, version, build, pid, model_path, model_real,
  model_md5, model_bytes, port, slots, ctx, pool_workers, cache_mib, prompt_cache_every, cpus, experts_resident,
  load_seconds, {clocks('ready_ts', 'ready')}, ready_seconds, checksum_mismatch
FROM (
  SELECT min(ts) FILTER (WHERE kind = 'start') AS ts, source, any_value(instance) AS instance,
    any_value(lane) AS lane, 'engine' AS component,
    {ENGINE('build_name', 'start')} AS build_name, {ENGINE('version', 'start')} AS version,
    {ENGINE('build', 'start')} AS build, {ENGINE('pid', 'start')} AS pid, {ENGINE('path', 'model')} AS model_path,
    {ENGINE('real', 'model')} AS model_real, {ENGINE('md5', 'model')} AS model_md5,
    {ENGINE('bytes', 'model')} AS model_bytes, {ENGINE('port', 'args')} AS port, {ENGINE('slots', 'args')} AS slots,
    {ENGINE('ctx', 'args')} AS ctx, {ENGINE('pool_workers', 'args')} AS pool_workers,
    {ENGINE('conversation_cache_mib', 'args')} AS cache_mib,
    {ENGINE('prompt_cache_every', 'args')} AS prompt_cache_every, {ENGINE('cpus', 'cpus')} AS cpus,
    {ENGINE('resident', 'experts_loaded')} AS experts_resident, {ENGINE('seconds', 'experts_loaded')} AS load_seconds,
    max(ts) FILTER (WHERE kind = 'ready') AS ready_ts, {ENGINE('seconds', 'ready')} AS ready_seconds,
    bool_or(kind = 'checksum_mismatch') AS checksum_mismatch
  FROM (SELECT *, sum(CASE WHEN kind = 'start' THEN 1 ELSE 0 END) OVER (PARTITION BY source ORDER BY ts, seq
                      ROWS UNBOUNDED PRECEDING) AS boot
        FROM ev_engine_log WHERE kind IN {BOOT_LINES})
  WHERE boot > 0
  GROUP BY source, boot
  UNION ALL BY NAME
  SELECT ts, source, instance, NULL AS lane, 'gateway' AS component, 'rag-proxy' AS build_name,
    {GATEWAY('version')} AS version, {GATEWAY('pid')} AS pid
  FROM ev_gateway_log WHERE kind = 'started'
)""", (*TS, *cols("""
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
"""), *clock_columns("ready", "When it said ready"), *cols("""
    ready_seconds float: Seconds from start to ready, the engine's figure
    checksum_mismatch bool: A checksum mismatch was logged while loading
""")))

STATUS_SNAPSHOTS = View("status_snapshots", "The serve's /v1/status, one row a poll (or a failed poll); absent"
                        " counters are NULL (not measured), never 0.", f"""
SELECT {clocks('ts')}, source, instance, kind = 'status' AS up, {SERVE('error')} AS poll_error, {SERVE('build')} AS build,
  {SERVE('serve_version')} AS serve_version, {SERVE('state')} AS state, {SERVE('uptime_s')} AS uptime_s,
  TRY_CAST({SERVE('slots')}->>'total' AS BIGINT) AS slots_total, TRY_CAST({SERVE('slots')}->>'busy' AS BIGINT) AS slots_busy,
  {SERVE('prefill_queue')} AS prefill_queue, {SERVE('prompt_escapes')} IS NOT NULL AS has_escape_fix,
  TRY_CAST({SERVE('prompt_escapes')}->>'calls' AS BIGINT) AS escape_calls,
  TRY_CAST({SERVE('prompt_escapes')}->>'literals' AS BIGINT) AS escape_literals,
  {SERVE('stops_while_reasoning')} AS stops_while_reasoning,
  TRY_CAST({SERVE('requests')}->>'total' AS BIGINT) AS requests_total,
  {SERVE('requests')}->'by_status' AS requests_by_status
FROM ev_serve_status WHERE kind IN ('status', 'poll_error')""", (*TS, *cols("""
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
""")))

ALERTS = View("alerts", "Alert notifications, as Alertmanager's webhook (POST /api/alerts) stores them: events of"
              " kind `alert` whose fields are the Alertmanager alert (alertname, status, labels, startsAt, endsAt).", f"""
SELECT {clocks('ts')}, source, coalesce({ALERT('alertname')}, {ALERT('labels')}->>'alertname') AS alertname,
  {ALERT('status')} AS status, {ALERT('labels')}->>'severity' AS severity,
  coalesce({ALERT('labels')}->>'instance', instance) AS instance, {ALERT('labels')} AS labels,
  {ALERT('annotations')}->>'summary' AS summary,
  {clocks(instant(ALERT('startsAt')), 'starts')},
  {clocks(f"CASE WHEN {ALERT('endsAt')} > 0 THEN {instant(ALERT('endsAt'))} END", 'ends')}
FROM ev_alertmanager WHERE kind = 'alert'""", (*TS, *cols("""
    source text: The receiving source
    alertname text: labels.alertname
    status text: firing or resolved
    severity text: labels.severity
    instance text: labels.instance, else the event's instance
    labels json: Every label of the alert
    summary text: annotations.summary
"""), *clock_columns("starts", "startsAt"), *clock_columns("ends", "endsAt; NULL while firing (Alertmanager sends 0001-01-01)")))

SMOKE_GATES = View("smoke_gates", "Runs of the smoke gate (`spyglass smoke --config`), one row a run: passed or"
                   " failed, why, the instance it gated, latencies, the samples file's hash.", f"""
SELECT {clocks('ts')}, instance, kind = 'smoke_passed' AS passed, {SMOKE('reason')} AS reason, {SMOKE('url')} AS url,
  {SMOKE('samples')} AS samples, {SMOKE('ttft_ms_median')} AS ttft_ms_median, {SMOKE('ttft_ms_max')} AS ttft_ms_max,
  {SMOKE('waited_seconds')} AS waited_seconds, {SMOKE('samples_file')} AS samples_file,
  {SMOKE('samples_sha256')} AS samples_sha256, {SMOKE('outcomes')} AS outcomes, host
FROM ev_smoke WHERE kind IN ('smoke_passed', 'smoke_failed')""", (*TS, *cols("""
    instance text: The engine instance the run gated (--instance, or the serve_status source polling --url)
    passed bool: The gate passed
    reason text: The gate's reason: N samples passed, or the first failing check
    url text: The serve URL it checked
    samples int: Samples answered (a failing run stops at the first failure)
    ttft_ms_median float: Median TTFT of the answered samples (the serve's x-ttft-ms, else wall time)
    ttft_ms_max float: Slowest TTFT of the answered samples
    waited_seconds float: Seconds /health took to answer 200 (the probe budget's share used)
    samples_file text: The samples file as given
    samples_sha256 text: SHA-256 of the samples file: which fixed samples the verdict is about
    outcomes json: Per sample: name, status, ttft_ms, finish, problem
    host text: Host whose agent stored it
""")))

SPANS = View("spans", "Trace spans pushed to the agent's /v1/traces (gateway and serve), one row a span.", f"""
SELECT {clocks('ts')}, request_id, {SPAN('trace_id')} AS trace_id, {SPAN('span_id')} AS span_id,
  {SPAN('parent_span_id')} AS parent_span_id, {SPAN('name')} AS name, {SPAN('service')} AS service, {SPAN('kind')} AS span_kind,
  {clocks(f"to_timestamp({SPAN('end')})", 'end')},
  round(({SPAN('end')} - {SPAN('start')}) * 1000, 3) AS duration_ms,
  {SPAN('status')} AS status, {SPAN('status_message')} AS status_message, {SPAN('attributes')} AS attributes
FROM ev_otlp WHERE kind = 'span'""", (*clock_columns("ts", "When the span started"), *cols("""
    request_id text: spyglass.request.id of the span
    trace_id text: Trace id, hex
    span_id text: Span id, hex
    parent_span_id text: Parent span id, hex; NULL for a root
    name text: Span name
    service text: service.name of the process that made it
    span_kind text: SERVER, CLIENT, INTERNAL, ...
"""), *clock_columns("end", "When the span ended"), *cols("""
    duration_ms float: end - start
    status text: unset, ok or error
    status_message text: The error text of an error span
    attributes json: The span's attributes (no prompt text is ever one)
""")))

GATEWAY_REQUESTS = View("gateway_requests", "One row per request id from the gateway log: what the client sent, what"
                        " assembly kept, the gateway's estimate, the precheck, the clamp, and how it ended.", f"""
SELECT {clocks('ts')}, request_id, instance, session, lane, mode, client_msgs, sent_msgs, chars, cjk, est_tokens,
  max_tokens, precheck_tokens, precheck_window, precheck_room, clamped_max_tokens, thinking_budget,
  coalesce(done_status, overfit_status, reject_status) AS status, engine_prompt, completion_tokens, finish, tool_calls,
  content_chars, ttft_ms, dur_ms, overfits, overfit_prompt, overfit_max, overfit_upstream,
  TRY_CAST(regexp_extract(overfit_upstream, ': (\\d+) > (\\d+)', 1) AS BIGINT) AS upstream_prompt,
  TRY_CAST(regexp_extract(overfit_upstream, ': (\\d+) > (\\d+)', 2) AS BIGINT) AS upstream_window,
  retried, reject_reason
FROM (
  SELECT request_id, min(ts) AS ts, any_value(instance) AS instance, {GATEWAY('session', 'request')} AS session,
    max({GATEWAY('lane')}) AS lane, max({GATEWAY('mode')}) AS mode, max({GATEWAY('client_msgs')}) AS client_msgs,
    max({GATEWAY('sent_msgs')}) AS sent_msgs, {GATEWAY('chars', 'request')} AS chars,
    {GATEWAY('cjk', 'request')} AS cjk, max({GATEWAY('est_tokens')}) AS est_tokens,
    {GATEWAY('max_tokens', 'request')} AS max_tokens, {GATEWAY('count_tokens', 'precheck')} AS precheck_tokens,
    {GATEWAY('window', 'precheck')} AS precheck_window, {GATEWAY('room', 'precheck')} AS precheck_room,
    {GATEWAY('max_to', 'clamp')} AS clamped_max_tokens, {GATEWAY('thinking_budget', 'clamp')} AS thinking_budget,
    {GATEWAY('status', 'done')} AS done_status, {GATEWAY('status', 'overfit')} AS overfit_status,
    {GATEWAY('status', 'reject')} AS reject_status, {GATEWAY('engine_prompt', 'done')} AS engine_prompt,
    {GATEWAY('completion', 'done')} AS completion_tokens, {GATEWAY('finish', 'done')} AS finish,
    {GATEWAY('tool_calls', 'done')} AS tool_calls, {GATEWAY('content_chars', 'done')} AS content_chars,
    {GATEWAY('ttft_ms', 'done')} AS ttft_ms, {GATEWAY('dur_ms', 'done')} AS dur_ms,
    count(*) FILTER (WHERE kind = 'overfit') AS overfits, {GATEWAY('prompt', 'overfit')} AS overfit_prompt,
    {GATEWAY('max', 'overfit')} AS overfit_max, {GATEWAY('upstream', 'overfit')} AS overfit_upstream,
    bool_or(kind = 'retry_on_overfit') AS retried, {GATEWAY('reason', 'reject')} AS reject_reason
  FROM ev_gateway_log WHERE request_id IS NOT NULL
  GROUP BY request_id
)""", (*TS, *cols("""
    request_id text: The gateway's request id (Beijing time of arrival inside)
    instance text: The gateway instance
    session text: Conversation session (auto:<hash of the first user message>)
    lane text: fast or normal
    mode text: assembled, no_rag or passthrough
    client_msgs int: Messages the client sent
    sent_msgs int: Messages assembly kept and sent on
    chars int: Characters sent
    cjk float: Share of CJK characters
    est_tokens int: Tokens estimated by the gateway (CJK 1.05, other 0.70 a character: an upper bound)
    max_tokens int: max_tokens the client asked for
    precheck_tokens int: Tokens counted by the serve's count_tokens in the gateway's precheck
    precheck_window int: Window the precheck used
    precheck_room int: window - precheck_tokens
    clamped_max_tokens int: max_tokens after the gateway's clamp
    thinking_budget int: Thinking budget set by the clamp
    status int: HTTP status the gateway logged (done, overfit or reject)
    engine_prompt int: Prompt tokens the engine reported back (usage), in the done line
    completion_tokens int: Completion tokens the engine reported back
    finish text: Finish reason in the done line
    tool_calls int: Tool calls in the response
    content_chars int: Visible text length in the response
    ttft_ms int: Time to first token at the gateway
    dur_ms int: Duration at the gateway
    overfits int: 400 overfit lines for this id (a blind retry writes one per attempt)
    overfit_prompt int: Prompt size the gateway's overfit line reported
    overfit_max int: Maximum the overfit line reported
    overfit_upstream text: The upstream 400's text, as relayed
    upstream_prompt int: Prompt tokens inside that text (the engine's count: #545 N > M)
    upstream_window int: Window inside that text
    retried bool: The gateway retried the overfit with max_tokens clamped (blind retry)
    reject_reason text: Why the gateway refused it (429: model concurrency full)
""")))

INFER_REQUESTS = View("infer_requests", "One row per request id from the infer store: the infer.db row (outcome, engine"
                      " counts) and the facts of its raw record in infer-segs (special-token literals, thinking-only,"
                      " broken tool JSON, task anchor, plan-then-stop), never its text.", f"""
SELECT {clocks('ts')}, request_id, session, lane, upstream, mode, client_msgs, sent_msgs, chars, est_tokens,
  prompt_tokens, completion_tokens, max_tokens, status, finish, tool_calls, content_chars, reasoning_chars, ttft_ms,
  dur_ms, segment, has_body, special_literals, thinking_only, invalid_tool_json, anchor_survived, offered_tools,
  plan_then_stop, body_finish, body_tool_calls, body_content_chars
FROM (
  SELECT request_id, coalesce(min(ts) FILTER (WHERE kind = 'request'), min(ts)) AS ts,
    {INFER('session', 'request')} AS session, max({INFER('lane')}) AS lane, {INFER('upstream', 'request')} AS upstream,
    {INFER('mode', 'request')} AS mode, {INFER('client_msgs', 'request')} AS client_msgs,
    {INFER('sent_msgs', 'request')} AS sent_msgs, {INFER('chars', 'request')} AS chars,
    {INFER('est_tokens', 'request')} AS est_tokens, {INFER('prompt_tokens', 'request')} AS prompt_tokens,
    {INFER('completion_tokens', 'request')} AS completion_tokens, {INFER('max_tokens', 'request')} AS max_tokens,
    {INFER('status', 'request')} AS status, {INFER('finish', 'request')} AS finish,
    {INFER('tool_calls', 'request')} AS tool_calls, {INFER('content_chars', 'request')} AS content_chars,
    {INFER('reasoning_chars', 'request')} AS reasoning_chars, {INFER('ttft_ms', 'request')} AS ttft_ms,
    {INFER('dur_ms', 'request')} AS dur_ms, coalesce({INFER('seg', 'request')}, {INFER('segment', 'request_body')}) AS segment,
    bool_or(kind = 'request_body') AS has_body, {INFER('special_literals', 'request_body')} AS special_literals,
    bool_or({INFER('thinking_only')}) FILTER (WHERE kind = 'request_body') AS thinking_only,
    {INFER('invalid_tool_json', 'request_body')} AS invalid_tool_json,
    bool_or({INFER('anchor_survived')}) FILTER (WHERE kind = 'request_body') AS anchor_survived,
    bool_or({INFER('offered_tools')}) FILTER (WHERE kind = 'request_body') AS offered_tools,
    bool_or({INFER('plan_then_stop')}) FILTER (WHERE kind = 'request_body') AS plan_then_stop,
    {INFER('finish', 'request_body')} AS body_finish, {INFER('tool_calls', 'request_body')} AS body_tool_calls,
    {INFER('content_chars', 'request_body')} AS body_content_chars
  FROM ev_infer_store WHERE kind IN ('request', 'request_body') AND request_id IS NOT NULL
  GROUP BY request_id
)""", (*clock_columns("ts", "Arrival (the row's ts, Beijing time in the file)"), *cols("""
    request_id text: Request id
    session text: Session
    lane text: Lane
    upstream text: Engine instance it went to
    mode text: assembled, no_rag or passthrough
    client_msgs int: Messages the client sent
    sent_msgs int: Messages sent on after assembly
    chars int: Characters sent
    est_tokens int: The gateway's estimate
    prompt_tokens int: Prompt tokens, the engine's count (NULL when the engine never saw it)
    completion_tokens int: Completion tokens, the engine's count
    max_tokens int: max_tokens sent
    status int: HTTP status
    finish text: Finish reason
    tool_calls int: Tool calls
    content_chars int: Visible text length
    reasoning_chars int: Thinking text length
    ttft_ms int: Time to first token at the gateway
    dur_ms int: Duration at the gateway
    segment text: Segment file holding the raw record
    has_body bool: Its raw record was read from a segment
    special_literals int: Special-token literals (<|im_end|>, ...) in the sent prompt
    thinking_only bool: The response has reasoning but no visible text and no tool call
    invalid_tool_json int: Tool calls whose arguments are not valid JSON
    anchor_survived bool: The client's first user message (the task anchor) is in the sent request
    offered_tools bool: The sent request offered tools
    plan_then_stop bool: Tools offered, no tool call, finish=stop and a short visible text (a plan, then EOS)
    body_finish text: finish_reason of the raw record
    body_tool_calls int: Tool calls in the raw record
    body_content_chars int: Visible text length in the raw record
""")))

HOST_SAMPLES = View("host_samples", "The host source's samples: per engine process, its CPU list, memory, threads,"
                    " CPU time and run-queue wait, its cgroup's throttling and OOM kills (kind process, or"
                    " process_missing when its pid is gone); per pair of engines, the CPUs they share (shared_cpus).", f"""
SELECT {clocks('ts')}, source, instance, kind AS event, {HOST('pid')} AS pid, {HOST('cpus')} AS cpus,
  {HOST('rss_bytes')} AS rss_bytes, {HOST('rss_anon_bytes')} AS rss_anon_bytes, {HOST('threads')} AS threads,
  {HOST('cpu_seconds')} AS cpu_seconds, {HOST('runqueue_wait_seconds')} AS runqueue_wait_seconds,
  {HOST('throttled_seconds')} AS throttled_seconds, {HOST('memory_bytes')} AS memory_bytes,
  {HOST('oom_kills')} AS oom_kills, {HOST('other')} AS other, {HOST('shared')} AS shared_cpus
FROM ev_host WHERE kind IN ('process', 'process_missing', 'shared_cpus')""", (*TS, *cols("""
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
""")))

REQUESTS = View("requests", "One row per request id, joining the gateway log, the infer store and the engine log:"
                " every layer's token count named by who counted it, status and finish, the raw record's facts,"
                " and TTFT and duration at the gateway and at the engine.", f"""
SELECT {clocks('least(g.ts_utc, i.ts_utc, e.ts_utc)')}, ids.request_id,
  coalesce(g.lane, i.lane, e.lane) AS lane, coalesce(g.session, i.session) AS session, coalesce(g.mode, i.mode) AS mode,
  coalesce(i.upstream, e.instance) AS instance, coalesce(g.client_msgs, i.client_msgs) AS client_msgs,
  coalesce(g.sent_msgs, i.sent_msgs) AS sent_msgs,
  coalesce(g.client_msgs, i.client_msgs) - coalesce(g.sent_msgs, i.sent_msgs) AS dropped_msgs,
  coalesce(g.chars, i.chars) AS chars, g.cjk,
  coalesce(g.est_tokens, i.est_tokens) AS tokens_gateway_estimate, g.precheck_tokens AS tokens_precheck,
  e.prompt_tokens AS tokens_engine, g.engine_prompt AS tokens_engine_via_gateway, i.prompt_tokens AS tokens_infer_store,
  coalesce(e.rejected_prompt, g.upstream_prompt) AS tokens_engine_rejected, g.overfit_prompt AS tokens_overfit_reported,
  coalesce(e.prompt_tokens, g.engine_prompt, i.prompt_tokens, e.rejected_prompt, g.upstream_prompt) AS tokens,
  CASE WHEN e.prompt_tokens IS NOT NULL THEN 'engine log'
       WHEN g.engine_prompt IS NOT NULL THEN 'engine, via the gateway done line'
       WHEN i.prompt_tokens IS NOT NULL THEN 'engine, via the infer store'
       WHEN coalesce(e.rejected_prompt, g.upstream_prompt) IS NOT NULL THEN 'engine, in its 400'
       WHEN g.precheck_tokens IS NOT NULL THEN 'serve count_tokens (precheck)' END AS tokens_counted_by,
  round(coalesce(g.est_tokens, i.est_tokens)
        / coalesce(e.prompt_tokens, g.engine_prompt, i.prompt_tokens, e.rejected_prompt, g.upstream_prompt), 3)
    AS estimate_ratio,
  coalesce(g.max_tokens, i.max_tokens) AS max_tokens, g.clamped_max_tokens,
  coalesce(i.status, g.status, e.rejected_status, CASE WHEN e.finish IS NOT NULL THEN 200 END) AS status,
  coalesce(i.finish, i.body_finish, g.finish, e.finish) AS finish, e.finish AS finish_engine,
  coalesce(i.tool_calls, i.body_tool_calls, g.tool_calls) AS tool_calls, e.wrote_tool_call,
  coalesce(i.content_chars, i.body_content_chars, g.content_chars) AS content_chars, i.reasoning_chars,
  coalesce(e.completion_tokens, g.completion_tokens, i.completion_tokens) AS completion_tokens,
  i.special_literals, i.thinking_only, i.invalid_tool_json, i.anchor_survived, i.offered_tools, i.plan_then_stop,
  g.retried, g.overfits, g.reject_reason,
  coalesce(g.ttft_ms, i.ttft_ms) AS ttft_ms_gateway, coalesce(g.dur_ms, i.dur_ms) AS dur_ms_gateway,
  e.ttft_ms AS ttft_ms_engine, e.duration_ms AS dur_ms_engine, e.prefill_ms, e.reused_tokens, e.read_tokens,
  e.reuse_origin, e.thinking_tokens, e.thinking_max, e.thinking_cause, e.conv, coalesce(e.attempts, 0) AS engine_attempts,
  concat_ws(',', CASE WHEN g.request_id IS NOT NULL THEN 'gateway' END, CASE WHEN i.request_id IS NOT NULL THEN 'infer' END,
            CASE WHEN e.request_id IS NOT NULL THEN 'engine' END) AS seen_by
FROM (SELECT request_id FROM gateway_requests__all UNION SELECT request_id FROM infer_requests__all
      UNION SELECT request_id FROM engine_requests__all WHERE request_id IS NOT NULL) ids
LEFT JOIN gateway_requests__all g USING (request_id)
LEFT JOIN infer_requests__all i USING (request_id)
LEFT JOIN (SELECT *, count(*) OVER (PARTITION BY request_id) AS attempts FROM engine_requests__all
           WHERE request_id IS NOT NULL QUALIFY row_number() OVER (PARTITION BY request_id ORDER BY ts_utc DESC) = 1) e
  USING (request_id)""", (*clock_columns("ts", "When the first layer saw it"), *cols("""
    request_id text: The gateway's request id: what `spyglass trace` and `timeline --request` take
    lane text: fast or normal
    session text: Session
    mode text: assembled, no_rag or passthrough
    instance text: Engine instance it went to
    client_msgs int: Messages the client sent
    sent_msgs int: Messages sent after assembly
    dropped_msgs int: client_msgs - sent_msgs: what assembly dropped
    chars int: Characters sent
    cjk float: Share of CJK characters (gateway log)
    tokens_gateway_estimate int: Counted by the gateway's estimator (an upper bound; English about 3.3x)
    tokens_precheck int: Counted by the serve's count_tokens, in the gateway's precheck
    tokens_engine int: Counted by the engine, in its log (the authority)
    tokens_engine_via_gateway int: The engine's usage as the gateway's done line reported it
    tokens_infer_store int: The engine's count as the infer store recorded it
    tokens_engine_rejected int: Counted by the engine when it refused the prompt (400 #545)
    tokens_overfit_reported int: The prompt size the gateway's overfit line reported
    tokens int: The authoritative count: the engine's, from the first layer that has it
    tokens_counted_by text: Where `tokens` came from
    estimate_ratio float: tokens_gateway_estimate / tokens
    max_tokens int: max_tokens the client asked for
    clamped_max_tokens int: max_tokens after the gateway's clamp
    status int: HTTP status (infer store, else gateway log, else the engine's)
    finish text: Finish reason (infer store, raw record, gateway log, engine log, in that order)
    finish_engine text: Finish reason in the engine's done line
    tool_calls int: Tool calls in the response
    wrote_tool_call bool: The engine logged `writing a tool call`
    content_chars int: Visible text length
    reasoning_chars int: Thinking text length (infer store)
    completion_tokens int: Completion tokens, the engine's count
    special_literals int: Special-token literals in the sent prompt (raw record)
    thinking_only bool: Reasoning but no visible text and no tool call (raw record)
    invalid_tool_json int: Tool calls with arguments that are not JSON (raw record)
    anchor_survived bool: The client's first user message survived assembly (raw record)
    offered_tools bool: The sent request offered tools (raw record)
    plan_then_stop bool: A short plan and then EOS, with tools offered and none called (raw record)
    retried bool: The gateway retried an overfit blindly
    overfits int: Overfit 400s the gateway logged
    reject_reason text: Why the gateway refused it
    ttft_ms_gateway int: Time to first token at the gateway
    dur_ms_gateway int: Duration at the gateway
    ttft_ms_engine int: Time to first token at the engine
    dur_ms_engine int: Queued to done at the engine
    prefill_ms int: The engine's prompt reuse + read time
    reused_tokens int: Prompt tokens reused from the cache
    read_tokens int: Prompt tokens read (prefilled)
    reuse_origin text: parked or checkpoint
    thinking_tokens int: Reasoning tokens used
    thinking_max int: Thinking budget
    thinking_cause text: Why thinking ended
    conv text: The engine's conversation id
    engine_attempts int: Engine tasks with this request id (a retry that was queued makes two)
    seen_by text: Layers that logged it: gateway, infer, engine
""")))

VIEWS: dict[str, View] = {v.name: v for v in (TIMELINE, ENGINE_REQUESTS, CACHE_EVENTS, PROCESS_EVENTS, DEPLOYS,
                                              STATUS_SNAPSHOTS, ALERTS, SMOKE_GATES, SPANS, GATEWAY_REQUESTS, INFER_REQUESTS,
                                              HOST_SAMPLES, REQUESTS)}


def source_kinds_sql(sources: dict[str, Any]) -> str:
    """The configured sources, and the received ones (spans, alerts, smoke), as a VALUES list of
    (source, source_kind, lane)."""
    rows = [f"({literal(name)}, {literal(o.kind)}, {literal(getattr(o, 'lane', '') or None)})"
            for name, o in sorted(sources.items())]
    rows += [f"({literal(name)}, {literal(kind)}, NULL)" for name, kind in RECEIVED.items() if name not in sources]
    return f"SELECT * FROM (VALUES {', '.join(rows)}) AS t(source, source_kind, lane)"


WINDOW = f"e.ts >= $from - {PAD} AND e.ts < $to + {PAD}"
EV = f"""SELECT e.seq, e.ts, e.source, coalesce(e.source_kind, k.source_kind) AS source_kind, e.kind, e.instance, e.host,
    e.request_id, e.fields, k.lane
  FROM events e LEFT JOIN source_kinds k ON k.source = e.source
  WHERE {WINDOW}"""
SOURCE_EV = re.compile(r"\bev_(\w+)\b")


def ev_source(source_kind: str) -> str:
    """`ev_<source kind>`: the window's events of one source kind, typed columns, with their source's lane
    (from the config) unless its events carry their own `lane` field (the gateway's, the infer store's)."""
    lane = "" if "lane" in declared_fields_of(source_kind) else ", k.lane"
    return (f"ev_{source_kind} AS (SELECT e.*, '{source_kind}' AS source_kind{lane}\n"
            f"  FROM {source_view(source_kind)} e LEFT JOIN source_kinds k ON k.source = e.source WHERE {WINDOW})")


def literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def strip_comments_and_literals(sql: str) -> str:
    """`sql` with its `--` comments removed, then its string literals emptied: names outside both
    remain. Comments go first: an apostrophe inside a comment would otherwise open a literal."""
    out, i = [], 0
    while i < len(sql):
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            i = len(sql) if end < 0 else end
        elif sql[i] == "'":
            end = i + 1
            while end < len(sql) and (sql[end] != "'" or sql.startswith("''", end)):
                end += 2 if sql.startswith("''", end) else 1
            out.append("''")
            i = end + 1
        else:
            out.append(sql[i])
            i += 1
    return "".join(out)


def needed(sql: str) -> list[str]:
    """The views `sql` names (outside comments and string literals), with the views they are built
    on (which name them as NAME__all), in definition order."""
    bare = strip_comments_and_literals(sql)
    found = {name for name in VIEWS if re.search(rf"\b{name}(__all)?\b", bare)}
    pending = list(found)
    while pending:
        for name in re.findall(r"\b(\w+)__all\b", VIEWS[pending.pop()].sql):
            if name in VIEWS and name not in found:
                found.add(name)
                pending.append(name)
    return [name for name in VIEWS if name in found]


def needed_sources(sql: str, views: list[str]) -> list[str]:
    """The source kinds whose `ev_<source kind>` the views (or `sql` itself) read."""
    text = strip_comments_and_literals(sql) + "".join(VIEWS[name].sql for name in views)
    known = set(source_kinds())
    return sorted({sk for sk in SOURCE_EV.findall(text) if sk in known})


def ctes(sql: str, sources: dict[str, Any], json_events: bool = False) -> list[str]:
    """The CTEs in front of `sql`. With `json_events` (Parquet segments of the JSON layout), each
    source kind's typed events are extracted from `events`' JSON fields instead of read from the
    store's `events_<source kind>` view."""
    views = needed(sql)
    kinds = needed_sources(sql, views)
    out = [f"source_kinds AS ({source_kinds_sql(sources)})", f"ev AS ({EV})"]
    if json_events:
        out += [f"{source_view(sk)} AS ({json_typed_select(sk, 'events', 'source_kinds')})" for sk in kinds]
    out += [ev_source(sk) for sk in kinds]
    for name in views:
        out.append(f"{name}__all AS ({VIEWS[name].sql.strip()})")
        out.append(f"{name} AS (SELECT * FROM {name}__all WHERE ts_utc >= $from AND ts_utc < $to)")
    return out


def with_views(sql: str, sources: dict[str, Any], json_events: bool = False) -> str:
    """`sql` (one SELECT, which may start with comments and its own WITH) with the views it names in front."""
    text = sql.strip().rstrip(";")
    comments = re.match(r"(?:[ \t]*--[^\n]*\n)*", text).group(0)  # type: ignore[union-attr] # * matches always
    body = text[len(comments):].lstrip()
    head = ",\n".join(ctes(body, sources, json_events))
    own = re.match(r"(?is)^with\s+(?!recursive\b)", body)
    return f"{comments}WITH {head},\n{body[own.end():]}" if own else f"{comments}WITH {head}\n{body}"
