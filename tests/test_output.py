"""How results print: a table cell is the value's text, never rich markup."""
from __future__ import annotations

import io

import pytest

from spyglass.forensics.output import emit

LINE = "[load] model=/models/[blue]x[/blue] [bold red]ok"


@pytest.mark.parametrize("fold", [True, False])
def test_a_bracketed_log_line_prints_as_written_in_a_table(fold):
    out = io.StringIO()
    emit([{"kind": "load", "line": LINE}], "table", title="1 events", out=out, fold=fold)
    assert LINE in out.getvalue()


def test_a_row_too_wide_for_the_terminal_keeps_its_brackets_too(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = io.StringIO()
    emit([{f"column_{i}": LINE for i in range(12)}], "table", out=out)
    assert "row 1" in out.getvalue()  # folded: one block a row
    assert out.getvalue().count("[load]") == 12


@pytest.mark.parametrize("fold", [True, False])
def test_to_a_pipe_a_wide_table_prints_whole_rows(monkeypatch, fold):
    """An analyst's `spyglass timeline ... | less` or `> incident.txt`: no column cut to "…"."""
    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()
    rows = [{"ts_utc": "2026-10-19T04:49:00.000Z", "ts_beijing": "2026-10-19T12:49:00.000+08:00", "instance": "strata-b",
             "kind": "evict", "detail": f"conv={n:016x} bytes=3541434456 reason=budget evictions={n}" * 3} for n in range(3)]
    emit(rows, "table", out=out, fold=fold)
    text = out.getvalue()
    assert "…" not in text and "row 1" not in text
    assert all(row["detail"] in text for row in rows)


SUMMARY = ("strata-b evicted 199 conversation snapshots (up to 19.9 a minute); the largest parked snapshot, 3.4 GB,"
           " is 40% of the 8 GiB budget")
EVIDENCE = "SELECT instance, count(*) AS evictions FROM cache_events WHERE kind = 'evict' AND ts >= $from GROUP BY ALL"


def test_a_diagnosis_to_a_pipe_keeps_each_summary_and_evidence_on_its_line(monkeypatch):
    """`spyglass diagnose > findings.txt`: at 80 assumed columns the summary was 4 wide, a word a line."""
    from datetime import UTC, datetime

    from spyglass.forensics.diagnose import Diagnosis, Finding
    from spyglass.forensics.diagnose_cli import print_table
    from spyglass.forensics.run import Window

    monkeypatch.delenv("COLUMNS", raising=False)
    at = datetime(2026, 10, 19, 4, 49, tzinfo=UTC)
    finding = Finding("H3", "Eviction storm", "EngineEvictionStorm", "critical", "strata-b", None, at, at, SUMMARY,
                      {"evictions": 199}, EVIDENCE, "the model is too big", "parked bytes against the budget",
                      ("--conversation-cache-mib",))
    out = io.StringIO()
    print_table(Diagnosis(Window(at, at), 7845, [finding], ["H3"]), out=out)
    lines = out.getvalue().splitlines()
    assert any(SUMMARY in line for line in lines) and EVIDENCE in lines


def test_a_sql_answer_and_a_trace_to_a_pipe_are_whole(monkeypatch, capsys):
    from rich.tree import Tree

    from spyglass.agent.query import show
    from spyglass.cli.console import console_for

    monkeypatch.delenv("COLUMNS", raising=False)
    show(["min(ts)", "detail"], [("2026-12-01T18:57:33.269000+00:00", SUMMARY)], "table")
    printed = capsys.readouterr().out
    assert "2026-12-01T18:57:33.269000+00:00" in printed and SUMMARY in printed and "…" not in printed
    tree = Tree("gateway POST /v1/chat/completions " * 4)
    tree.add("engine prefill " * 10)
    out = io.StringIO()
    console_for(out, tree).print(tree)
    assert "engine prefill " * 10 in out.getvalue()
