"""`spyglass diagnose` on replays of the seed's incidents and on a healthy hour, in a real DuckDB store.

Each incident's window must find its heuristic with the seed's figures and no heuristic of another
incident; the healthy hour finds nothing; the exit status gates on severity.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from fixtures.incidents.healthy import WINDOW as HEALTHY
from fixtures.incidents.healthy import write_healthy
from fixtures.incidents.replay import WINDOWS, engine_banner, supervisord, utc, write_all
from typer.testing import CliRunner

from spyglass.alerting.heuristics import by_id
from spyglass.cli.app import app
from spyglass.config import parse_config
from spyglass.forensics.diagnose import findings_of
from spyglass.forensics.times import utc_text

pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier


def ingest(config) -> str:
    result = CliRunner().invoke(app, ["ingest", "--config", str(config)])
    assert result.exit_code == 0, result.output
    return str(config)


@pytest.fixture(scope="module")
def replay(tmp_path_factory) -> str:
    return ingest(write_all(tmp_path_factory.mktemp("incidents")))


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> str:
    return ingest(write_healthy(tmp_path_factory.mktemp("healthy")))


def diagnose(config: str, start, end, *extra: str, code: int | None = None):
    result = CliRunner().invoke(
        app,
        ["diagnose", "--config", config, "--from", f"{start:%Y-%m-%d %H:%M}", "--to", f"{end:%Y-%m-%d %H:%M}", *extra],
    )
    if code is not None:
        assert result.exit_code == code, result.output
    return result


def findings(config: str, start, end, code: int) -> dict[str, list[dict]]:
    result = diagnose(config, start, end, "--json", code=code)
    report = json.loads(result.stdout)
    assert report["window"] == {"from": f"{start:%Y-%m-%dT%H:%M}:00.000Z", "to": f"{end:%Y-%m-%dT%H:%M}:00.000Z"}
    out: dict[str, list[dict]] = {}
    for f in report["findings"]:
        out.setdefault(f["heuristic"], []).append(f)
    return out


def test_incident_2_is_an_eviction_storm_with_checkpoint_only_long_prompts(replay):
    found = findings(replay, *WINDOWS["incident2"], code=2)  # the storm is critical
    assert set(found) == {"H3", "H4", "H5"}  # and it burns the normal lane's TTFT budget, as the pager says
    [late] = found["H5"]
    assert late["instance"] == "strata-b" and late["figures"]["worst_hour_late_percent"] > 14.4
    [storm] = found["H3"]
    assert (storm["instance"], storm["severity"], storm["alert"]) == ("strata-b", "critical", "EngineEvictionStorm")
    figures = storm["figures"]
    assert figures["evictions"] == 2508
    assert (figures["budget_bytes"], figures["slots"]) == (8192 << 20, 20)
    assert round(figures["largest_snapshot_bytes"] / 1e9, 1) == 4.7 and figures["snapshot_share_of_budget"] > 0.5
    assert figures["snapshot_in_slot_shares"] > 10
    assert "2,508" in storm["summary"] and storm["start"] < storm["end"]
    [longs] = found["H4"]
    assert (longs["instance"], longs["figures"]["long_prompts"], longs["figures"]["checkpoint_only"]) == (
        "strata-b",
        194,
        123,
    )
    h3 = by_id()["H3"]  # the text is the catalogue's
    assert storm["wrong_guess"] == h3.wrong_guess and storm["check"] == h3.check.text
    assert storm["knobs"] == list(h3.knobs) and "cache_events__all" in storm["evidence"]


def test_incident_3_is_the_special_token_control_table(replay):
    found = findings(replay, *WINDOWS["incident3"], code=1)
    assert set(found) == {"H6"}
    fast = next(f for f in found["H6"] if f["lane"] == "fast")
    table = [
        tuple(
            fast["figures"][f"{side}_{c}"] for c in ("requests", "thinking_only", "broken_tool_json", "visible_content")
        )
        for side in ("with_literals", "without_literals")
    ]
    assert table == [(58, 16, 5, 20), (295, 0, 1, 169)]
    assert fast["instance"] is None and fast["severity"] == "warning"
    assert "16 of 58" in fast["summary"] and "0 of 295" in fast["summary"]


def test_incident_5_is_a_lost_task_anchor_then_plans_and_eos(replay):
    found = findings(replay, *WINDOWS["incident5"], code=1)
    # H10 is there too and true: the replay's English prompts are estimated at 2.1x the engine's count.
    assert set(found) == {"H8", "H9", "H10"}
    [anchor] = found["H9"]
    assert (
        anchor["figures"]["anchor_lost"],
        anchor["figures"]["client_msgs"],
        anchor["figures"]["sent_msgs"],
        anchor["figures"]["most_dropped_msgs"],
    ) == (5, 315, 147, 168)  # the seed's 147 of 315 sent
    assert anchor["trace_request_id"] and "147 of the client's 315" in anchor["summary"]
    assert found["H8"][0]["figures"]["plan_then_stop"] == 4


def test_incident_6_is_the_four_counts_and_the_blind_retries(replay):
    start, end = WINDOWS["incident6"]
    found = findings(replay, start, utc("2026-10-19 05:00"), code=1)
    assert set(found) == {"H10"}
    skew = found["H10"][0]["figures"]
    assert (skew["characters"], skew["engine_tokens"], skew["estimated_tokens"]) == (1_075_447, 154_796, 516_561)
    assert skew["ratio"] == pytest.approx(3.34, abs=0.005)
    retries = findings(replay, utc("2026-10-19 06:14"), utc("2026-10-19 06:16"), code=1)
    assert set(retries) == {"H11"}
    assert retries["H11"][0]["figures"]["engine_prompt_tokens"] == 372_066


def test_the_restart_loop_is_critical_with_its_exit_causes(replay):
    found = findings(replay, *WINDOWS["restarts"], code=2)
    assert set(found) - {"H11"} == {"H13"}  # the window also holds incident 6's blind retries at 06:14
    [loop] = found["H13"]
    assert loop["instance"] == "strata-b" and loop["severity"] == "critical"
    assert {k: v for k, v in loop["figures"].items() if k in ("spawns", "restarts", "unexpected_exits", "fatal")} == {
        "spawns": 4,
        "restarts": 3,
        "unexpected_exits": 4,
        "fatal": 1,
    }
    assert loop["figures"]["exit_causes: exit status 134"] == 3
    assert loop["figures"]["exit_causes: terminated by SIGABRT (core dumped)"] == 1
    assert loop["start"] == "2026-10-19T06:10:01.130Z" and loop["end"] == "2026-10-19T06:20:09.112Z"
    # rag-proxy restarted three times that day, hours apart: not a loop
    assert all(f["instance"] != "rag-proxy" for f in found.get("H13", []))


SPAWNS = ("06:10:01.130", "06:20:02.780", "06:20:04.110", "06:20:07.520")  # supervisord's, in the replay


@pytest.mark.parametrize("watched", [True, False], ids=["supervisord watches it", "nothing watches it"])
def test_a_restart_loop_is_found_once_whoever_counts_it(tmp_path, watched):
    """The engine's own start banners at supervisord's four spawns: with supervisord's log in the store the loop
    is ProgramCrashLoop's, counted by supervisord, and the banners add no second finding; without it (systemd,
    a container, a shell loop) it is EngineRestartLoop's, counted from the log, as the alert pages it."""
    banners = [raw for at in SPAWNS for raw in engine_banner(utc(f"2026-10-19 {at}"), 8082, "38-53")]
    (tmp_path / "engine-b.log").write_bytes(b"\n".join(sorted(banners, key=lambda raw: raw[:23])) + b"\n")
    (tmp_path / "supervisord.log").write_bytes(b"\n".join(supervisord()) + b"\n")
    sources = f'[sources.engine-b]\nkind = "engine_log"\npath = "{tmp_path}/engine-b.log"\ninstance = "strata-b"\n'
    if watched:
        sources += f'[sources.supervisord]\nkind = "supervisord_log"\npath = "{tmp_path}/supervisord.log"\n'
    config = tmp_path / "spyglass.toml"
    config.write_text(f'[agent]\nstate_dir = "{tmp_path}/state"\n[exporters.prometheus]\nenabled = false\n{sources}')
    found = findings(ingest(config), *WINDOWS["restarts"], code=2)
    [loop] = found["H13"]
    assert (loop["instance"], loop["severity"]) == ("strata-b", "critical")
    figures = {k: v for k, v in loop["figures"].items() if k in ("spawns", "restarts", "most_spawns_in_window")}
    assert figures == {"spawns": 4, "restarts": 3, "most_spawns_in_window": 4}
    if watched:
        assert loop["alert"] == "ProgramCrashLoop" and loop["figures"]["fatal"] == 1
        assert "counted by supervisord" in loop["summary"]
    else:
        assert loop["alert"] == "EngineRestartLoop" and "fatal" not in loop["figures"]
        assert "counted from its own log, no supervisord watching it" in loop["summary"], loop["summary"]


