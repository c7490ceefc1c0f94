-- Per engine: loads that took longer than the probe budget, and starts that never got ready and ended killed by
-- a signal from outside (SIGKILL, SIGTERM: a probe) rather than by their own crash (SIGABRT, an exit status:
-- H13's loop). The upgrade day: a probe killed strata-a 10 s into each 40 s load.
WITH slow AS (
  SELECT instance, lane, ts_utc AS start_utc, ready_utc AS end_utc, ready_seconds AS seconds, NULL AS cause
  FROM deploys WHERE component = 'engine' AND ready_seconds > {budget}
), exits AS (
  SELECT program AS instance, ts_utc, cause FROM process_events__all WHERE event = 'exited' AND ts_utc < $to
), unready AS (
  SELECT d.instance, d.lane, d.ts_utc AS start_utc, x.ts_utc AS end_utc, epoch(x.ts_utc - d.ts_utc) AS seconds,
    x.cause
  FROM deploys d ASOF JOIN exits x ON x.instance = d.instance AND x.ts_utc >= d.ts_utc
  WHERE d.component = 'engine' AND d.ready_utc IS NULL
), loads AS (
  SELECT *, regexp_full_match(cause, 'terminated by SIG(KILL|TERM)') AS killed FROM slow UNION ALL BY NAME
  SELECT *, regexp_full_match(cause, 'terminated by SIG(KILL|TERM)') AS killed FROM unready
)
SELECT instance, any_value(lane) AS lane, min(start_utc) AS start_utc, max(end_utc) AS end_utc,
  count(*) FILTER (WHERE cause IS NULL) AS slow_loads, max(seconds) FILTER (WHERE cause IS NULL) AS ready_seconds,
  count(*) FILTER (WHERE killed) AS killed_while_loading,
  round(max(seconds) FILTER (WHERE killed), 1) AS killed_after_seconds,
  count(*) FILTER (WHERE cause IS NOT NULL AND NOT killed) AS crashed_while_loading, {budget} AS probe_budget_seconds
FROM loads GROUP BY instance
HAVING count(*) FILTER (WHERE cause IS NULL) > 0
    OR (count(*) FILTER (WHERE killed) > 0 AND count(*) FILTER (WHERE cause IS NOT NULL AND NOT killed) = 0)
ORDER BY instance
