"""Shared test options and helpers."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite golden files from the current output")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(scope="session")
def promtool() -> str:
    """Debian's promtool; scripts/setup installs it, so its absence is a failure, not a skip."""
    path = shutil.which("promtool")
    assert path, "promtool not found: run scripts/setup (installs Debian's prometheus package)"
    return path


def wait_until(predicate, timeout: float = 20.0, what: str = "condition"):
    """Poll `predicate` until it returns a truthy value; fail after `timeout` seconds.

    For conditions only another process can make true (an HTTP answer, a line on /metrics);
    the assertion is on the condition, never on how long it took.
    """
    import threading
    import time

    pause = threading.Event()
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        pause.wait(0.02)


def kill_at_random_until_done(command: list[str], duration: float, seed: int, window: tuple[float, float],
                              after_kill=None, kill_when=None) -> int:
    """Run `command` again and again, each time SIGKILLed at a random moment of `window` (fractions
    of `duration`, one clean run's time here), until one run finishes; return the number of kills.

    With `kill_when` (a predicate on what the process left on disk), every other run is killed as
    soon as it holds instead (or at its random moment if it never does): a kill aimed at a short
    phase that random moments rarely hit. `after_kill()` runs after each kill, with the process
    gone. A run that finishes must exit 0; 100 runs without one finishing is a failure."""
    import random
    import subprocess
    import tempfile
    import threading
    import time

    rng = random.Random(seed)
    pause = threading.Event()
    for run in range(100):
        with tempfile.TemporaryFile() as err:  # a file, not a pipe: a chatty run never blocks on it unread
            proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
            aim = kill_when if run % 2 else None
            deadline = time.monotonic() + rng.uniform(*window) * duration
            while proc.poll() is None and time.monotonic() < deadline and not (aim and aim()):
                pause.wait(0.001 if aim else 0.01)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            else:
                err.seek(0)
                assert proc.returncode == 0, err.read().decode()
                return run  # every run before this one was killed
        if after_kill is not None:
            after_kill()
    raise AssertionError(f"{command[3:]} never finished within 100 runs")
