-- Each poll where the serve said ready with work queued or slots busy, against the engine's last sign
-- of progress before it: a done or [stats] line. A hung engine's HTTP thread may go on logging queued
-- requests; those are not life. The oldest request queued since is the one to trace.
WITH progress AS (
  SELECT instance, ts_utc FROM timeline__all
  WHERE source_kind = 'engine_log' AND kind IN ('done', 'stats') AND ts_utc < $to
), waiting AS (
  SELECT instance, ts_utc, prefill_queue, slots_busy FROM status_snapshots
  WHERE up AND state = 'ready' AND (prefill_queue > 0 OR slots_busy > 0)
), hung AS (
  SELECT w.instance, w.ts_utc, w.prefill_queue, w.slots_busy, p.ts_utc AS last_progress_utc
  FROM waiting w ASOF JOIN progress p ON p.instance = w.instance AND w.ts_utc >= p.ts_utc
  WHERE w.ts_utc - p.ts_utc > INTERVAL {minutes} MINUTE
), stalls AS (
  SELECT instance, min(last_progress_utc) AS start_utc, max(ts_utc) AS end_utc,
    coalesce(max(prefill_queue), 0) AS queued, coalesce(max(slots_busy), 0) AS busy
  FROM hung GROUP BY instance
), resumed AS (  -- the next sign of progress after the stall, or the window's end
  SELECT s.instance, coalesce(min(p.ts_utc), $to) AS resumed_utc
  FROM stalls s LEFT JOIN progress p ON p.instance = s.instance AND p.ts_utc > s.start_utc
  GROUP BY s.instance
), queued_since AS (
  SELECT s.instance, count(*) AS queued_lines, arg_min(t.request_id, t.ts_utc) AS trace_request_id
  FROM stalls s JOIN resumed r USING (instance) JOIN timeline__all t ON t.instance = s.instance
    AND t.source_kind = 'engine_log' AND t.kind = 'queued' AND t.ts_utc > s.start_utc AND t.ts_utc < r.resumed_utc
  GROUP BY s.instance
)
SELECT s.instance, NULL AS lane, s.start_utc, s.end_utc,
  round(epoch(s.end_utc - s.start_utc) / 60, 1) AS silent_minutes, s.queued, s.busy,
  coalesce(q.queued_lines, 0) AS queued_lines, q.trace_request_id
FROM stalls s LEFT JOIN queued_since q USING (instance) ORDER BY s.instance
