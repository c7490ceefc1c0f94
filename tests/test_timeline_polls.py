"""`spyglass timeline` shows a status poll where it changed what its source said, not a row a second.

llama-server is polled each second by default: a 15-minute timeline of a llama deployment was 900 rows of
`llama_status` per instance before anything else. A real DuckDB store, written as the agent writes it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spyglass.cli.app import app
from spyglass.collectors.event import Event
from spyglass.config import load_config
from spyglass.exporters.store import DuckDBStore

pytestmark = pytest.mark.usefixtures("spawns")  # the query runs in its own process: the e2e tier
START = 1_790_000_000.0  # 2026-09-21T14:13:20Z
HEALTH = ["ok"] * 30 + ["loading"] * 10 + ["ok"] * 20  # one poll a second: ok, a reload, ok again


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("polls")
    path = folder / "spyglass.toml"
    path.write_text(
        f'[agent]\nstate_dir = "{folder}/state"\n[exporters.prometheus]\nenabled = false\n'
        '[sources.llama-a]\nkind = "llama_server"\nurl = "http://127.0.0.1:8080"\ninstance = "llama-a"\n'
    )
    polls = [
        Event(START + n, "llama-a", "llama_status", "llama-a", {"health": health, "build": "b7", "poll_ms": n % 7})
        for n, health in enumerate(HEALTH)
    ]
    error = Event(START + 45.5, "llama-a", "poll_error", "llama-a", {"error": "timeout"})
    store = DuckDBStore(load_config(path).store_path(), {"llama-a": "llama_server"})
    store.commit([*polls, error], {}, {})
    store.con.close()
    return path


def timeline(config: Path, *args: str) -> list[dict]:
    result = CliRunner().invoke(app, ["timeline", "--config", str(config), "--format", "json", *args])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]  # JSON lines


def test_a_poll_is_shown_where_its_health_changed_and_at_the_windows_start(config) -> None:
    rows = timeline(config)
    assert [(r["kind"], r["fields"].get("health")) for r in rows] == [
        ("llama_status", "ok"),
        ("llama_status", "loading"),
        ("llama_status", "ok"),
        ("poll_error", None),
    ]
    assert [r["ts_utc"][17:19] for r in rows] == ["20", "50", "00", "05"]  # 14:13:20, :50, 14:14:00, :05.5
    later = timeline(config, "--from", "2026-09-21 14:13:35", "--to", "2026-09-21 14:13:55")
    # the window's first poll (it repeats one before the window: the state as the window opens), then the change
    assert [(r["ts_utc"][17:19], r["fields"]["health"]) for r in later] == [("35", "ok"), ("50", "loading")]


def test_every_poll_is_there_when_asked_for(config) -> None:
    assert sum(r["kind"] == "llama_status" for r in timeline(config, "--every-poll")) == len(HEALTH)
    assert len(timeline(config, "--kind", "llama_status")) == len(HEALTH)


def test_the_header_says_the_polls_are_thinned(config) -> None:
    result = CliRunner().invoke(app, ["timeline", "--config", str(config)])
    assert result.exit_code == 0, result.output
    header = " ".join(result.stdout.splitlines()[0:2])
    assert "4 events" in header and "(status polls: changes only)" in header
    every = CliRunner().invoke(app, ["timeline", "--config", str(config), "--every-poll"]).stdout
    assert "61 events" in every and "changes only" not in every.splitlines()[0]
