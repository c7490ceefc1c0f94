"""A new user's first steps, as they took them (issue 20, "the first hour"): real commands, real
processes, real ports on 127.0.0.1. Each ends in one clear line and a non-zero exit, never a traceback,
and leaves nothing behind that it made."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import FIXTURES, wait_until

from spyglass.config import engine_log_config, toml_text
from spyglass.ports import free_port
from spyglass.terminal.timeinput import parse_since, parse_time

FIXTURE = FIXTURES / "engine_log" / "strata-iq3_xxs-b.log"


def spyglass(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spyglass.cli.app", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **(env or {})},
    )


def held_port() -> socket.socket:
    """A socket listening on a free 127.0.0.1 port: the port is in use while it is open."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    return taken


def engine_config(folder: Path, port: int) -> Path:
    log = folder / "engine.log"
    log.write_bytes(FIXTURE.read_bytes())
    path = folder / "spyglass.toml"
    path.write_text(toml_text(engine_log_config(log, folder / "state", listen=f"127.0.0.1:{port}")))
    return path


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def test_run_on_a_port_in_use_says_which_port_and_setting(tmp_path, spawns):
    with held_port() as taken:
        port = taken.getsockname()[1]
        config = engine_config(tmp_path, port)
        result = spyglass("run", "-c", str(config))
    line = one_error_line(result)
    assert result.returncode == 1
    assert f"127.0.0.1:{port}" in line and "in use" in line and "exporters.prometheus.listen" in line, line


def test_demo_on_a_port_in_use_says_so_and_removes_its_folder(tmp_path, spawns):
    temp, kept = tmp_path / "tmp", tmp_path / "kept"
    temp.mkdir()
    with held_port() as taken:
        port = taken.getsockname()[1]
        plain = spyglass("demo", "--listen", f"127.0.0.1:{port}", "--seconds", "5", env={"TMPDIR": str(temp)})
        keeping = spyglass("demo", "--listen", f"127.0.0.1:{port}", "--seconds", "5", "--keep", str(kept))
    for result in (plain, keeping):
        line = one_error_line(result)
        assert f"127.0.0.1:{port}" in line and "in use" in line and "--listen" in line, line
    assert list(temp.iterdir()) == []  # the temp folder the demo made is gone
    assert not kept.exists()  # --keep made it: removed too


def test_ingest_while_the_agent_runs_says_the_agent_holds_the_store(tmp_path, spawns):
    config = engine_config(tmp_path, free_port())
    with subprocess.Popen(
        [sys.executable, "-m", "spyglass.cli.app", "run", "-c", str(config)], stderr=subprocess.PIPE, text=True
    ) as agent:
        try:
            for line in agent.stderr:  # type: ignore[union-attr]
                if "metrics at" in line:
                    break
            ingest = spyglass("ingest", "-c", str(config))
            second = spyglass("run", "-c", str(config))
        finally:
            agent.terminate()
            agent.communicate(timeout=60)
    line = one_error_line(ingest)
    assert "held by another process" in line and f"pid {agent.pid}" in line and "stop it" in line, line
    assert "held by another process" in one_error_line(second)
    after = spyglass("ingest", "-c", str(config))  # the agent stopped: ingest runs
    assert after.returncode == 0, after.stderr


NOW = datetime(2026, 10, 19, 6, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2026-10-19T04:49:00Z", datetime(2026, 10, 19, 4, 49, tzinfo=UTC)),
        ("2026-10-19 12:49+08:00", datetime(2026, 10, 19, 4, 49, tzinfo=UTC)),
        ("2026-10-19 04:49", datetime(2026, 10, 19, 4, 49, tzinfo=UTC)),
        ("1792385340", datetime.fromtimestamp(1792385340, UTC)),
        ("1792385340.5", datetime.fromtimestamp(1792385340.5, UTC)),
        ("now", NOW),
        ("now-1h", NOW - timedelta(hours=1)),
        ("now - 90m", NOW - timedelta(minutes=90)),
        ("now+1h30m", NOW + timedelta(minutes=90)),
    ],
)
def test_one_time_grammar(text, expected):
    assert parse_time(text, "UTC", NOW) == expected


def test_since_is_a_duration_back_from_now_or_a_time():
    assert parse_since("15m", "UTC", NOW) == NOW - timedelta(minutes=15)
    assert parse_since("2026-10-19 12:00", "Asia/Shanghai", NOW) == datetime(2026, 10, 19, 4, 0, tzinfo=UTC)
    assert parse_since("now-2h", "UTC", NOW) == NOW - timedelta(hours=2)


