"""The forensic views: each returns exactly its documented columns; none depends on the session's zone;
parameters are literals, never SQL; times typed by an analyst mean what they say."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest
from fixtures.incidents.replay import write_all
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from spyglass.agent.alert_webhook import decode_notification
from spyglass.agent.otlp_receiver import decode_spans
from spyglass.agent.pipeline import Pipeline
from spyglass.collectors.clock import SystemClock
from spyglass.config import load_config
from spyglass.engine.instrument import span_id_for, trace_id_for
from spyglass.exporters import event_schema
from spyglass.exporters.request_rows import row_tables
from spyglass.exporters.store import DuckDBStore
from spyglass.forensics import reports
from spyglass.forensics.run import Query, Window, render
from spyglass.forensics.times import parse_time, window
from spyglass.forensics.views import VIEWS, needed, with_views
from spyglass.query.bounded import QueryError
from spyglass.upgrades.smoke_event import decode_result


def pushed_span(request_id: str, at: float) -> bytes:
    """One gateway server span as the instrumented gateway pushes it to /v1/traces."""
    export = ExportTraceServiceRequest()
    spans = export.resource_spans.add()
    spans.resource.attributes.add(key="service.name").value.string_value = "rag-proxy"
    span = spans.scope_spans.add().spans.add(name="POST /v1/messages", kind=2)
    span.trace_id = trace_id_for(request_id).to_bytes(16, "big")
    span.span_id = span_id_for("gateway", request_id).to_bytes(8, "big")
    span.start_time_unix_nano, span.end_time_unix_nano = int(at * 1e9), int((at + 15.52) * 1e9)
    span.attributes.add(key="spyglass.request.id").value.string_value = request_id
    return export.SerializeToString()


ALERT = {
    "alertname": "SpyglassEvictionStorm",
    "status": "firing",
    "labels": {"alertname": "SpyglassEvictionStorm", "severity": "critical", "instance": "strata-b"},
    "annotations": {"summary": "2508 evictions"},
    "startsAt": "2026-10-07T07:40:00Z",
    "endsAt": "0001-01-01T00:00:00Z",
}


SMOKE = {
    "instance": "strata-b",
    "url": "http://127.0.0.1:8082",
    "passed": False,
    "reason": "sample s1: HTTP 503",
    "waited_seconds": 1.5,
    "samples_file": "samples.jsonl",
    "samples_sha256": "ab" * 32,
    "samples": [
        {"name": "s0", "status": 200, "ttft_ms": 40.0, "finish": "end_turn"},
        {"name": "s1", "status": 503, "ttft_ms": 8.0, "problem": "HTTP 503"},
    ],
}


HOST_SOURCE = """[sources.host]
kind = "host"
proc_root = "{host}/proc"
cgroup_root = "{host}/cgroup"
[sources.host.processes.strata-a]
cmdline = "--port 8081"
[sources.host.processes.strata-b]
cmdline = "--port 8082"
"""


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    path = write_all(tmp_path_factory.mktemp("views"))
    host = Path(__file__).resolve().parent / "fixtures" / "host" / "v2"  # and the host source, for host_samples
    path.write_text(path.read_text() + HOST_SOURCE.format(host=host))
    config = load_config(path)
    store = DuckDBStore(config.store_path())
    pipeline = Pipeline(config, SystemClock(), store)  # segments settle against real file times
    try:
        pipeline.run_until_idle()
        at = datetime(2026, 10, 19, 4, 49, tzinfo=UTC).timestamp()
        # what /v1/traces and a future Alertmanager webhook hand the pipeline, stored at its next step
        pipeline.submit(decode_spans(pushed_span("20261019-124900-7aa82c", at), "replay", now=at))
        pipeline.submit(decode_notification(json.dumps({"version": "4", "alerts": [ALERT]}).encode(), "replay", now=at))
        webhook = {
            "version": "4",
            "alerts": [
                {
                    **ALERT,
                    "status": "resolved",
                    "labels": {**ALERT["labels"], "alertname": "SpyglassCrashLoop"},
                    "startsAt": "2026-10-19T04:40:00Z",
                    "endsAt": "2026-10-19T04:45:30Z",
                }
            ],
        }
        pipeline.submit(decode_notification(json.dumps(webhook).encode(), "replay", now=at))  # POST /api/alerts
        pipeline.submit([decode_result(json.dumps({**SMOKE, "at": at}).encode(), "replay", now=at)])  # POST /api/smoke
        pipeline.run_until_idle()  # steps, then commits what they applied
    finally:
        pipeline.close()
    return config


def session(config, tz: str = "UTC") -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(str(config.store_path()), read_only=True)
    con.execute(f"SET TimeZone = '{tz}'")
    return con


@pytest.mark.parametrize("name", list(VIEWS))
def test_each_view_returns_exactly_its_documented_columns(replay, name):
    text = Query(f"SELECT * FROM {name}", Window().params()).text(replay)
    with session(replay) as con:
        described = [(row[0], row[1]) for row in con.execute(f"DESCRIBE {text}").fetchall()]
        assert con.execute(text).fetchall(), f"{name} is empty on the replays"
    assert described == [(c.name, c.type) for c in VIEWS[name].columns]


def test_spans_alerts_and_snapshots_are_typed(replay):
    def one(sql: str) -> tuple:
        with session(replay) as con:
            return con.execute(Query(sql, Window().params()).text(replay)).fetchone()

    assert one("SELECT request_id, service, span_kind, duration_ms, ts_local FROM spans") == (
        "20261019-124900-7aa82c",
        "rag-proxy",
        "SERVER",
        15520.0,
        datetime(2026, 10, 19, 12, 49),
    )
    assert one("SELECT alertname, severity, instance, starts_local, ends_utc FROM alerts ORDER BY ts_utc") == (
        "SpyglassEvictionStorm",
        "critical",
        "strata-b",
        datetime(2026, 10, 7, 15, 40),
        None,
    )
    assert one("SELECT starts_utc, ends_utc, ends_local FROM alerts WHERE alertname = 'SpyglassCrashLoop'") == (
        datetime(2026, 10, 19, 4, 40, tzinfo=UTC),
        datetime(2026, 10, 19, 4, 45, 30, tzinfo=UTC),
        datetime(2026, 10, 19, 12, 45, 30),
    )  # the webhook stores epoch seconds: both cast (issue 21 item 12)
    assert one(
        "SELECT instance, passed, reason, samples, ttft_ms_median, ttft_ms_max, outcomes->1->>'problem',"
        " ts_local FROM smoke_gates"
    ) == ("strata-b", False, "sample s1: HTTP 503", 2, 24.0, 40.0, "HTTP 503", datetime(2026, 10, 19, 12, 49))
    assert one(
        "SELECT count(*) FILTER (WHERE has_escape_fix), max(escape_literals), count(*) FILTER"
        " (WHERE stops_while_reasoning IS NULL) FROM status_snapshots"
    ) == (1, 1603, 1)


LLAMA_ONLY = {"prompt-cache": "tests/test_llama_outcomes.py"}  # reports of llama-server's lines, run where tested


def test_every_report_runs_and_says_which_incident_it_reproduces(replay):
    with session(replay) as con:
        for name, report in reports.load_all().items():
            assert "Reproduces" in report.doc, name
            if name in LLAMA_ONLY:  # the replay holds no llama-server log: its own test runs it over one
                continue
            assert con.execute(report.query(replay, Window()).text(replay)).fetchall(), name


def test_views_do_not_depend_on_the_session_time_zone(replay):
    text = Query(
        "SELECT request_id, ts_utc, ts_local, dur_ms_engine FROM requests ORDER BY request_id",
        window("2026-10-19 03:45", "2026-10-19 06:20").params(),
    ).text(replay)
    with session(replay, "UTC") as utc, session(replay, "America/New_York") as other:
        assert utc.execute(text).fetchall() == other.execute(text).fetchall()
        first = utc.execute(text).fetchone()
    assert (first[0], first[2]) == ("20261019-115000-848a00", datetime(2026, 10, 19, 11, 50))  # the id's own clock


def test_a_parameter_is_a_literal_and_an_unknown_one_is_refused():
    hostile = "x' OR 1=1; DROP TABLE events --"
    text = render(
        "SELECT $value AS v, $n AS n, $at AS at, $none AS none",
        {"value": hostile, "n": 3, "at": datetime(2026, 10, 19, 4, 49, tzinfo=UTC), "none": None},
    )
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    assert con.execute(text).fetchone() == (hostile, 3, datetime(2026, 10, 19, 4, 49, tzinfo=UTC), None)
    with pytest.raises(QueryError, match=r"\$missing"):
        render("SELECT $missing", {})


def test_only_the_named_views_and_their_bases_are_put_in_front():
    assert needed("SELECT * FROM requests") == ["engine_requests", "gateway_requests", "infer_requests", "requests"]
    assert needed("SELECT 'requests' AS word FROM cache_events") == ["cache_events"]  # a string is not a name
    text = with_views("-- note\nWITH x AS (SELECT 1) SELECT * FROM x, spans", {})
    assert text.startswith("-- note\nWITH source_kinds AS (") and "x AS (SELECT 1) SELECT * FROM x, spans" in text
    assert duckdb.connect().extract_statements(text)[0].type == duckdb.StatementType.SELECT


@pytest.mark.parametrize(
    "text, tz, expected",
    [
        ("2026-10-19 04:49", "UTC", datetime(2026, 10, 19, 4, 49, tzinfo=UTC)),
        ("2026-10-19T04:49:00.120Z", "Asia/Shanghai", datetime(2026, 10, 19, 4, 49, 0, 120000, tzinfo=UTC)),
        ("2026-10-19 12:49", "Asia/Shanghai", datetime(2026, 10, 19, 4, 49, tzinfo=UTC)),
        ("2026-10-19 12:49+08:00", "UTC", datetime(2026, 10, 19, 4, 49, tzinfo=UTC)),
        ("2026-10-19", "UTC", datetime(2026, 10, 19, tzinfo=UTC)),
    ],
)
def test_times_without_a_zone_are_read_in_the_given_zone(text, tz, expected):
    assert parse_time(text, tz) == expected


def test_bad_times_and_reversed_windows_are_refused():
    with pytest.raises(ValueError, match="not a time"):
        parse_time("12:49 yesterday")
    with pytest.raises(ValueError, match="is after --to"):
        window("2026-10-19 12:49", "2026-10-19 04:49", "UTC")
    assert window("2026-10-19 12:49", "2026-10-19 12:49", "Asia/Shanghai").start == parse_time("2026-10-19 04:49")


def test_the_store_file_is_untouched_by_the_views(replay):
    before = Path(replay.store_path()).stat().st_mtime_ns
    with session(replay) as con:
        con.execute(Query("SELECT count(*) FROM requests", Window().params()).text(replay)).fetchall()
        tables = {row[0] for row in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        views = {row[0] for row in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    assert tables == {"checkpoints", "agent_state", "store_schema", *event_schema.table_names(), *row_tables()}
    assert views == {"events", *map(event_schema.source_view, event_schema.source_kinds())}
    assert Path(replay.store_path()).stat().st_mtime_ns == before


def test_every_field_the_replays_write_is_declared(replay):
    """Every source of the replays (engine logs, gateway, infer store, supervisord, serve status, host, spans,
    alerts, smoke) writes only declared kinds and fields: nothing lands in a kind's `extra` or in ev_other."""
    with session(replay) as con:
        undeclared = {}
        for name in event_schema.table_names():
            column = "fields" if name == event_schema.OTHER else "extra"
            rows = con.execute(
                f"SELECT kind, {column}::VARCHAR FROM {event_schema.quoted(name)} WHERE {column} IS NOT NULL LIMIT 3"
            ).fetchall()
            if rows:
                undeclared[name] = rows
        stored = {row[0] for row in con.execute("SELECT DISTINCT source_kind FROM events").fetchall()}
    assert undeclared == {}
    assert stored >= {
        "engine_log",
        "gateway_log",
        "infer_store",
        "supervisord_log",
        "serve_status",
        "host",
        "otlp",
        "alertmanager",
        "smoke",
    }
