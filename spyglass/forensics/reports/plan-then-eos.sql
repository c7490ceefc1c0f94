-- Plan-then-EOS: responses that offered tools, called none, and stopped after a short plan; with the raw-record check.
-- Reproduces incidents 4 and 5 (seed chapters 18.5 and 18.6): 20261019-000107-5c6c32 of session bd7e62ed
-- (prompt 87,890 after 86,472: it grew, so not a client retry; completion 740 far below max_tokens, content
-- 67 characters, finish=stop, 0 tool calls: not truncation), and session 848a12ed's "Let me write 04 and 05 now"
-- (thinking 3194 of max 32000, done (stop), no `writing a tool call`). One row per such response.
-- Parameters: $from, $to.
WITH turns AS (
  SELECT *, lag(tokens) OVER w AS previous_tokens, lag(tool_calls) OVER w AS previous_tool_calls,
    lag(request_id) OVER w AS previous_request, count(*) OVER (PARTITION BY session) AS session_requests,
    count(*) FILTER (WHERE plan_then_stop) OVER (PARTITION BY session) AS session_plan_stops
  FROM requests WHERE session IS NOT NULL
  WINDOW w AS (PARTITION BY session ORDER BY ts_utc)
)
SELECT session, request_id, ts_utc, ts_local, session_requests, session_plan_stops, client_msgs, sent_msgs,
  anchor_survived, tokens, previous_tokens, tokens > previous_tokens AS prompt_grew, completion_tokens, max_tokens,
  content_chars, tool_calls, finish, thinking_tokens, thinking_max, thinking_cause, wrote_tool_call,
  previous_request, previous_tool_calls
FROM turns
WHERE plan_then_stop
ORDER BY session, ts_utc
