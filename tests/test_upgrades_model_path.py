"""The model-path watch (H15) on real symlinks, switched and broken while the agent's pipeline polls them.

The engine's start banner says what it loaded; the watch resolves the configured path every poll.
A blue/green switch makes the path name another file than the running process loaded (mismatch);
a cleanup that deletes the target leaves a dangling link (does not resolve); a restart on the new
file clears the mismatch.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import duckdb
import pytest

from spyglass.agent.pipeline import Pipeline
from spyglass.collectors.clock import ManualClock
from spyglass.collectors.model_path import ModelPathOptions, ModelPathSource, resolve
from spyglass.config import parse_config
from spyglass.engine.emulator.logsynth import line
from spyglass.exporters.store import DuckDBStore

START = 1_790_000_000.0


def banner(ts: float, link: Path, real: Path) -> list[bytes]:
    return [
        line(ts, "I", "main", "Strata 0.9.3 (build 7f3c2e1) starting pid=48211"),
        line(ts, "I", "main", f"args: --model {link} --port 8081 --slots 20"),
        line(ts, "I", "main", f"model path={link} real={real} bytes={real.stat().st_size} md5=5d41402abc4b2a76"),
        line(ts + 2, "I", "main", "ready in 2.0 s"),
    ]


def point(link: Path, target: Path) -> None:
    """An atomic switch: a new link renamed over the old one."""
    tmp = link.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    os.replace(tmp, link)


@pytest.fixture
def deployment(tmp_path):
    blue, green = tmp_path / "blue" / "model.gguf", tmp_path / "green" / "model.gguf"
    for f, size in ((blue, 100), (green, 200)):
        f.parent.mkdir()
        f.write_bytes(b"w" * size)
    link = tmp_path / "current.gguf"
    point(link, blue)
    log = tmp_path / "engine-a.log"
    log.write_bytes(b"\n".join(banner(START - 60, link, blue)) + b"\n")
    config = parse_config(
        tomllib.loads(f"""
