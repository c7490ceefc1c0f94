-- Graph rebuilds a minute over the rule's window ({recent}) above the threshold; the peak is the most in one real
-- minute, not that count divided by {recent_minutes}.
WITH rebuilds AS (
  SELECT instance, ts_utc,
    count(*) OVER (PARTITION BY instance ORDER BY ts_utc
                   RANGE BETWEEN {recent} PRECEDING AND CURRENT ROW) / {recent_minutes} AS per_minute,
    count(*) OVER (PARTITION BY instance ORDER BY ts_utc
                   RANGE BETWEEN {peak} PRECEDING AND CURRENT ROW) AS in_a_minute
  FROM timeline WHERE kind = 'graph_rebuild' AND source_kind = 'engine_log'
)
SELECT instance, NULL AS lane, min(ts_utc) FILTER (WHERE per_minute > {per_minute}) AS start_utc,
  max(ts_utc) FILTER (WHERE per_minute > {per_minute}) AS end_utc, count(*) AS rebuilds,
  max(in_a_minute) AS rebuilds_per_minute_peak
FROM rebuilds GROUP BY instance HAVING max(per_minute) > {per_minute}
ORDER BY instance