@pytest.mark.parametrize(
    "text, words",
    [
        ("yesterday", "not a time"),
        ("now-1x", "not a duration"),
        ("2026", "not a time"),
        ("now-9000y", "outside 1970-9999"),
        ("now+9000y", "outside 1970-9999"),
    ],
)
def test_a_bad_time_says_what_was_expected(text, words):
    with pytest.raises(ValueError, match=words):
        parse_time(text, "UTC", NOW)


def test_a_timeline_line_shows_span_times_as_times_and_is_cut_to_the_width():
    from spyglass.forensics.timeline import event_lines

    start = datetime(2026, 12, 2, 15, 52, 30, 626000, tzinfo=UTC)
    record = {
        "ts_utc": "2026-12-02T15:52:30.626Z",
        "ts_local": "2026-12-02T23:52:30.626+08:00",
        "source": "otlp",
        "instance": "rag-proxy",
        "kind": "span",
        "request_id": "20261202-235230-0e0d73",
        "fields": {
            "name": "POST /v1/messages",
            "start": start.timestamp(),
            "end": start.timestamp() + 0.098,
            "status": "error",
            "status_message": "upstream 400\x1b[2J",
        },
    }
    _, line = event_lines([record])
    assert (
        'req=20261202-235230-0e0d73 name="POST /v1/messages" start=2026-12-02T15:52:30.626Z'
        ' end=2026-12-02T15:52:30.724Z status=error status_message="upstream 400\\u001b[2J"'
    ) in line
    assert "e+09" not in line and "\x1b" not in line
    head, *wrapped = event_lines([record], width=80)  # narrower: the display zone's time to the header, fields wrap
    assert head.startswith("utc 2026-12-02") and re.search(r"\(\S+ is UTC[+-]\d\d:\d\d\)", head), head
    assert all(len(line) <= 80 for line in wrapped) and "…" not in "".join(wrapped)
    assert wrapped[0].startswith("15:52:30.626") and wrapped[0].endswith(
        "otlp    rag-proxy  span  req=20261202-235230-0e0d73"
    )
    assert 'name="POST /v1/messages"' in "\n".join(wrapped)
    llama = {**record, "source": "engine-llama-a", "instance": "llama-a", "kind": "done"}
    llama["request_id"] = "20261204-215430-99fd92191021c61a"  # a llama id: 36 cells with its key, too wide beside
    _, *rows = event_lines([llama], width=80)
    assert f"req={llama['request_id']}" in "\n".join(rows) and all(len(line) <= 80 for line in rows), rows


def test_ingest_after_the_stack_stopped_stores_no_poll_that_stretches_the_window(tmp_path, spawns):
    """A kept demo's config polls its serves' /v1/status; once the demo ended nothing answers there, and
    each ingest stored a failed poll stamped now, which moved every open window's end to now."""
    import duckdb

    config = engine_config(tmp_path, free_port())
    dead = free_port()  # nothing listens: the serve of a stopped stack
    config.write_text(
        config.read_text() + f'\n[sources.serve-b]\nkind = "serve_status"\n'
        f'url = "http://127.0.0.1:{dead}/v1/status"\ninstance = "strata-b"\n'
    )
    store = tmp_path / "state" / "spyglass.duckdb"

    def stored() -> tuple[int, object, object]:
        with duckdb.connect(str(store), read_only=True) as con:
            return con.execute(
                "SELECT count(*) FILTER (WHERE source = 'serve-b'), max(ts), min(ts) FROM events"
            ).fetchone()  # type: ignore[return-value]

    first = spyglass("ingest", "-c", str(config))
    assert first.returncode == 0, first.stderr
    polls, last, _ = stored()
    assert polls == 0  # the files' events only: the window ends where the logs end
    asked = spyglass("ingest", "-c", str(config), "--poll")  # asked for: one poll, now, stored as what it saw
    assert asked.returncode == 0, asked.stderr
    polls, after, _ = stored()
    assert polls >= 1 and after > last  # type: ignore[operator]


