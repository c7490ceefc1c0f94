"""The bounds of a query a command runs on the store file itself are the `[forensics]` settings, not
/api/sql's: a query that needs a few hundred MB is the analyst's to run (a one-day report on 10M
events needs about 1 GiB), and the same query under a small `forensics.memory_mb` is refused with
the reason, never a crash."""

from __future__ import annotations

from typer.testing import CliRunner

from spyglass.cli.app import app
from spyglass.config import engine_log_config, toml_text

# A hash table of 4M distinct values: about 100-200 MB in DuckDB, which may not spill here.
HUNGRY = "SELECT count(*) AS n FROM (SELECT DISTINCT range % 4000000 FROM range(8000000))"


def config(tmp_path, **forensics) -> str:
    tmp_path.mkdir()
    log = tmp_path / "engine.log"
    log.write_bytes(b"")
    document = engine_log_config(log, tmp_path / "state")
    if forensics:
        document["forensics"] = forensics
    path = tmp_path / "spyglass.toml"
    path.write_text(toml_text(document))
    assert CliRunner().invoke(app, ["ingest", "-c", str(path)]).exit_code == 0
    return str(path)


def test_a_hungry_query_runs_within_the_forensics_bound_and_is_refused_under_a_small_one(spawns, tmp_path):
    roomy = CliRunner().invoke(app, ["sql", "-c", config(tmp_path / "roomy"), HUNGRY, "-f", "csv"])
    assert roomy.exit_code == 0, roomy.output
    assert roomy.stdout.splitlines() == ["n", "4000000"]
    tight = CliRunner().invoke(app, ["sql", "-c", config(tmp_path / "tight", memory_mb=128), HUNGRY])
    assert tight.exit_code == 1
    assert "[forensics] memory_mb" in tight.stderr, tight.stderr  # the refusal says what to raise


def test_a_bad_forensics_setting_names_its_key(tmp_path):
    result = CliRunner().invoke(app, ["sql", "-c", config_text(tmp_path, "memory_mb = 1"), "SELECT 1"])
    assert result.exit_code != 0 and "forensics.memory_mb" in result.output


def config_text(tmp_path, line: str) -> str:
    path = tmp_path / "bad.toml"
    path.write_text(f'[agent]\nstate_dir = "{tmp_path}"\n[forensics]\n{line}\n')
    return str(path)
