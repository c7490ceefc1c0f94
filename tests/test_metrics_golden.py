"""Golden-file test of the /metrics output for the fixtures, and promtool's lint of it.

Regenerate after an intended change with `pytest tests/test_metrics_golden.py --update-golden`,
then review the diff like code: it is a public interface.
"""
from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

from collectors.clock import ManualClock
from exporters.prometheus import render
from exporters.statefile import StateFile
from spyglass.config import engine_log_toml, parse_config
from spyglass.pipeline import Pipeline

HERE = Path(__file__).parent
GOLDEN = HERE / "golden" / "metrics.prom"


def fixture_config(state_dir: Path) -> dict:
    log = HERE / "fixtures" / "engine_log" / "strata-iq3_xxs-b.log"
    return tomllib.loads(engine_log_toml(log, state_dir, store=False, host="golden"))


def render_fixtures(state_dir: Path) -> str:
    config = parse_config(fixture_config(state_dir), "golden")
    pipeline = Pipeline(config, ManualClock(), StateFile(state_dir / "state.json"))
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
