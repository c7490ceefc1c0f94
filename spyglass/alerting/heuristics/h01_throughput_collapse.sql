-- Per engine request: the mean decode rate over the window before it ({recent}) against the same instance's mean of
-- the hour before an hour ago (as the rule's recent mean against its 1h-offset baseline). A finding where
-- the current mean fell under the drop ratio of the baseline (incident 1: 76.8 -> 9.3 tok/s).
WITH rates AS (
  SELECT instance, lane, ts_utc, request_id, decode_tps,
    avg(decode_tps) OVER (PARTITION BY instance ORDER BY ts_utc
                          RANGE BETWEEN {recent} PRECEDING AND CURRENT ROW) AS current_tps,
    avg(decode_tps) OVER (PARTITION BY instance ORDER BY ts_utc
                          RANGE BETWEEN {baseline_from} PRECEDING AND {baseline_to} PRECEDING) AS baseline_tps
  FROM engine_requests__all WHERE decode_tps IS NOT NULL AND ts_utc < $to
), collapsed AS (
  SELECT * FROM rates WHERE ts_utc >= $from AND current_tps < {drop} * baseline_tps
)
SELECT instance, any_value(lane) AS lane, min(ts_utc) AS start_utc, max(ts_utc) AS end_utc, count(*) AS requests,
  round(arg_min(current_tps, current_tps / baseline_tps), 1) AS decode_tps,
  round(arg_min(baseline_tps, current_tps / baseline_tps), 1) AS baseline_decode_tps,
  arg_min(request_id, decode_tps) AS trace_request_id
FROM collapsed GROUP BY instance ORDER BY instance
