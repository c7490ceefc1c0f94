-- Graph rebuilds a minute over 10 minutes (the rule's rate) above the threshold; the peak is the most in one real
-- minute, not a 10-minute count divided by 10.
WITH rebuilds AS (
  SELECT instance, ts_utc,
    count(*) OVER (PARTITION BY instance ORDER BY ts_utc
                   RANGE BETWEEN INTERVAL 10 MINUTE PRECEDING AND CURRENT ROW) / 10 AS per_minute,
    count(*) OVER (PARTITION BY instance ORDER BY ts_utc
                   RANGE BETWEEN INTERVAL 1 MINUTE PRECEDING AND CURRENT ROW) AS in_a_minute
  FROM timeline WHERE kind = 'graph_rebuild' AND source_kind = 'engine_log'
)
SELECT instance, NULL AS lane, min(ts_utc) FILTER (WHERE per_minute > {per_minute}) AS start_utc,
  max(ts_utc) FILTER (WHERE per_minute > {per_minute}) AS end_utc, count(*) AS rebuilds,
  max(in_a_minute) AS rebuilds_per_minute_peak
FROM rebuilds GROUP BY instance HAVING max(per_minute) > {per_minute}
ORDER BY instance
