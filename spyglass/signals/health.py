"""spyglass's own health, per source: is it read, how much, what failed to parse, how far behind.

These close the blind spots of heuristic H19: a source that went silent while its process runs,
lines that stopped parsing (format drift), a file that vanished with unread bytes.
"""

from __future__ import annotations

from spyglass.signals import declare_only
from spyglass.signals.catalogue import MetricSpec

SOURCE = ("source",)

SPECS = [
    MetricSpec(
        "spyglass_source_up",
        "gauge",
        "1 when the source could be read (file) or answered (endpoint) at the last poll, else 0.",
        SOURCE,
    ),
    MetricSpec(
        "spyglass_source_lines_total",
        "counter",
        "Lines read, by outcome: event, ignored (skipped level), unmatched (prefix but no pattern:"
        " format drift), unprefixed (no known shape: another format, a continuation line), invalid (matched but"
        " unusable), joined (became part of another line's event: llama.cpp's timing lines).",
        SOURCE + ("outcome",),
    ),
    MetricSpec(
        "spyglass_source_invalid_fields_total",
        "counter",
        "Values refused where they were parsed, by field: a malformed number (1.2.3) or one beyond"
        " 2^53; a log line with one is counted invalid and skipped whole.",
        SOURCE + ("field",),
    ),
    MetricSpec(
        "spyglass_source_unlisted_labels_total",
        "counter",
        "Label values from a log or body outside their closed set or configured list, exported as other, by label.",
        SOURCE + ("label",),
    ),
    MetricSpec("spyglass_source_bytes_total", "counter", "Bytes of complete lines read.", SOURCE, "bytes"),
    MetricSpec(
        "spyglass_source_long_lines_total",
        "counter",
        "Lines longer than agent.max_line_bytes, truncated to it.",
        SOURCE,
    ),
    MetricSpec(
        "spyglass_source_nul_bytes_total",
        "counter",
        "NUL bytes skipped at line starts (a copytruncate hole).",
        SOURCE,
        "bytes",
    ),
    MetricSpec(
        "spyglass_source_rotations_total",
        "counter",
        "File generations ended, by how: renamed, deleted, truncate, copytruncate, overwritten.",
        SOURCE + ("kind",),
    ),
    MetricSpec(
        "spyglass_source_lost_files_total",
        "counter",
        "Files lost unread: checkpointed files that vanished while spyglass was stopped with bytes"
        " unread, rotations faster than a poll that may have deleted a generation unseen, and a file"
        " checkpointed empty found emptied again after a restart. A followed file that is still held"
        " under a name no rotated pattern gives is counted in spyglass_source_possibly_lost_total"
        " instead.",
        SOURCE,
    ),
    MetricSpec(
        "spyglass_source_lost_bytes_total",
        "counter",
        "Bytes proven lost: seen in a file (its size observed, a held partial line) and destroyed"
        " before they were read, by a truncation that left no copy of them or a checkpointed file"
        " gone while spyglass was stopped.",
        SOURCE,
        "bytes",
    ),
    MetricSpec(
        "spyglass_source_possibly_lost_total",
        "counter",
        "Events after which lines may have been lost, which cannot be proven, by reason: truncated"
        " (truncated with no copy of what followed the last offset: whatever was written after the"
        " last poll is gone), renamed (the followed file was renamed to a name no rotated pattern"
        " gives: generations renamed away between two polls go unseen), relinked (the path, a symlink, was"
        " pointed at another file: a target linked and replaced between two polls goes unseen).",
        SOURCE + ("reason",),
    ),
    MetricSpec(
        "spyglass_source_refused_files_total",
        "counter",
        "Files found at a source's path (or a rotated name) and never read, by kind: fifo, device,"
        " directory, socket, symlink_loop. Reading one could block the agent; each file is counted"
        " once, and /health names the source while its path holds one.",
        SOURCE + ("kind",),
    ),
    MetricSpec(
        "spyglass_source_last_event_timestamp_seconds",
        "gauge",
        "Timestamp (from the line itself) of the newest event of the source.",
        SOURCE,
        "seconds",
    ),
    MetricSpec(
        "spyglass_source_lag_bytes", "gauge", "Bytes written to the source not yet read as lines.", SOURCE, "bytes"
    ),
    MetricSpec(
        "spyglass_source_polls_total",
        "counter",
        "Polls of a polled source, by result: ok or error.",
        SOURCE + ("result",),
    ),
    MetricSpec(
        "spyglass_received_refused_total",
        "counter",
        "Bodies POSTed to a receiver (/v1/traces, /api/smoke, /api/alerts) refused whole, nothing taken, by"
        " reason: too_large (413), rate (429, over its budget), store_failing and backlog (503: the store"
        " cannot commit, or a full batch waits). See docs/guarantees.md.",
        ("receiver", "reason"),
    ),
    MetricSpec(
        "spyglass_agent_spans_received_total",
        "counter",
        "Spans received over OTLP/HTTP at the agent's /v1/traces (stored as span events).",
    ),
    MetricSpec(
        "spyglass_alerts_dropped_total",
        "counter",
        "Alertmanager alerts not stored, by reason: notification_cap (past the first 1,000 of one"
        " notification), sender_truncated (left out by Alertmanager's max_alerts, its truncatedAlerts),"
        " alert_budget (past the alert's own budget of events: a flapping or forged alert).",
        ("reason",),
    ),
    MetricSpec(
        "spyglass_alerts_deferred_total",
        "counter",
        "Alertmanager alerts answered 503 because the agent's total alert rate was spent; the sender"
        " retries them, so they are stored later, not lost.",
    ),
    MetricSpec("spyglass_store_events_total", "counter", "Events committed to the DuckDB store."),
    MetricSpec(
        "spyglass_store_events_refused_total",
        "counter",
        "Events the store could not take, set aside so that the rest of their batch commits: a"
        " timestamp outside 1970 to 9999 (not counted in spyglass_store_events_total), or fields"
        " that will not encode (counted there too). The edges refuse such records first.",
    ),
    MetricSpec(
        "spyglass_state_dropped_series_total",
        "counter",
        "New series refused because their metric already had the maximum number of series.",
        ("metric",),
    ),
    MetricSpec(
        "spyglass_store_healthy",
        "gauge",
        "1 while commits to the store (or the state file) succeed; 0 while they fail and are retried.",
    ),
    MetricSpec(
        "spyglass_store_commit_failures_total",
        "counter",
        "Failed commits (disk full, read-only, ...); each is retried with back-off, nothing dropped.",
    ),
    MetricSpec(
        "spyglass_parquet_publish_failures_total",
        "counter",
        "Parquet publications that failed (disk full, a batch past the memory limit, a bug); each is"
        " retried the next interval, with half the batch.",
    ),
    MetricSpec(
        "spyglass_parquet_rows_set_aside_total",
        "counter",
        "Stored rows no Parquet partition can name (a timestamp before 1970 or past 9999), written"
        " to <parquet_dir>/.set-aside/ instead, so the rest is published.",
    ),
    MetricSpec(
        "spyglass_parquet_rows_dropped_unpublished_total",
        "counter",
        "Stored rows deleted before Parquet had them: past retain_hours while no publication had"
        " succeeded for retain_hours (stuck), so that the store does not grow without bound.",
    ),
    MetricSpec("spyglass_agent_info", "info", "spyglass version, value 1.", ("version",)),
    MetricSpec(
        "spyglass_agent_allowed_cpus_info",
        "info",
        "The CPUs the agent and its threads may run on (agent.cpus, or as started), value 1: compare with"
        " the engines' (H2).",
        ("cpus",),
    ),
]

declare_only("agent", SPECS)
