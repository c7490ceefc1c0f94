"""The upgrade seed's four turns, replayed as the sources write them and ingested into a real DuckDB store.

strata-b on 2026-11-02 (UTC), one turn an hour after a healthy start at 01:00:
1. 02:00 the new model on the old image: `Missing key(s) in state_dict`, exit 1, four times, FATAL
   (dependency drift: a process exit with a load error, in a restart loop);
2. 03:00 the image upgraded (a new build, switched in the switch log), the link now dangling after
   a blue/green cleanup: a checksum mismatch, exit 1 (a process exit, H15);
3. 04:00 the file re-uploaded (a new real path): it loads, and under load every new shape
   rebuilds a graph: TTFT p99 ~20 ms -> ~900 ms, the queue grows, nothing dies (a latency avalanche);
4. 05:00 fixed shapes and a warm-up (arguments the parser does not know), a new serve: stable.
strata-a, 06:00: a banner without its model line, killed by a probe three times while loading.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spyglass.cli.app import app
from spyglass.collectors.clock import BEIJING
from spyglass.config import load_config
from spyglass.engine.emulator.logsynth import line
from spyglass.forensics.run import Window
from spyglass.upgrades.crashes import CrashFinding, Facts, classify, classify_facts

pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier

UTC = UTC
DAY = datetime(2026, 11, 2, tzinfo=UTC)
OLD, NEW = "7f3c2e1", "9e8d7c6"
MD5_V7, MD5_V8 = "5d41402abc4b2a76b9719d911017c592", "7d793037a0760186574b0282f2f435e7"
BASE_ARGS = "--model /home/cloud/models/current.gguf --port 8082 --slots 20 --ctx 262144 --pool-workers 24"


def at(hour: int, minute: float = 0.0) -> datetime:
    return DAY + timedelta(hours=hour, minutes=minute)


def window(hour: int) -> tuple[str, str]:
    return f"2026-11-02 {hour:02d}:00", f"2026-11-02 {hour:02d}:59"


def banner(
    when: datetime,
    build: str,
    real: str | None,
    md5: str,
    args: str = BASE_ARGS,
    version: str = "0.9.3",
    pid: int = 48211,
) -> list[bytes]:
    ts = when.timestamp()
    out = [
        line(ts, "I", "main", f"Strata {version} (build {build}) starting pid={pid}"),
        line(ts, "I", "main", f"args: {args}"),
    ]
    if real:
        out.append(
            line(
                ts, "I", "main", f"model path=/home/cloud/models/current.gguf real={real} bytes=163208757248 md5={md5}"
            )
        )
    out.append(line(ts, "I", "main", "cpus allowed=38-53 pool_workers=24"))
    return out


def requests(start: datetime, minutes: int, ttft_ms, rebuilds_per_min: int = 0, task0: int = 100) -> list[bytes]:
    """Four requests a minute; `ttft_ms(minute)` their TTFT; rebuild lines for new shapes; a stats line a minute."""
    out, task = [], task0
    for m in range(minutes):
        base = (start + timedelta(minutes=m)).timestamp()
        for k in range(4):
            task += 1
            ts = base + k * 15
            req = f"{datetime.fromtimestamp(ts, BEIJING):%Y%m%d-%H%M%S}-{task:06x}"
            ttft = ttft_ms(m) + k
            out += [
                line(ts, "I", "http", f"task {task} req={req} conv=c{task:x} queued prefill_depth=1"),
                line(
                    ts + 0.01,
                    "I",
                    f"slot {task % 20}",
                    f"task {task} prompt 4000 = 0 reused + 4000 read in {ttft - 5} ms",
                ),
                line(
                    ts + ttft / 1000 + 1,
                    "I",
                    f"slot {task % 20}",
                    f"task {task} done finish=stop prompt=4000 completion=200 ttft_ms={ttft} decode_tps=76.8",
                ),
            ]
        for r in range(rebuilds_per_min(m) if callable(rebuilds_per_min) else rebuilds_per_min):
            out.append(
                line(base + 5 + r, "I", "graph", f"rebuild shape=1x{3000 + 7 * m + r} reason=new_shape took_ms=900")
            )
        queue = 14 if (callable(rebuilds_per_min) and rebuilds_per_min(m)) else 0
        out.append(
            line(
                base + 59,
                "I",
                "stats",
                f"busy=4/20 prefill_queue={queue} decode_tps=76.8 parked=0 used=0 budget=8589934592 evictions=0",
            )
        )
    return out


def engine_b() -> list[bytes]:
    out = banner(at(1), OLD, "/data/models/v7/model.gguf", MD5_V7)
    out.append(line(at(1, 7).timestamp(), "I", "main", "ready in 420.0 s"))
    out += requests(at(1, 8), 30, lambda m: 20)
    for n in range(4):  # turn 1
        t = at(2, n * 0.5).timestamp()
        out += banner(at(2, n * 0.5), OLD, "/data/models/v8/model.gguf", MD5_V8, pid=48300 + n)
        out.append(
            line(
                t + 12,
                "E",
                "load",
                'Missing key(s) in state_dict: "layers.61.moe.gate_up.weight".'
                ' Unexpected key(s) in state_dict: "layers.61.moe.experts.0.w1".',
            )
        )
    out += banner(at(3), NEW, "/data/models/v8/model.gguf", MD5_V8, version="0.9.4", pid=48400)  # turn 2
    out.append(
        line(
            at(3).timestamp() + 30,
            "E",
            "load",
            "checksum mismatch reading /home/cloud/models/current.gguf:"
            f" expected md5={MD5_V8} got=d41d8cd98f00b204e9800998ecf8427e",
        )
    )
    out += banner(at(4), NEW, "/data/models/v8-r2/model.gguf", MD5_V8, version="0.9.4", pid=48500)  # turn 3
    out.append(line(at(4, 7).timestamp(), "I", "main", "ready in 420.0 s"))
    out += requests(
        at(4, 8),
        45,
        lambda m: 20 if m < 20 else 900 + 10 * m,
        rebuilds_per_min=lambda m: 0 if m < 20 else 3,
        task0=1000,
    )
    fixed = f"{BASE_ARGS} --max-batch 4 --fixed-shapes=1x4096,4x8192 --warmup -Xshape-cache"
    out += banner(at(5), NEW, "/data/models/v8-r2/model.gguf", MD5_V8, fixed, "0.9.4", 48600)  # turn 4
    out.append(line(at(5, 7).timestamp(), "I", "main", "ready in 420.0 s"))
    out += requests(at(5, 8), 45, lambda m: 21, task0=5000)
    return out


def engine_a() -> list[bytes]:
    out = []
    for n in range(3):
        when = at(6, n * 11)
        out += [
            line(when.timestamp(), "I", "main", f"Strata 0.9.4 (build {NEW}) starting pid={49000 + n}"),
            line(when.timestamp(), "I", "main", f"args: {BASE_ARGS}"),
        ]
    return out


def supervisord() -> list[bytes]:
    def s(when: datetime, level: str, message: str) -> bytes:
        return f"{when:%Y-%m-%d %H:%M:%S},{when.microsecond // 1000:03d} {level} {message}".encode()

    out = [s(at(1) - timedelta(seconds=1), "INFO", "spawned: 'strata-b' with pid 48211")]
    for n in range(4):
        out += [
            s(at(2, n * 0.5) - timedelta(seconds=1), "INFO", f"spawned: 'strata-b' with pid {48300 + n}"),
            s(at(2, n * 0.5) + timedelta(seconds=13), "WARN", "exited: strata-b (exit status 1; not expected)"),
        ]
    out.append(s(at(2, 2), "INFO", "gave up: strata-b entered FATAL state, too many start retries too quickly"))
    out += [
        s(at(3) - timedelta(seconds=1), "INFO", "spawned: 'strata-b' with pid 48400"),
        s(at(3) + timedelta(seconds=31), "WARN", "exited: strata-b (exit status 1; not expected)"),
        s(at(4) - timedelta(seconds=1), "INFO", "spawned: 'strata-b' with pid 48500"),
        s(at(5) - timedelta(seconds=3), "INFO", "waiting for strata-b to stop"),
        s(at(5) - timedelta(seconds=2), "WARN", "stopped: strata-b (terminated by SIGTERM)"),
        s(at(5) - timedelta(seconds=1), "INFO", "spawned: 'strata-b' with pid 48600"),
    ]
    for n in range(3):  # a probe kills strata-a 10 s into each load
        out += [
            s(at(6, n * 11) - timedelta(seconds=1), "INFO", f"spawned: 'strata-a' with pid {49000 + n}"),
            s(at(6, n * 11) + timedelta(seconds=10), "WARN", "exited: strata-a (terminated by SIGKILL; not expected)"),
        ]
    return sorted(out)


def status() -> list[bytes]:
    def snap(when: datetime, state: str, serve: str) -> bytes:
        body = {
            "engine": "strata-b",
            "build": "Strata",
            "serve_version": serve,
            "state": state,
            "uptime_s": 1.0,
            "slots": {"total": 20, "busy": 0},
            "prefill_queue": 0,
            "requests": {"total": 0, "by_status": {}},
        }
        return json.dumps({"ts": when.isoformat().replace("+00:00", "Z"), "body": body}).encode()

    return [
        snap(at(1, 1), "loading", "2026.10.30"),
        snap(at(1, 8), "ready", "2026.10.30"),
        snap(at(2, 0.1), "loading", "2026.10.30"),
        snap(at(3, 0.1), "loading", "2026.10.30"),
        snap(at(4, 8), "ready", "2026.10.30"),
        snap(at(5, 8), "ready", "2026.11.01"),
    ]


def switch_log() -> list[bytes]:
    beijing = (at(3) - timedelta(minutes=1)).astimezone(BEIJING)  # the switch log is written in Beijing time
    return [f"{beijing:%Y-%m-%d %H:%M:%S} switch strata-b engine={OLD} -> {NEW} by=ops".encode()]


CONFIG = """[agent]
state_dir = "{d}/state"
host = "replay"
[exporters.prometheus]
enabled = false
[alerts]
probe_budget_seconds = 900
[sources.engine-a]
kind = "engine_log"
path = "{d}/engine-a.log"
instance = "strata-a"
lane = "fast"
[sources.engine-b]
kind = "engine_log"
path = "{d}/engine-b.log"
instance = "strata-b"
lane = "normal"
[sources.supervisord]
kind = "supervisord_log"
path = "{d}/supervisord.log"
tz = "UTC"
[sources.serve-b]
kind = "serve_status"
path = "{d}/status.jsonl"
instance = "strata-b"
[sources.switch]
kind = "switch_log"
path = "{d}/switch-engine.log"
"""


@pytest.fixture(scope="module")
def replay(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("upgrade")
    files = {
        "engine-b.log": sorted(engine_b(), key=lambda raw: raw[:23]),
        "engine-a.log": engine_a(),
        "supervisord.log": supervisord(),
        "status.jsonl": status(),
        "switch-engine.log": switch_log(),
    }
    for name, lines in files.items():
        (d / name).write_bytes(b"\n".join(lines) + b"\n")
    config = d / "spyglass.toml"
    config.write_text(CONFIG.format(d=d))
    result = CliRunner().invoke(app, ["ingest", "--config", str(config)])
    assert result.exit_code == 0, result.output
    return str(config)


def cli(config: str, *args: str, code: int = 0) -> list[dict]:
    result = CliRunner().invoke(app, [*args, "--config", config, "--format", "json"])
    assert result.exit_code == code, result.output
    return [json.loads(x) for x in result.stdout.splitlines()] if code == 0 else []


def crashes_in(config: str, hour: int) -> list[dict]:
    start, end = window(hour)
    return cli(config, "crashes", "--from", start, "--to", end)


def test_turn_1_dependency_drift_is_a_load_error_in_a_restart_loop(replay):
    [f] = crashes_in(replay, 2)
    assert (f["instance"], f["class"], f["cause"], f["count"]) == ("strata-b", "process_exit", "state_dict", 4)
    assert f["evidence"][0].startswith("4 exits in 2 min: a restart loop, FATAL at 02:02:00Z")
    assert any("Missing key(s) in state_dict" in e for e in f["evidence"])
    assert "export environment" in f["first_check"]


def test_turn_2_dangling_link_is_a_checksum_load_error(replay):
    [f] = crashes_in(replay, 3)
    assert (f["class"], f["cause"], f["heuristic"]) == ("process_exit", "checksum", "H15")
    assert any("checksum mismatch reading /home/cloud/models/current.gguf" in e for e in f["evidence"])
    assert "serve state before it: loading" in f["evidence"]
    assert "readlink -f" in f["first_check"]


def test_turn_3_rebuild_storm_is_a_latency_avalanche_without_a_death(replay):
    [f] = crashes_in(replay, 4)
    assert (f["instance"], f["class"], f["cause"], f["heuristic"]) == (
        "strata-b",
        "latency_avalanche",
        "graph_rebuilds",
        "H16",
    )
    assert f["first_utc"].startswith("2026-11-02T04:25") and f["count"] >= 4
    assert "15 graph rebuilds, prefill queue 14" in f["evidence"][1]  # every minute of the bucket rebuilt 3 graphs
    assert "Dynamic shapes" in f["first_check"]


def test_turn_4_the_stable_fix_has_no_finding(replay):
    start, end = window(5)
    result = CliRunner().invoke(app, ["crashes", "--config", replay, "--from", start, "--to", end])
    assert result.exit_code == 1 and "no crash" in result.stderr


def test_probe_killing_each_load_is_a_restart_loop(replay):
    [f] = crashes_in(replay, 6)
    assert (f["instance"], f["class"], f["cause"], f["count"]) == (
        "strata-a",
        "restart_loop",
        "killed_while_loading",
        3,
    )
    assert "ended 10 s after its start, never ready" in f["evidence"]
    assert "probe" in f["first_check"]


def changes_of(config: str, *args: str) -> list[tuple]:
    return [(c["deploy"], c["change"], c["before"], c["after"]) for c in cli(config, "changes", *args)]


def test_the_change_list_of_the_four_turns(replay):
    got = changes_of(replay, "--instance", "strata-b")
    assert got[0] == (1, "first start stored", None, OLD)
    turn1 = [c for c in got if c[0] == 2]
    assert turn1 == [
        (2, "model_real", "/data/models/v7/model.gguf", "/data/models/v8/model.gguf"),
        (2, "model_md5", MD5_V7, MD5_V8),
        (2, "ended while loading", None, "exit status 1 after 13 s"),
    ]
    assert [c for c in got if c[0] == 3] == [(3, "ended while loading", None, "exit status 1 after 13 s")]
    turn2 = [c for c in got if c[0] == 6]
    assert turn2 == [
        (6, "build", OLD, NEW),
        (6, "version", "0.9.3", "0.9.4"),
        (6, "switch log", None, f"{OLD} -> {NEW} by ops"),
        (6, "checksum mismatch while loading", None, "/data/models/v8/model.gguf"),
        (6, "ended while loading", None, "exit status 1 after 31 s"),
    ]
    assert [c for c in got if c[0] == 7] == [
        (7, "model_real", "/data/models/v8/model.gguf", "/data/models/v8-r2/model.gguf")
    ]
    turn4 = [c for c in got if c[0] == 8]  # the unknown arguments kept verbatim, and the serve's new version
    assert turn4 == [
        (8, "serve_version", "2026.10.30", "2026.11.01"),
        (8, "arg --max-batch", None, "4"),
        (8, "arg --fixed-shapes", None, "1x4096,4x8192"),
        (8, "arg --warmup", None, "--warmup"),
        (8, "arg -Xshape-cache", None, "-Xshape-cache"),
    ]


def test_changes_since_compares_with_the_start_before(replay):
    got = changes_of(replay, "--instance", "strata-b", "--since", "2026-11-02 13:00", "--tz", "Asia/Shanghai")
    assert {c[0] for c in got} == {8}  # 05:00 UTC; compared with start 7, which is before --since


def test_a_banner_without_its_model_line_is_a_finding(replay):
    got = changes_of(replay, "--instance", "strata-a")
    lacks = [c for c in got if c[1] == "banner lacks"]
    assert lacks == [(n, "banner lacks", None, "model file, md5, cpus") for n in (1, 2, 3)]
    deploys = cli(replay, "changes", "--instance", "strata-a", "--deploys")
    assert [d["missing"] for d in deploys] == [["model file", "md5", "cpus"]] * 3


def test_a_deploy_record_has_the_banner_and_versions(replay):
    [d] = [d for d in cli(replay, "changes", "--instance", "strata-b", "--deploys") if d["deploy"] == 8]
    assert (d["build"], d["version"], d["model_real"], d["model_md5"], d["serve_version"]) == (
        NEW,
        "0.9.4",
        "/data/models/v8-r2/model.gguf",
        MD5_V8,
        "2026.11.01",
    )
    assert d["args"].endswith("--max-batch 4 --fixed-shapes 1x4096,4x8192 --warmup -Xshape-cache")
    assert d["missing"] == [] and d["ready_seconds"] == 420.0


def test_classify_is_callable_on_the_store_for_diagnose(replay):
    cfg = load_config(Path(replay))
    found = classify(cfg, Window(at(2), at(3)))
    assert [(c.klass, c.cause) for c in found] == [("process_exit", "state_dict")]
    assert isinstance(found[0], CrashFinding) and found[0].first_check


def test_oom_needs_a_kill_and_memory_that_grew():
    exit_ = {
        "ts_utc": at(7),
        "program": "strata-b",
        "event": "exited",
        "signal": "SIGKILL",
        "exit_status": None,
        "expected": False,
        "cause": "terminated by SIGKILL",
    }
    ready = [
        {"ts_utc": at(6), "instance": "strata-b", "kind": "start", "fields": {}},
        {"ts_utc": at(6, 5), "instance": "strata-b", "kind": "ready", "fields": {}},
    ]
    grow = [
        {"instance": "strata-b", "minute_utc": at(6, m), "rss": (100 + m) * 2**30, "oom_kills": 0}
        for m in range(0, 60, 5)
    ]
    [f] = classify_facts(Facts([exit_], ready, grow, [], []))
    assert (f.klass, f.cause, f.heuristic) == ("resource_growth", "oom", "H17")
    flat = [dict(g, rss=100 * 2**30) for g in grow]
    [f] = classify_facts(Facts([exit_], ready, flat, [], []))
    assert (f.klass, f.cause) == ("process_exit", "killed")  # an external kill after ready: not OOM, not a probe


def test_argv_is_kept_verbatim_whatever_its_shape():
    from spyglass.forensics.changes import parse_argv

    assert parse_argv("--model /m.gguf --offset -1 --x=1 -v positional --flag") == {
        "--model": "/m.gguf",
        "--offset": "-1",
        "--x": "1",
        "-v": "positional",
        "--flag": "",
    }
    assert parse_argv('--name "two words" --q \'unbalanced') == {"--name": '"two', 'words"': "", "--q": "'unbalanced"}
    assert parse_argv("") == {}


def baseline_of(config: str, *args: str) -> dict[str, dict]:
    return {r["metric"]: r for r in cli(config, "baseline", "--instance", "strata-b", *args)}


def test_baseline_after_the_rebuild_storm_is_worse_than_the_last_steady_state(replay):
    b = baseline_of(replay, "--deploy", "7")  # deploys 2-6 never got ready: the steady state is deploy 1's
    assert (b["ttft_p50_ms"]["before"], b["ttft_p99_ms"]["before"]) == (21.5, 23.0)
    assert b["ttft_p99_ms"]["after"] > 1000 and b["ttft_p99_ms"]["verdict"] == "worse"
    assert b["rebuilds_per_minute"]["before"] == 0 and b["rebuilds_per_minute"]["verdict"] == "worse"
    assert b["prefill_queue"]["verdict"] == "worse" and b["decode_tokens_per_second"]["verdict"] == "ok"
    assert (b["requests"]["before"], b["requests"]["after"]) == (120, 180)
    fixed = baseline_of(replay)  # the last deploy, the stable fix, against the storm
    assert {m: r["verdict"] for m, r in fixed.items() if r["verdict"]} == {
        m: "ok"
        for m in (
            "ttft_p50_ms",
            "ttft_p99_ms",
            "decode_tokens_per_second",
            "error_share",
            "prefill_queue",
            "rebuilds_per_minute",
        )
    }


def test_baseline_of_an_unknown_deploy_says_which_exist(replay):
    result = CliRunner().invoke(app, ["baseline", "--config", replay, "--instance", "strata-b", "--deploy", "20"])
    assert result.exit_code == 1 and "no deploy 20: the instance has deploys 1 to 8" in result.stderr


def test_a_load_longer_than_the_probe_budget_is_a_finding_of_its_start():
    from spyglass.forensics.changes import changes, deploy_of

    row = {
        "instance": "strata-b",
        "ts_utc": at(8),
        "build": NEW,
        "version": "0.9.4",
        "model_real": "/m",
        "model_md5": "x",
        "cpus": "0-15",
        "argv": BASE_ARGS,
        "ready_utc": at(8, 20),
        "ready_seconds": 1200.0,
    }
    slow, quick = deploy_of(row, 2, 900.0, False), deploy_of(dict(row, ready_seconds=420.0), 1, 900.0, False)
    assert slow.over_budget and not quick.over_budget
    assert [(c.change, c.after) for c in changes(quick, slow)] == [("load over probe budget", "1200 s")]


def test_the_timeline_has_a_row_for_each_build_and_model_change(replay):
    rows = cli(
        replay,
        "timeline",
        "--from",
        "2026-11-02 00:00",
        "--to",
        "2026-11-02 07:00",
        "--instance",
        "strata-b",
        "--kind",
        "build_changed",
        "--kind",
        "model_changed",
    )
    got = [
        (r["ts_utc"][11:16], r["kind"], r["fields"]["deploy"], sorted(k for k in r["fields"] if k != "deploy"))
        for r in rows
    ]
    assert got == [
        ("02:00", "model_changed", 2, ["model_md5", "model_real"]),
        ("03:00", "build_changed", 6, ["build", "version"]),
        ("04:00", "model_changed", 7, ["model_real"]),
    ]
    assert rows[1]["fields"]["build"] == {"before": OLD, "after": NEW} and rows[1]["source"] == "engine-b"
    # a window that starts after start 6 still says what start 7 changed against it
    later = cli(replay, "timeline", "--from", "2026-11-02 03:30", "--to", "2026-11-02 04:30", "--instance", "strata-b")
    changed = [r for r in later if r["kind"].endswith("_changed")]
    assert [(r["kind"], r["fields"]["model_real"]["before"]) for r in changed] == [
        ("model_changed", "/data/models/v8/model.gguf")
    ]
    kinds = [r["kind"] for r in later]  # in time order: after the banner lines of its instant, before what follows
    assert kinds.index("model_changed") > kinds.index("start") and kinds[-1] != "model_changed"
    # strata-a's starts changed nothing: no change row
    assert not [
        r
        for r in cli(
            replay, "timeline", "--from", "2026-11-02 05:30", "--to", "2026-11-02 07:00", "--instance", "strata-a"
        )
        if r["kind"].endswith("_changed")
    ]
