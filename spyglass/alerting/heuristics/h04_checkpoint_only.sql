WITH banners AS (
  SELECT instance, ts_utc, prompt_cache_every FROM deploys__all WHERE component = 'engine'
), prompts AS (
  SELECT r.instance, r.lane, r.ts_utc, r.request_id, r.prompt_tokens, r.reused_tokens,
    coalesce(d.prompt_cache_every, $default_every) AS cache_every
  FROM engine_requests r ASOF LEFT JOIN banners d ON d.instance = r.instance AND r.ts_utc >= d.ts_utc
  WHERE r.prompt_tokens >= $long_prompt_tokens
), marked AS (
  SELECT *, $checkpoint_only AS checkpoint,  -- the rule: collectors/checkpoint_reuse.py
    count(*) OVER (PARTITION BY instance ORDER BY ts_utc
                   RANGE BETWEEN {hourly} PRECEDING AND CURRENT ROW) AS in_the_hour
  FROM prompts
)
SELECT instance, any_value(lane) AS lane, min(ts_utc) FILTER (WHERE checkpoint) AS start_utc,
  max(ts_utc) FILTER (WHERE checkpoint) AS end_utc, count(*) AS long_prompts,
  count(*) FILTER (WHERE checkpoint) AS checkpoint_only,
  round(count(*) FILTER (WHERE checkpoint) / count(*), 3) AS checkpoint_only_share,
  max(cache_every) AS prompt_cache_every, max(in_the_hour) AS most_long_prompts_in_an_hour,
  arg_max(request_id, prompt_tokens) FILTER (WHERE checkpoint) AS trace_request_id
FROM marked GROUP BY instance
HAVING count(*) FILTER (WHERE checkpoint) / count(*) > {share} AND max(in_the_hour) >= {least}
ORDER BY instance
