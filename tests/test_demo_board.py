"""The demo's live table, as a person reads it: rates against rate thresholds, and where each value comes from."""

from __future__ import annotations

import io

from rich.console import Console

from spyglass import signals
from spyglass.cli.demo_board import Board, Faster, Increase, Signal
from spyglass.signals.state import MetricState


def key(state: MetricState, metric: str, **labels: str) -> tuple[str, ...]:
    return tuple(labels.get(name, "") for name in state.catalogue[metric].labels)


def shown(board: Board, now: float) -> str:
    out = io.StringIO()
    Console(file=out, width=160).print(board.table(now))
    return out.getvalue()


def test_a_rate_threshold_is_compared_with_a_rate_and_the_row_names_its_instance():
    state = MetricState(signals.full_catalogue())
    evictions = "spyglass_engine_evictions_total"
    exits = "spyglass_supervisord_exits_total"
    board = Board(
        [
            Signal("evictions", "ev", evictions, {"instance": "strata-b"}, Faster(1)),
            Signal("unexpected exits", "exits", exits, {"expected": "false"}, Increase(5, 1800)),
        ]
    )
    state.set(evictions, key(state, evictions, instance="strata-b", lane="normal"), 1_500)
    board.sample(state, now=1000.0)
    state.set(evictions, key(state, evictions, instance="strata-b", lane="normal"), 1_589)
    state.set(exits, key(state, exits, program="strata-b", expected="false", cause="exit status 134"), 40)
    board.sample(state, now=1060.0)
    text = shown(board, now=1065.0)
    assert "spyglass demo: incident signals after 1 min 05 s" in text  # the title counts from the first sample
    line = next(line for line in text.splitlines() if line.startswith("│ evictions"))
    assert "1,589" in line and "89 a minute" in line and "> 1 a minute" in line and "strata-b" in line
    exits_line = next(line for line in text.splitlines() if line.startswith("│ unexpected exits"))
    assert "strata-b" in exits_line and "+40 in 30 min" in exits_line
