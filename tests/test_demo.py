"""`spyglass demo` runs the emulated stack and the agent, shows the storm, and stops cleanly."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import free_port


def test_demo_runs_the_stack_shows_the_storm_and_cleans_up():
    port = free_port()
    result = subprocess.run([sys.executable, "-m", "spyglass.cli", "demo", "--seconds", "20",
                             "--listen", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"http://127.0.0.1:{port}/metrics" in result.stdout
    evictions = re.search(r"evictions, strata-b \(engine's own counter\)\s*│\s*(\d+)", result.stdout)
    assert evictions and int(evictions.group(1)) > 0, result.stdout[-2000:]
    store = Path(re.search(r"store\s+(\S+)", result.stdout).group(1))
    assert not store.parent.parent.exists(), "the demo left its temp folder behind"
    assert "stopped cleanly" in result.stderr
    leftovers = subprocess.run(["pgrep", "-f", str(store.parent.parent)], capture_output=True, text=True)
    assert leftovers.stdout == "", "processes of the demo are still running"
