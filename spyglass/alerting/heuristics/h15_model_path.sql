SELECT instance, NULL AS lane, min(ts_utc) AS start_utc, max(ts_utc) AS end_utc, count(*) AS checksum_mismatches
FROM timeline WHERE kind = 'checksum_mismatch' AND source_kind = 'engine_log'
GROUP BY instance ORDER BY instance
