"""How results print: a table cell is the value's text, never rich markup."""

from __future__ import annotations

import io

from spyglass.collectors.clock import set_display_zone
from spyglass.forensics.output import emit

LINE = "[load] model=/models/[blue]x[/blue] [bold red]ok"


def test_a_bracketed_log_line_prints_as_written_in_a_table():
    out = io.StringIO()
    emit([{"kind": "load", "line": LINE}], "table", title="1 events", out=out)
    assert LINE in out.getvalue()


def test_a_row_too_wide_for_the_terminal_keeps_its_brackets_too(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = io.StringIO()
    emit([{f"column_{i}": LINE for i in range(12)}], "table", out=out)
    assert out.getvalue().count("[load]") == 12


def test_to_a_pipe_a_wide_table_prints_whole_rows(monkeypatch):
    """An analyst's `spyglass timeline ... | less` or `> incident.txt`: no column cut to "…"."""
    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()
    rows = [
        {
            "ts_utc": "2026-10-19T04:49:00.000Z",
            "ts_local": "2026-10-19T12:49:00.000+08:00",
            "instance": "strata-b",
            "kind": "evict",
            "detail": f"conv={n:016x} bytes=3541434456 reason=budget evictions={n}" * 3,
        }
        for n in range(3)
    ]
    emit(rows, "table", out=out)
    text = out.getvalue()
    assert "…" not in text and "row 1" not in text
    assert all(row["detail"] in text for row in rows)


SUMMARY = (
    "strata-b evicted 199 conversation snapshots (up to 19.9 a minute); the largest parked snapshot, 3.4 GB,"
    " is 40% of the 8 GiB budget"
)
EVIDENCE = "SELECT instance, count(*) AS evictions FROM cache_events WHERE kind = 'evict' AND ts >= $from GROUP BY ALL"


def test_a_diagnosis_to_a_pipe_keeps_each_summary_and_evidence_on_its_line(monkeypatch):
    """`spyglass diagnose > findings.txt`: at 80 assumed columns the summary was 4 wide, a word a line."""
    from datetime import UTC, datetime

    from spyglass.cli.diagnose_commands import print_table
    from spyglass.forensics.diagnose import Diagnosis, Finding
    from spyglass.forensics.run import Window

    monkeypatch.delenv("COLUMNS", raising=False)
    at = datetime(2026, 10, 19, 4, 49, tzinfo=UTC)
    finding = Finding(
        "H3",
        "Eviction storm",
        "EngineEvictionStorm",
        "critical",
        "strata-b",
        None,
        at,
        at,
        SUMMARY,
        {"evictions": 199},
        EVIDENCE,
        "the model is too big",
        "parked bytes against the budget",
        ("--conversation-cache-mib",),
    )
    out = io.StringIO()
    print_table(Diagnosis(Window(at, at), 7845, [finding], ["H3"]), out=out)
    lines = out.getvalue().splitlines()
    assert any(SUMMARY in line for line in lines) and EVIDENCE in lines


def test_a_sql_answer_and_a_trace_to_a_pipe_are_whole(monkeypatch, capsys):
    from rich.tree import Tree

    from spyglass.query.bounded import show
    from spyglass.terminal.console import console_for

    monkeypatch.delenv("COLUMNS", raising=False)
    show(["min(ts)", "detail"], [("2026-12-01T18:57:33.269000+00:00", SUMMARY)], "table")
    printed = capsys.readouterr().out
    assert "2026-12-01T18:57:33.269000+00:00" in printed and SUMMARY in printed and "…" not in printed
    tree = Tree("gateway POST /v1/chat/completions " * 4)
    tree.add("engine prefill " * 10)
    out = io.StringIO()
    console_for(out, tree).print(tree)
    assert "engine prefill " * 10 in out.getvalue()


FIRINGS = [
    {
        "alert": "GatewayBlindRetries",
        "severity": "warning",
        "heuristic": "H9",
        "instance": "rag-proxy",
        "labels": "lane=fast reason=overfit",
        "fired_utc": "2026-12-03T09:41:15Z",
        "resolved_utc": "2026-12-03T09:55:00Z",
    },
    {
        "alert": "ThinkingOnlyWithSpecialTokens",
        "severity": "critical",
        "heuristic": "H6",
        "instance": "strata-b",
        "labels": "lane=normal",
        "fired_utc": "2026-12-03T09:41:15Z",
        "resolved_utc": "(still firing)",
    },
]


def test_at_100_columns_a_table_keeps_its_keys_and_gives_way_in_its_labels(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    out = io.StringIO()
    emit(FIRINGS, "table", title="alerts", out=out)
    text = out.getvalue()
    assert "…" not in text and "row 1" not in text  # side by side, nothing cut
    assert all(len(line) <= 100 for line in text.splitlines())
    for row in FIRINGS:
        assert row["alert"] in text and row["instance"] in text and row["severity"] in text
    assert "09:41:15" in text and "2026-12-03: the date of every fired_utc, resolved_utc" in text
    assert "left out to fit 100 columns: heuristic, labels" in text


def test_the_second_clock_moves_to_a_header_line_before_anything_wraps(monkeypatch):
    monkeypatch.setenv("COLUMNS", "70")
    set_display_zone("Asia/Shanghai")
    rows = [
        {
            "request_id": f"20261203-17411{n}-0e0d7{n}",
            "ts_utc": f"2026-12-0{n + 1}T09:41:15.000Z",
            "ts_local": f"2026-12-0{n + 1}T17:41:15.000+08:00",
            "session": "auto:15eb3770f7f979bf",
            "tokens": 154_796,
        }
        for n in range(3)
    ]
    out = io.StringIO()
    emit(rows, "table", out=out)
    text = out.getvalue()
    assert "ts_local left out: Asia/Shanghai is UTC+08:00" in text and "17:41:15" not in text
    assert all(r["request_id"] in text for r in rows) and "154,796" in text and "…" not in text


def test_a_header_breaks_after_an_underscore_to_fit_its_column():
    from spyglass.terminal.layout import header_lines

    assert header_lines("tokens_engine_via_gateway", 14) == "tokens_engine_\nvia_gateway"
    assert header_lines("instance", 3) == "instance"  # a part longer than the width stays whole
