WITH spawns AS (
  SELECT program, count(*) OVER (PARTITION BY program ORDER BY ts_utc
    RANGE BETWEEN INTERVAL {crash_loop_window_minutes} MINUTE PRECEDING AND CURRENT ROW) AS in_window
  FROM process_events WHERE event = 'spawned'
), loops AS (
  SELECT program, max(in_window) AS most FROM spawns GROUP BY program HAVING max(in_window) >= {crash_loop_spawns}
  UNION ALL
  SELECT program, NULL FROM process_events WHERE event = 'fatal'
), causes AS (
  SELECT program, json_group_object(cause, n) AS exit_causes
  FROM (SELECT program, cause, count(*) AS n FROM process_events WHERE event = 'exited' AND cause IS NOT NULL
        GROUP BY ALL)
  GROUP BY program
), supervised AS (
  SELECT DISTINCT program FROM process_events WHERE program IS NOT NULL
), starts AS (
  -- EngineRestartLoop's: an engine's own start lines, where no supervisord names it (systemd, a container, a loop)
  SELECT instance, ts AS ts_utc, count(*) OVER (PARTITION BY instance ORDER BY ts
    RANGE BETWEEN INTERVAL {crash_loop_window_minutes} MINUTE PRECEDING AND CURRENT ROW) AS in_window
  FROM ev_engine_log
  WHERE kind = 'start' AND instance IS NOT NULL AND ts >= $from AND ts < $to
    AND instance NOT IN (SELECT program FROM supervised)
)
SELECT program AS instance, NULL AS lane, 'ProgramCrashLoop' AS alert, 'counted by supervisord' AS counted_by,
  min(p.ts_utc) AS start_utc, max(p.ts_utc) AS end_utc,
  count(*) FILTER (WHERE event = 'spawned') AS spawns,
  count(*) FILTER (WHERE event = 'spawned') - CASE WHEN arg_min(event, p.ts_utc) = 'spawned' THEN 1 ELSE 0 END
    AS restarts,
  count(*) FILTER (WHERE event = 'exited' AND NOT expected) AS unexpected_exits,
  count(*) FILTER (WHERE event = 'exited' AND core_dumped) AS core_dumps, count(*) FILTER (WHERE event = 'fatal') AS fatal,
  coalesce(max(l.most), 0) AS most_spawns_in_window, any_value(c.exit_causes) AS exit_causes
FROM process_events p JOIN (SELECT program, max(most) AS most FROM loops GROUP BY program) l USING (program)
LEFT JOIN causes c USING (program)
WHERE event IN ('spawned', 'exited', 'fatal')
GROUP BY program
UNION ALL
SELECT instance, NULL, 'EngineRestartLoop', 'counted from its own log, no supervisord watching it',
  min(ts_utc), max(ts_utc), count(*), count(*) - 1, NULL, NULL, NULL, max(in_window), NULL
FROM starts GROUP BY instance HAVING max(in_window) >= {crash_loop_spawns}
ORDER BY instance
