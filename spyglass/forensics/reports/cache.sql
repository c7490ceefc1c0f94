-- The conversation cache per engine instance: evictions, the largest snapshot against budget and slots, long prompts.
-- Reproduces incident 2 (seed chapter 18.3, the evidence table of strata-b): a 254k-token conversation's
-- snapshot of 4,716,362,992 bytes against an 8 GiB budget for 20 slots, 2508 evictions, and 123 of 194
-- prompts of at least 200k tokens reusing only a checkpoint (a multiple of --prompt-cache-every). The
-- fastest long turn is the counter-example that clears the engine (the same conversation's 2.2 s turn).
-- Parameters: $from, $to, $long_prompt_tokens, $default_every (used when no start banner is in the window),
-- $checkpoint_only (the rule, collectors/checkpoint_reuse.py).
WITH banners AS (
  SELECT instance, ts_utc, prompt_cache_every, slots FROM deploys__all WHERE component = 'engine'
), prompts AS (
  SELECT r.instance, r.request_id, r.ts_utc, r.prompt_tokens, r.reused_tokens, r.prefill_ms,
    coalesce(d.prompt_cache_every, $default_every) AS cache_every
  FROM engine_requests r ASOF LEFT JOIN banners d ON d.instance = r.instance AND r.ts_utc >= d.ts_utc
  WHERE r.prompt_tokens >= $long_prompt_tokens
), longs AS (
  SELECT instance, count(*) AS long_prompts,
    count(*) FILTER (WHERE $checkpoint_only) AS checkpoint_only,
    min(prefill_ms) AS fastest_long_prefill_ms, arg_min(request_id, (prefill_ms, ts_utc)) AS fastest_long_request,  -- a tie: the earliest
    max(cache_every) AS prompt_cache_every
  FROM prompts GROUP BY instance
), cache AS (
  SELECT instance, count(*) FILTER (WHERE event = 'evict') AS evictions, max(evictions) AS evictions_counter,
    max(snapshot_bytes) FILTER (WHERE event = 'park') AS largest_snapshot_bytes, max(budget_bytes) AS budget_bytes,
    max(parked) AS most_parked
  FROM cache_events GROUP BY instance
)
SELECT instance, c.evictions, c.evictions_counter, c.largest_snapshot_bytes, c.budget_bytes,
  (SELECT max(slots) FROM banners s WHERE s.instance = c.instance) AS slots,
  round(c.largest_snapshot_bytes / c.budget_bytes, 3) AS snapshot_share_of_budget,
  round(c.largest_snapshot_bytes / (c.budget_bytes / (SELECT max(slots) FROM banners s WHERE s.instance = c.instance)), 1)
    AS snapshot_in_slot_shares,
  c.most_parked, coalesce(l.long_prompts, 0) AS long_prompts, coalesce(l.checkpoint_only, 0) AS checkpoint_only,
  l.prompt_cache_every, l.fastest_long_prefill_ms, l.fastest_long_request
FROM cache c FULL JOIN longs l USING (instance)
ORDER BY instance
