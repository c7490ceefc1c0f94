"""The demo's incident signals and their board: each signal's rule (what makes it abnormal), its recent
values, and the table and status line that show them."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from rich.table import Table

from spyglass.alerting.heuristics import Heuristic, by_id
from spyglass.signals.state import MetricState

History = deque[tuple[float, float]]  # (monotonic seconds, value), oldest first


class Rule(Protocol):
    def abnormal(self, history: History) -> bool: ...

    def measured(self, history: History) -> str:
        """The value in the terms the rule compares: a rate for a rate threshold, never a running total."""
        ...


@dataclass(frozen=True)
class Above:
    """Abnormal while the value is above `limit`: a count that is zero on a healthy stack."""

    limit: float = 0.0

    def abnormal(self, history: History) -> bool:
        return history[-1][1] > self.limit

    def measured(self, history: History) -> str:
        return f"{history[-1][1]:,.0f}"

    def __str__(self) -> str:
        return f"> {self.limit:g}"


@dataclass(frozen=True)
class Increase:
    """Abnormal when the value grew by at least `by` within the last `seconds` (a rate, for a
    counter that also moves a little on a healthy stack); not before `settle` seconds of
    history, for a counter that a warming stack moves fast."""

    by: float
    seconds: float
    settle: float = 0.0

    def abnormal(self, history: History) -> bool:
        if history[-1][0] - history[0][0] < self.settle:
            return False
        return growth(history, self.seconds) >= self.by

    def measured(self, history: History) -> str:
        return f"+{growth(history, self.seconds):,.0f} in {self.seconds / 60:g} min"

    def __str__(self) -> str:
        return f"+{self.by:g} in {self.seconds / 60:g} min" + (
            f", after {self.settle / 60:g} min" if self.settle else ""
        )


@dataclass(frozen=True)
class Faster:
    """Abnormal when the value grew by more than `per_minute` within the last minute: a heuristic's
    rate floor, as its alert's `rate * 60 > floor` reads it."""

    per_minute: float

    def abnormal(self, history: History) -> bool:
        return growth(history, 60.0) > self.per_minute

    def measured(self, history: History) -> str:
        return f"{growth(history, 60.0):,.0f} a minute"

    def __str__(self) -> str:
        return f"> {self.per_minute:g} a minute"


def growth(history: History, seconds: float) -> float:
    """How much the value grew within the last `seconds` (since the first sample, if younger)."""
    now, value = history[-1]
    past = next((v for t, v in reversed(history) if t <= now - seconds), history[0][1])
    return value - past


@dataclass(frozen=True)
class Held:
    """Abnormal when the value stayed above `limit` for `seconds` in a row (a state that is
    normal for a moment, such as loading)."""

    seconds: float
    limit: float = 0.0

    def abnormal(self, history: History) -> bool:
        now = history[-1][0]
        if now - history[0][0] < self.seconds:
            return False
        return all(v > self.limit for t, v in history if t >= now - self.seconds)

    def measured(self, history: History) -> str:
        return f"{history[-1][1]:,.0f}"

    def __str__(self) -> str:
        return f"> {self.limit:g} for {self.seconds:g} s"


@dataclass(frozen=True)
class Signal:
    label: str  # what the on-call engineer reads
    short: str  # its name on a status line
    metric: str
    labels: dict[str, str] = field(default_factory=dict)
    rule: Rule | None = None  # None: shown for context, never abnormal
    # More (metric, labels) whose value counts too: the signal is the largest of them, as an alert that
    # fires on `a > 0 or b > 0` sees it.
    also: tuple[tuple[str, dict[str, str]], ...] = ()

    def value(self, state: MetricState) -> float:
        return max([state.total(self.metric, **self.labels), *(state.total(m, **labels) for m, labels in self.also)])

    def where(self, state: MetricState) -> str:
        """Which instance, program or lane the value comes from: `strata-b, lane normal`, `strata-b 38, strata-a 2`."""
        names = state.catalogue[self.metric].labels
        fixed = self.labels.get("instance", "")
        label = next((n for n in ("instance", "program", "lane") if n in names and n not in self.labels), None)
        if label is None:
            return fixed
        parts: dict[str, float] = {}
        for key, value in state.series(self.metric).items():
            labels = dict(zip(names, key))
            if value and all(labels.get(k) == v for k, v in self.labels.items()):
                name = f"lane {labels[label]}" if label == "lane" else labels[label]
                parts[name] = parts.get(name, 0.0) + value
        ranked = sorted(parts.items(), key=lambda kv: -kv[1])
        spread = (
            ranked[0][0]
            if len(ranked) == 1
            else ", ".join(f"{n} {v:,.0f}" for n, v in ranked[:3]) + (" ..." if len(ranked) > 3 else "")
        )
        return ", ".join(p for p in (fixed, spread) if p)


