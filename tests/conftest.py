"""Shared test options and helpers."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

FIXTURES = Path(__file__).parent / "fixtures"

# Hypothesis runs under a profile, never a count written into a decorator: `dev` for a developer's
# quick run, `ci` (more examples) when CI is set. Both draw at random; scripts/test gives CI a fixed
# `--hypothesis-seed` (SPYGLASS_HYPOTHESIS_SEED), so a red CI run replays, and a nightly-style run
# explores by passing another seed.
_HYPOTHESIS = dict(
    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]
)
settings.register_profile("dev", max_examples=25, **_HYPOTHESIS)
settings.register_profile("ci", max_examples=250, print_blob=True, **_HYPOTHESIS)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite golden files from the current output")


# --- The e2e tier is decided by fixture use -------------------------------------------------------
# A test that starts a process (a stack, Prometheus, the CLI, a child to kill) requests `spawns`,
# directly or through a fixture that does. It is then marked `e2e`, and `scripts/test --fast`
# (`-m "not e2e"`) leaves it out. A test that starts a process without it fails, in every run, so
# the fast tier cannot quietly grow a process-starting test.
_spawn_allowed = True  # outside a test (collection, xdist's start-up) nothing is refused
_execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]
_fork = os.fork


def _refuse_unless_allowed(what: str) -> None:
    if not _spawn_allowed:
        raise RuntimeError(
            f"this test starts a process ({what}) but does not request the `spawns` fixture "
            "(tests/conftest.py): request it, so the test is marked e2e and kept out of --fast"
        )


# Libraries look things up by running these (ctypes.util.find_library runs `ldconfig -p`, for
# inotify_simple; platform.uname() runs `uname -p`): lookups, not processes a test starts.
_LIBRARY_LOOKUPS = frozenset({"ldconfig", "uname"})


def _guarded_execute_child(self, args, *rest, **kw):
    program = args if isinstance(args, (str, bytes)) else args[0]
    if os.path.basename(os.fsdecode(program).split()[0]) not in _LIBRARY_LOOKUPS:
        _refuse_unless_allowed(str(args)[:80])
    return _execute_child(self, args, *rest, **kw)


def _guarded_fork():
    _refuse_unless_allowed("os.fork")
    return _fork()


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("numprocesses", None) and not hasattr(config, "workerinput"):
        return  # xdist's controller: it starts the workers, and runs no test itself
    subprocess.Popen._execute_child = _guarded_execute_child  # type: ignore[attr-defined]
    os.fork = _guarded_fork


@pytest.fixture(scope="session")
def spawns() -> None:
    """Declares that a test (or a fixture) starts processes: the test is marked e2e."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "spawns" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    global _spawn_allowed
    # Set before the item's fixtures: a module-scoped stack starts inside its first test's setup.
    _spawn_allowed = "spawns" in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    global _spawn_allowed
    _spawn_allowed = True


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(scope="session")
def promtool(spawns) -> str:
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


def kill_at_random_until_done(
    command: list[str], duration: float, seed: int, window: tuple[float, float], after_kill=None, kill_when=None
) -> int:
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


@pytest.fixture(autouse=True)
def _display_zone_of_its_own() -> Iterator[None]:
    """Each test starts with no display zone loaded (a config it loads sets the process's: collectors.clock)."""
    from spyglass.collectors import clock

    yield
    clock._DISPLAY.clear()
