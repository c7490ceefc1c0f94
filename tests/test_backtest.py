"""Alerts tested on history: log files shaped by the seeds' numbers, ingested by the real pipeline into
a real DuckDB store, replayed (`spyglass backfill`) and evaluated by Debian's Prometheus (`spyglass
backtest`). Each incident's alert fires in its window and no unrelated one; a quiet day fires only
Watchdog; an empty window says so."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import wait_until
from typer.testing import CliRunner

from spyglass.agent.pipeline import Pipeline
from spyglass.agent.runtime import open_store
from spyglass.alerting.backfill import (
    OPENMETRICS_FILE,
    BackfillError,
    BackfillResult,
    parse_duration,
    parse_time,
    replay,
)
from spyglass.alerting.backtest import episodes
from spyglass.alerting.backtest_cleanup import process_start
from spyglass.alerting.backtest_report import BacktestResult, Firing, Pending, show
from spyglass.alerting.backtest_rules import (
    MAX_RULE_FILE_BYTES,
    AlertRule,
    BacktestError,
    config_rules,
    inline,
    load_rules,
)
from spyglass.cli.app import app
from spyglass.collectors.clock import SystemClock
from spyglass.config import load_config
from spyglass.engine.emulator.logsynth import Conversation, EngineModel

pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier

ROOT = Path(__file__).resolve().parents[1]
DAY = datetime(2026, 10, 7, tzinfo=UTC).timestamp()  # incident 2's day (the storm 15:21-19:40 Beijing)
H = 3600.0
STORM = (DAY + 2 * H, DAY + 2 * H + 260 * 60)  # 4 h 20 min, as 15:21-19:40
STORM_EVICTIONS = 2508  # the seed's evictions
CRASH = (DAY + 8 * H, DAY + 8.5 * H)  # strata-a crash-loops to FATAL, an operator starts it again
GiB = 1 << 30


def small_conversations(model: EngineModel, n: int) -> list[Conversation]:
    return [Conversation(f"{model.rng.getrandbits(64):016x}", model.rng.randrange(2000, 8000)) for _ in range(n)]


class EngineWriter:
    """An engine log in time order: the logsynth model's lines, sorted by their stamps."""

    def __init__(self, model: EngineModel) -> None:
        self.model, self.lines = model, []

    def add(self, lines: list[bytes]) -> None:
        self.lines += lines

    def start(self, ts: float, cpus: str) -> None:
        """The start-up banner; each instance pinned to CPUs of its own (logsynth's are strata-b's)."""
        self.add(
            [raw.replace(b"cpus allowed=38-53", f"cpus allowed={cpus}".encode()) for raw in self.model.start_lines(ts)]
        )

    def healthy(self, start: float, end: float, every: float = 120.0, stats: float = 10.0) -> None:
        t = start
        while t < end:
            self.add(self.model.turn(t))
            t += every
        self.stats(start, end, stats)

    def stats(self, start: float, end: float, every: float = 10.0) -> None:
        t = start
        while t < end:
            self.add([self.model.stats_line(t)])
            t += every

    def write(self, path: Path) -> None:
        self.lines.sort(key=lambda raw: raw[:23])  # stable: a turn's lines keep their order
        path.write_bytes(b"\n".join(self.lines) + b"\n")


def supervisord(ts: float, level: str, message: str) -> str:
    stamp = datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    return f"{stamp} {level} {message}"


def config_file(folder: Path) -> Path:
    text = (
        f'[agent]\nstate_dir = "{folder}"\n[exporters.prometheus]\nenabled = false\n[exporters.store]\nenabled = true\n'
    )
    for name, instance, lane in (("engine-a", "strata-a", "fast"), ("engine-b", "strata-b", "normal")):
        text += (
            f'[sources.{name}]\nkind = "engine_log"\npath = "{folder / name}.log"\ninstance = "{instance}"\n'
            f'lane = "{lane}"\ntz = "UTC"\n'
        )
    text += f'[sources.supervisord]\nkind = "supervisord_log"\npath = "{folder / "supervisord.log"}"\ntz = "UTC"\n'
    (folder / "spyglass.toml").write_text(text)
    return folder / "spyglass.toml"