[agent]
state_dir = "{tmp_path / "state"}"
[exporters.prometheus]
enabled = false
[sources.engine-a]
kind = "engine_log"
path = "{log}"
instance = "strata-a"
lane = "fast"
[sources.model-a]
kind = "model_path"
path = "{link}"
instance = "strata-a"
interval_seconds = 30
"""),
        "t",
    )
    clock = ManualClock(START)
    pipeline = Pipeline(config, clock, DuckDBStore(config.store_path()))
    yield pipeline, clock, link, blue, green, log, config
    pipeline.close()


def gauges(pipeline: Pipeline) -> dict[str, float | None]:
    values = pipeline.state.values
    return {
        name: values[name].get(("strata-a",))
        for name in (
            "spyglass_model_path_resolves",
            "spyglass_model_path_mismatch",
            "spyglass_model_path_changes_total",
            "spyglass_model_path_changed_timestamp_seconds",
        )
    }


def poll(pipeline: Pipeline, clock: ManualClock, seconds: float = 30) -> dict[str, float | None]:
    clock.advance(seconds)
    pipeline.run_until_idle()
    return gauges(pipeline)


def test_switch_cleanup_and_restart_on_real_links(deployment):
    pipeline, clock, link, blue, green, log, config = deployment
    pipeline.run_until_idle()  # first poll, then the banner is read
    g = poll(pipeline, clock)
    assert g["spyglass_model_path_resolves"] == 1.0 and g["spyglass_model_path_mismatch"] == 0.0
    assert g["spyglass_model_path_changes_total"] == 0.0  # a known counter: at 0 until the first switch
    assert g["spyglass_model_path_changed_timestamp_seconds"] == pytest.approx(os.lstat(link).st_mtime)

    point(link, green)  # the switch, while the engine still runs on blue
    switched = clock.now() + 30
    g = poll(pipeline, clock)
    assert g["spyglass_model_path_resolves"] == 1.0 and g["spyglass_model_path_mismatch"] == 1.0
    assert g["spyglass_model_path_changes_total"] == 1.0
    assert g["spyglass_model_path_changed_timestamp_seconds"] == switched

    green.unlink()  # the cleanup raced the switch: the link now dangles
    g = poll(pipeline, clock)
    assert g["spyglass_model_path_resolves"] == 0.0 and g["spyglass_model_path_changes_total"] == 2.0
    assert g["spyglass_model_path_mismatch"] is None  # nothing to compare: the finding is that it does not resolve

    green.write_bytes(b"w" * 200)  # fixed, and the engine restarted on it
    with log.open("ab") as out:
        out.write(b"\n".join(banner(clock.now(), link, green)) + b"\n")
    poll(pipeline, clock)
    g = poll(pipeline, clock)
    assert g["spyglass_model_path_resolves"] == 1.0 and g["spyglass_model_path_mismatch"] == 0.0
    assert g["spyglass_model_path_changes_total"] == 3.0
    pipeline.close()

    con = duckdb.connect(str(config.store_path()), read_only=True)
    changes = con.execute(
        "SELECT before, after FROM events_model_path WHERE kind = 'model_path_changed' ORDER BY ts"
    ).fetchall()
    assert changes == [(str(blue), str(green)), (str(green), None), (None, str(green))]
    dangling = con.execute(
        "SELECT count(*) FROM events WHERE kind = 'model_path' AND (fields->>'dangling')::BOOLEAN"
    ).fetchone()[0]
    assert dangling == 1


def test_a_missing_path_a_plain_file_and_a_restart_of_the_watch(tmp_path):
    assert resolve(tmp_path / "nope").real is None
    plain = tmp_path / "m.gguf"
    plain.write_bytes(b"x")
    r = resolve(plain)
    assert r.real == str(plain) and not r.link and r.bytes == 1
    source = ModelPathSource("m", ModelPathOptions(kind="model_path", path=plain, instance="strata-a"))
    [first] = source.poll(1.0).events
    assert first.fields["resolves"] and "changed_ts" not in first.fields  # a plain file has no switch time
    saved = json.loads(json.dumps(source.checkpoint()))
    plain.unlink()
    again = ModelPathSource("m", ModelPathOptions(kind="model_path", path=plain, instance="strata-a"))
    again.restore(saved)
    kinds = [e.kind for e in again.poll(2.0).events]
    assert kinds == ["model_path_changed", "model_path"]  # the change across the agent's restart is seen
    again.restore({"last": {"bogus": 1}})  # a checkpoint of another shape starts over, it does not crash
    assert [e.kind for e in again.poll(3.0).events] == ["model_path"]


def test_ingest_reads_the_files_and_does_not_count_a_model_path_as_one(tmp_path):
    from typer.testing import CliRunner

    from spyglass.cli.app import app

    (tmp_path / "v7.gguf").write_bytes(b"weights")
    log = tmp_path / "engine-b.log"
    log.write_bytes(b"\n".join(banner(START, tmp_path / "current.gguf", tmp_path / "v7.gguf")) + b"\n")
    config = tmp_path / "spyglass.toml"
    config.write_text(
        f'[agent]\nstate_dir = "{tmp_path / "state"}"\n[exporters.prometheus]\nenabled = false\n'
        f'[sources.engine-b]\nkind = "engine_log"\npath = "{log}"\ninstance = "strata-b"\n'
        f'[sources.model-b]\nkind = "model_path"\npath = "{tmp_path / "gone.gguf"}"\ninstance = "strata-b"\n'
    )
    result = CliRunner().invoke(app, ["ingest", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "no file at" not in result.stderr and "from 1 of 1 files" in result.stdout
    log.unlink()  # the one file gone: none of the files exists, whatever the model path
    result = CliRunner().invoke(app, ["ingest", "--config", str(config)])
    assert result.exit_code == 1 and "none of the 1 configured files exists" in result.stderr
