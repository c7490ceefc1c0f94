-- Either alert's condition, judged over the window: p95 above the objective (the spike), or the pages' burn:
-- the share of late first tokens over a trailing long window and its short window both above the factor
-- times the budget ({fast_long} and {fast_short} over {fast_burn}x, {slow_long} and {slow_short} over {slow_burn}x), at
-- any request of the window.
-- A storm of one hour in a window of four is a page even though the window's own share stays small.
WITH objectives AS (SELECT * FROM (VALUES {objectives}) AS t(lane, objective_seconds, budget)), ttft AS (
  SELECT r.instance, r.lane, r.ts_utc, r.request_id, r.ttft_ms / 1000 AS ttft_seconds, o.objective_seconds, o.budget,
    (r.ttft_ms / 1000 > o.objective_seconds)::INT AS late
  FROM engine_requests r JOIN objectives o USING (lane) WHERE r.ttft_ms IS NOT NULL
), burn AS (
  SELECT *,
    avg(late) OVER (w RANGE BETWEEN {fast_long} PRECEDING AND CURRENT ROW) AS late_fast_long,
    avg(late) OVER (w RANGE BETWEEN {fast_short} PRECEDING AND CURRENT ROW) AS late_fast_short,
    avg(late) OVER (w RANGE BETWEEN {slow_long} PRECEDING AND CURRENT ROW) AS late_slow_long,
    avg(late) OVER (w RANGE BETWEEN {slow_short} PRECEDING AND CURRENT ROW) AS late_slow_short
  FROM ttft WINDOW w AS (PARTITION BY instance, lane ORDER BY ts_utc)
), judged AS (
  SELECT *, (late_fast_long > {fast_burn} * budget AND late_fast_short > {fast_burn} * budget)
         OR (late_slow_long > {slow_burn} * budget AND late_slow_short > {slow_burn} * budget) AS burning
  FROM burn
)
SELECT instance, lane, min(ts_utc) FILTER (WHERE late = 1) AS start_utc,
  max(ts_utc) FILTER (WHERE late = 1) AS end_utc, count(*) AS requests,
  count(*) FILTER (WHERE late = 1) AS over_objective,
  round(quantile_cont(ttft_seconds, 0.95), 1) AS p95_ttft_seconds, round(max(ttft_seconds), 1) AS slowest_ttft_seconds,
  any_value(objective_seconds) AS objective_seconds, arg_max(request_id, ttft_seconds) AS trace_request_id,
  round(100 * max(late_fast_long), 1) AS worst_hour_late_percent
FROM judged GROUP BY instance, lane
HAVING quantile_cont(ttft_seconds, 0.95) > any_value(objective_seconds) OR bool_or(burning)
ORDER BY instance, lane