def test_a_healthy_hour_finds_nothing_and_exits_0(healthy):
    result = diagnose(healthy, *HEALTHY, "--json", code=0)
    report = json.loads(result.stdout)
    assert report["findings"] == [] and report["events"] > 900
    assert {"H3", "H4", "H5", "H6", "H10", "H13"} <= set(report["checked"])
    table = diagnose(healthy, *HEALTHY, code=0).stdout
    assert "0 findings between 2026-11-02 02:00:00Z" in table


def test_the_table_carries_summary_figures_check_and_evidence(replay):
    text = diagnose(replay, *WINDOWS["incident2"], code=2).stdout
    assert "EngineEvictionStorm" in text and "2,508" in text
    assert by_id()["H3"].wrong_guess in text and "--conversation-cache-mib" in text
    assert "SELECT instance" in text  # the evidence query


def test_from_after_to_is_a_usage_error(replay):
    result = diagnose(replay, utc("2026-10-19 06:00"), utc("2026-10-19 05:00"), code=2)
    assert "is after --to" in result.stderr


def test_an_empty_window_says_so(replay):
    result = diagnose(replay, utc("2030-01-01 00:00"), utc("2030-01-01 01:00"), "--json", code=1)
    assert "no events are stored between 2030-01-01 00:00:00Z" in result.stderr
    assert json.loads(result.stdout)["findings"] == []


