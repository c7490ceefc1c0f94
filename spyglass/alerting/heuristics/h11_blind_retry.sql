SELECT NULL AS instance, lane, min(ts_utc) AS start_utc, max(ts_utc) AS end_utc, count(*) AS blind_retries,
  sum(overfits) AS overfits, max(overfit_prompt) AS relayed_prompt_tokens, max(overfit_max) AS relayed_window,
  max(upstream_prompt) AS engine_prompt_tokens, max(upstream_window) AS engine_window,
  arg_min(request_id, ts_utc) AS trace_request_id
FROM gateway_requests WHERE retried
GROUP BY lane ORDER BY lane
