-- llama-server's host prompt cache (--cache-ram) at each update of the window: what it held and what left it.
-- One row per listing the server logged (`- cache state:` and its `- prompt 0x...: N tokens, checkpoints: K, X MiB`
-- lines, at -lv 4 or -v): the entries it held then (address:tokens:MiB, largest first), their MiB against the
-- limit, and the entries of the listing before that are gone from this one (evicted, or restored into a slot).
-- What the cache held at a moment is the last row at or before it: `--to MOMENT --since 10m`.
-- Reproduces issue 37's ask, on the real build's -v log (tests/fixtures/llama/0.3.36/verbose/server.log): three
-- entries of 0.969 of 1 MiB at its end, a 455-token prompt gone when a 742-token one took its address.
-- When empty: llama-server lists its prompt cache at -lv 4 (or -v) only; at the default verbosity nothing is listed.
-- Parameters: $from, $to.
WITH entries AS (
  SELECT instance, ts_utc, fields->>'addr' AS prompt, (fields->>'tokens')::BIGINT AS tokens,
    (fields->>'checkpoints')::BIGINT AS checkpoints, (fields->>'mib')::DOUBLE AS mib
  FROM timeline WHERE source_kind = 'engine_log' AND kind = 'cache_prompt'
), updates AS (
  SELECT instance, ts_utc, ts_local, (fields->>'parked')::BIGINT AS prompts,
    round((fields->>'used')::DOUBLE / 1048576, 3) AS mib, round((fields->>'budget')::DOUBLE / 1048576, 3) AS limit_mib,
    round((fields->>'largest')::DOUBLE / 1048576, 3) AS largest_mib,
    lag(ts_utc) OVER (PARTITION BY instance ORDER BY ts_utc) AS before_utc
  FROM timeline WHERE source_kind = 'engine_log' AND kind = 'cache_inventory'
), held AS (
  SELECT u.instance, u.ts_utc,
    string_agg(e.prompt || ':' || e.tokens || ':' || e.mib, ' ' ORDER BY e.mib DESC, e.prompt) AS held
  FROM updates u JOIN entries e ON e.instance = u.instance AND e.ts_utc = u.ts_utc GROUP BY ALL
), gone AS (
  SELECT u.instance, u.ts_utc,
    string_agg(b.prompt || ':' || b.tokens || ':' || b.mib, ' ' ORDER BY b.mib DESC, b.prompt) AS gone,
    count(*) AS left_count
  FROM updates u JOIN entries b ON b.instance = u.instance AND b.ts_utc = u.before_utc
  WHERE NOT EXISTS (
    SELECT 1 FROM entries e WHERE e.instance = u.instance AND e.ts_utc = u.ts_utc AND e.prompt = b.prompt
      AND e.tokens = b.tokens)
  GROUP BY ALL
)
SELECT u.instance, u.ts_utc, u.ts_local, u.prompts, u.mib, u.limit_mib, u.largest_mib,
  round(100 * u.mib / nullif(u.limit_mib, 0), 1) AS used_percent, coalesce(h.held, '') AS held,
  coalesce(g.left_count, 0) AS left_count, coalesce(g.gone, '') AS left_since_before
FROM updates u LEFT JOIN held h USING (instance, ts_utc) LEFT JOIN gone g USING (instance, ts_utc)
ORDER BY u.instance, u.ts_utc