def ingest(folder: Path) -> Path:
    config = config_file(folder)
    cfg = load_config(config)
    pipeline = Pipeline(cfg, SystemClock(), open_store(cfg))
    try:
        assert pipeline.run_until_idle() > 0
    finally:
        pipeline.close()
    return config


def start_lines(ts: float, names: tuple[str, ...]) -> list[str]:
    out = [supervisord(ts, "INFO", "supervisord started with pid 3426001")]
    for n, name in enumerate(names):
        out.append(supervisord(ts + 1, "INFO", f"spawned: '{name}' with pid {3426010 + n}"))
        out.append(
            supervisord(
                ts + 31,
                "INFO",
                f"success: {name} entered RUNNING state, process has stayed up for > than 30 seconds (startsecs)",
            )
        )
    return out


def incident_day(folder: Path) -> Path:
    """00:00-10:00 UTC: strata-b's eviction storm (4.7 GB snapshots in 8 GiB, 2508 evictions) and
    strata-a's crash loop to FATAL at 08:00, restarted at 08:30; healthy otherwise."""
    a = EngineWriter(EngineModel(instance_port=8081, budget_bytes=64 * GiB, seed=11))
    b = EngineWriter(EngineModel(instance_port=8082, budget_bytes=8192 << 20, seed=12))
    a.model.convs = small_conversations(a.model, 4)
    b.model.convs = small_conversations(b.model, 4)
    a.start(DAY + 30, "22-37")
    b.start(DAY + 30, "38-53")
    a.healthy(DAY + 60, CRASH[0])
    a.start(CRASH[1] + 30, "22-37")
    a.healthy(CRASH[1] + 60, DAY + 10 * H)
    b.healthy(DAY + 60, STORM[0])
    # The 1M-context suite sent to strata-b alone: eight 240k-token conversations, a turn every 3.6 s,
    # until the seed's 2508 evictions (one snapshot fits the budget: almost every turn evicts).
    b.model.convs = [Conversation(f"{b.model.rng.getrandbits(64):016x}", 240_000 + 2000 * k) for k in range(8)]
    t, first = STORM[0], b.model.cache.evictions
    while b.model.cache.evictions - first < STORM_EVICTIONS and t < STORM[1]:
        b.add(b.model.turn(t))
        t += 3.6
    b.stats(STORM[0], STORM[1])
    b.model.convs = small_conversations(b.model, 4)
    b.healthy(STORM[1], DAY + 10 * H)
    a.write(folder / "engine-a.log")
    b.write(folder / "engine-b.log")
    sup = start_lines(DAY, ("rag-proxy", "strata-a", "strata-b"))
    t, pid = CRASH[0], 3427000
    sup.append(supervisord(t, "WARN", "exited: strata-a (terminated by SIGABRT (core dumped); not expected)"))
    for k in range(5):  # supervisord retries; the model load dies each time within startsecs
        sup.append(supervisord(t + 60 * k + 2, "INFO", f"spawned: 'strata-a' with pid {pid + k}"))
        sup.append(supervisord(t + 60 * k + 50, "WARN", "exited: strata-a (exit status 134; not expected)"))
    sup.append(
        supervisord(t + 300, "INFO", "gave up: strata-a entered FATAL state, too many start retries too quickly")
    )
    sup.append(supervisord(CRASH[1], "INFO", f"spawned: 'strata-a' with pid {pid + 10}"))
    sup.append(
        supervisord(
            CRASH[1] + 31,
            "INFO",
            "success: strata-a entered RUNNING state, process has stayed up for > than 30 seconds (startsecs)",
        )
    )
    (folder / "supervisord.log").write_text("\n".join(sup) + "\n")
    return ingest(folder)


