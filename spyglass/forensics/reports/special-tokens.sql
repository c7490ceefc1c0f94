-- Special-token literals in the prompt against none, per Beijing day and lane: the control table.
-- Reproduces incident 3 (seed chapter 18.4, the 58 / 295 comparison of 2026-10-17, fast lane):
-- with literals 58 requests, 16 thinking-only, 5 with broken tool JSON, 20 with visible text;
-- without 295, 0, 1, 169. Long context is not the cause if the "without" row has no thinking-only.
-- Reads the raw records' facts (infer_requests with a body). Parameters: $from, $to.
SELECT strftime(ts_local, '%Y-%m-%d') AS day_local, lane, special_literals > 0 AS with_literals,
  count(*) AS requests,
  count(*) FILTER (WHERE thinking_only) AS thinking_only,
  count(*) FILTER (WHERE invalid_tool_json > 0) AS broken_tool_json,
  count(*) FILTER (WHERE coalesce(body_content_chars, content_chars) > 0) AS visible_content
FROM infer_requests
WHERE has_body
GROUP BY ALL
ORDER BY day_local, lane, with_literals DESC
