-- Each serve's polls without the special-token escape fix (no prompt_escapes in its status) while another
-- serve's polls had it, for at least as long as ServeBuildSkew waits (incident 3: the normal lane got the fix
-- only on 10-19).
WITH polls AS (
  SELECT instance, ts_utc, has_escape_fix, serve_version FROM status_snapshots WHERE up
), fixed AS (
  SELECT instance, min(ts_utc) AS first_utc, max(ts_utc) AS last_utc, max(serve_version) AS serve_version
  FROM polls WHERE has_escape_fix GROUP BY instance
), unfixed AS (
  SELECT u.instance, f.instance AS fixed_instance, f.serve_version AS fixed_version,
    min(u.ts_utc) AS start_utc, max(u.ts_utc) AS end_utc, count(*) AS polls_without_fix,
    max(u.serve_version) AS serve_version
  FROM polls u JOIN fixed f ON f.instance <> u.instance AND u.ts_utc BETWEEN f.first_utc AND f.last_utc
  WHERE NOT u.has_escape_fix
  GROUP BY u.instance, f.instance, f.serve_version
)
SELECT instance, NULL AS lane, start_utc, end_utc, serve_version, fixed_instance, fixed_version, polls_without_fix,
  round(epoch(end_utc - start_utc) / 60, 1) AS minutes_without_fix
FROM unfixed WHERE end_utc - start_utc >= INTERVAL {hold_minutes} MINUTE
ORDER BY instance
