"""`spyglass demo` starts, shows the eviction storm growing, and stops cleanly in bounded time."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import free_port


def test_demo_runs_and_cleans_up():
    port = free_port()
    result = subprocess.run([sys.executable, "-m", "spyglass.cli", "demo", "--seconds", "5",
                             "--listen", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr
    assert f"http://127.0.0.1:{port}/metrics" in result.stdout
    log = Path(re.search(r"engine log\s+(\S+)", result.stdout).group(1))
    assert not log.parent.exists(), "the demo left its temp folder behind"
    evictions = [int(n) for n in re.findall(r"evictions\s+(\d+)", result.stdout)]
    assert evictions and evictions[-1] > 0, result.stdout
    assert "stopped cleanly" in result.stderr
