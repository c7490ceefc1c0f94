"""`spyglass demo` runs the emulated stack and the agent, marks only what is abnormal, stops cleanly
on Ctrl-C, and with --keep leaves a store that `spyglass sql` and `spyglass trace` read afterwards."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path

import pytest

from spyglass import signals
from spyglass.alerting.heuristics import Deployment, by_id
from spyglass.cli.demo_board import SIGNALS, Above, Board, Faster, Held, Increase, Signal, incident_signals
from spyglass.config import AlertsConfig
from spyglass.ports import free_port
from spyglass.signals.state import MetricState

pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier

TITLE = "spyglass demo: incident signals"


WIDE = {**os.environ, "COLUMNS": "200"}  # a table row on one line


def spyglass(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spyglass.cli.app", *args], capture_output=True, text=True, timeout=120, env=WIDE
    )


def row(stdout: str, label: str) -> tuple[int, bool]:
    """(total, marked abnormal) of one signal in the last table printed: signal, where, total, now (the total
    when it is what the rule compares), abnormal when, abnormal."""
    table = stdout[stdout.rindex(TITLE) :]
    line = next((line for line in table.splitlines() if line.startswith(f"│ {label}")), None)
    assert line, table
    _, _, total, now, _, mark = (cell.strip() for cell in line.split("│")[1:-1])
    return int((total or now).replace(",", "")), mark == "abnormal"


def series(*points: tuple[float, float]) -> deque:
    return deque(points)


def test_the_rules_mark_only_what_is_abnormal():
    assert not Above(0).abnormal(series((0, 0), (5, 0))) and Above(0).abnormal(series((0, 0), (5, 1)))
    storm, slow = Increase(2, 60), series(*((t, t // 40) for t in range(0, 600, 10)))  # one in 40 s
    assert not storm.abnormal(slow)
    assert storm.abnormal(series((0, 0), (300, 5), (330, 6), (350, 8)))  # +3 in the last minute
    assert storm.abnormal(series((0, 0), (20, 3)))  # younger than the window: growth since the start
    warming = Increase(5, 60, settle=120)
    assert not warming.abnormal(series((0, 0), (50, 12)))  # every shape once, while warming up
    assert warming.abnormal(series((0, 0), (100, 12), (200, 13), (250, 19)))
    assert not warming.abnormal(series((0, 0), (100, 12), (200, 13), (250, 14)))
    loading = Held(60)
    assert not loading.abnormal(series((0, 1), (30, 1)))  # loading for a moment is normal
    assert loading.abnormal(series((0, 1), (30, 1), (61, 1)))
    assert not loading.abnormal(series((0, 1), (30, 0), (61, 1)))


def test_the_demos_thresholds_are_the_heuristics_catalogues():
    """Evictions are abnormal over H3's floor a minute, exits over H13's crash loop, with the deployment's own [alerts]."""
    deployment = Deployment(settings=AlertsConfig(crash_loop_spawns=5, crash_loop_window_minutes=30))
    rules = {s.short: s.rule for s in incident_signals(by_id(deployment))}
    assert rules["evictions-b"] == Faster(by_id(deployment)["H3"].threshold("evictions_per_minute"))
    assert rules["unexpected-exits"] == Increase(5, 1800)
    floor = Faster(1)  # H3's default: over one eviction a minute
    assert not floor.abnormal(series((0, 0), (30, 1), (60, 1))) and floor.abnormal(series((0, 0), (30, 1), (60, 2)))
    assert not floor.abnormal(series((0, 0), (60, 2), (120, 3)))  # two in the first minute, one in the last
    assert {s.short: s.rule for s in SIGNALS}["evictions-b"] == Faster(by_id()["H3"].threshold("evictions_per_minute"))


def test_the_board_samples_the_state_with_the_given_clock():
    state = MetricState(signals.full_catalogue())
    board = Board(
        [
            Signal("evictions", "ev", "spyglass_engine_evictions_total", {"instance": "strata-b"}, Increase(2, 60)),
            Signal("requests", "req", "spyglass_gateway_requests_total"),
        ]
    )
    board.sample(state, now=1000.0)
    labels = state.catalogue["spyglass_engine_evictions_total"].labels
    key = tuple({"instance": "strata-b", "lane": "normal"}.get(name, "") for name in labels)
    state.set("spyglass_engine_evictions_total", key, 3)
    board.sample(state, now=1030.0)
    assert [(s.short, value, abnormal) for s, value, abnormal in board.rows()] == [("ev", 3, True), ("req", 0, False)]
    assert board.status_line(30.0) == "  30s  ev 3!  req 0"
    board.sample(state, now=1200.0)  # no new eviction for three minutes: normal again
    assert board.rows()[0][2] is False


