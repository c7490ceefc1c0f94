-- Per lane, requests sent without the client's first user message, and the one that dropped the most:
-- its messages sent against the client's (incident 5: 147 of 315 sent, the task among those dropped).
SELECT NULL AS instance, lane, min(ts_utc) AS start_utc, max(ts_utc) AS end_utc, count(*) AS anchor_lost,
  count(DISTINCT session) AS sessions, first(sent_msgs ORDER BY dropped_msgs DESC, request_id) AS sent_msgs,
  first(client_msgs ORDER BY dropped_msgs DESC, request_id) AS client_msgs, max(dropped_msgs) AS most_dropped_msgs,
  -- the worst request, the earliest id of those that dropped as many: the same one from the store and Parquet
  first(request_id ORDER BY dropped_msgs DESC, request_id) AS trace_request_id
FROM requests WHERE anchor_survived = false
GROUP BY lane ORDER BY lane