def quiet_day(folder: Path) -> Path:
    a = EngineWriter(EngineModel(instance_port=8081, budget_bytes=64 * GiB, seed=21))
    b = EngineWriter(EngineModel(instance_port=8082, budget_bytes=64 * GiB, seed=22))
    for w, cpus in ((a, "22-37"), (b, "38-53")):
        w.model.convs = small_conversations(w.model, 4)
        w.start(DAY + 30, cpus)
        w.healthy(DAY + 60, DAY + 26 * H)
    a.write(folder / "engine-a.log")
    b.write(folder / "engine-b.log")
    (folder / "supervisord.log").write_text("\n".join(start_lines(DAY, ("rag-proxy", "strata-a", "strata-b"))) + "\n")
    return ingest(folder)


@pytest.fixture(scope="module")
def incident(tmp_path_factory) -> Path:
    return incident_day(tmp_path_factory.mktemp("incident"))


def backtest_json(config: Path, start: float, end: float, *extra: str) -> dict:
    result = CliRunner().invoke(
        app,
        [
            "backtest",
            "--config",
            str(config),
            "--from",
            str(start),
            "--to",
            str(end),
            "--rules",
            str(ROOT / "alerts"),
            "--json",
            *extra,
        ],
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def within(text: str | None, start: float, end: float) -> bool:
    return text is not None and start <= parse_time(text) <= end


def test_the_storm_and_the_crash_loop_fire_in_their_windows_and_nothing_unrelated(incident: Path) -> None:
    alerts = backtest_json(incident, DAY + 2 * H, DAY + 10 * H)["alerts"]
    assert {tuple(a) for a in alerts} == {("alert", "heuristic", "severity", "labels", "start", "end")}
    storm = [a for a in alerts if a["alert"] == "EngineEvictionStorm"]
    assert storm and all(a["labels"]["instance"] == "strata-b" for a in storm)
    assert within(storm[0]["start"], STORM[0], STORM[0] + 30 * 60), storm[0]
    assert all(within(a["start"], *STORM) and within(a["end"], STORM[0], STORM[1] + 30 * 60) for a in storm), storm
    loop = [a for a in alerts if a["alert"] == "ProgramCrashLoop"]
    assert len(loop) == 1 and loop[0]["labels"]["instance"] == "strata-a"
    assert within(loop[0]["start"], CRASH[0], CRASH[0] + 5 * 60) and within(
        loop[0]["end"], CRASH[0], CRASH[1] + 20 * 60
    )
    fatal = [a for a in alerts if a["alert"] == "ProgramFatal"]
    assert len(fatal) == 1 and within(fatal[0]["start"], CRASH[0], CRASH[0] + 6 * 60)
    assert within(fatal[0]["end"], CRASH[1], CRASH[1] + 60)  # the operator's restart resolves it
    # The storm's own chain (H3 -> checkpoint-only restores H4 -> TTFT H5) on strata-b, the crash loop
    # (H13) on strata-a, the heartbeat: nothing else, and nothing of one incident on the other instance.
    chain = {
        "EngineEvictionStorm",
        "EngineSnapshotOverBudget",
        "EngineLongPromptsCheckpointOnly",
        "EngineTTFTBudgetFastBurn",
        "EngineTTFTBudgetSlowBurn",
        "EngineTTFTSpike",
    }
    for a in alerts:
        if a["alert"] in chain:
            assert a["labels"]["instance"] == "strata-b" and within(a["start"], *STORM), a
        else:
            assert a["alert"] in {"ProgramCrashLoop", "ProgramFatal", "Watchdog"}, a
    watchdog = [a for a in alerts if a["alert"] == "Watchdog"]
    assert watchdog == [
        {
            "alert": "Watchdog",
            "heuristic": "H19",
            "severity": "info",
            "labels": {"severity": "info", "heuristic": "H19"},
            "start": "2026-10-07T02:00:00Z",
            "end": None,
        }
    ]


def test_a_window_around_the_crash_loop_alone_has_only_the_crash_loop(incident: Path) -> None:
    alerts = backtest_json(incident, CRASH[0] - 30 * 60, CRASH[1] + 60 * 60)["alerts"]
    assert sorted({a["alert"] for a in alerts}) == ["ProgramCrashLoop", "ProgramFatal", "Watchdog"]


def test_the_replay_keeps_the_seeds_numbers(incident: Path, tmp_path: Path) -> None:
    result = replay(load_config(incident), DAY, DAY + 10 * H, 15.0, tmp_path / OPENMETRICS_FILE)
    text = (tmp_path / OPENMETRICS_FILE).read_text()
    last = [ln for ln in text.splitlines() if ln.startswith('spyglass_engine_evictions_total{instance="strata-b"')][-1]
    assert float(last.split()[1]) >= STORM_EVICTIONS
    assert result.times == 10 * 240 + 1 and text.endswith("# EOF\n")
    check = subprocess.run(
        [
            "promtool",
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            str(tmp_path / OPENMETRICS_FILE),
            str(tmp_path / "blocks"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert check.returncode == 0, check.stderr


def test_a_quiet_day_fires_nothing_but_watchdog(tmp_path: Path) -> None:
    config = quiet_day(tmp_path)
    alerts = backtest_json(config, DAY + 2 * H, DAY + 26 * H, "--step", "30s")["alerts"]
    assert [a["alert"] for a in alerts] == ["Watchdog"], alerts


def test_an_empty_window_says_so(incident: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "backtest",
            "--config",
            str(incident),
            "--from",
            "2027-01-01T00:00:00Z",
            "--to",
            "2027-01-02T00:00:00Z",
            "--rules",
            str(ROOT / "alerts"),
        ],
    )
    assert result.exit_code == 1
    assert "no events of engine-a, engine-b, supervisord between 2027-01-01T00:00:00Z" in result.output
    with pytest.raises(BackfillError, match="must be after"):
        replay(load_config(incident), DAY + H, DAY, 15.0, Path("/nonexistent/x.om"))


@pytest.mark.parametrize("text,seconds", [("15s", 15), ("1m30s", 90), ("2h", 7200), ("1d", 86400), ("500ms", 0.5)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "15", "1x", "-5m", "0s", "5m junk"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(BackfillError):
        parse_duration(text)


def test_times() -> None:
    assert parse_time("2026-10-07T02:00:00Z") == parse_time("2026-10-07T10:00:00+08:00") == DAY + 2 * H
    assert parse_time("2026-10-07 02:00:00") == DAY + 2 * H  # no offset: UTC
    with pytest.raises(BackfillError, match="not a time"):
        parse_time("last tuesday")


RULE = AlertRule("X", "x", 30.0, 90.0, 0.0, {"severity": "warning", "heuristic": "H0"})
TIMES = [30.0 * k for k in range(20)]


def test_for_holds_before_firing_and_a_pending_alert_that_vanishes_never_fires() -> None:
    present = {
        (("instance", "a"),): {30.0 * k for k in range(2, 9)},  # 60..240: fires at 150, resolved at 270
        (("instance", "b"),): {30.0 * k for k in (10, 11, 12)},
    }  # 90 s pending only: never fires
    (fired,) = episodes(RULE, present, TIMES)
    assert (fired.labels["instance"], fired.start, fired.end) == ("a", "1970-01-01T00:02:30Z", "1970-01-01T00:04:30Z")


def test_keep_firing_for_bridges_gaps_shorter_than_it() -> None:
    rule = AlertRule("X", "x", 30.0, 0.0, 60.0, {})
    present = {(): {0.0, 30.0, 90.0, 300.0}}  # a gap of one evaluation is kept; 60 s missing resolves it
    assert [(f.start, f.end) for f in episodes(rule, present, TIMES)] == [
        ("1970-01-01T00:00:00Z", "1970-01-01T00:03:00Z"),
        ("1970-01-01T00:05:00Z", "1970-01-01T00:06:30Z"),
    ]
    assert [f.end for f in episodes(rule, {(): {0.0, 30.0, 90.0, 540.0, 570.0}}, TIMES)] == [
        "1970-01-01T00:03:00Z",
        None,
    ]


def test_recorded_names_are_inlined_with_their_matchers_and_windows() -> None:
    records = {"a:b:c": "sum by (lane) (rate(x_total[5m]))"}
    assert inline('a:b:c{lane="fast"} > 1 and on (lane) a:b:c', records, 30) == (
        '((sum by (lane) (rate(x_total[5m]))) and on (lane) label_replace(vector(1), "lane", "fast", "", ""))'
        " > 1 and on (lane) (sum by (lane) (rate(x_total[5m])))"
    )
    assert (
        inline("max_over_time(a:b:c[10m])", records, 30)
        == "max_over_time((sum by (lane) (rate(x_total[5m])))[10m:30s])"
    )
    assert inline('label_replace(y, "a:b:c", "$1", "", "")', records, 30) == 'label_replace(y, "a:b:c", "$1", "", "")'
    with pytest.raises(BackfillError, match="only = matchers"):
        inline('a:b:c{lane=~"f.*"}', records, 30)
    with pytest.raises(BackfillError, match="offset"):
        inline("a:b:c offset 1h", records, 30)


# -- the rules a backtest evaluates ---------------------------------------------------------------------
def test_without_rules_the_backtest_evaluates_those_the_config_generates(tmp_path: Path, monkeypatch) -> None:
    """The in-memory rules of examples/strata.toml are the committed alerts/ folder (generated from it),
    nothing is read from the working directory, and a config's own thresholds are the ones evaluated."""
    monkeypatch.chdir(tmp_path)
    records, alerts = config_rules(load_config(ROOT / "examples" / "strata.toml"))
    assert (records, alerts) == load_rules(ROOT / "alerts", 30)
    config = config_file(tmp_path)
    config.write_text(config.read_text() + "[alerts]\nprobe_budget_seconds = 600\n")
    (not_ready,) = [a for a in config_rules(load_config(config))[1] if a.name == "EngineNotReady"]
    assert "> 600" in not_ready.expr


def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yml"
    rows = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    rows += [f"{chr(98 + n)}: &{chr(98 + n)} [{', '.join(['*' + chr(97 + n)] * 9)}]" for n in range(8)]
    bomb.write_text("\n".join(rows) + "\ngroups: *i\n")  # 9**9 strings if expanded
    started = time.monotonic()
    with pytest.raises(BacktestError, match=r"alias \(\*a\) is not allowed"):
        load_rules(bomb, 30)
    assert time.monotonic() - started < 5
    huge = tmp_path / "huge.yml"
    huge.write_bytes(b"# " + b"x" * (MAX_RULE_FILE_BYTES + 1))
    with pytest.raises(BacktestError, match="more than a rule file may have"):
        load_rules(huge, 30)


def test_a_deeply_nested_rule_file_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """Issue 29 item 10: 200 KB of `[` crashed backtest with a RecursionError traceback."""
    deep = tmp_path / "deep.yml"
    deep.write_bytes(b"[" * 200_000)
    with pytest.raises(BacktestError, match="nested too deeply"):
        load_rules(deep, 30)


OUT_OF_RANGE = r"out of range|not a time"  # past the year range, or beyond what a time can be


@pytest.mark.parametrize(
    "args,message",
    [
        (["--from", "2026-10-07T10:00:00Z", "--to", "2026-10-07T09:00:00Z"], "must be after --from"),
        (["--from", "1e300", "--to", "2e300"], OUT_OF_RANGE),
        (["--from", "0001", "--to", "9999"], OUT_OF_RANGE),
        (["--from", "nan", "--to", "2026-10-07T09:00:00Z"], OUT_OF_RANGE),
        (["--from", "2001-01-01", "--to", "2099-01-01"], "longer than a backtest takes"),
        (["--from", "2026-10-07T00:00:00Z", "--to", "2026-10-08T00:00:00Z", "--step", "1ms"], "smallest step"),
        (["--from", "2026-10-01T00:00:00Z", "--to", "2026-10-30T00:00:00Z", "--step", "5s"], "more than 200,000"),
        (["--from", "2026-10-07T00:00:00Z", "--to", "2026-10-08T00:00:00Z", "--lookback", "30d"], "longer than 7d"),
    ],
)
def test_bad_windows_and_steps_are_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["backtest", "--config", str(config_file(tmp_path)), *args])
    assert result.exit_code == 2, result.output
    assert re.search(message, result.output) and "Traceback" not in result.output
    assert not list(tmp_path.glob("spyglass-backtest-*"))


# -- what it says ---------------------------------------------------------------------------------------
def test_an_alert_pending_but_never_fired_is_shown_with_its_hold() -> None:
    rule = AlertRule("Slow", "x", 30.0, 300.0, 0.0, {"heuristic": "H5"})
    present = {
        (("instance", "a"),): {30.0 * k for k in range(3, 10)},  # 90..270: held 3m of 5m
        (("instance", "b"),): {30.0 * k for k in range(2, 15)},
    }  # fires at 360
    pending: list[Pending] = []
    fired = episodes(rule, present, [30.0 * k for k in range(20)], pending)
    assert [f.labels["instance"] for f in fired] == ["b"]
    assert [(p.labels["instance"], p.since, p.text()) for p in pending] == [
        ("a", "1970-01-01T00:01:30Z", "held 3m of for: 5m")
    ]


def test_the_table_keeps_its_full_width_to_a_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # a pipe with no width said: an earlier test may have set one
    firing = Firing(
        "EngineLongPromptsCheckpointOnly",
        "H4",
        "warning",
        {"instance": "strata-b", "lane": "normal", "severity": "warning"},
        "2026-10-07T07:40:00Z",
        None,
    )
    pending = Pending(
        "EngineTTFTBudgetSlowBurn",
        "H5",
        {"instance": "strata-b", "lane": "normal"},
        "2026-10-07T08:00:00Z",
        1800.0,
        3600.0,
    )
    result = BacktestResult([firing], BackfillResult(Path("x"), 1, 1, 1, 1), 36, {"replay": 1.0}, [pending], "x")
    out = io.StringIO()
    show(result, 0.0, 1.0, out)
    text = out.getvalue()
    assert "EngineLongPromptsCheckpointOnly" in text and "…" not in text
    assert "held 30m of for: 1h" in text and "(still firing)" in text


# -- what a replay adds: process state, staleness ------------------------------------------------------------
def om_samples(path: Path, prefix: str) -> list[tuple[float, float]]:
    return [
        (float(ln.split()[-1]), float(ln.split()[-2])) for ln in path.read_text().splitlines() if ln.startswith(prefix)
    ]


def test_the_replay_derives_process_state_from_supervisord(incident: Path, tmp_path: Path) -> None:
    replay(load_config(incident), CRASH[0] - 600, CRASH[1] + 600, 15.0, tmp_path / OPENMETRICS_FILE)
    up = dict(om_samples(tmp_path / OPENMETRICS_FILE, 'spyglass_host_process_up{instance="strata-a"'))
    assert up[CRASH[0] - 600] == 1.0  # running
    assert up[CRASH[0] + 15] == 1.0  # exited (SIGABRT) at +0, spawned again at +2
    assert up[CRASH[0] + 60] == 0.0  # that one exited at +50; the next spawn is at +62
    assert up[CRASH[0] + 75] == 1.0
    assert up[CRASH[0] + 300 + 15] == 0.0  # FATAL
    assert up[CRASH[1] + 15] == 1.0  # the operator's spawn


def test_a_polled_series_goes_stale_two_polls_after_its_last_poll(tmp_path: Path) -> None:
    t0 = DAY + 2 * H
    polls = [
        json.dumps(
            {
                "ts": datetime.fromtimestamp(t0 + 30 * k, UTC).isoformat(),
                "url": "http://127.0.0.1:8081/v1/status",
                "body": {"engine": "strata-a", "state": "ready", "slots": {"total": 20, "busy": 1}},
            }
        )
        for k in range(3)
    ]
    (tmp_path / "status.jsonl").write_text("\n".join(polls) + "\n")
    (tmp_path / "spyglass.toml").write_text(
        f'[agent]\nstate_dir = "{tmp_path}"\n[exporters.prometheus]\nenabled = false\n[sources.serve]\n'
        f'kind = "serve_status"\npath = "{tmp_path / "status.jsonl"}"\ninstance = "strata-a"\ninterval_seconds = 30\n'
    )
    assert CliRunner().invoke(app, ["ingest", "--config", str(tmp_path / "spyglass.toml")]).exit_code == 0
    replay(load_config(tmp_path / "spyglass.toml"), t0, t0 + 3600, 15.0, tmp_path / OPENMETRICS_FILE)
    times = [t for t, _ in om_samples(tmp_path / OPENMETRICS_FILE, "spyglass_serve_slots_busy{")]
    assert times[0] == t0 and times[-1] == t0 + 60 + 2 * 30  # the last poll, then two intervals


# -- nothing left behind ----------------------------------------------------------------------------------
def children_named(parent: int, word: bytes) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and word in (entry / "cmdline").read_bytes():
                stat = (entry / "stat").read_text()
                if int(stat[stat.rindex(")") + 2 :].split()[1]) == parent:
                    out.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


@pytest.fixture(scope="module")
def quiet(tmp_path_factory) -> Path:
    return quiet_day(tmp_path_factory.mktemp("quiet"))


def start_backtest(config: Path, tmp: Path) -> tuple[subprocess.Popen, int]:
    """A real `spyglass backtest` in its own process, stopped (SIGSTOP) once its Prometheus runs."""
    env = {**os.environ, "TMPDIR": str(tmp)}
    with open(tmp / "stderr.txt", "wb") as stderr:
        proc = subprocess.Popen(
            [
                str(ROOT / ".venv" / "bin" / "spyglass"),
                "backtest",
                "--config",
                str(config),
                "--from",
                str(DAY + 2 * H),
                "--to",
                str(DAY + 26 * H),
                "--step",
                "30s",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    (prometheus,) = wait_until(
        lambda: children_named(proc.pid, b"prometheus") or proc.poll() is not None and [-1],
        timeout=240,
        what="the backtest's prometheus",
    )
    assert prometheus != -1, (tmp / "stderr.txt").read_text()
    os.kill(proc.pid, signal.SIGSTOP)
    assert alive(prometheus), "the backtest finished before it could be interrupted"
    return proc, prometheus


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_ends_the_backtest_with_its_prometheus_and_folder(quiet: Path, tmp_path: Path, signum: int) -> None:
    proc, prometheus = start_backtest(quiet, tmp_path)
    os.kill(proc.pid, signum)
    os.kill(proc.pid, signal.SIGCONT)
    assert proc.wait(timeout=60) == 128 + signum
    wait_until(lambda: not alive(prometheus), timeout=30, what="prometheus gone")
    assert not list(tmp_path.glob("spyglass-backtest-*"))


def test_after_a_sigkill_its_prometheus_dies_and_the_next_run_removes_the_folder(quiet: Path, tmp_path: Path) -> None:
    proc, prometheus = start_backtest(quiet, tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    wait_until(lambda: not alive(prometheus), timeout=30, what="prometheus killed with its parent")
    (left,) = tmp_path.glob("spyglass-backtest-*")
    assert (left / "owner.json").exists()
    mine = tmp_path / "spyglass-backtest-running"  # a live backtest's folder (this process owns it): kept
    mine.mkdir()
    (mine / "owner.json").write_text(json.dumps({"pid": os.getppid(), "start": process_start(os.getppid())}))
    stranger = tmp_path / "spyglass-backtest-unknown"  # no owner file: not provably an orphan, kept
    stranger.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    nothing = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "spyglass"),
            "backtest",
            "--config",
            str(quiet),
            "--from",
            "2027-01-01T00:00:00Z",
            "--to",
            "2027-01-01T01:00:00Z",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert nothing.returncode == 1 and "no events" in nothing.stderr
    assert sorted(p.name for p in tmp_path.glob("spyglass-backtest-*")) == [
        "spyglass-backtest-running",
        "spyglass-backtest-unknown",
    ]


def test_backfill_takes_the_same_bounds(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "backfill",
            "--config",
            str(config_file(tmp_path)),
            "--from",
            "2026-10-07",
            "--to",
            "2026-10-08",
            "--step",
            "1ms",
            "--out",
            str(tmp_path / "om"),
        ],
    )
    assert result.exit_code == 2 and "smallest step" in result.output
    assert not (tmp_path / "om").exists()