def test_crashes_calls_a_fresh_starts_warm_up_no_avalanche_and_times_a_real_one_by_its_requests(tmp_path, spawns):
    """A demo's engine is slow for its first minutes (each new shape builds its graph once): crashes called
    that a latency avalanche caused by "the new model's dynamic shapes", with no model changed, from a
    5-minute bucket's start, before the stack existed."""
    import json

    from test_upgrades_seed import MD5_V7, OLD, at, banner, requests

    from spyglass.engine.emulator.logsynth import line

    log = tmp_path / "engine.log"
    fresh = [
        *banner(at(1), OLD, "/data/models/v7/model.gguf", MD5_V7),
        line(at(1, 0.5).timestamp(), "I", "main", "ready in 30.0 s"),
        *requests(at(1, 0.6), 30, lambda m: 900 if m < 4 else 20, rebuilds_per_min=lambda m: 3 if m < 4 else 0),
    ]
    config = engine_config(tmp_path, free_port())  # reads tmp_path / "engine.log": this stack's log
    log.write_bytes(b"\n".join(fresh) + b"\n")
    assert spyglass("ingest", "-c", str(config)).returncode == 0
    warm = spyglass("crashes", "-c", str(config))
    assert warm.returncode == 1 and "no crash, failed start or latency avalanche" in warm.stderr, warm.stdout

    later = requests(at(1, 30.6), 15, lambda m: 900 + 10 * m, task0=5000)  # 30 min after ready, nothing died
    with log.open("ab") as out:
        out.write(b"\n".join(later) + b"\n")
    assert spyglass("ingest", "-c", str(config)).returncode == 0
    [found] = [json.loads(x) for x in spyglass("crashes", "-c", str(config), "-f", "json").stdout.splitlines()]
    assert (found["class"], found["cause"]) == ("latency_avalanche", "queueing")
    assert "new model" not in found["first_check"].split(";")[0]  # no model changed: not its dynamic shapes first
    first = datetime.fromisoformat(found["first_utc"])
    assert at(1, 30) < first < at(1, 30.6)  # the first request of its first 5 minutes, not their start (01:30)


