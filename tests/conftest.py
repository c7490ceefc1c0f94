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
