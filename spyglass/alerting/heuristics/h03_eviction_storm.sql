-- Per eviction: the rate over the window before it ({recent}) and over the hour before that (as the rule computes
-- them; the views read an hour beyond the window, so its first minutes see a shorter baseline), and the mean
-- parked snapshot's share of the budget then. The peak is the most evictions in one real minute; the largest
-- snapshot is the largest parked in the window (incident 2: 4,716,362,992 bytes against 8 GiB); the largest evicted
-- entry is what llama-server names (it logs an eviction's size, never what stays parked).
WITH cache AS (
  SELECT instance, lane, ts_utc, event, snapshot_bytes, used_bytes, parked, budget_bytes, slots
  FROM cache_events__all WHERE ts_utc < $to
), evictions AS (  -- each eviction, with the evictions of its instance at or before its time (`ts`: the time as a
  -- plain TIMESTAMP, whose arithmetic needs no time zone)
  SELECT instance, ts_utc, make_timestamp(epoch_us(ts_utc)) AS ts, count(*) OVER (PARTITION BY instance ORDER BY ts_utc) AS upto
  FROM cache WHERE event = 'evict'
), rate AS (  -- each RANGE frame's count as the difference of two of those, the earlier found by an ASOF join: DuckDB
  -- evaluates a RANGE frame row by row (one ending before the current row slowest of all), most of a day's diagnose
  SELECT e.instance, e.ts_utc,
    (e.upto - coalesce(recent.upto, 0)) / {recent_minutes} AS per_minute,
    (coalesce(baseline_to.upto, 0) - coalesce(baseline_from.upto, 0)) / {hourly_minutes} AS baseline,
    e.upto - coalesce(peak.upto, 0) AS in_a_minute
  FROM evictions e
  ASOF LEFT JOIN evictions recent ON recent.instance IS NOT DISTINCT FROM e.instance AND recent.ts < e.ts - {recent}
  ASOF LEFT JOIN evictions baseline_from
    ON baseline_from.instance IS NOT DISTINCT FROM e.instance AND baseline_from.ts < e.ts - {baseline_from}
  ASOF LEFT JOIN evictions baseline_to
    ON baseline_to.instance IS NOT DISTINCT FROM e.instance AND baseline_to.ts <= e.ts - {baseline_to}
  ASOF LEFT JOIN evictions peak ON peak.instance IS NOT DISTINCT FROM e.instance AND peak.ts < e.ts - {peak}
), share AS (
  SELECT instance, ts_utc, used_bytes / greatest(parked, 1) / budget_bytes AS snapshot_share
  FROM cache WHERE budget_bytes > 0 AND used_bytes IS NOT NULL
), storm AS (
  SELECT r.instance, min(r.ts_utc) AS start_utc, max(r.ts_utc) AS end_utc, max(r.in_a_minute) AS peak
  FROM rate r ASOF LEFT JOIN share s ON s.instance = r.instance AND r.ts_utc >= s.ts_utc
  WHERE r.ts_utc >= $from AND r.per_minute > {floor}
    AND (r.per_minute > {spike} * r.baseline OR s.snapshot_share > {share})
  GROUP BY r.instance
), in_window AS (
  SELECT instance, any_value(lane) AS lane, count(*) FILTER (WHERE event = 'evict') AS evictions,
    max(snapshot_bytes) FILTER (WHERE event = 'park') AS largest_snapshot_bytes,
    max(snapshot_bytes) FILTER (WHERE event = 'evict') AS largest_evicted_bytes, max(budget_bytes) AS budget_bytes,
    max(slots) AS stats_slots
  FROM cache WHERE ts_utc >= $from GROUP BY instance
), banner AS (
  SELECT instance, max(slots) AS slots FROM deploys__all WHERE component = 'engine' GROUP BY instance
)
SELECT instance, w.lane, s.start_utc, s.end_utc, w.evictions, s.peak AS evictions_per_minute_peak,
  w.largest_snapshot_bytes, w.largest_evicted_bytes, w.budget_bytes, coalesce(b.slots, w.stats_slots) AS slots,
  round(w.largest_snapshot_bytes / w.budget_bytes, 3) AS snapshot_share_of_budget,
  round(w.largest_snapshot_bytes / (w.budget_bytes / coalesce(b.slots, w.stats_slots)), 1) AS snapshot_in_slot_shares
FROM storm s JOIN in_window w USING (instance) LEFT JOIN banner b USING (instance)
ORDER BY instance