def test_a_null_figure_is_left_out_and_its_summary_says_unknown():
    h = by_id()["H3"]
    columns = ["instance", "lane", "start_utc", "end_utc", *h.probe.figures]
    row = (
        "strata-b",
        "normal",
        "2026-10-07T07:24:10+00:00",
        None,
        2508,
        15.8,
        4_716_362_992,
        None,
        8192 << 20,
        None,
        0.549,
        None,
    )
    [f] = findings_of(h, columns, [row], "SELECT 1")
    assert "slots" not in f.figures and f.figures["evictions"] == 2508 and f.end is None
    assert "?" not in f.summary and "2,508" in f.summary
    assert f.summary.endswith("Not known: slots, snapshot in slot shares (not in this window's events).")
    assert f.start.isoformat() == "2026-10-07T07:24:10+00:00" and f.severity == "critical"


def test_an_open_window_is_everything_stored_as_for_report(healthy, tmp_path):
    whole = json.loads(CliRunner().invoke(app, ["diagnose", "--config", healthy, "--json"]).stdout)
    span = CliRunner().invoke(
        app,
        [
            "sql",
            "--config",
            healthy,
            "--format",
            "json",
            "SELECT min(ts) AS first, max(ts) AS last, count(*) AS n FROM events",
        ],
    )
    stored = json.loads(span.stdout)
    first = datetime.fromisoformat(stored["first"]).astimezone(UTC)
    last = datetime.fromisoformat(stored["last"]).astimezone(UTC) + timedelta(milliseconds=1)
    assert whole["window"] == {"from": utc_text(first), "to": utc_text(last)}  # the last event is inside
    assert whole["events"] == stored["n"] and whole["findings"] == []
    # one open end: closed at the store's last event; the explicit --from kept
    half = json.loads(
        CliRunner()
        .invoke(app, ["diagnose", "--config", healthy, "--json", "--from", f"{HEALTHY[0]:%Y-%m-%d %H:%M}"])
        .stdout
    )
    assert half["window"] == {"from": f"{HEALTHY[0]:%Y-%m-%dT%H:%M}:00.000Z", "to": utc_text(last)}
    # nothing stored in an open window: said, exit 1, never a usage error
    result = CliRunner().invoke(app, ["diagnose", "--config", healthy, "--from", "2030-01-01 00:00"])
    assert result.exit_code == 1 and "no events are stored" in result.stderr and "nothing to diagnose" in result.stderr


