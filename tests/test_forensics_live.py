"""Every forensic command answers the same through the running agent (its read-only query path,
which holds the store's lock) as from the file with the agent stopped (issue #11, item 7)."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest
from conftest import wait_until
from fixtures.incidents.replay import WINDOWS, write_all

from spyglass.ports import free_port

pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier

SOME_WINDOWS = ("incident2", "incident3", "restarts")  # the cache, the special tokens, the restart loop
COMMANDS = [
    ["timeline", "--limit", "100000"],
    ["requests"],
    ["diagnose", "--json"],
    ["report", "cache"],
    ["report", "special-tokens"],
    ["report", "four-counts"],
    ["report", "restarts"],
]


def spyglass(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spyglass.cli.app", *args], capture_output=True, text=True, timeout=300
    )


def answers(config: str) -> dict[tuple[str, ...], tuple[int, str]]:
    out = {}
    for window in SOME_WINDOWS:
        start, end = WINDOWS[window]
        for command in COMMANDS:
            args = [*command, "--config", config, "--from", f"{start:%Y-%m-%d %H:%M}", "--to", f"{end:%Y-%m-%d %H:%M}"]
            if command[0] != "diagnose":
                args += ["--format", "json"]
            result = spyglass(*args)
            out[(window, *command)] = (result.returncode, result.stdout)
    return out


def healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.slow
def test_the_same_answers_through_the_running_agent_and_from_the_file(tmp_path):
    config = write_all(tmp_path)
    port = free_port()
    config.write_text(
        config.read_text().replace(
            "[exporters.prometheus]\nenabled = false", f'[exporters.prometheus]\nlisten = "127.0.0.1:{port}"'
        )
    )
    assert spyglass("ingest", "--config", str(config)).returncode == 0
    from_file = answers(str(config))
    assert sum(1 for code, text in from_file.values() if code in (0, 1, 2) and text) >= len(SOME_WINDOWS) * 3

    agent = subprocess.Popen(
        [sys.executable, "-m", "spyglass.cli.app", "run", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: healthy(f"http://127.0.0.1:{port}/health"), 60, "the agent's /health")
        locked = spyglass("sql", "--config", str(config), "SELECT count(*) AS n FROM events")
        assert locked.returncode == 0, locked.stderr  # the agent holds the lock: this went through /api/sql
        through_agent = answers(str(config))
    finally:
        agent.terminate()
        agent.wait(timeout=60)
    assert through_agent == from_file
