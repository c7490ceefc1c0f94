-- Per lane, requests sent without the client's first user message, and the one that dropped the most:
-- its messages sent against the client's (incident 5: 147 of 315 sent, the task among those dropped).
SELECT NULL AS instance, lane, min(ts_utc) AS start_utc, max(ts_utc) AS end_utc, count(*) AS anchor_lost,
  count(DISTINCT session) AS sessions, arg_max(sent_msgs, dropped_msgs) AS sent_msgs,
  arg_max(client_msgs, dropped_msgs) AS client_msgs, max(dropped_msgs) AS most_dropped_msgs,
  arg_max(request_id, dropped_msgs) AS trace_request_id
FROM requests WHERE anchor_survived = false
GROUP BY lane ORDER BY lane