def test_a_kept_demo_agrees_with_the_alert_on_shared_cpus_and_prints_commands_for_its_window(tmp_path, spawns):
    """The demo's table said 0 shared CPUs from the start lines while the host source measured 2 and
    EngineCPUsShared fired; its closing message gave no command for its own window."""
    import json
    import re
    import shlex

    kept = tmp_path / "kept"
    result = spyglass(
        "demo",
        "--scenario",
        "healthy",
        "--seconds",
        "20",
        "--listen",
        f"127.0.0.1:{free_port()}",
        "--keep",
        str(kept),
        env={"COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    final = result.stdout[result.stdout.rindex("spyglass demo: incident signals") :]
    assert re.match(r"spyglass demo: incident signals after 0 min \d\d s", final), final[:200]
    shown = int(re.search(r"CPUs the two engines may share\s*│[^│]*│\s*[\d,]*\s*│\s*(\d+)", final).group(1))
    config = kept / "spyglass.toml"
    measured = spyglass(
        "sql",
        "-c",
        str(config),
        "--format",
        "json",
        "SELECT max((fields->>'shared')::INT) AS host FROM events WHERE kind = 'shared_cpus'",
    )
    host = json.loads(measured.stdout)["host"]
    assert host is not None and shown == host  # one signal, one answer: what the alert reads
    if len(os.sched_getaffinity(0)) >= 2:
        assert host == 0  # pinned apart, as their start lines say

    commands = {
        line.split()[1]: shlex.split(line)
        for line in result.stdout.splitlines()
        if re.match(r"\s+\S*spyglass (diagnose|timeline|backtest) ", line)
    }
    assert set(commands) == {"diagnose", "timeline", "backtest"}, result.stdout[-2000:]
    for name in ("diagnose", "timeline"):
        args = commands[name][1:]
        assert args[args.index("--from") + 1] <= args[args.index("--to") + 1]
        ran = spyglass(*args)
        assert ran.returncode in ((0, 1, 2) if name == "diagnose" else (0,)), ran.stderr  # its findings, no usage error
        assert "error:" not in ran.stderr
    assert "--lookback" in commands["backtest"]
    assert "EngineEvictionStorm needs strata-b evicting for" in result.stdout  # 20 s: too short for it, said
    # the two clocks (issue 20, item 3): the durations the emulator logs are model time, and that is said
    # in the banner, the closing message and the kept config
    clock = re.findall(
        r"durations\s+they and the gateway log \(ttft_ms, dur_ms, prompt read ms, load s\) are model"
        r" time, (\d+) times the wall clock",
        result.stdout,
    )
    assert len(clock) == 2 and clock[0] == clock[1] != "1", result.stdout[:2000]
    assert config.read_text().startswith("# spyglass demo: the emulated engines run")


def test_sql_reads_a_query_from_stdin_or_a_file_and_points_to_views_for_a_view(tmp_path, spawns):
    config = engine_config(tmp_path, free_port())
    assert spyglass("ingest", "-c", str(config)).returncode == 0
    query = "SELECT count(*) AS n FROM events WHERE kind = 'park'"
    piped = subprocess.run(
        [sys.executable, "-m", "spyglass.cli.app", "sql", "-c", str(config), "-f", "csv", "-"],
        input=query,
        capture_output=True,
        text=True,
        timeout=120,
    )
    (tmp_path / "q.sql").write_text(query + "\n")
    filed = spyglass("sql", "-c", str(config), "-f", "csv", "--file", str(tmp_path / "q.sql"))
    assert piped.returncode == filed.returncode == 0 and piped.stdout == filed.stdout == "n\n3\n"
    view = spyglass("sql", "-c", str(config), "SELECT count(*) FROM requests")
    assert view.returncode == 1 and "requests is a forensic view: `spyglass views" in view.stderr
    assert spyglass("views", "-c", str(config), "SELECT count(*) AS n FROM cache_events").returncode == 0
    neither = spyglass("sql", "-c", str(config))
    assert neither.returncode == 2 and "give one query" in neither.stderr


def test_small_things_a_new_user_tripped_on(tmp_path, spawns):
    config = engine_config(tmp_path, free_port())
    listed = spyglass("report")  # no name: the list, not a usage error
    assert listed.returncode == 0 and "four-counts" in listed.stdout and "special-tokens" in listed.stdout
    ignored = spyglass("report", "cache", "-c", str(config), "--request", "20261019-124900-7aa82c")
    assert ignored.returncode == 2 and "takes no request id (only four-counts" in ignored.stderr
    silent = spyglass("views", "SELECT 1")  # a query without a config was a silent list of the views
    assert silent.returncode == 2 and "--config" in silent.stderr
    assert "At most this many requests" in spyglass("requests", "--help", env={"COLUMNS": "200"}).stdout
    changes_help = spyglass("changes", "--help", env={"COLUMNS": "200"}).stdout
    assert "Zone of a --since time" in changes_help and "--from" not in changes_help


def test_numbers_print_with_thousands_separators_and_no_exponent():
    from spyglass.forensics.output import counted
    from spyglass.terminal.cells import cell

    assert cell(75677700.0, "resident_bytes_max") == "75,677,700"  # baseline printed 7.56777e+07
    assert cell(2508, "evictions") == "2,508" and cell(0.33761, "share") == "0.3376" and cell(77.06, "rate") == "77.06"
    assert cell(48211, "pid") == "48211" and cell(8081, "port") == "8081" and cell(7, "deploy") == "7"
    assert cell({"before": 75677700.0, "pid": 48211}) == "before=75,677,700 pid=48211"
    assert (counted(1, "finding"), counted(2, "deploy"), counted(11894, "event")) == (
        "1 finding",
        "2 deploys",
        "11,894 events",
    )


def test_a_trace_says_when_a_logged_ttft_is_longer_than_its_span():
    """The demo's `trace` showed ttft_ms=1498 on a 0.098 s span with nothing saying why."""
    from spyglass.forensics.trace import clock_notes
    from spyglass.signals.spans import PhaseSpan

    engine = PhaseSpan("engine strata-a", 100.0, 100.098, {"spyglass.ttft_ms": 1498})
    root = PhaseSpan("rag-proxy: POST /v1/messages", 99.99, 100.2, {}, [engine])
    [note] = clock_notes(root)
    assert "engine strata-a logs ttft_ms=1498 for a span of 98 ms" in note.plain
    assert "another clock" in note.plain
    assert clock_notes(PhaseSpan("engine strata-b", 100.0, 102.0, {"spyglass.ttft_ms": 1498})) == []  # it fits


def test_the_demos_live_table_has_the_trace_hint_and_nothing_prints_over_it(monkeypatch):
    """The trace hint printed from its own thread while the live table ran left a stray header."""
    import io
    import threading
    from types import SimpleNamespace

    from rich.console import Console

    import spyglass.cli.demo_screen as screen
    from spyglass import signals
    from spyglass.cli.demo_board import Board
    from spyglass.signals.state import MetricState

    monkeypatch.setattr(screen, "finished_request", lambda agent, settled_seconds=6.0: "20261202-235234-e1eb42")
    agent = SimpleNamespace(
        pipeline=SimpleNamespace(state=MetricState(signals.full_catalogue())), stop=threading.Event()
    )
    runner = threading.Thread(target=agent.stop.wait)  # the agent: alive until stopped
    runner.start()
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160)
    hints: list[str] = []
    original = console.print

    def recording(*args, **kwargs):
        if any("one request's trace" in str(a) for a in args):
            hints.append(threading.current_thread().name)
        return original(*args, **kwargs)

    monkeypatch.setattr(console, "print", recording)
    stopping = threading.Event()
    board = Board()
    try:
        threading.Timer(6.5, stopping.set).start()  # the hint thread looks first after 5 s
        screen.watch(agent, runner, board, console, 0, Path("c.toml"), stopping)  # type: ignore[arg-type]
    finally:
        agent.stop.set()
        runner.join()
    assert hints == [threading.current_thread().name]  # printed once, after the live table, by the main thread
    assert "trace -c c.toml 20261202-235234-e1eb42" in out.getvalue()
    assert "incident signals after 0 min 0" in out.getvalue()  # the live table shows the elapsed time


def test_requests_labels_the_clocks_when_a_logged_ttft_is_longer_than_its_engine_duration(tmp_path, spawns):
    """The demo's engines log model time (200x the wall clock) while dur_ms_engine is measured between their
    log's timestamps: `ttft_ms_engine 195426` sat unlabelled next to `dur_ms_engine 1121`. On a store whose
    clocks agree the table has no note; on one where they do not, table and json (on stderr) say so."""
    import json

    from test_upgrades_seed import at, requests

    from spyglass.engine.emulator.logsynth import line

    log = tmp_path / "engine.log"
    config = engine_config(tmp_path, free_port())  # reads tmp_path / "engine.log"
    log.write_bytes(b"\n".join(requests(at(1), 1, lambda m: 900)) + b"\n")
    assert spyglass("ingest", "-c", str(config)).returncode == 0
    agreeing = spyglass("requests", "-c", str(config))
    assert agreeing.returncode == 0 and "4 requests" in agreeing.stdout and "clock:" not in agreeing.stdout

    ts, req = at(1, 5).timestamp(), "20261019-091500-0003e8"
    emulated = [
        line(ts, "I", "http", f"task 1000 req={req} conv=c3e8 queued prefill_depth=1"),
        line(ts + 0.01, "I", "slot 3", "task 1000 prompt 4000 = 0 reused + 4000 read in 195400 ms"),
        line(
            ts + 1.121,
            "I",
            "slot 3",
            "task 1000 done finish=stop prompt=4000 completion=200 ttft_ms=195426 decode_tps=76.8",
        ),
    ]
    with log.open("ab") as out:
        out.write(b"\n".join(emulated) + b"\n")
    assert spyglass("ingest", "-c", str(config)).returncode == 0
    table = spyglass("requests", "-c", str(config), env={"COLUMNS": "400"})
    assert table.returncode == 0, table.stderr
    assert f"({req}: ttft_ms_engine 195,426 > dur_ms_engine 1,121)" in table.stdout
    assert "the demo's emulated engines log model time" in table.stdout
    as_json = spyglass("requests", "-c", str(config), "-f", "json")
    rows = [json.loads(x) for x in as_json.stdout.splitlines()]  # stdout stays data
    assert [(r["ttft_ms_engine"], r["dur_ms_engine"]) for r in rows if r["request_id"] == req] == [(195426, 1121)]
    assert "clock: " in as_json.stderr


def test_ctrl_c_in_ingest_commits_says_what_it_read_and_exits_130(tmp_path, spawns):
    """It once printed `Exception ignored in: <module 'threading'> ... KeyboardInterrupt`, exited 0 and said nothing."""
    import signal

    config = engine_config(tmp_path, free_port())
    (tmp_path / "engine.log").write_bytes(FIXTURE.read_bytes() * 3000)  # long enough to be read when the signal comes
    with subprocess.Popen(
        [sys.executable, "-m", "spyglass.cli.app", "ingest", "-c", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as ingest:
        wait_until(lambda: (tmp_path / "state" / "spyglass.duckdb").exists(), timeout=120, what="the store")
        ingest.send_signal(signal.SIGINT)
        out, err = ingest.communicate(timeout=120)
    assert ingest.returncode == 130, (out, err)
    assert out.startswith("interrupted: read ") and "the next ingest goes on" in out, out
    assert "Traceback" not in err and "Exception ignored" not in err, err
    again = spyglass("ingest", "-c", str(config))  # the next run reads the rest
    assert again.returncode == 0 and "events stored" in again.stdout, again.stderr
