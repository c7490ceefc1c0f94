"""Issue 37, item 7: the shipped llama-server example is quiet on a healthy server.

The project's real llama-server build, started with the example's own flags (its header, the quickstart's
unit) on the tiny model, idle; examples/llama-server.toml pointed at it (only paths, port and state folder
changed) and read by the real pipeline for an hour of an injected clock: the log, /health, /metrics, /slots
and /props polled every 5 s, /proc sampled, the model path checked. The store's hour is then replayed and the
rules `spyglass rules` makes of that config are evaluated by Debian's Prometheus (`spyglass backtest`):
nothing fires but Watchdog. An hour of real waiting would prove no
more: an idle llama-server writes nothing and answers each poll the same.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import tomli_w
from conftest import wait_until

from spyglass.agent.pipeline import Pipeline
from spyglass.agent.runtime import open_store
from spyglass.alerting.backtest import backtest
from spyglass.collectors.clock import ManualClock
from spyglass.config import load_config
from spyglass.engine.llama.build import ensure_built
from spyglass.engine.llama.model import ensure_model
from spyglass.ports import free_port

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "llama-server.toml"
HOUR = 3600.0


def example_flags() -> list[str]:
    """The llama-server flags the example's header says it runs with, from `-np` on (the model, host, port and
    log file are this test's)."""
    header = [line.removeprefix("#").strip() for line in EXAMPLE.read_text().splitlines() if line.startswith("#")]
    command = " ".join(header[header.index(next(h for h in header if h.startswith("llama-server -m"))) :][:2])
    argv = shlex.split(command.replace("\\", " "))
    flags = argv[argv.index("-np") : argv.index("--log-file")]
    assert "--metrics" in flags and "--cache-ram" in flags, argv
    return flags


@pytest.fixture
def idle_server(spawns: None, tmp_path: Path) -> Iterator[tuple[int, Path, Path]]:
    build, model = ensure_built(), ensure_model()
    port, log = free_port(), tmp_path / "llama-a.log"
    argv = [str(build.server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), *example_flags()]
    argv += ["--log-file", str(log), "-c", "4096", "-t", "1"]
    env = {**os.environ, "LD_LIBRARY_PATH": str(build.bin_dir)}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:

        def healthy() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, timeout=120, what="llama-server's /health")
        yield port, log, model
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def example_config(folder: Path, port: int, log: Path, model: Path) -> Path:
    data = tomllib.loads(EXAMPLE.read_text())
    data["agent"]["state_dir"] = str(folder / "state")
    data["exporters"]["prometheus"]["enabled"] = False
    sources = data["sources"]
    sources["engine-llama-a"]["path"] = str(log)
    sources["metrics-llama-a"]["url"] = f"http://127.0.0.1:{port}"
    sources["model-llama-a"]["path"] = str(model)
    sources["host"]["processes"]["llama-a"]["cmdline"] = f"--port {port} "
    path = folder / "spyglass.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def test_the_example_config_fires_nothing_over_an_hour_of_an_idle_healthy_server(
    idle_server: tuple[int, Path, Path], tmp_path: Path
) -> None:
    port, log, model = idle_server
    config = load_config(example_config(tmp_path, port, log, model))
    clock = ManualClock(time.time())
    start = clock.now()
    pipeline = Pipeline(config, clock, open_store(config))
    try:
        while clock.now() < start + HOUR:
            pipeline.poll_all()
            pipeline.step()
            pipeline.commit_if_due()
            clock.advance(5.0)
        pipeline.run_until_idle(poll=False)
        polls = pipeline.state.series("spyglass_source_polls_total")
        assert polls[("metrics-llama-a", "ok")] >= HOUR / 5 and ("metrics-llama-a", "error") not in polls
        assert pipeline.state.series("spyglass_engine_starts_total")[("llama-a", "normal")] == 1
        assert pipeline.problems() == []  # --metrics is on: no endpoint switched off
    finally:
        pipeline.close()
    result = backtest(config, start, start + HOUR, step=15.0, lookback=300)
    assert result.rules > 20 and result.backfill.samples > 0
    assert [(f.alert, f.labels.get("instance")) for f in result.alerts] == [("Watchdog", None)]
