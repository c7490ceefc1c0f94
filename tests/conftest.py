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


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def random_port_base() -> int:
    """Three free consecutive ports from a kernel-chosen start: other test runs on this machine scan
    from free_port_base's fixed start and would race this stack for the same ports."""
    import socket

    while True:
        base = free_port()
        try:
            for port in (base + 1, base + 2):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
