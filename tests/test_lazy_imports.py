"""What a command does not need, it does not import: the CLI and a metrics-only agent's modules load neither
DuckDB nor pyarrow (the store's and the Parquet writer's), and the light client of the answered commands
loads nothing beyond the standard library (tests/test_warm_commands.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("duckdb", "pyarrow", "numpy")


@pytest.mark.parametrize(
    "modules",
    [
        ["spyglass.cli.app"],  # every command registered: none imports the store's libraries
        ["spyglass.cli.app", "spyglass.agent.runtime", "spyglass.agent.pipeline", "spyglass.agent.server"],
    ],
)
def test_the_cli_and_a_metrics_only_agent_load_no_store_library(modules, spawns) -> None:
    probe = (
        f"import sys\nfor m in {modules!r}: __import__(m)\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_an_engine_source_imports_pyarrow_at_its_first_columnar_block_only(spawns) -> None:
    """A live, metrics-only agent reads blocks below columnar_min_lines: its engine source never builds the
    columnar grammar, so pyarrow (about 48 MiB mapped) stays out of the process; a large block builds it."""
    probe = """
import sys
from pathlib import Path
from spyglass.collectors.engine_log import EngineLogOptions, EngineLogSource
lines = Path("tests/fixtures/engine_log/strata-iq3_xxs-b.log").read_bytes().splitlines()[:8]
source = EngineLogSource("engine-b", EngineLogOptions(path="x", instance="strata-b", columnar_min_lines=8))
small, _, _ = source.handle_lines(lines[:7])
print(len(small), "pyarrow" in sys.modules)
large, _, _ = source.handle_lines(lines)
print(len(large), "pyarrow" in sys.modules, source.parse_note)
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    small, large = done.stdout.splitlines()
    assert small.split()[1] == "False" and int(small.split()[0]) > 0
    assert large.split()[1] == "True" and large.split(maxsplit=2)[2] == "columnar: auto (blocks of 8+ lines)"