@pytest.mark.parametrize(
    "ttfts, found",
    [
        ((21.0, 40.5), True),  # p95 39.5 s is under the 40 s objective, but half are late: the fast burn's page
        ((21.0, 42.0), True),  # p95 above the objective: the spike
        ((5.0,) * 99 + (41.0,), False),  # 1% late: within the 99% objective's budget, p95 5 s
        ((5.0,) * 80 + (41.0,) * 20, True),  # 20% late: over 14.4x the 1% budget
        ((5.0, 39.9), False),
    ],
)
def test_the_ttft_probe_finds_what_either_h5_alert_would(ttfts, found):
    """H5's probe over a window: p95 above the objective (EngineTTFTSpike), or a late share above the
    fast burn's 14.4x the budget (EngineTTFTBudgetFastBurn); a lane of 40 s at 99%."""
    import duckdb

    from spyglass.alerting.heuristics import Deployment, catalogue

    d = Deployment.of(parse_config({"alerts": {"lanes": {"normal": {"ttft_seconds": 40, "objective": 0.99}}}}, "t"))
    h5 = next(h for h in catalogue(d) if h.id == "H5")
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE engine_requests (instance VARCHAR, lane VARCHAR, ts_utc TIMESTAMPTZ, request_id VARCHAR,"
        " ttft_ms DOUBLE)"
    )
    con.executemany(
        "INSERT INTO engine_requests VALUES ('strata-b', 'normal', TIMESTAMPTZ '2026-10-19 05:00:00+00', NULL, ?)",
        [(t * 1000,) for t in ttfts],
    )
    rows = con.execute(h5.probe.sql).fetchall()
    assert bool(rows) == found, rows


@pytest.fixture
def query_processes(monkeypatch) -> list[list[str]]:
    """The query processes (spyglass.query.sqlworker) started while the test runs: each Popen is recorded, then made."""
    import subprocess

    import spyglass.query.bounded

    started: list[list[str]] = []
    real = subprocess.Popen

    def popen(args, *rest, **kwargs):
        started.append(list(args))
        return real(args, *rest, **kwargs)

    monkeypatch.setattr(spyglass.query.bounded.subprocess, "Popen", popen)
    return started


def test_diagnose_runs_every_probe_on_one_connection_in_one_process(replay, query_processes):
    found = findings(replay, *WINDOWS["incident2"], code=2)
    assert {"H3", "H4"} <= set(found)
    assert len(query_processes) == 1, query_processes  # the window's span, the counts, and every probe


def window_args(name: str) -> list[str]:
    start, end = WINDOWS[name]
    return ["--from", f"{start:%Y-%m-%d %H:%M}", "--to", f"{end:%Y-%m-%d %H:%M}"]


@pytest.mark.parametrize(
    "command",
    [
        ["timeline", "--kind", "start", *window_args("incident2")],
        ["report", "cache", *window_args("incident2")],
        ["changes"],
        ["crashes"],
    ],
)
def test_a_forensic_command_starts_one_query_process(replay, query_processes, command):
    result = CliRunner().invoke(app, [*command, "--config", replay])
    assert result.exit_code in (0, 1), result.output  # 1: nothing of that kind in the window
    assert len(query_processes) == 1, (result.output, query_processes)
