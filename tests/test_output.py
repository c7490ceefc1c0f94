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
