-- Restarts and exits per program, with their causes, from supervisord (log and API) and the switch log.
-- Reproduces the upgrade article's restart loop (seed 004; heuristic H13): a program that dies after startsecs
-- is respawned at once and never reaches FATAL, so restarts are counted from spawns and unexpected exits.
-- `restarts` is spawns after the first, if the window begins with a spawn. Parameters: $from, $to.
WITH causes AS (
  SELECT program, cause, count(*) AS n
  FROM process_events WHERE event IN ('exited', 'stopped') AND cause IS NOT NULL
  GROUP BY ALL
), per_program AS (
  SELECT program,
    count(*) FILTER (WHERE event = 'spawned') AS spawns,
    count(*) FILTER (WHERE event = 'spawned')
      - CASE WHEN arg_min(event, ts_utc) = 'spawned' THEN 1 ELSE 0 END AS restarts,
    count(*) FILTER (WHERE event = 'exited' AND NOT expected) AS unexpected_exits,
    count(*) FILTER (WHERE event = 'exited' AND expected) AS expected_exits,
    count(*) FILTER (WHERE event = 'exited' AND core_dumped) AS core_dumps,
    count(*) FILTER (WHERE event = 'fatal') AS fatal,
    count(*) FILTER (WHERE event = 'stopped') AS stops,
    count(*) FILTER (WHERE event = 'stop_kill') AS sigkill_escalations,
    count(*) FILTER (WHERE event = 'restarted') AS api_restarts,
    count(*) FILTER (WHERE event = 'operator_restart') AS operator_restarts,
    min(ts_utc) AS first_utc, min(ts_local) AS first_local, max(ts_utc) AS last_utc, max(ts_local) AS last_local
  FROM process_events WHERE program IS NOT NULL
  GROUP BY program
)
SELECT p.program, spawns, restarts, unexpected_exits, expected_exits, core_dumps, fatal, stops, sigkill_escalations,
  api_restarts, operator_restarts,
  (SELECT string_agg(cause || ' x' || n, ', ' ORDER BY n DESC, cause) FROM causes c WHERE c.program = p.program)
    AS exit_causes,
  first_utc, first_local, last_utc, last_local
FROM per_program p
ORDER BY unexpected_exits DESC, restarts DESC, program
