SELECT NULL AS instance, lane, min(ts_utc) AS start_utc, max(ts_utc) AS end_utc, count(*) AS anchor_lost,
  count(DISTINCT session) AS sessions, max(client_msgs) AS most_client_msgs, max(dropped_msgs) AS most_dropped_msgs
FROM requests WHERE anchor_survived = false
GROUP BY lane ORDER BY lane
