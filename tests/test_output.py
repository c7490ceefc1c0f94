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


def test_a_row_too_wide_for_the_terminal_keeps_its_brackets_too():
    out = io.StringIO()
    emit([{f"column_{i}": LINE for i in range(12)}], "table", out=out)
    assert out.getvalue().count("[load]") == 12
