-- Assembly and task-anchor survival per session: what the gateway dropped, and whether the task went with it.
-- Reproduces incident 5 (seed chapter 18.6): session 848a12ed, mode=assembled, client_msgs=315 -> sent_msgs=147,
-- 168 old messages dropped and with them the original task (the first user message), tools and system kept.
-- Parameters: $from, $to.
SELECT session, count(*) AS requests, string_agg(DISTINCT mode, ',' ORDER BY mode) AS mode,  -- every mode the session used
  max(client_msgs) AS most_client_msgs, arg_max(client_msgs, ts_utc) AS last_client_msgs,
  arg_max(sent_msgs, ts_utc) AS last_sent_msgs, arg_max(dropped_msgs, ts_utc) AS last_dropped_msgs,
  count(*) FILTER (WHERE dropped_msgs > 0) AS requests_with_drops,
  count(*) FILTER (WHERE anchor_survived) AS anchor_kept, count(*) FILTER (WHERE NOT anchor_survived) AS anchor_lost,
  arg_max(anchor_survived, ts_utc) FILTER (WHERE anchor_survived IS NOT NULL) AS anchor_at_last,
  count(*) FILTER (WHERE plan_then_stop) AS plan_then_stop,
  min(ts_utc) AS first_utc, min(ts_local) AS first_local, max(ts_utc) AS last_utc, max(ts_local) AS last_local
FROM requests
WHERE session IS NOT NULL
GROUP BY session
ORDER BY anchor_lost DESC, requests_with_drops DESC, session
