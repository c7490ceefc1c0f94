-- Per engine request: the mean decode rate over the window before it ({recent}) against the same instance's mean of
-- the hour before an hour ago (as the rule's recent mean against its 1h-offset baseline). A finding where
-- the current mean fell under the drop ratio of the baseline (incident 1: 76.8 -> 9.3 tok/s).
-- The baseline is a RANGE frame that ends before the current row, which DuckDB evaluates row by row (most of a
-- day's diagnose). So its bounds are found by two ASOF joins instead (named baseline_from and baseline_to, as
-- tests/test_probe_windows.py reads them), as positions: `n`, the request's place in its instance's order, and
-- `upto`, the requests at or before its time; the mean is then a ROWS frame over exactly those rows, the same rows
-- in the same order (and the same sum). `ts` is the time as a plain TIMESTAMP: its arithmetic needs no time zone.
WITH decode AS (
  SELECT instance, lane, ts_utc, request_id, decode_tps, row_number() OVER w AS n, count(*) OVER w AS upto,
    make_timestamp(epoch_us(ts_utc)) AS ts
  FROM engine_requests__all WHERE decode_tps IS NOT NULL AND ts_utc < $to
  WINDOW w AS (PARTITION BY instance ORDER BY ts_utc)
), keys AS (
  SELECT instance, n, ts, upto FROM decode
), bounds AS (
  SELECT k.instance, k.n, coalesce(baseline_from.upto, 0) AS before_from, coalesce(baseline_to.upto, 0) AS upto_to
  FROM keys k
  ASOF LEFT JOIN keys baseline_from
    ON baseline_from.instance IS NOT DISTINCT FROM k.instance AND baseline_from.ts < k.ts - {baseline_from}
  ASOF LEFT JOIN keys baseline_to
    ON baseline_to.instance IS NOT DISTINCT FROM k.instance AND baseline_to.ts <= k.ts - {baseline_to}
), rates AS (
  SELECT d.instance, lane, ts_utc, request_id, decode_tps,
    avg(decode_tps) OVER (PARTITION BY d.instance ORDER BY ts_utc
                          RANGE BETWEEN {recent} PRECEDING AND CURRENT ROW) AS current_tps,
    avg(decode_tps) OVER (PARTITION BY d.instance ORDER BY d.n
                          ROWS BETWEEN d.n - before_from - 1 PRECEDING AND d.n - upto_to PRECEDING) AS baseline_tps
  FROM decode d JOIN bounds b ON b.instance IS NOT DISTINCT FROM d.instance AND b.n = d.n
), collapsed AS (
  SELECT * FROM rates WHERE ts_utc >= $from AND current_tps < {drop} * baseline_tps
)
SELECT instance, any_value(lane) AS lane, min(ts_utc) AS start_utc, max(ts_utc) AS end_utc, count(*) AS requests,
  round(arg_min(current_tps, current_tps / baseline_tps), 1) AS decode_tps,
  round(arg_min(baseline_tps, current_tps / baseline_tps), 1) AS baseline_decode_tps,
  arg_min(request_id, decode_tps) AS trace_request_id
FROM collapsed GROUP BY instance ORDER BY instance
