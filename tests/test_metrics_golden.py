"""Golden-file test of the /metrics output for the fixtures, and promtool's lint of it; the same for
the OpenMetrics output (with exemplars), parsed by prometheus_client's strict OpenMetrics parser
(promtool 2.42's `check metrics` reads only the classic text format).

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

from spyglass import signals
from spyglass.agent.pipeline import Pipeline
from spyglass.collectors.clock import ManualClock
from spyglass.config import parse_config
from spyglass.exporters.prometheus import render, render_openmetrics
from spyglass.exporters.statefile import StateFile

HERE = Path(__file__).parent
GOLDEN = HERE / "golden" / "metrics.prom"
GOLDEN_OPENMETRICS = HERE / "golden" / "metrics.om"
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


def render_fixtures(state_dir: Path, renderer=render) -> str:
    config = parse_config(fixture_config(state_dir), "golden")
    pipeline = Pipeline(config, ManualClock(start=NOW), StateFile(state_dir / "state.json"))
    try:
        pipeline.run_until_idle()
        return renderer(pipeline.state).decode()
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


def test_openmetrics_matches_golden(tmp_path, update_golden):
    actual = render_fixtures(tmp_path, render_openmetrics)
    if update_golden:
        GOLDEN_OPENMETRICS.write_text(actual)
    assert GOLDEN_OPENMETRICS.read_text() == actual


def test_golden_openmetrics_parses_with_its_exemplars_and_the_same_samples():
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics
    from prometheus_client.parser import text_string_to_metric_families as classic

    text = GOLDEN_OPENMETRICS.read_text()
    assert text.endswith("# EOF\n") and "_created" not in text
    families = list(openmetrics(text))  # raises on anything OpenMetrics 1.0.0 does not allow
    samples = {(s.name, tuple(sorted(s.labels.items()))): s for f in families for s in f.samples}
    exemplars = {name for (name, _), s in samples.items() if s.exemplar}
    assert (
        exemplars
        == {
            "spyglass_engine_ttft_seconds_bucket",
            "spyglass_gateway_ttft_seconds_bucket",
            "spyglass_gateway_request_duration_seconds_bucket",
        }
        == {f"{spec.name}_bucket" for spec in signals.full_catalogue() if spec.exemplars}
    )
    for sample in (s for s in samples.values() if s.exemplar):
        assert set(sample.exemplar.labels) == {"trace_id"} and len(sample.exemplar.labels["trace_id"]) == 32
        upper = float(sample.labels["le"])  # the exemplar's value lies in its bucket
        bounds = sorted(
            float(s.labels["le"])
            for s in samples.values()
            if s.name == sample.name and {**s.labels, "le": ""} == {**sample.labels, "le": ""}
        )
        assert ([b for b in bounds if b < upper] or [float("-inf")])[-1] < sample.exemplar.value <= upper
    # The same series and values as the classic text (counters named with _total in both).
    plain = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in classic(GOLDEN.read_text()) for s in f.samples}
    assert {k: s.value for k, s in samples.items()} == plain
