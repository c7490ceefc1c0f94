-- Per lane, the gateway's estimate against the engine's count of the same prompts, and the worst single
-- request (the largest gap in tokens: the one that overflows a window), found when the lane is out of bounds
-- or one request is, by a long prompt's worth of tokens (a finding the pager rightly ignores), as incident 6
-- measured it
-- (1,075,447 characters, 516,561 estimated, 154,796 counted: 3.34x).
WITH counted AS (
  SELECT request_id, lane, ts_utc, chars, tokens_gateway_estimate AS estimated,
    coalesce(tokens_engine, tokens_engine_via_gateway, tokens_infer_store) AS engine
  FROM requests WHERE tokens_gateway_estimate IS NOT NULL
), worst AS (
  SELECT lane, arg_max(request_id, abs(estimated - engine)) AS trace_request_id,
    arg_max(chars, abs(estimated - engine)) AS worst_characters,
    arg_max(engine, abs(estimated - engine)) AS worst_engine_tokens,
    arg_max(estimated, abs(estimated - engine)) AS worst_estimated_tokens
  FROM counted WHERE engine > 0 GROUP BY lane
)
SELECT NULL AS instance, c.lane, min(ts_utc) AS start_utc, max(ts_utc) AS end_utc, count(*) AS requests,
  sum(chars) AS characters, sum(engine) AS engine_tokens, sum(estimated) AS estimated_tokens,
  round(sum(estimated) / sum(engine), 3) AS ratio, any_value(w.trace_request_id) AS trace_request_id,
  any_value(w.worst_characters) AS worst_characters, any_value(w.worst_engine_tokens) AS worst_engine_tokens,
  any_value(w.worst_estimated_tokens) AS worst_estimated_tokens,
  round(any_value(w.worst_estimated_tokens) / any_value(w.worst_engine_tokens), 2) AS worst_ratio
FROM counted c JOIN worst w USING (lane) WHERE engine > 0 GROUP BY c.lane
HAVING sum(estimated) / sum(engine) > {high} OR sum(estimated) / sum(engine) < {low}
    OR (abs(any_value(w.worst_estimated_tokens) - any_value(w.worst_engine_tokens)) >= $long_prompt_tokens
        AND (any_value(w.worst_estimated_tokens) / any_value(w.worst_engine_tokens) > {high}
             OR any_value(w.worst_estimated_tokens) / any_value(w.worst_engine_tokens) < {low}))
ORDER BY c.lane
