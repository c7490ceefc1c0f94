"""Hostile text in the logs is printed as data (issue 21, item 7): what an attacker wrote into a line
reaches `sql`, `timeline`, `diagnose`, `trace` and `changes` as written, never as rich markup, a
terminal escape sequence or a spreadsheet formula; and diagnose's exit status is the findings'."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# A program name is one word in supervisord's lines (\S+): markup, a clear-screen, an OSC 8 hyperlink.
MARKUP = "[/x][link=https://evil.example]click[/link][bold]"
ESCAPES = "\x1b[2J\x1b]8;;https://evil.example\x1b\\"
EVIL = f"strata-b{MARKUP}{ESCAPES}"
FORMULA = "=2+5+cmd|calc!A0"  # a spreadsheet would run it

CONFIG = """[agent]
state_dir = "{folder}/state"
[exporters.prometheus]
enabled = false
[sources.supervisord]
kind = "supervisord_log"
path = "{folder}/supervisord.log"
"""


def crash_loop(program: str, minute: int) -> list[str]:
    """A program that dies four times in a minute and goes FATAL (H13, critical)."""
    lines = [
        f"2026-10-19 06:{minute:02d}:{n}0,100 INFO spawned: '{program}' with pid {4000 + n}\n"
        f"2026-10-19 06:{minute:02d}:{n}5,100 WARN exited: {program} (exit status 134; not expected)"
        for n in range(4)
    ]
    return [
        *lines,
        f"2026-10-19 06:{minute:02d}:50,100 INFO gave up: {program} entered FATAL state, too many start"
        " retries too quickly",
    ]


@pytest.fixture(scope="module")
def store(tmp_path_factory, spawns) -> Path:
    folder = tmp_path_factory.mktemp("hostile")
    (folder / "supervisord.log").write_text("\n".join(crash_loop(EVIL, 10) + crash_loop(FORMULA, 20)) + "\n")
    config = folder / "spyglass.toml"
    config.write_text(CONFIG.format(folder=folder))
    ingested = spyglass("ingest", "-c", str(config))
    assert ingested.returncode == 0, ingested.stderr
    return config


def spyglass(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spyglass.cli.app", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "COLUMNS": "400"},
    )


def assert_shown_as_data(out: str) -> None:
    assert "\x1b" not in out  # no escape sequence reaches the terminal
    assert MARKUP in out  # the markup prints as written
    assert "\\x1b[2J\\x1b]8;;https://evil.example\\x1b\\" in out  # the escapes, shown escaped


PROGRAMS = "SELECT DISTINCT fields->>'program' AS program FROM events WHERE kind = 'spawned' ORDER BY 1"


def test_sql_prints_a_hostile_program_name_as_data_in_every_format(store):
    table = spyglass("sql", "-c", str(store), PROGRAMS)
    assert table.returncode == 0, table.stderr
    assert_shown_as_data(table.stdout)
    as_csv = spyglass("sql", "-c", str(store), "--format", "csv", PROGRAMS)
    assert as_csv.returncode == 0 and "\x1b" not in as_csv.stdout
    cells = [row[0] for row in csv.reader(io.StringIO(as_csv.stdout))]
    assert f"'{FORMULA}" in cells and not any(c.startswith(("=", "+", "-", "@")) for c in cells)
    as_json = spyglass("sql", "-c", str(store), "--format", "json", PROGRAMS)
    assert as_json.returncode == 0 and "\x1b" not in as_json.stdout
    assert {json.loads(line)["program"] for line in as_json.stdout.splitlines()} == {EVIL, FORMULA}  # JSON: lossless


def test_timeline_prints_it_as_data(store):
    for fmt in ("table", "csv"):
        shown = spyglass("timeline", "-c", str(store), "--kind", "spawned", "--format", fmt)
        assert shown.returncode == 0, shown.stderr
        assert "\x1b" not in shown.stdout
    assert MARKUP in shown.stdout and f"'{FORMULA}" not in shown.stdout  # a fields cell starts with its first key


def test_diagnose_exits_2_for_the_critical_crash_loop_and_prints_the_name_as_data(store):
    result = spyglass("diagnose", "-c", str(store))
    assert result.returncode == 2, result.stderr  # a deploy gate sees the critical crash loop
    assert "Traceback" not in result.stderr and "error" not in result.stderr
    assert_shown_as_data(result.stdout)
    assert "H13" in result.stdout
    as_json = spyglass("diagnose", "-c", str(store), "--json")
    assert as_json.returncode == 2 and "\x1b" not in as_json.stdout
    assert EVIL in {f["instance"] for f in json.loads(as_json.stdout)["findings"]}


def test_crashes_prints_the_name_and_evidence_as_data(store):
    result = spyglass("crashes", "-c", str(store))
    assert result.returncode == 0, result.stderr
    assert_shown_as_data(result.stdout)


def test_diagnose_exits_by_its_findings_even_when_printing_fails(store, spawns):
    """The deploy gate's `spyglass diagnose > /dev/full` (or any output that breaks): still 2, and said."""
    for extra in ((), ("--json",)):
        with open("/dev/full", "w") as full:
            result = subprocess.run(
                [sys.executable, "-m", "spyglass.cli.app", "diagnose", "-c", str(store), *extra],
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                timeout=180,
            )
        assert result.returncode == 2, result.stderr
        assert "printing the diagnosis failed" in result.stderr and "Traceback" not in result.stderr


def test_trace_prints_a_hostile_upstream_reason_as_data(tmp_path, spawns):
    """An upstream error text is the engine's, or whoever answered in its place: `[/x]` made trace exit 1."""
    req = "20261019-141458-1f2e3d"
    reason = f"#545 {MARKUP}{ESCAPES}"
    (tmp_path / "rag-proxy.log").write_text(
        f"[06:14:58] req={req} session=auto:15eb3770f7f979bf lane=fast mode=no_rag client_msgs=12 sent_msgs=12"
        " chars=1300000 cjk=0.010 est_tokens=398890 max_tokens=32000\n"
        f'[06:14:58] overfit req={req} status=400 prompt=398890 max=256000 upstream="{reason}"\n'
        f"[06:14:58] retry_on_overfit req={req} max_tokens 32000 -> 1\n"
    )
    config = tmp_path / "spyglass.toml"
    config.write_text(
        f'[agent]\nstate_dir = "{tmp_path}/state"\n[exporters.prometheus]\nenabled = false\n'
        f'[sources.gateway]\nkind = "gateway_log"\npath = "{tmp_path}/rag-proxy.log"\n'
    )
    assert spyglass("ingest", "-c", str(config)).returncode == 0
    result = spyglass("trace", "-c", str(config), req)
    assert result.returncode == 0, result.stderr
    assert_shown_as_data(result.stdout)
    assert "status: 400 #545 " in result.stdout and "blind retry" in result.stdout
