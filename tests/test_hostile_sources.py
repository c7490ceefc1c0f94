"""Issue 29 item 1: no source can block the others. A FIFO, a device, a directory or a symlink loop at
a source path (at start-up, or swapped in for a followed log at run time) is refused for that source,
counted, and named by /health; the pipeline goes on and SIGTERM stops it. Before, opening the FIFO
blocked the whole agent (nothing committed, /health ok, SIGTERM ignored)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from conftest import FIXTURES, wait_until

from spyglass.collectors.clock import ManualClock
from spyglass.collectors.tailer import Tailer
from spyglass.config import engine_log_config, toml_text
from spyglass.ports import free_port

FIXTURE = FIXTURES / "engine_log" / "strata-iq3_xxs-b.log"


def poll_within(tailer: Tailer, seconds: float = 10.0) -> list[bytes]:
    """One poll on a thread of its own: a poll that blocks (the old open of a FIFO) fails the test
    instead of hanging it."""
    out: list[list[bytes]] = []
    thread = threading.Thread(target=lambda: out.append(tailer.poll()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the poll blocked"
    return out[0]


def hostile(kind: str, path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "device":
        path.symlink_to("/dev/zero")  # reading it would never end
    else:
        path.symlink_to(path.name)  # a link to itself


@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "symlink_loop"])
def test_a_path_that_is_no_regular_file_is_refused_at_start_and_counted_once(tmp_path, kind):
    path = tmp_path / "engine.log"
    hostile(kind, path)
    tailer = Tailer(str(path), ManualClock())
    assert poll_within(tailer) == [] and poll_within(tailer) == []
    assert tailer.stats.refused == {kind: 1}
    assert tailer.error is not None and (kind in tailer.error or "symlink loop" in tailer.error)


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_followed_log_replaced_at_run_time_is_drained_then_the_new_path_refused(tmp_path, kind):
    path = tmp_path / "engine.log"
    path.write_bytes(b"one\ntwo\n")
    clock = ManualClock()
    tailer = Tailer(str(path), clock)
    assert poll_within(tailer) == [b"one", b"two"]
    with open(path, "ab") as f:
        f.write(b"three\n")
    path.rename(tmp_path / "engine.log.1")
    hostile(kind, path)
    assert poll_within(tailer) == [b"three"]  # the old file is read to its end
    clock.advance(3600)
    assert poll_within(tailer) == []
    assert tailer.stats.refused == {kind: 1} and tailer.error is not None
    path.unlink() if kind != "directory" else path.rmdir()
    path.write_bytes(b"four\n")  # a regular file again: read, and the problem is gone
    assert poll_within(tailer) == [b"four"] and tailer.error is None


@pytest.fixture
def agent_with_a_fifo(tmp_path, spawns):
    port = free_port()
    good = tmp_path / "good.log"
    good.write_bytes(FIXTURE.read_bytes())
    os.mkfifo(tmp_path / "fifo.log")
    config = engine_log_config(good, tmp_path / "state", listen=f"127.0.0.1:{port}", commit_interval_seconds=0.2)
    ((name, options),) = config["sources"].items()
    config["sources"]["other"] = {**options, "path": str(tmp_path / "other.log")}
    config["sources"]["fifo"] = {**options, "path": str(tmp_path / "fifo.log")}
    (tmp_path / "other.log").write_bytes(b"")
    (tmp_path / "spyglass.toml").write_text(toml_text(config))
    proc = subprocess.Popen(
        [sys.executable, "-m", "spyglass.cli.app", "run", "-c", str(tmp_path / "spyglass.toml")],
        stderr=subprocess.PIPE,
        text=True,
    )
    killer = threading.Timer(90, proc.kill)  # the old agent ignored SIGTERM here: never hang the suite
    killer.start()
    yield {"proc": proc, "url": f"http://127.0.0.1:{port}", "dir": tmp_path}
    if proc.poll() is None:
        proc.kill()
    proc.communicate()
    killer.cancel()


def metric(url: str, sample: str) -> float | None:
    try:
        text = httpx.get(f"{url}/metrics", timeout=5).text
    except httpx.HTTPError:
        return None
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_a_fifo_source_blocks_nothing_and_sigterm_stops_the_agent(agent_with_a_fifo):
    url, folder, proc = agent_with_a_fifo["url"], agent_with_a_fifo["dir"], agent_with_a_fifo["proc"]
    wait_until(lambda: metric(url, "spyglass_store_events_total") == 35.0, what="the good source stored")
    assert metric(url, 'spyglass_source_refused_files_total{kind="fifo",source="fifo"}') == 1.0
    health = httpx.get(f"{url}/health")
    assert health.status_code == 200 and health.text.startswith("degraded\n")
    assert f"source fifo: {folder / 'fifo.log'} is not a regular file: fifo" in health.text
    # A followed log replaced by a FIFO at run time: refused too, and the other sources go on.
    (folder / "other.log").rename(folder / "other.log.1")
    os.mkfifo(folder / "other.log")
    wait_until(
        lambda: metric(url, 'spyglass_source_refused_files_total{kind="fifo",source="other"}') == 1.0,
        what="the swapped-in FIFO refused",
    )
    with open(folder / "good.log", "ab") as log:
        log.write(
            b"2026-10-19 05:21:00.000 I [cache] evict conv=7b7b bytes=76021760 reason=budget parked=0"
            b" used=0 budget=8589934592 evictions=1\n"
        )
    wait_until(lambda: metric(url, "spyglass_store_events_total") == 36.0, what="the good source still stored")
    assert "source other:" in httpx.get(f"{url}/health").text
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "stopped cleanly" in err
