"""What a backtest found: the firing episodes, the alerts that were pending but never fired, and
their printing (a table, or JSON)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from spyglass.alerting.backfill import BackfillResult, iso


@dataclass
class Firing:
    """One firing episode of one alert (one label set): fired at `start`, resolved at `end` (None:
    still firing when the window ended)."""

    alert: str
    heuristic: str | None
    severity: str | None
    labels: dict[str, str]
    start: str
    end: str | None
    active_since: str = field(default="", repr=False)  # when it became pending


@dataclass
class Pending:
    """An alert (one label set) that was pending in the window and never fired there: the longest hold."""

    alert: str
    heuristic: str | None
    labels: dict[str, str]
    since: str
    held: float  # seconds its condition held, from `since`
    hold: float  # the rule's for:

    def text(self) -> str:
        return f"held {duration_text(self.held)} of for: {duration_text(self.hold)}"


def duration_text(seconds: float) -> str:
    """Prometheus-style: 0s, 45s, 3m, 1h30m, 31d."""
    seconds = int(round(seconds))
    parts = [(seconds // 86400, "d"), (seconds % 86400 // 3600, "h"), (seconds % 3600 // 60, "m"), (seconds % 60, "s")]
    return "".join(f"{n}{unit}" for n, unit in parts if n) or "0s"


@dataclass
class BacktestResult:
    alerts: list[Firing]
    backfill: BackfillResult
    rules: int
    seconds: dict[str, float] = field(default_factory=dict)  # wall time per phase
    pending: list[Pending] = field(default_factory=list)  # pending in the window, never fired there
    rules_from: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "alerts": [{k: v for k, v in asdict(a).items() if k != "active_since"} for a in self.alerts],
            "pending": [{**asdict(p), "text": p.text()} for p in self.pending],
        }


def _rest(labels: dict[str, str]) -> str:
    return " ".join(
        f"{k}={v}" for k, v in sorted(labels.items()) if k not in ("severity", "heuristic", "instance", "job")
    )


def show(result: BacktestResult, start: float, end: float, out: Any = None) -> None:
    """The firings, then the alerts that were pending but never fired, then a summary; laid out as every table
    (spyglass.terminal.layout: the alert, instance and times whole), to a pipe at full width."""
    from rich.text import Text

    from spyglass.terminal.cells import print_table  # labels are data: a `[/x]` in one prints as written
    from spyglass.terminal.console import console_for

    print_table(
        ["alert", "severity", "heuristic", "instance", "labels", "fired_utc", "resolved_utc"],
        [
            [
                a.alert,
                a.severity or "",
                a.heuristic or "",
                a.labels.get("instance", ""),
                _rest(a.labels),
                a.start,
                a.end or "(still firing)",
            ]
            for a in result.alerts
        ],
        Text(f"alerts that would have fired between {iso(start)} and {iso(end)}"),
        out,
    )
    if result.pending:
        print_table(
            ["alert", "heuristic", "instance", "labels", "pending_since_utc", "held"],
            [
                [p.alert, p.heuristic or "", p.labels.get("instance", ""), _rest(p.labels), p.since, p.text()]
                for p in result.pending
            ],
            Text("pending in the window, never fired there"),
            out,
        )
    b = result.backfill
    summary = Text(
        f"{len(result.alerts)} firings of {result.rules} alert rules ({result.rules_from}); replayed"
        f" {b.events} events ({b.events_in_window} in the window) into {b.samples} samples at"
        f" {b.times} times; " + ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items())
    )
    console_for(out).print(summary, soft_wrap=True)


def dumps(result: BacktestResult) -> str:
    return json.dumps(result.as_json(), indent=2)
