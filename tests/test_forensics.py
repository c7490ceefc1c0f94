"""The analyst's commands on replays of the seed's incidents, ingested into a real DuckDB store.

The replays (tests/fixtures/incidents/replay.py) are written as the sources write them, from the
seed's numbers; `spyglass ingest` reads them; the reports and views must give the seed's tables.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from fixtures.incidents.replay import WINDOWS, write_all
from typer.testing import CliRunner

from spyglass.cli.app import app

pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier


@pytest.fixture(scope="module")
def replay(tmp_path_factory) -> str:
    config = write_all(tmp_path_factory.mktemp("incidents"))
    result = CliRunner().invoke(app, ["ingest", "--config", str(config)])
    assert result.exit_code == 0, result.output
    return str(config)


def run(config: str, *args: str, window: str | None = None, code: int = 0) -> str:
    if window:
        start, end = WINDOWS[window]
        args += ("--from", f"{start:%Y-%m-%d %H:%M}", "--to", f"{end:%Y-%m-%d %H:%M}")
    result = CliRunner().invoke(app, [*args, "--config", config])
    assert result.exit_code == code, result.output
    return result.stdout if code == 0 else result.stderr


def rows(config: str, *args: str, window: str | None = None) -> list[dict]:
    return [json.loads(line) for line in run(config, *args, "--format", "json", window=window).splitlines()]


def test_cache_report_reproduces_incident_2(replay):
    [b] = rows(replay, "report", "cache", window="incident2")
    assert b["instance"] == "strata-b"
    assert (b["evictions"], b["evictions_counter"]) == (2508, 2508)
    assert (b["long_prompts"], b["checkpoint_only"], b["prompt_cache_every"]) == (194, 123, 16384)
    assert (b["budget_bytes"], b["slots"]) == (8192 << 20, 20)
    assert round(b["largest_snapshot_bytes"] / 1e9, 1) == 4.7  # one 254k-token conversation
    assert b["snapshot_share_of_budget"] > 0.5 and b["snapshot_in_slot_shares"] > 10
    assert b["fastest_long_prefill_ms"] == 2196  # the same conversation's 2.2 s turn: the mechanism works


def test_special_token_report_reproduces_incident_3(replay):
    table = {
        (r["day_local"], r["lane"], r["with_literals"]): (
            r["requests"],
            r["thinking_only"],
            r["broken_tool_json"],
            r["visible_content"],
        )
        for r in rows(replay, "report", "special-tokens", window="incident3")
    }
    assert table[("2026-10-17", "fast", True)] == (58, 16, 5, 20)
    assert table[("2026-10-17", "fast", False)] == (295, 0, 1, 169)
    assert table[("2026-10-17", "normal", True)] == (10, 4, 0, 6)  # the other lane is its own row
    assert len(table) == 3  # the next day lies outside the window


def test_four_counts_report_reproduces_incident_6(replay):
    by_id = {r["request_id"]: r for r in rows(replay, "report", "four-counts", window="incident6")}
    one = by_id["20261019-124900-7aa82c"]
    assert (one["chars"], one["tokens_engine"], one["tokens_gateway_estimate"]) == (1_075_447, 154_796, 516_561)
    assert (one["tokens_precheck"], one["tokens_infer_store"], one["tokens_counted_by"]) == (
        154_796,
        154_796,
        "engine log",
    )
    assert one["estimate_ratio"] == pytest.approx(3.34, abs=0.005) and one["cjk"] == 0.053
    overfits = [r for r in by_id.values() if r["status"] == 400]
    assert [r["ts_local"][11:19] for r in overfits] == ["14:14:58", "14:15:04", "14:15:10"]
    for r in overfits:
        assert (r["tokens_overfit_reported"], r["overfit_max"]) == (398_890, 256_000)  # what the 400 relayed
        assert (r["tokens_engine_rejected"], r["engine_window"]) == (372_066, 262_144)  # the engine's own count
        assert r["retried"] is True and r["tokens_counted_by"] == "engine, in its 400"
    alone = rows(replay, "report", "four-counts", "--request", "20261019-124900-7aa82c", window="incident6")
    assert [r["request_id"] for r in alone] == ["20261019-124900-7aa82c"]


def test_assembly_report_shows_the_lost_task_anchor_of_incident_5(replay):
    [session] = rows(replay, "report", "assembly", window="incident5")
    assert session["session"] == "auto:848a12ed00000000"
    assert (session["most_client_msgs"], session["requests_with_drops"], session["anchor_lost"]) == (315, 5, 5)
    assert session["plan_then_stop"] == 4 and session["anchor_kept"] == 0


def test_plan_then_eos_report_carries_the_raw_record_check_of_incidents_4_and_5(replay):
    start, end = WINDOWS["incident4"][0], WINDOWS["incident5"][1]
    found = rows(
        replay, "report", "plan-then-eos", "--from", f"{start:%Y-%m-%d %H:%M}", "--to", f"{end:%Y-%m-%d %H:%M}"
    )
    bd = [r for r in found if r["session"] == "auto:bd7e62ed00000000"]
    assert [(r["request_id"], r["previous_request"]) for r in bd] == [
        ("20261019-000107-5c6c32", "20261019-000029-de091a")
    ]
    [stop] = bd  # the prompt grew (not a client retry), far below max_tokens (not truncation), raw finish=stop
    assert (stop["previous_tokens"], stop["tokens"], stop["prompt_grew"]) == (86_472, 87_890, True)
    assert (stop["completion_tokens"], stop["max_tokens"], stop["content_chars"]) == (740, 32000, 67)
    assert (stop["finish"], stop["tool_calls"], stop["previous_tool_calls"]) == ("stop", 0, 1)
    book = [r for r in found if r["session"] == "auto:848a12ed00000000"]
    assert len(book) == 4 and all(r["anchor_survived"] is False for r in book)
    assert {(r["thinking_tokens"], r["thinking_max"], r["thinking_cause"], r["wrote_tool_call"]) for r in book} == {
        (3194, 32000, "stop", False)
    }


def test_restarts_report_counts_the_crash_loop_and_its_causes(replay):
    by_program = {
        r["program"]: r
        for r in rows(replay, "report", "restarts", "--from", "2026-10-19 05:00", "--to", "2026-10-19 09:00")
    }
    b = by_program["strata-b"]
    assert (b["spawns"], b["restarts"], b["unexpected_exits"], b["core_dumps"], b["fatal"]) == (4, 3, 4, 1, 1)
    assert b["exit_causes"] == "exit status 134 x3, terminated by SIGABRT (core dumped) x1"
    proxy = by_program["rag-proxy"]
    assert proxy["restarts"] == 3 and proxy["exit_causes"] == "exit status 1 x3"
    # the three restarts of 10-19 in Beijing time: 13:07, 13:56, 16:41 (not the report's 15:33)
    assert proxy["first_local"].startswith("2026-10-19T13:07") and proxy["last_local"].startswith("2026-10-19T16:41")


def test_timeline_merges_every_source_in_time_order_on_both_clocks(replay):
    events = rows(replay, "timeline", "--from", "2026-10-19 04:49", "--to", "2026-10-19 04:49:20")
    assert {e["source"] for e in events} == {"gateway", "engine-a", "infer"}
    instants = [datetime.fromisoformat(e["ts_utc"]) for e in events]
    assert instants == sorted(instants)
    for e, utc in zip(events, instants):
        assert e["ts_utc"].endswith("Z") and datetime.fromisoformat(e["ts_local"]) == utc
        assert datetime.fromisoformat(e["ts_local"]).utcoffset() == timedelta(hours=8)
    precheck = next(e for e in events if e["kind"] == "precheck")
    assert precheck["fields"]["count_tokens"] == 154_796  # fields nest in JSON
    kinds = [e["kind"] for e in events if e["source"] == "engine-a"]
    assert kinds == ["queued", "prompt", "thinking", "tool_call", "done", "park"]
    table = run(
        replay,
        "timeline",
        "--from",
        "2026-10-19 12:49",
        "--to",
        "2026-10-19 12:49:20",
        "--tz",
        "Asia/Shanghai",
        "--source",
        "gateway",
        "--format",
        "csv",
    )
    parsed = list(csv.DictReader(io.StringIO(table)))
    assert [r["kind"] for r in parsed] == ["request", "precheck", "clamp", "done"]  # the same instants, read in Beijing
    assert json.loads(parsed[0]["fields"])["chars"] == 1_075_447


def test_requests_finds_the_ids_that_timeline_request_takes(replay):
    failed = rows(replay, "requests", "--status", "4xx", window="incident6")
    assert [r["request_id"] for r in failed] == [
        "20261019-141458-1f2e3d",
        "20261019-141504-1f2e3e",
        "20261019-141510-1f2e3f",
    ]
    assert rows(replay, "requests", "--status", "400", window="incident6") == failed
    one = rows(replay, "timeline", "--request", failed[0]["request_id"])
    assert [e["kind"] for e in one] == ["request", "overfit", "retry_on_overfit", "request"]
    slowest = rows(replay, "requests", "--slowest", "2", window="incident2")
    assert len(slowest) == 2 and slowest[0]["dur_ms_engine"] >= slowest[1]["dur_ms_engine"] > 100_000
    session = rows(replay, "requests", "--session", "auto:bd7e62ed00000000", window="incident4")
    assert [r["request_id"] for r in session] == ["20261019-000029-de091a", "20261019-000107-5c6c32"]


def test_trace_of_a_failed_request_says_its_status_reason_and_blind_retry(replay):
    """It said only "error": incident 6's 400 and the gateway's blind retry with max_tokens 1."""
    out = run(replay, "trace", "20261019-141458-1f2e3d")
    assert "status: 400 #545 prompt too long: 372066 > 262144" in out
    assert "blind retry: the gateway sent the same prompt again with max_tokens 32000 -> 1" in out
    succeeded = run(replay, "trace", "20261019-124900-7aa82c")  # a 200: no outcome lines
    assert "status: " not in succeeded and "blind retry" not in succeeded


def test_timeline_of_a_request_includes_its_conversations_cache_lines(replay):
    one = rows(replay, "timeline", "--request", "20261019-124900-7aa82c", "--source", "engine-a")
    assert [e["kind"] for e in one] == ["queued", "prompt", "thinking", "tool_call", "done", "park"]
    assert one[-1]["request_id"] is None and one[-1]["fields"]["conv"] == "15eb3770f7f979bf"


def test_a_hostile_filter_value_is_data_not_sql(replay):
    message = run(replay, "requests", "--session", "x' OR 1=1 --", window="incident6", code=1)
    assert "no request matches" in message


@pytest.mark.parametrize(
    "args, words",
    [
        (("timeline", "--from", "2026-10-19 05:00", "--to", "2026-10-19 04:00"), "is after --to"),
        (("timeline", "--from", "yesterday", "--to", "2026-10-19 04:00"), "not a time"),
        (("timeline", "--since", "15m", "--from", "2026-10-19 05:00"), "not both"),
        (("timeline", "--source", "nosuch"), "engine-a, engine-b, gateway, infer, serve-status, supervisord"),
        (("requests", "--from", "2026-10-19 05:00", "--to", "2026-10-19 06:00", "--status", "4x"), "--status"),
        (("report", "no-such-report"), "special-tokens"),
        (("timeline", "--request", "12345"), "not a request id"),
    ],
)
def test_usage_errors_exit_2_and_say_why(replay, args, words):
    assert words in run(replay, *args, code=2)


def test_timeline_prints_an_event_a_row_its_fields_wrapped_to_the_terminal(replay):
    """At 100 columns source, instance and kind were cut to `su…`; now they stay whole, the shared date and
    the second clock move to the header, and the fields wrap under themselves so a request id stays whole."""
    result = CliRunner().invoke(app, ["timeline", "--config", replay, "--limit", "40"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    header, columns, *lines = result.stdout.splitlines()
    stored = len(rows(replay, "timeline", "--limit", "100000"))
    assert header.startswith(f"the first 40 of {stored:,} events between the beginning and the end")
    words = columns.split()
    assert words[0] == "utc" and words[2:6] == ["source", "instance", "kind", "fields"] and "Asia/Shanghai" in columns
    events = [line for line in lines if not line.startswith(" ")]
    assert len(events) == 40 and all(len(line) <= 100 for line in lines)
    assert all("su…" not in line for line in lines)
    first = rows(replay, "timeline", "--limit", "1")[0]
    assert events[0].split()[1:4] == [first["source"], first["instance"], first["kind"]]
    assert f"{next(iter(first['fields']))}=" in events[0]


def test_timeline_leaves_kinds_out_and_keeps_lines_that_contain_a_text(replay):
    window = ("--from", "2026-10-19 04:49", "--to", "2026-10-19 04:49:20")
    every = rows(replay, "timeline", *window)
    without = rows(replay, "timeline", *window, "--exclude-kind", "park", "--exclude-kind", "thinking")
    assert without == [e for e in every if e["kind"] not in ("park", "thinking")] and len(without) < len(every)
    counted = rows(replay, "timeline", *window, "--contains", "154796")  # the engine's count of incident 6's prompt
    assert counted == [e for e in every if "154796" in json.dumps(e)] and 0 < len(counted) < len(every)
    assert rows(replay, "timeline", *window, "--contains", "gateway", "--contains", "clamp") == [
        e for e in every if e["source"] == "gateway" and e["kind"] == "clamp"
    ]


def test_every_window_option_takes_rfc3339_epoch_and_now_relative_times(replay):
    start, end = WINDOWS["incident6"]
    by_text = rows(replay, "requests", "--from", start.isoformat(), "--to", end.isoformat())
    assert rows(replay, "requests", "--from", str(int(start.timestamp())), "--to", str(int(end.timestamp()))) == by_text
    ago = (datetime.now(UTC) - start).total_seconds()
    assert rows(replay, "requests", "--from", f"now-{ago:.0f}s", "--to", end.isoformat()) == by_text
    assert rows(replay, "requests", "--since", f"{ago:.0f}s", "--to", end.isoformat()) == by_text
    # timeline and crashes take everything stored by default, as report does
    assert len(rows(replay, "timeline", "--limit", "100000")) == len(
        rows(replay, "timeline", "--since", "3650d", "--limit", "100000")
    )
    assert {c["instance"] for c in rows(replay, "crashes")} >= {"strata-b"}


def test_a_window_with_no_data_says_so(replay):
    message = run(replay, "timeline", "--from", "2030-01-01 00:00", "--to", "2030-01-01 01:00", code=1)
    assert message.startswith("no events are stored between 2030-01-01 00:00:00Z")
    message = run(replay, "report", "cache", window="incident3", code=1)
    assert "events are stored, but report cache found nothing" in message


def test_report_sql_prints_the_evidence_query_with_its_views(replay):
    text = run(replay, "report", "cache", "--sql", window="incident2")
    assert text.startswith("-- The conversation cache per engine instance")
    assert "cache_events__all AS (" in text and "TIMESTAMPTZ '2026-10-07 07:00:00.000000+00'" in text
    # only the views it names, and what they are built on
    assert "\nrequests__all AS (" not in text and "\nengine_requests__all AS (" in text