def incident_signals(heuristics: dict[str, Heuristic]) -> list[Signal]:
    """The signals the demo shows, one row each, with the heuristics catalogue's thresholds where a
    heuristic watches the same thing: H3's eviction floor, H13's crash loop (its spawns within its
    window, counted here on unexpected exits, since every program's first spawn counts too)."""
    evictions_per_minute = heuristics["H3"].threshold("evictions_per_minute")
    loop = heuristics["H13"]
    crash_loop = Increase(loop.threshold("spawns"), loop.threshold("window_minutes") * 60)
    return [
        Signal(
            "evictions, strata-b (engine's own counter)",
            "evictions-b",
            "spyglass_engine_evictions_total",
            {"instance": "strata-b"},
            Faster(evictions_per_minute),
        ),
        Signal(
            "long prompts restored only from a checkpoint",
            "checkpoint-only",
            "spyglass_engine_long_prompts_checkpoint_only_total",
            rule=Above(0),
        ),
        Signal(
            "thinking-only responses with special tokens",
            "special-tokens",
            "spyglass_infer_thinking_only_total",
            {"special_tokens": "yes"},
            Above(0),
        ),
        Signal("plan, then EOS", "plan-eos", "spyglass_infer_plan_then_stop_total", rule=Above(0)),
        Signal("task anchor dropped by assembly", "anchor-lost", "spyglass_infer_anchor_lost_total", rule=Above(0)),
        Signal("overfit 400s at the gateway", "overfits", "spyglass_gateway_overfits_total", rule=Above(0)),
        Signal(
            "blind retries after an overfit", "blind-retries", "spyglass_gateway_blind_retries_total", rule=Above(0)
        ),
        Signal(
            "unexpected process exits (supervisord)",
            "unexpected-exits",  # a crash loop, before FATAL
            "spyglass_supervisord_exits_total",
            {"expected": "false"},
            crash_loop,
        ),
        Signal("programs that gave up (FATAL)", "fatal", "spyglass_supervisord_fatal_total", rule=Above(0)),
        Signal("engines still loading", "loading", "spyglass_serve_state", {"state": "loading"}, Held(60)),
        Signal(
            "compute-graph rebuilds",
            "rebuilds",  # each new shape once: many while the stack warms up
            "spyglass_engine_graph_rebuilds_total",
            rule=Increase(5, 60, settle=120),
        ),
        # What EngineCPUsShared fires on: the CPUs both processes may run on (host), or their start lines' lists.
        Signal(
            "CPUs the two engines may share",
            "shared-cpus",
            "spyglass_host_shared_cpus",
            {"instance": "strata-a"},
            Above(0),
            also=(("spyglass_engine_shared_cpus", {"instance": "strata-a"}),),
        ),
        Signal("requests answered by the gateway", "requests", "spyglass_gateway_requests_total"),
    ]


SIGNALS = incident_signals(by_id())  # with the default [alerts]


class Board:
    """The signals' recent values, sampled with the caller's clock; says which are abnormal."""

    def __init__(self, signals: list[Signal] = SIGNALS, keep_seconds: float = 1800.0) -> None:
        self.signals, self.keep = signals, keep_seconds
        self.history: list[History] = [deque() for _ in signals]
        self.wheres: list[str] = ["" for _ in signals]
        self.began: float | None = None

    def sample(self, state: MetricState, now: float) -> None:
        with state.lock:
            values = [s.value(state) for s in self.signals]
            self.wheres = [s.where(state) for s in self.signals]
        self.began = now if self.began is None else self.began
        for history, value in zip(self.history, values):
            history.append((now, value))
            while history[0][0] < now - self.keep:
                history.popleft()

    def rows(self) -> list[tuple[Signal, float, bool]]:
        """(signal, latest value, abnormal) for every signal sampled at least once."""
        return [
            (s, h[-1][1], s.rule is not None and s.rule.abnormal(h)) for s, h in zip(self.signals, self.history) if h
        ]

    def status_line(self, elapsed: float) -> str:
        """Every signal's value on one line; `!` marks the abnormal ones."""
        return f"{elapsed:4.0f}s  " + "  ".join(
            f"{s.short} {value:.0f}{'!' if abnormal else ''}" for s, value, abnormal in self.rows()
        )

    def elapsed(self, now: float | None = None) -> float:
        """Seconds since the first sample (to `now`, else to the last sample)."""
        times = next((h for h in self.history if h), None)
        if self.began is None or times is None:
            return 0.0
        return (times[-1][0] if now is None else now) - self.began

    def table(self, now: float | None = None) -> Table:
        """The signals: each one's total, what its rule compares now (a rate for a rate: never a running total
        against "a minute"), where it comes from (instance, program or lane), and whether it is abnormal."""
        minutes, seconds = divmod(int(self.elapsed(now)), 60)
        table = Table(
            "signal",
            "where",
            "total",
            "now",
            "abnormal when",
            "",
            title=f"spyglass demo: incident signals after {minutes} min {seconds:02d} s",
        )
        for (row, value, abnormal), where in zip(self.rows(), self.wheres):
            history = self.history[self.signals.index(row)]
            now_text = row.rule.measured(history) if row.rule is not None else ""
            shown = "" if now_text == f"{value:,.0f}" else f"{value:,.0f}"  # a level: its value once, under "now"
            table.add_row(
                row.label,
                where,
                shown,
                f"[bold red]{now_text}[/]" if abnormal else now_text,
                str(row.rule or "-"),
                "[bold red]abnormal[/]" if abnormal else "",
            )
        return table
