-- Per instance, the busiest {window} of the window by requests ended badly: an error (by reason) or a cancel
-- by the client, over all its requests then; a finding where they are at least {least} and over {share} of them.
-- An engine's refusal before queueing (Strata's 400 #545, no request id) is the gateway's estimate at fault: H10, H11.
WITH ended AS (
  SELECT instance, ts_utc, request_id, outcome, error_reason FROM engine_requests
  WHERE outcome <> 'open' AND rejected_status IS NULL
), counted AS (
  SELECT *, count(*) OVER w AS requests,
    count(*) FILTER (WHERE outcome IN ('error', 'cancelled')) OVER w AS failed
  FROM ended WINDOW w AS (PARTITION BY instance ORDER BY ts_utc RANGE BETWEEN {window} PRECEDING AND CURRENT ROW)
), worst AS (
  SELECT instance, arg_max(ts_utc, failed) AS end_utc FROM counted
  WHERE failed >= {least} AND failed > {share} * requests GROUP BY instance
), found AS (
  SELECT e.*, w.end_utc FROM worst w JOIN ended e ON e.instance = w.instance
    AND e.ts_utc BETWEEN w.end_utc - {window} AND w.end_utc
)
SELECT instance, NULL AS lane, min(ts_utc) AS start_utc, any_value(end_utc) AS end_utc, count(*) AS requests,
  count(*) FILTER (WHERE outcome IN ('error', 'cancelled')) AS failed,
  count(*) FILTER (WHERE outcome = 'error') AS errors, count(*) FILTER (WHERE outcome = 'cancelled') AS cancelled,
  round(count(*) FILTER (WHERE outcome IN ('error', 'cancelled')) / count(*), 3) AS share,
  coalesce(string_agg(DISTINCT error_reason, ', ' ORDER BY error_reason), 'no reason logged') AS reasons,
  round(epoch(any_value(end_utc) - min(ts_utc)) / 60, 1) AS window_minutes,
  arg_min(request_id, ts_utc) FILTER (WHERE outcome IN ('error', 'cancelled')) AS trace_request_id
FROM found GROUP BY instance ORDER BY instance
