WITH counted AS (
  SELECT lane, ts_utc, chars, tokens_gateway_estimate AS estimated,
    coalesce(tokens_engine, tokens_engine_via_gateway, tokens_infer_store) AS engine
  FROM requests WHERE tokens_gateway_estimate IS NOT NULL
)
SELECT NULL AS instance, lane, min(ts_utc) AS start_utc, max(ts_utc) AS end_utc, count(*) AS requests,
  sum(chars) AS characters, sum(engine) AS engine_tokens, sum(estimated) AS estimated_tokens,
  round(sum(estimated) / sum(engine), 3) AS ratio
FROM counted WHERE engine > 0 GROUP BY lane
HAVING sum(estimated) / sum(engine) > {high} OR sum(estimated) / sum(engine) < {low}
ORDER BY lane
