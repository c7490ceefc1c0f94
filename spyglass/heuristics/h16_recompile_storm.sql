WITH rebuilds AS (
  SELECT instance, ts_utc, count(*) OVER (PARTITION BY instance ORDER BY ts_utc
                                        RANGE BETWEEN INTERVAL 10 MINUTE PRECEDING AND CURRENT ROW) / 10 AS per_minute
  FROM timeline WHERE kind = 'graph_rebuild' AND source_kind = 'engine_log'
)
SELECT instance, NULL AS lane, min(ts_utc) FILTER (WHERE per_minute > {per_minute}) AS start_utc,
  max(ts_utc) FILTER (WHERE per_minute > {per_minute}) AS end_utc, count(*) AS rebuilds,
  round(max(per_minute), 1) AS rebuilds_per_minute_peak
FROM rebuilds GROUP BY instance HAVING max(per_minute) > {per_minute}
ORDER BY instance
