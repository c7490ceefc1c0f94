WITH objectives AS (SELECT * FROM (VALUES {objectives}) AS t(lane, objective_seconds, budget)), ttft AS (
  SELECT r.instance, r.lane, r.ts_utc, r.request_id, r.ttft_ms / 1000 AS ttft_seconds, o.objective_seconds, o.budget
  FROM engine_requests r JOIN objectives o USING (lane) WHERE r.ttft_ms IS NOT NULL
)
SELECT instance, lane, min(ts_utc) FILTER (WHERE ttft_seconds > objective_seconds) AS start_utc,
  max(ts_utc) FILTER (WHERE ttft_seconds > objective_seconds) AS end_utc, count(*) AS requests,
  count(*) FILTER (WHERE ttft_seconds > objective_seconds) AS over_objective,
  round(quantile_cont(ttft_seconds, 0.95), 1) AS p95_ttft_seconds, round(max(ttft_seconds), 1) AS slowest_ttft_seconds,
  any_value(objective_seconds) AS objective_seconds, arg_max(request_id, ttft_seconds) AS trace_request_id
FROM ttft GROUP BY instance, lane
HAVING quantile_cont(ttft_seconds, 0.95) > any_value(objective_seconds)
  OR count(*) FILTER (WHERE ttft_seconds > objective_seconds) > {fast_burn} * any_value(budget) * count(*)
ORDER BY instance, lane