def test_every_signal_has_a_short_name_of_its_own():
    assert len({s.short for s in SIGNALS}) == len(SIGNALS) == 13


def test_demo_keep_survives_ctrl_c_and_its_store_answers_afterwards(tmp_path):
    port, kept = free_port(), tmp_path / "kept"
    command = [sys.executable, "-m", "spyglass.cli.app", "demo", "--listen", f"127.0.0.1:{port}", "--keep", str(kept)]
    out: list[str] = []
    stderr: list[str] = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=WIDE) as proc:
        killer = threading.Timer(240, proc.kill)  # never let a hung demo hang the suite
        killer.start()
        reader = threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True)
        reader.start()
        try:
            for line in proc.stdout:  # runs until evictions and requests show on a status line, then Ctrl-C
                out.append(line)
                if re.match(r"\s*\d+s  evictions-b [1-9].*  requests [1-9]", line):
                    break
            proc.send_signal(signal.SIGINT)
            out += proc.stdout.readlines()
            code = proc.wait(60)
            reader.join(10)
        finally:
            killer.cancel()
    assert code == 0, "".join(stderr)[-3000:]
    stdout = "".join(out)
    assert f"http://127.0.0.1:{port}/metrics" in stdout
    assert stdout.count(TITLE) == 1, "the final table is printed once"
    status = [line for line in out if re.match(r"\s*\d+s  evictions-b", line)]
    assert status, stdout + "".join(stderr)[-3000:]
    assert all(f" {s.short} " in f" {line} " for s in SIGNALS for line in status[-1:])
    evictions, abnormal = row(stdout, "evictions, strata-b")
    assert evictions > 0 and abnormal  # strata-b's cache is too small: the storm is the incident
    requests, marked = row(stdout, "requests answered by the gateway")
    assert requests > 0 and not marked  # traffic itself is not abnormal
    assert row(stdout, "programs that gave up (FATAL)") == (0, False)
    assert "stopped cleanly" in "".join(stderr)

    config = kept / "spyglass.toml"
    assert f"kept in {kept}" in stdout and config.exists()
    assert (kept / "stack" / "rag-proxy.log").stat().st_size > 0
    assert (kept / "spyglass" / "spyglass.duckdb").exists()
    query = spyglass(
        "sql",
        "--config",
        str(config),
        "--format",
        "json",
        "SELECT count(*) AS n FROM events WHERE kind = 'evict' AND instance = 'strata-b'",
    )
    assert query.returncode == 0, query.stderr
    assert json.loads(query.stdout)["n"] > 0
    traced = re.findall(r"spyglass trace -c \S+ (\d{8}-\d{6}-[0-9a-f]+)", stdout)[-1]
    tree = spyglass("trace", "--config", str(config), traced)
    assert tree.returncode == 0, tree.stderr
    assert f"{traced} (trace " in tree.stdout  # its shape is tests/test_tracing.py's business, but
    assert re.search(r"strata-[ab]: POST /v1/messages \d", tree.stdout), tree.stdout  # every layer's spans are in
    leftovers = subprocess.run(["pgrep", "-f", str(kept)], capture_output=True, text=True)
    assert leftovers.stdout == "", "processes of the demo are still running"


def test_demo_healthy_marks_nothing_and_cleans_up():
    port = free_port()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "spyglass.cli.app",
            "demo",
            "--scenario",
            "healthy",
            "--seconds",
            "20",
            "--listen",
            f"127.0.0.1:{port}",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=WIDE,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count(TITLE) == 1
    assert row(result.stdout, "requests answered by the gateway")[0] > 0, result.stdout + result.stderr[-3000:]
    final = result.stdout[result.stdout.rindex(TITLE) :]
    assert "abnormal │" not in final.replace("abnormal when", ""), final
    store = Path(re.search(r"store\s+(\S+)", result.stdout).group(1))
    assert not store.parent.parent.exists(), "the demo left its temp folder behind"
    assert "stopped cleanly" in result.stderr


def test_keep_refuses_a_folder_in_use(tmp_path):
    (tmp_path / "old.txt").write_text("someone's file")
    result = spyglass("demo", "--keep", str(tmp_path), "--seconds", "1")
    assert result.returncode == 2
    assert "not an empty folder" in result.stderr
    assert (tmp_path / "old.txt").read_text() == "someone's file"
