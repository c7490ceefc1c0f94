-- Every response that ended the turn after a short plan (tools offered, none called, finish=stop), per lane:
-- one is enough to diagnose (incident 4 was a single request); the pager waits for {least} in an hour.
-- The completion range against max_tokens rules out truncation, as the seeds did (740 of 32000; 3,240 / 267).
WITH stops AS (
  SELECT lane, session, request_id, ts_utc, content_chars, completion_tokens, max_tokens,
    count(*) OVER (PARTITION BY lane ORDER BY ts_utc RANGE BETWEEN {hourly} PRECEDING AND CURRENT ROW)
      AS in_the_hour
  FROM requests WHERE plan_then_stop
)
SELECT NULL AS instance, lane, min(ts_utc) AS start_utc, max(ts_utc) AS end_utc, count(*) AS plan_then_stop,
  count(DISTINCT session) AS sessions, max(in_the_hour) AS most_in_an_hour,
  arg_min(request_id, ts_utc) AS trace_request_id, arg_min(content_chars, ts_utc) AS content_chars,
  min(completion_tokens) AS least_completion, max(completion_tokens) AS most_completion,
  max(max_tokens) AS max_tokens
FROM stops GROUP BY lane
ORDER BY lane
