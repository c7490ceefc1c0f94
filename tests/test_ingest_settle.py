"""`spyglass ingest` says which infer-store segments it left unread because they changed too recently,
and `--settled-seconds` reads a segment copied a moment ago."""

from __future__ import annotations

from pathlib import Path

from fixtures.incidents.replay import ANSWER, Infer, body, rid, utc
from typer.testing import CliRunner

from spyglass.cli.app import app


def store(folder: Path) -> Path:
    infer, at = Infer(), utc("2026-10-17 14:00:05")
    for n in range(3):
        req = rid(at, n)
        infer.add(
            at,
            {
                "id": req,
                "session": "auto:1",
                "lane": "fast",
                "upstream": "strata-a",
                "mode": "assembled",
                "status": 200,
                "finish": "stop",
            },
            body(system="s", first_user="u", sent_user="u", tools=False, content=ANSWER),
        )
    db = infer.write(folder / "infer")
    config = folder / "spyglass.toml"
    config.write_text(
        f'[agent]\nstate_dir = "{folder / "state"}"\n[exporters.prometheus]\nenabled = false\n'
        f'[sources.infer]\nkind = "infer_store"\npath = "{db}"\n'
    )
    return config


def bodies(config: Path) -> str:
    result = CliRunner().invoke(
        app,
        [
            "sql",
            "--config",
            str(config),
            "--format",
            "csv",
            "SELECT count(*) AS n FROM events WHERE kind = 'request_body'",
        ],
    )
    assert result.exit_code == 0, result.output
    return result.stdout.split()[-1]


def test_a_fresh_segment_is_skipped_and_said_then_read_with_settled_seconds_0(tmp_path: Path, spawns) -> None:
    config = store(tmp_path)
    first = CliRunner().invoke(app, ["ingest", "--config", str(config)])
    assert first.exit_code == 0, first.output
    assert "skipped 1 unsettled segment of sources.infer (changed within settle_seconds 30 s" in first.stderr
    assert "20261017/seg-220000-00001.jsonl.gz" in first.stderr
    assert bodies(config) == "0"
    second = CliRunner().invoke(app, ["ingest", "--config", str(config), "--settled-seconds", "0"])
    assert second.exit_code == 0 and "unsettled" not in second.stderr, second.output
    assert bodies(config) == "3"


def test_a_negative_settle_time_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["ingest", "--config", str(store(tmp_path)), "--settled-seconds", "-1"])
    assert result.exit_code == 2
