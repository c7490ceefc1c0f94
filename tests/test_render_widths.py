"""Every command's table as a person sees it, at 80, 100 and 160 columns, on a terminal and piped, over the
incident replays (tests/fixtures/incidents/replay.py) ingested into a real store: the columns a user acts on
(alert, instance, request and trace ids, UTC times, figures) are never cut. Issue 31: `backtest` printed
`GatewayBlindR…`, `timeline` cut request ids so `trace` could not take them, `report special-tokens` turned
into a block a row at 100 columns.

Each command runs once with `--format json` (its rows as data) and then as a table in every width and
mode; every key value of the rows must be in the table whole, and no cell may end in "…".
"""

from __future__ import annotations

import json
import re

import pytest
from fixtures.incidents.replay import WINDOWS, write_all
from typer.testing import CliRunner

from spyglass.cli.app import app
from spyglass.terminal.cells import cell
from spyglass.terminal.layout import DATED, role

pytestmark = pytest.mark.usefixtures("spawns")  # starts processes (the query worker): the e2e tier

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
WIDTHS = (80, 100, 160)
MODES = [("terminal", w) for w in WIDTHS] + [("piped", 100), ("piped", None)]  # piped: COLUMNS set, or not
start, end = WINDOWS["incident6"]
INCIDENT6 = ["--from", f"{start:%Y-%m-%d %H:%M}", "--to", f"{end:%Y-%m-%d %H:%M}"]

# (name, the table command, its JSON twin or None when the keys are read from the table's own lines)
COMMANDS = [
    ("requests", ["requests", "--limit", "40"], ["requests", "--limit", "40", "-f", "json"]),
    ("requests --status 4xx", ["requests", "--status", "4xx"], ["requests", "--status", "4xx", "-f", "json"]),
    *(
        (f"report {r}", ["report", r, "--limit", "40"], ["report", r, "--limit", "40", "-f", "json"])
        for r in ("special-tokens", "cache", "four-counts", "assembly", "plan-then-eos", "restarts")
    ),
    (
        "views",
        ["views", "SELECT request_id, session, lane, status, tokens FROM requests ORDER BY ts_utc LIMIT 30"],
        [
            "views",
            "SELECT request_id, session, lane, status, tokens FROM requests ORDER BY ts_utc LIMIT 30",
            "-f",
            "json",
        ],
    ),
    ("changes", ["changes"], ["changes", "-f", "json"]),
    ("crashes", ["crashes"], ["crashes", "-f", "json"]),
    (
        "sql",
        ["sql", "SELECT source, instance, kind, count(*) AS n FROM events GROUP BY ALL ORDER BY n DESC"],
        ["sql", "SELECT source, instance, kind, count(*) AS n FROM events GROUP BY ALL ORDER BY n DESC", "-f", "json"],
    ),
    ("timeline", ["timeline", *INCIDENT6, "--limit", "80"], ["timeline", *INCIDENT6, "--limit", "80", "-f", "json"]),
    ("diagnose", ["diagnose"], ["diagnose", "--json"]),
]


@pytest.fixture(scope="module")
def replay(tmp_path_factory) -> str:
    config = write_all(tmp_path_factory.mktemp("incidents"))
    result = CliRunner().invoke(app, ["ingest", "--config", str(config)])
    assert result.exit_code == 0, result.output
    return str(config)


def invoke(config: str, args: list[str], mode: str = "piped", width: int | None = None) -> str:
    env = {
        "TTY_COMPATIBLE": "1" if mode == "terminal" else "0",
        "COLUMNS": str(width) if width else None,
        "NO_COLOR": None,
        "FORCE_COLOR": None,
    }
    result = CliRunner().invoke(app, [*args, "--config", config], env=env)
    assert result.exit_code in (0, 1, 2) and result.exception is None or isinstance(result.exception, SystemExit), (
        result.output
    )
    assert "Traceback" not in result.output
    return ANSI.sub("", result.stdout)


def key_texts(name: str, output: str) -> set[str]:
    """The texts of the key columns of a command's JSON output, as a table prints them."""
    lines = [json.loads(line) for line in output.splitlines() if line.strip()]
    if name == "diagnose":
        findings = lines[0]["findings"] if lines else []
        return {f["alert"] for f in findings} | {f["instance"] for f in findings if f.get("instance")}
    if name == "timeline":
        return {r["request_id"] for r in lines if r.get("request_id")} | {r["instance"] for r in lines if r["instance"]}
    if not lines:
        return set()
    names = list(lines[0])
    out = set()
    for column in names:
        values = [r.get(column) for r in lines]
        if role(column, values, names) != "key":
            continue
        for value in values:
            text = str(value) if name == "sql" else cell(value, column)  # `sql` prints values as they are
            if isinstance(value, (dict, list)) or not text:
                continue
            out.add(text[11:] if DATED.match(text) else text)  # a date all rows share may move to the header
    return out


@pytest.mark.parametrize("name, table, as_json", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_no_key_column_is_cut_at_any_width(replay, name, table, as_json):
    keys = key_texts(name, invoke(replay, as_json))
    assert keys or name in ("crashes", "changes"), f"{name}: no rows to check"
    for mode, width in MODES:
        shown = invoke(replay, table, mode, width)
        where = f"{name}, {mode} at {width or 'its own'} columns"
        missing = sorted(k for k in keys if k not in shown)
        assert not missing, f"{where}: cut or missing {missing[:5]}\n{shown[:3000]}"
        assert "…" not in shown, f"{where}: a cell cut to …\n{shown[:3000]}"
        if mode == "terminal" and name not in ("diagnose",):  # diagnose's SQL is soft-wrapped, to copy whole
            wide = [line for line in shown.splitlines() if len(line) > width]
            assert not wide, f"{where}: {len(wide)} lines wider than the terminal: {wide[0]}"


def test_small_tables_stay_side_by_side_at_100_columns(replay):
    """A few rows are compared side by side: a table, or (too many columns) turned, a column a row, never a block a
    row; `report special-tokens` (4 rows of 7 short columns) went a block a row."""
    for args in (["report", "special-tokens"], ["sql", "SELECT kind, count(*) FROM events GROUP BY ALL"]):
        shown = invoke(replay, args, "terminal", 100)
        assert shown.count("┏") == 1 and "row 1" not in shown, shown  # one table, not turned
    restarts = invoke(
        replay, ["report", "restarts"], "terminal", 100
    )  # 14 columns of figures: turned, rows side by side
    assert any("row 1" in line and "row 2" in line for line in restarts.splitlines()), restarts


def test_the_diagnose_evidence_runs_as_printed(replay, tmp_path):
    """It printed `spyglass views "<the query below>"` and the query began with `-- ...`: an option to the CLI."""
    import shlex
    import subprocess
    import sys

    shown = invoke(replay, ["diagnose", *INCIDENT6], "terminal", 100)
    lines = shown.splitlines()
    last = next(n for n, line in enumerate(lines) if line.endswith("- <<'SQL'"))
    first = last
    while first > 0 and lines[first - 1].endswith("\\"):  # a command continued past the width
        first -= 1
    command = " ".join(line.removesuffix("\\") for line in lines[first : last + 1])
    query = "\n".join(lines[last + 1 : lines.index("SQL", last)]) + "\n"
    words = shlex.split(command.replace("- <<'SQL'", "-"))
    assert words[1] == "views" and words[-1] == "-", words
    assert query.strip(), lines[last : last + 5]
    ran = subprocess.run(
        [sys.executable, "-m", "spyglass.cli.app", *words[1:]], input=query, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip(), "the evidence query found the finding's rows"
