-- Engine processes alive in the window whose start banners name overlapping CPU lists (incident 1: both
-- engines on 0-31 at 9.3 tok/s), or whose overlap the host source measured (Cpus_allowed_list, as the
-- alert reads it: one signal, one answer), with each one's median decode rate and a request to trace.
WITH starts AS (
  SELECT instance, cpus, ts_utc, lead(ts_utc) OVER (PARTITION BY instance ORDER BY ts_utc) AS next_utc
  FROM deploys__all WHERE component = 'engine' AND ts_utc < $to
), alive AS (
  SELECT instance, cpus, ts_utc FROM starts WHERE cpus IS NOT NULL AND (next_utc IS NULL OR next_utc > $from)
), ranges AS (
  SELECT instance, cpus, ts_utc, trim(unnest(string_split(cpus, ','))) AS part FROM alive
), cpu AS (
  SELECT instance, cpus, ts_utc,
    unnest(range(TRY_CAST(split_part(part, '-', 1) AS INT),
                 TRY_CAST(coalesce(nullif(split_part(part, '-', 2), ''), split_part(part, '-', 1)) AS INT) + 1)) AS cpu
  FROM ranges
), pairs AS (
  SELECT a.instance, b.instance AS other, any_value(a.cpus) AS cpus, any_value(b.cpus) AS other_cpus,
    count(DISTINCT a.cpu) AS shared_cpus, greatest(max(a.ts_utc), max(b.ts_utc)) AS since_utc
  FROM cpu a JOIN cpu b ON a.cpu = b.cpu AND a.instance <> b.instance
  GROUP BY a.instance, b.instance
), measured AS (  -- the host source samples in the window: the overlap as the kernel allows it
  SELECT instance, other, max(shared_cpus) AS shared_cpus, min(ts_utc) AS since_utc
  FROM host_samples WHERE event = 'shared_cpus'
  GROUP BY ALL
), allowed AS (
  SELECT instance, arg_max(cpus, ts_utc) AS cpus
  FROM host_samples WHERE event = 'process'
  GROUP BY instance
), overlap_pairs AS (
  SELECT instance, other, cpus, other_cpus, shared_cpus, since_utc FROM pairs
  UNION ALL
  SELECT m.instance, m.other, a.cpus, o.cpus, m.shared_cpus, m.since_utc
  FROM measured m LEFT JOIN allowed a ON a.instance = m.instance LEFT JOIN allowed o ON o.instance = m.other
), best AS (
  SELECT instance, other, arg_max(cpus, shared_cpus) AS cpus, arg_max(other_cpus, shared_cpus) AS other_cpus,
    max(shared_cpus) AS shared_cpus, min(since_utc) AS since_utc
  FROM overlap_pairs GROUP BY instance, other
), decode AS (
  SELECT instance, round(median(decode_tps), 1) AS decode_tps, count(*) AS requests,
    arg_min(request_id, decode_tps) AS trace_request_id, min(ts_utc) AS first_utc, max(ts_utc) AS last_utc
  FROM engine_requests WHERE decode_tps IS NOT NULL GROUP BY instance
)
SELECT p.instance, NULL AS lane, greatest(p.since_utc, d.first_utc) AS start_utc, d.last_utc AS end_utc,
  p.cpus, p.other, p.other_cpus, p.shared_cpus, d.decode_tps, o.decode_tps AS other_decode_tps, d.requests,
  d.trace_request_id
FROM best p LEFT JOIN decode d USING (instance) LEFT JOIN decode o ON o.instance = p.other
WHERE p.shared_cpus > {shared}
ORDER BY p.instance
