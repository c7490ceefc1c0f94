"""The warm query path: `timeline`, `requests`, `trace`, `sql`, `report` and `views` run by the agent that serves
the store (POST /api/command, spyglass/cli/warm.py) print exactly what the command prints when it opens the
store itself; the client imports nothing heavy; the agent refuses what the client must run itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest
import tomli_w
from conftest import wait_until
from incidents.windows import BY_NAME

from spyglass.cli import warm
from spyglass.ports import free_port

SPYGLASS = str(Path(sys.executable).parent / "spyglass")
WINDOW = ["--from", "2026-10-17 14:00", "--to", "2026-10-17 14:20"]


def commands(config: Path, request_id: str) -> list[list[str]]:
    c = ["-c", str(config)]
    return [
        ["timeline", *c, *WINDOW, "--limit", "50"],
        ["timeline", *c, *WINDOW, "--kind", "no-such-kind"],  # exit 1, said on stderr
        ["requests", *c, *WINDOW, "--format", "json"],
        ["requests", *c, *WINDOW, "--slowest", "5"],
        ["trace", *c, request_id],
        ["trace", *c, "20991231-000000-000000"],  # not stored: exit 1
        ["sql", *c, "SELECT source, count(*) AS n FROM events GROUP BY source ORDER BY source"],
        ["sql", *c, "-"],  # the query on stdin
        ["report", "special-tokens", *c, *WINDOW],
        ["report", "cache", *c, *WINDOW, "--format", "csv"],
        ["views", "SELECT count(*) AS n FROM requests", *c, *WINDOW],
        ["diagnose", *c, *WINDOW],  # exit 2: incident 3's window has a critical finding
        ["diagnose", *c, *WINDOW, "--json"],
        ["requests", *c, "--from", "not a time"],  # a usage error: exit 2
    ]


STDIN = "SELECT kind, count(*) AS n FROM events WHERE source = 'gateway' GROUP BY kind ORDER BY kind\n"


def environ(columns: str | None) -> dict[str, str]:
    """The environment without a terminal's size (an earlier test may have set one), or with COLUMNS."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return {**env, "COLUMNS": columns} if columns else env


def here(argv: list[str], columns: str | None = None) -> tuple[int, str, str]:
    done = subprocess.run(  # bytes: text mode would turn the CSV's \r\n into \n
        [SPYGLASS, *argv], input=STDIN.encode(), capture_output=True, timeout=300, env=environ(columns)
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


@pytest.fixture(scope="module")
def store(tmp_path_factory, spawns):
    """Incident 3's window ingested into a store, an agent's listen address in its config."""
    folder = tmp_path_factory.mktemp("warm")
    config = BY_NAME["incident3"].build(folder)
    document = tomllib.loads(config.read_text())
    document.setdefault("exporters", {})["prometheus"] = {"listen": f"127.0.0.1:{free_port()}"}
    config.write_text(tomli_w.dumps(document))
    status, _, err = here(["ingest", "--config", str(config)])
    assert status == 0, err
    status, out, err = here(["requests", "-c", str(config), *WINDOW, "--format", "json", "--limit", "1"])
    assert status == 0, err
    return config, json.loads(out.splitlines()[0])["request_id"]


@pytest.fixture(scope="module")
def cold(store):
    """Each command's output with no agent running: the command opens the store file itself."""
    config, request_id = store
    request = warm.command_request(["timeline", "-c", str(config)])
    assert request is not None and warm.through_agent(request) is None  # nothing listens: the command runs here
    return {(columns, *argv): here(argv, columns) for argv in commands(config, request_id) for columns in (None, "70")}


@pytest.fixture(scope="module")
def agent(store, cold):
    """`spyglass run` on the store (after the cold runs: it holds the file)."""
    config, _ = store
    listen = tomllib.loads(config.read_text())["exporters"]["prometheus"]["listen"]
    process = subprocess.Popen([SPYGLASS, "run", "--config", str(config)], stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _health(listen), timeout=60, what="the agent serving")
        yield listen
    finally:
        process.terminate()
        process.wait(timeout=60)


def _health(listen: str) -> bool:
    try:
        return httpx.get(f"http://{listen}/health").status_code == 200
    except httpx.HTTPError:
        return False


def test_every_command_prints_the_same_through_the_agent(store, cold, agent, monkeypatch) -> None:
    import io

    config, request_id = store
    for columns, *argv in cold:
        monkeypatch.setattr(os, "environ", environ(columns))  # what the client sends of its terminal
        monkeypatch.setattr(sys, "stdin", io.StringIO(STDIN))
        request = warm.command_request(argv)
        assert request is not None, argv
        answer = warm.through_agent(request)
        assert answer is not None, f"the agent did not run {argv}"
        assert answer == cold[(columns, *argv)], (columns, argv)
    assert {status for status, _, _ in cold.values()} == {0, 1, 2}  # rows, nothing found, a usage error


def test_the_command_as_a_process_is_answered_by_the_agent(store, cold, agent) -> None:
    config, request_id = store
    argv = commands(config, request_id)[0]
    assert here(argv) == cold[(None, *argv)]


def test_what_the_client_must_run_itself_is_refused_or_not_sent(store, agent, tmp_path) -> None:
    config, _ = store
    assert warm.command_request(["timeline", "-c", str(config), "--parquet", "x/*.parquet"]) is None
    assert warm.command_request(["report", "cache", "-c", str(config), "--html", "out.html"]) is None
    assert warm.command_request(["ingest", "-c", str(config)]) is None
    assert warm.command_request(["timeline"]) is None  # no config: the command says so itself
    other = tmp_path / "other.toml"
    other.write_text(config.read_text())  # the same agent's address, but not its config file
    request = warm.command_request(["timeline", "-c", str(other)])
    assert request is not None and warm.through_agent(request) is None
    body = {"argv": ["ingest", "-c", str(config)], "config_at": 2, "terminal": {}}
    refused = httpx.post(f"http://{agent}/api/command", json=body, timeout=30)
    assert refused.status_code == 409 and "not a command" in refused.json()["local"]
    twice = {"argv": ["timeline", "-c", str(config), "-c", str(other)], "config_at": 2, "terminal": {}}
    refused = httpx.post(f"http://{agent}/api/command", json=twice, timeout=30)
    assert refused.status_code == 409 and "more than one" in refused.json()["local"]
    bad = httpx.post(f"http://{agent}/api/command", json={"argv": "timeline"}, timeout=30)
    assert bad.status_code == 400
    assert httpx.get(f"http://{agent}/health").status_code == 200  # and the agent lives on


def test_the_client_imports_nothing_heavy(spawns) -> None:
    heavy = {"duckdb", "pyarrow", "typer", "pydantic", "rich", "httpx", "loguru", "numpy"}
    probe = f"import sys, spyglass.cli.warm; print(sorted({{m.split('.')[0] for m in sys.modules}} & {heavy!r}))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_the_client_names_the_commands_the_agent_answers() -> None:
    from spyglass.cli import answered

    assert set(answered.COMMANDS) == warm.COMMANDS
