"""What happened to a request, layer by layer: the engine's task, the gateway's lines, the infer store's row and
raw record, their join by request id, and the trace spans. The three layers' views read the per-request rows
the store maintains at ingest (`rows_<table>`: exporters/request_rows.py), not the events."""

from __future__ import annotations

from spyglass.forensics.views.schema import SPAN, TS, View, clock_columns, clocks, cols

ENGINE_REQUESTS = View(
    "engine_requests",
    "One row per engine task, from the engine log: queued, prompt reused/read,"
    " thinking, tool call, done, or the engine's own 400.",
    f"""
SELECT {clocks("t.ts")}, t.source, t.instance, k.lane, t.request_id, t.task, t.conv, t.prefill_depth,
  t.prompt_tokens, t.reused_tokens, t.read_tokens, t.prefill_ms, t.reuse_origin,
  t.thinking_tokens, t.thinking_max, t.thinking_cause, t.wrote_tool_call, t.finish, t.completion_tokens,
  t.ttft_ms, t.decode_tps, {clocks("t.done_ts", "done")},
  round(epoch(t.done_ts - t.ts) * 1000)::BIGINT AS duration_ms,
  coalesce(t.outcome, CASE WHEN t.rejected_status IS NOT NULL OR t.finish = 'error' THEN 'error'
    WHEN t.finish = 'abort' THEN 'cancelled' WHEN t.done_ts IS NOT NULL THEN 'done' ELSE 'open' END) AS outcome,
  coalesce(t.error_reason, CASE WHEN t.rejected_window IS NOT NULL THEN 'context_exceeded'
    WHEN t.rejected_status IS NOT NULL THEN 'invalid_request' END) AS error_reason,
  coalesce(t.error_status, t.rejected_status) AS error_status, t.error_message,
  t.queue_ms, t.queue_basis, t.client_wait_ms,
  t.rejected_status, t.rejected_code::VARCHAR AS rejected_code, t.rejected_prompt, t.rejected_window
FROM rows_requests_engine t LEFT JOIN source_kinds k ON k.source = t.source""",
    (
        *TS,
        *cols("""
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
    ttft_ms int: Time to first token, the engine's own figure: from its slot (its prefill), not the client's wait
    decode_tps float: Decode rate, the engine's own figure
"""),
        *clock_columns("done", "When the engine finished it"),
        *cols("""
    duration_ms int: From queued to done, on the engine's clock
    outcome text: How it ended: done, truncated (the context ran out), cancelled (the client went away), error; open: no end logged yet
    error_reason text: An error's reason: context_exceeded, invalid_request, internal, other
    error_status int: The HTTP status the engine answered the error with, where its message fixes it
    error_message text: The engine's error message (llama-server's send_error)
    queue_ms int: Its wait for a slot (llama-server: arrival to slot; basis in queue_basis)
    queue_basis text: How queue_ms is known: arrival (the log's arrival line, -v), slots_full (bounded by the run of full slots it waited in), none (a slot was free)
    client_wait_ms int: The client's wait for its first token: queue_ms plus the engine's prefill (ttft_ms)
    rejected_status int: Status of the engine's refusal (400), if refused
    rejected_code text: The refusal's code (545: prompt too long)
    rejected_prompt int: Prompt tokens the engine counted when refusing it
    rejected_window int: The context window it refused against
"""),
    ),
)

GATEWAY_REQUESTS = View(
    "gateway_requests",
    "One row per request id from the gateway log: what the client sent, what"
    " assembly kept, the gateway's estimate, the precheck, the clamp, and how it ended.",
    f"""
SELECT {clocks("ts")}, request_id, instance, session, lane, mode, client_msgs, sent_msgs, chars, cjk, est_tokens,
  max_tokens, precheck_tokens, precheck_window, precheck_room, clamped_max_tokens, thinking_budget,
  coalesce(done_status, overfit_status, reject_status) AS status, engine_prompt, completion_tokens, finish, tool_calls,
  content_chars, ttft_ms, dur_ms, overfits, overfit_prompt, overfit_max, overfit_upstream,
  TRY_CAST(regexp_extract(overfit_upstream, ': (\\d+) > (\\d+)', 1) AS BIGINT) AS upstream_prompt,
  TRY_CAST(regexp_extract(overfit_upstream, ': (\\d+) > (\\d+)', 2) AS BIGINT) AS upstream_window,
  retried, reject_reason
FROM rows_requests_gateway""",
    (
        *TS,
        *cols("""
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
"""),
    ),
)

INFER_REQUESTS = View(
    "infer_requests",
    "One row per request id from the infer store: the infer.db row (outcome, engine"
    " counts) and the facts of its raw record in infer-segs (special-token literals, thinking-only,"
    " broken tool JSON, task anchor, plan-then-stop), never its text.",
    f"""
SELECT {clocks("ts")}, request_id, session, lane, upstream, mode, client_msgs, sent_msgs, chars, est_tokens,
  prompt_tokens, completion_tokens, max_tokens, status, finish, tool_calls, content_chars, reasoning_chars, ttft_ms,
  dur_ms, segment, has_body, special_literals, thinking_only, invalid_tool_json, anchor_survived, offered_tools,
  plan_then_stop, body_finish, body_tool_calls, body_content_chars
FROM (SELECT * REPLACE (coalesce(seg, segment) AS segment) FROM rows_requests_infer)""",
    (
        *clock_columns("ts", "Arrival (the row's ts, the store's zone in the file)"),
        *cols("""
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
"""),
    ),
)

