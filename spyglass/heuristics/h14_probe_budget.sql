SELECT instance, lane, ts_utc AS start_utc, ready_utc AS end_utc, ready_seconds, {budget} AS probe_budget_seconds
FROM deploys WHERE component = 'engine' AND ready_seconds > {budget}
ORDER BY ts_utc
