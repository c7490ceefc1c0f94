SELECT NULL AS instance, lane, min(ts_utc) FILTER (WHERE thinking_only) AS start_utc,
  max(ts_utc) FILTER (WHERE thinking_only) AS end_utc,
  count(*) FILTER (WHERE special_literals > 0) AS with_literals_requests, count(*) FILTER (WHERE special_literals > 0 AND thinking_only) AS with_literals_thinking_only,
  count(*) FILTER (WHERE special_literals > 0 AND invalid_tool_json > 0) AS with_literals_broken_tool_json, count(*) FILTER (WHERE special_literals > 0 AND coalesce(body_content_chars, content_chars) > 0) AS with_literals_visible_content,
  count(*) FILTER (WHERE coalesce(special_literals, 0) = 0) AS without_literals_requests, count(*) FILTER (WHERE coalesce(special_literals, 0) = 0 AND thinking_only) AS without_literals_thinking_only,
  count(*) FILTER (WHERE coalesce(special_literals, 0) = 0 AND invalid_tool_json > 0) AS without_literals_broken_tool_json, count(*) FILTER (WHERE coalesce(special_literals, 0) = 0 AND coalesce(body_content_chars, content_chars) > 0) AS without_literals_visible_content,
  count(*) FILTER (WHERE thinking_only) AS thinking_only, count(*) AS requests,
  arg_min(request_id, ts_utc) FILTER (WHERE thinking_only AND special_literals > 0) AS trace_request_id
FROM infer_requests WHERE has_body
GROUP BY lane
HAVING count(*) FILTER (WHERE thinking_only) / count(*) > {share}
    OR (count(*) FILTER (WHERE special_literals > 0 AND thinking_only)
          / greatest(count(*) FILTER (WHERE special_literals > 0), 1) > {share}
        AND count(*) FILTER (WHERE special_literals > 0) >= {least}
        AND count(*) FILTER (WHERE special_literals > 0 AND thinking_only)
          / greatest(count(*) FILTER (WHERE special_literals > 0), 1)
          > {factor} * count(*) FILTER (WHERE coalesce(special_literals, 0) = 0 AND thinking_only)
            / greatest(count(*) FILTER (WHERE coalesce(special_literals, 0) = 0), 1))
ORDER BY lane
