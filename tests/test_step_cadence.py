"""The main loop under a steady writer (inotify waking it at every write): a step comes about once
per commit interval, just before the commit, not once per wake or per `coalesce_seconds` (the
writer's lines wait for the commit either way), and every line written is read, committed and on
the exposed state."""

from __future__ import annotations

import threading

import pytest
from conftest import wait_until

from spyglass.agent.pipeline import Pipeline
from spyglass.agent.wake import Wake
from spyglass.collectors.clock import SystemClock
from spyglass.config import engine_log_config, parse_config
from spyglass.engine.emulator.logsynth import EngineModel
from spyglass.exporters.statefile import StateFile

pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier

INTERVAL, SECONDS, WRITES_A_SECOND = 0.5, 3.0, 50


def lines(n: int) -> list[bytes]:
    model, ts, out = EngineModel(seed=5), 1_792_380_000.0, []
    out += model.start_lines(ts)
    while len(out) < n:
        ts += 20
        out += [model.noise(ts)] + model.turn(ts)
    return [line + b"\n" for line in out[:n]]


def test_steps_follow_the_commits_not_the_wakes(tmp_path):
    log = tmp_path / "engine.log"
    log.write_bytes(b"")
    document = engine_log_config(log, tmp_path / "state", store=False, commit_interval_seconds=INTERVAL)
    config = parse_config(document, "cadence")
    pipeline = Pipeline(config, SystemClock(), StateFile(tmp_path / "state.json"))
    steps, commits = [0], [0]
    step, commit = pipeline.step, pipeline.committer.commit

    def counted_step() -> int:
        steps[0] += 1
        return step()

    def counted_commit(**options: bool) -> None:
        commits[0] += 1
        commit(**options)

    pipeline.step, pipeline.committer.commit = counted_step, counted_commit  # type: ignore[method-assign]
    wake, stop = Wake(), threading.Event()
    wake.watch([tmp_path])
    loop = threading.Thread(target=pipeline.run, args=(stop, wake), daemon=True)
    loop.start()
    written = lines(int(SECONDS * WRITES_A_SECOND) * 20)
    pace = threading.Event()  # never set: its wait paces the writer
    try:
        with open(log, "ab", buffering=0) as out:
            for i in range(0, len(written), 20):  # 20 lines a write, 50 writes a second: 50 wakes a second
                out.write(b"".join(written[i : i + 20]))
                pace.wait(1 / WRITES_A_SECOND)
        steps_while_writing = steps[0]

        def all_exposed() -> bool:
            with pipeline.exposed.lock:
                counted = pipeline.exposed.series("spyglass_source_lines_total")
                return sum(v for (source, _), v in counted.items() if source == "engine-b") == len(written)

        wait_until(all_exposed, timeout=10 * INTERVAL + 10, what="every line written on the exposed state")
    finally:
        stop.set()
        wake.set()
        loop.join(timeout=30)
        wake.close()
        pipeline.close()
    # 0.1 s coalescing alone would step about 10 times a second (30 here); one step per commit is 6
    assert steps_while_writing <= SECONDS / INTERVAL * 1.5 + 3, (steps_while_writing, commits[0])
    assert commits[0] >= 2
