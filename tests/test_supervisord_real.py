"""A real supervisord (PyPI supervisor) runs programs that crash-loop, fail to spawn, get SIGKILLed
and are stopped; spyglass reads the log it wrote and derives the lifecycle."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import wait_until

from spyglass.collectors.host import HostOptions, HostSource
from spyglass.collectors.supervisord_log import SupervisordLogOptions, SupervisordLogSource
from spyglass.collectors.supervisord_rpc import SupervisordRpcOptions, SupervisordRpcSource
from spyglass.signals import full_catalogue
from spyglass.signals.state import MetricState
from spyglass.signals.supervisord_log import SupervisordSignals

pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier

BIN = Path(sys.executable).parent
PROGRAM = Path(__file__).parent / "fixtures" / "supervisord" / "program.py"


def conf(folder: Path) -> Path:
    py = sys.executable
    path = folder / "supervisord.conf"
    path.write_text(f"""
[supervisord]
logfile={folder}/supervisord.log
pidfile={folder}/supervisord.pid
nodaemon=true
loglevel=info

[unix_http_server]
file={folder}/supervisor.sock

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://{folder}/supervisor.sock

[program:crashy]
command={py} {PROGRAM} 0.2 1
startsecs=1
startretries=2

[program:lateloop]
command={py} {PROGRAM} 1.3 3
startsecs=1
autorestart=true

[program:missing]
command=/nonexistent/strata-engine
startretries=1

[program:victim]
command={py} {PROGRAM} 0 0 0.5
startsecs=1

[program:steady]
command={py} {PROGRAM} 0 0 0.5
startsecs=1
""")
    return path


@pytest.fixture(scope="module")
def supervised(tmp_path_factory):
    folder = tmp_path_factory.mktemp("supervisord")
    config = conf(folder)
    log = folder / "supervisord.log"
    proc = subprocess.Popen(
        [str(BIN / "supervisord"), "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    text = lambda: log.read_text() if log.exists() else ""  # noqa: E731
    try:
        wait_until(
            lambda: (
                "gave up: crashy" in text()
                and "success: victim" in text()
                and "success: steady" in text()
                and text().count("spawned: 'lateloop'") >= 3
            ),
            timeout=60,
            what="supervisord to crash-loop its programs",
        )
        victim_pid = int(re.findall(r"spawned: 'victim' with pid (\d+)", text())[-1])
        os.kill(victim_pid, signal.SIGKILL)  # as the OOM killer would
        wait_until(
            lambda: (
                "exited: victim (terminated by SIGKILL; not expected)" in text()
                and text().count("success: victim") >= 2
            ),
            what="the kill and the respawn",
        )
        endpoint = f"unix://{folder}/supervisor.sock"
        rpc_source = SupervisordRpcSource("rpc", SupervisordRpcOptions(endpoint=endpoint, interval_seconds=1))
        rpc_events = rpc_source.poll(0.0).events
        host = HostSource("host", HostOptions(supervisord=endpoint, processes={"victim": {"program": "victim"}}))
        host_events = host.poll(0.0).events
        victim_pid = int(re.findall(r"spawned: 'victim' with pid (\d+)", text())[-1])  # after the kill
        subprocess.run(
            [str(BIN / "supervisorctl"), "-c", str(config), "stop", "steady"], check=True, capture_output=True
        )
        wait_until(lambda: "stopped: steady" in text(), what="the stop")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    return {"log": log, "rpc": rpc_events, "host": host_events, "victim_pid": victim_pid}


def derive(log: Path) -> tuple[list, MetricState]:
    source = SupervisordLogSource("supervisord", SupervisordLogOptions(path=str(log)))
    events, misses, unmatched = source.handle_lines(log.read_bytes().splitlines())
    assert misses["unmatched"] == 0, unmatched
    state = MetricState(full_catalogue())
    signals = SupervisordSignals(state)
    for event in events:
        signals.apply(event)
    return events, state


def test_lifecycle_from_a_real_supervisord_log(supervised):
    events, state = derive(supervised["log"])
    value = lambda name, *key: state.values[name].get(key, 0.0)  # noqa: E731
    current = {program: s for (program, s), v in state.values["spyglass_supervisord_process_state"].items() if v}

    assert value("spyglass_supervisord_fatal_total", "crashy") == 1
    # startretries=2 gives at least 3 tries; on a loaded machine an attempt that outlives startsecs
    # counts as RUNNING and resets the retry counter, so there can be more.
    assert value("spyglass_supervisord_exits_total", "crashy", "false", "exit_1") >= 3
    assert value("spyglass_supervisord_spawns_total", "lateloop") >= 3
    assert value("spyglass_supervisord_fatal_total", "lateloop") == 0  # dies after startsecs: never FATAL
    assert value("spyglass_supervisord_exits_total", "lateloop", "false", "exit_3") >= 2
    assert value("spyglass_supervisord_exits_total", "victim", "false", "SIGKILL") == 1
    assert value("spyglass_supervisord_spawns_total", "victim") == 2  # respawned after the kill
    assert value("spyglass_supervisord_stops_total", "steady", "SIGTERM") == 1
    assert value("spyglass_supervisord_spawn_errors_total") >= 1
    assert value("spyglass_supervisord_fatal_total", "missing") == 1
    assert current["crashy"] == "FATAL" and current["missing"] == "FATAL"
    assert {e.kind for e in events} >= {
        "supervisord_started",
        "spawned",
        "running",
        "exited",
        "fatal",
        "stopping",
        "stopped",
        "spawn_error",
        "signal",
        "shutdown_wait",
    }


def test_the_rpc_api_reports_current_state_and_feeds_the_host_collector(supervised):
    states = {e.instance: e.fields["statename"] for e in supervised["rpc"] if e.kind == "process_info"}
    assert states["crashy"] == "FATAL" and states["missing"] == "FATAL"
    assert states["victim"] == "RUNNING" and states["steady"] == "RUNNING"
    # the real /proc also yields the agent's shared_cpus pair (H2): the process sample is the one asked for
    (sample,) = [e for e in supervised["host"] if e.kind == "process"]
    assert (sample.kind, sample.instance, sample.fields["pid"]) == ("process", "victim", supervised["victim_pid"])


def test_a_restart_between_two_polls_is_counted():
    source = SupervisordRpcSource("rpc", SupervisordRpcOptions(endpoint="unix:///nonexistent.sock"))
    source.restore({"seen": {"engine": [100, 1000]}})
    result = source.poll(0)
    assert [e.kind for e in result.events] == ["poll_error"]  # unreachable: up = 0, the agent goes on
    assert result.ok is False
