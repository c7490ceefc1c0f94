WITH engine AS (
  SELECT instance, ts_utc FROM timeline__all WHERE source_kind = 'engine_log' AND ts_utc < $to
), waiting AS (
  SELECT instance, ts_utc, prefill_queue, slots_busy FROM status_snapshots
  WHERE up AND state = 'ready' AND (prefill_queue > 0 OR slots_busy > 0)
), hung AS (
  SELECT w.instance, w.ts_utc, w.prefill_queue, w.slots_busy, e.ts_utc AS last_line_utc
  FROM waiting w ASOF JOIN engine e ON e.instance = w.instance AND w.ts_utc >= e.ts_utc
  WHERE w.ts_utc - e.ts_utc > INTERVAL {minutes} MINUTE
)
SELECT instance, NULL AS lane, min(last_line_utc) AS start_utc, max(ts_utc) AS end_utc,
  round(epoch(max(ts_utc) - min(last_line_utc)) / 60, 1) AS silent_minutes,
  coalesce(max(prefill_queue), 0) AS queued, coalesce(max(slots_busy), 0) AS busy
FROM hung GROUP BY instance ORDER BY instance
