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
