-- Each engine start that served requests, against the last start before it that did (its steady state, the
-- seed's baseline: deploys that never got ready served nothing and are skipped). A regression when the new
-- start's median TTFT is over {factor} times the steady state's, on at least {least} requests each.
WITH starts AS (
  SELECT instance, ts_utc FROM deploys__all WHERE component = 'engine'
), served AS (
  SELECT r.instance, any_value(r.lane) AS lane, s.ts_utc AS started_utc, count(*) AS requests,
    min(r.ts_utc) AS first_utc, max(r.ts_utc) AS last_utc,
    quantile_cont(r.ttft_ms, 0.5) AS p50_ms, quantile_cont(r.ttft_ms, 0.99) AS p99_ms,
    arg_max(r.request_id, r.ttft_ms) AS slowest_request_id
  FROM engine_requests r ASOF JOIN starts s ON s.instance = r.instance AND r.ts_utc >= s.ts_utc
  WHERE r.ttft_ms IS NOT NULL GROUP BY r.instance, s.ts_utc HAVING count(*) >= {least}
), paired AS (
  SELECT *, lag(p50_ms) OVER w AS before_p50_ms, lag(p99_ms) OVER w AS before_p99_ms,
    lag(requests) OVER w AS before_requests, lag(started_utc) OVER w AS before_started_utc
  FROM served WINDOW w AS (PARTITION BY instance ORDER BY started_utc)
)
SELECT instance, lane, first_utc AS start_utc, last_utc AS end_utc, started_utc, before_started_utc,
  round(before_p50_ms, 1) AS before_p50_ms, round(p50_ms, 1) AS after_p50_ms,
  round(before_p99_ms, 1) AS before_p99_ms, round(p99_ms, 1) AS after_p99_ms, before_requests,
  requests AS after_requests, round(p50_ms / before_p50_ms, 1) AS ratio, slowest_request_id AS trace_request_id
FROM paired WHERE before_p50_ms > 0 AND p50_ms > {factor} * before_p50_ms
ORDER BY instance, started_utc
