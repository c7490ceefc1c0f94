WITH stops AS (
  SELECT lane, session, request_id, ts_utc, count(*) OVER (PARTITION BY lane ORDER BY ts_utc
                                             RANGE BETWEEN INTERVAL 1 HOUR PRECEDING AND CURRENT ROW) AS in_the_hour
  FROM requests WHERE plan_then_stop
)
SELECT NULL AS instance, lane, min(ts_utc) AS start_utc, max(ts_utc) AS end_utc, count(*) AS plan_then_stop,
  count(DISTINCT session) AS sessions, max(in_the_hour) AS most_in_an_hour,
  arg_min(request_id, ts_utc) AS trace_request_id
FROM stops GROUP BY lane HAVING max(in_the_hour) >= {least}
ORDER BY lane
