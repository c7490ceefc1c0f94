SELECT NULL AS instance, lane, min(ts_utc) FILTER (WHERE status = 429) AS start_utc,
  max(ts_utc) FILTER (WHERE status = 429) AS end_utc, count(*) AS requests,
  count(*) FILTER (WHERE status = 429) AS rejected, round(count(*) FILTER (WHERE status = 429) / count(*), 3) AS share,
  arg_min(request_id, ts_utc) FILTER (WHERE status = 429) AS trace_request_id
FROM gateway_requests
GROUP BY lane HAVING count(*) FILTER (WHERE status = 429) / count(*) > {share}
ORDER BY lane
