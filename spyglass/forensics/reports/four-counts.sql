-- Every layer's count of one request's prompt, each named by who counted it.
-- Reproduces incident 6 (seed chapter 18.7): 1,075,447 characters (CJK 5.3%), 154,796 tokens counted by the
-- engine, 516,561 estimated by the gateway (3.34x); and for the 400s, the gateway's 398,890 > 256,000 against
-- the engine's own 372,066 > 262,144 (#545). The engine's count is the authority.
-- Parameters: $from, $to, $request (one request id, or every request of the window).
SELECT r.request_id, r.ts_utc, r.ts_local, r.session, r.status, r.chars, r.cjk,
  r.tokens_gateway_estimate, r.tokens_precheck, r.tokens_engine, r.tokens_engine_via_gateway, r.tokens_infer_store,
  r.tokens_overfit_reported, g.overfit_max, r.tokens_engine_rejected, g.upstream_window AS engine_window,
  r.tokens, r.tokens_counted_by, r.estimate_ratio,
  round(r.chars / r.tokens, 2) AS chars_per_token, r.max_tokens, r.clamped_max_tokens, r.retried, r.overfits
FROM requests r LEFT JOIN gateway_requests__all g USING (request_id)
WHERE ($request IS NULL OR r.request_id = $request) AND r.chars IS NOT NULL
ORDER BY r.ts_utc
