"""Golden-file test of the /metrics output for the fixtures, and promtool's lint of it.

Regenerate after an intended change with `pytest tests/test_metrics_golden.py --update-golden`,
then review the diff like code: it is a public interface.
"""
from __future__ import annotations

import gzip
import os
import sqlite3
import subprocess
import tomllib
from contextlib import closing
from pathlib import Path

from collectors.clock import ManualClock
from exporters.prometheus import render
from exporters.statefile import StateFile
from spyglass.config import parse_config
from spyglass.pipeline import Pipeline

HERE = Path(__file__).parent
GOLDEN = HERE / "golden" / "metrics.prom"
PINNED_MTIME = 1_792_454_399.0  # 2026-10-19 23:59:59 UTC: the gateway's date before its first request id
NOW = 1_793_000_000.0  # 2026-10-26: the clock of the golden run, after every fixture


def build_infer_store(folder: Path) -> Path:
    """infer.db and its segment, built from the text fixtures (no binary files in git)."""
    fixture = HERE / "fixtures" / "infer_store"
    folder.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(folder / "infer.db")) as con:
        con.executescript((fixture / "requests.sql").read_text())
    segment = folder / "infer-segs" / "20261017" / "seg-220000-00001.jsonl.gz"
    segment.parent.mkdir(parents=True, exist_ok=True)
    segment.write_bytes(gzip.compress((fixture / "seg-220000-00001.jsonl").read_bytes(), mtime=0))
    os.utime(segment, (PINNED_MTIME, PINNED_MTIME))  # long settled
    return folder


def fixture_config(state_dir: Path) -> dict:
    """Every fixture source, with the file mtimes a fresh clone would scramble pinned."""
    fixtures = HERE / "fixtures"
    document = tomllib.loads((fixtures / "spyglass.toml").read_text())
    os.utime(fixtures / "gateway_log" / "rag-proxy.log", (PINNED_MTIME, PINNED_MTIME))
    document["agent"]["state_dir"] = str(state_dir)
    for options in document["sources"].values():
        for key in ("path", "proc_root", "cgroup_root"):
            if key in options:
                options[key] = str(fixtures / options[key])
    document["sources"]["infer"]["path"] = str(build_infer_store(state_dir / "infer") / "infer.db")
    return document


def render_fixtures(state_dir: Path) -> str:
    config = parse_config(fixture_config(state_dir), "golden")
    pipeline = Pipeline(config, ManualClock(start=NOW), StateFile(state_dir / "state.json"))
    try:
        pipeline.run_until_idle()
        return render(pipeline.state).decode()
    finally:
        pipeline.close()


def test_metrics_match_golden(tmp_path, update_golden):
    actual = render_fixtures(tmp_path)
    if update_golden:
        GOLDEN.write_text(actual)
    assert GOLDEN.read_text() == actual


def test_golden_passes_promtool_check_metrics(promtool):
    result = subprocess.run([promtool, "check", "metrics"], input=GOLDEN.read_bytes(), capture_output=True)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