SPANS = View(
    "spans",
    "Trace spans pushed to the agent's /v1/traces (gateway and serve), one row a span.",
    f"""
SELECT {clocks("ts")}, request_id, {SPAN("trace_id")} AS trace_id, {SPAN("span_id")} AS span_id,
  {SPAN("parent_span_id")} AS parent_span_id, {SPAN("name")} AS name, {SPAN("service")} AS service, {SPAN("kind")} AS span_kind,
  {clocks(f"to_timestamp({SPAN('end')})", "end")},
  round(({SPAN("end")} - {SPAN("start")}) * 1000, 3) AS duration_ms,
  {SPAN("status")} AS status, {SPAN("status_message")} AS status_message, {SPAN("attributes")} AS attributes
FROM ev_otlp WHERE kind = 'span'""",
    (
        *clock_columns("ts", "When the span started"),
        *cols("""
    request_id text: spyglass.request.id of the span
    trace_id text: Trace id, hex
    span_id text: Span id, hex
    parent_span_id text: Parent span id, hex; NULL for a root
    name text: Span name
    service text: service.name of the process that made it
    span_kind text: SERVER, CLIENT, INTERNAL, ...
"""),
        *clock_columns("end", "When the span ended"),
        *cols("""
    duration_ms float: end - start
    status text: unset, ok or error
    status_message text: The error text of an error span
    attributes json: The span's attributes (no prompt text is ever one)
"""),
    ),
)

REQUESTS = View(
    "requests",
    "One row per request id, joining the gateway log, the infer store and the engine log:"
    " every layer's token count named by who counted it, status and finish, the raw record's facts,"
    " and TTFT and duration at the gateway and at the engine.",
    f"""
SELECT {clocks("least(g.ts_utc, i.ts_utc, e.ts_utc)")}, ids.request_id,
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
  coalesce(i.status, g.status, e.error_status, CASE WHEN e.outcome IN ('done', 'truncated') THEN 200 END) AS status,
  e.outcome, e.error_reason,
  coalesce(i.finish, i.body_finish, g.finish, e.finish) AS finish, e.finish AS finish_engine,
  coalesce(i.tool_calls, i.body_tool_calls, g.tool_calls) AS tool_calls, e.wrote_tool_call,
  coalesce(i.content_chars, i.body_content_chars, g.content_chars) AS content_chars, i.reasoning_chars,
  coalesce(e.completion_tokens, g.completion_tokens, i.completion_tokens) AS completion_tokens,
  i.special_literals, i.thinking_only, i.invalid_tool_json, i.anchor_survived, i.offered_tools, i.plan_then_stop,
  g.retried, g.overfits, g.reject_reason,
  coalesce(g.ttft_ms, i.ttft_ms) AS ttft_ms_gateway, coalesce(g.dur_ms, i.dur_ms) AS dur_ms_gateway,
  e.ttft_ms AS ttft_ms_engine, e.queue_ms AS queue_ms_engine, e.client_wait_ms AS client_wait_ms_engine,
  e.duration_ms AS dur_ms_engine, e.prefill_ms, e.reused_tokens, e.read_tokens,
  e.reuse_origin, e.thinking_tokens, e.thinking_max, e.thinking_cause, e.conv, coalesce(e.attempts, 0) AS engine_attempts,
  concat_ws(',', CASE WHEN g.request_id IS NOT NULL THEN 'gateway' END, CASE WHEN i.request_id IS NOT NULL THEN 'infer' END,
            CASE WHEN e.request_id IS NOT NULL THEN 'engine' END) AS seen_by
FROM (SELECT request_id FROM gateway_requests__all UNION SELECT request_id FROM infer_requests__all
      UNION SELECT request_id FROM engine_requests__all WHERE request_id IS NOT NULL) ids
LEFT JOIN gateway_requests__all g USING (request_id)
LEFT JOIN infer_requests__all i USING (request_id)
LEFT JOIN (SELECT *, count(*) OVER (PARTITION BY request_id) AS attempts FROM engine_requests__all
           WHERE request_id IS NOT NULL QUALIFY row_number() OVER (PARTITION BY request_id ORDER BY ts_utc DESC) = 1) e
  USING (request_id)""",
    (
        *clock_columns("ts", "When the first layer saw it"),
        *cols("""
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
    outcome text: How the engine's task ended: done, truncated, cancelled, error, open (no end logged yet)
    error_reason text: An error's reason at the engine: context_exceeded, invalid_request, internal, other
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
    ttft_ms_engine int: Time to first token at the engine, from its slot: the engine's prefill, not the client's wait
    queue_ms_engine int: Its wait for a slot at the engine (llama-server)
    client_wait_ms_engine int: The client's wait for its first token as the engine log gives it: queue plus prefill
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
"""),
    ),
)
