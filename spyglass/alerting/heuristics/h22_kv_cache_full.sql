-- Per instance, the KV-full lines of the window: decodes refused at batch size 1 (llama_decode's 1), batches
-- halved and retried, context shifts, cached prompts that did not fit back; and the requests answered
-- `Context size has been exceeded.`. A finding where a decode was refused, or at least {splits} batches were
-- split within {window}.
WITH pressure AS (
  SELECT instance, ts_utc, kind, request_id,
    kind = 'decode_failed' AND fields->>'ret' = '1' AS refused,
    kind = 'done' AND fields->>'message' = 'Context size has been exceeded.' AS failed
  FROM timeline__all WHERE source_kind = 'engine_log'
    AND kind IN ('kv_no_slot', 'kv_retry', 'decode_failed', 'context_shift', 'cache_restore_failed', 'done')
), split AS (
  SELECT instance, max(n) AS most FROM (
    SELECT instance, count(*) FILTER (WHERE kind = 'kv_retry')
      OVER (PARTITION BY instance ORDER BY ts_utc RANGE BETWEEN {window} PRECEDING AND CURRENT ROW) AS n
    FROM pressure) GROUP BY instance
)
SELECT p.instance, NULL AS lane,
  min(p.ts_utc) FILTER (WHERE p.kind <> 'done') AS start_utc, max(p.ts_utc) FILTER (WHERE p.kind <> 'done') AS end_utc,
  count(*) FILTER (WHERE p.refused) AS refused, count(*) FILTER (WHERE p.failed) AS failed,
  count(*) FILTER (WHERE p.kind = 'kv_retry') AS retries, count(*) FILTER (WHERE p.kind = 'context_shift') AS shifts,
  count(*) FILTER (WHERE p.kind = 'cache_restore_failed') AS restores,
  arg_min(p.request_id, p.ts_utc) FILTER (WHERE p.failed) AS trace_request_id
FROM pressure p JOIN split s USING (instance)
GROUP BY p.instance, s.most
HAVING count(*) FILTER (WHERE p.refused) > 0 OR s.most >= {splits}
ORDER BY p.instance
