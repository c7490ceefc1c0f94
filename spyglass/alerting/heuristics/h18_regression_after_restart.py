"""H18: Regression against the baseline after a change. Incident upgrade (no errors, so fine).

The seed's baseline is the old build's steady state, measured before the change (seed 004 §5.3), and its
canary watches 10 to 30 minutes before it rolls back (§5.2). The alert compares the median TTFT of the
last few minutes after an engine start with the median of the last busy hour before that start, found
with fixed `offset`s: PromQL has no offset relative to a series' value, so a ladder of whole hours before
now is tried, nearest first, and the first hour that ends before the start and served enough requests
is the baseline. Only where no hour before the start served enough does it fall back to the same hour a
day before."""

from __future__ import annotations

from spyglass.alerting.heuristics.model import (
    IL,
    INSTANCE,
    LANE,
    SECONDS,
    Alert,
    Check,
    Deployment,
    Evidence,
    Heuristic,
    Probe,
    Threshold,
    probe_sql,
)
from spyglass.alerting.heuristics.promql import TTFT, last, num, spoken, ttft_quantile

START = "spyglass_engine_start_time_seconds"


def age() -> str:
    """Seconds since the engine's last start, per instance and lane."""
    return f"(time() - max by ({IL}) ({START}))"


def hour_before_start(d: Deployment, hours: int, least: int) -> str:
    """The median TTFT of the hour ending `hours` ago, where that hour ended before the engine's start
    (the engine is at most `hours` old) and served at least `least` requests."""
    off = f"{hours}h"
    return (
        f"({ttft_quantile(0.5, '1h', off)}\n"
        f"  and on ({IL}) sum by ({IL}) (increase({TTFT}_count[1h] offset {off})) >= {least}\n"
        f"  and on ({IL}) {age()} <= {num(hours * 3600 * d.settings.time_scale)})"
    )


def baseline(d: Deployment, watch_hours: int, look_back_hours: int, least: int) -> str:
    """The steady state before the start: the nearest busy hour before it within `look_back_hours`, for
    an engine up to `watch_hours` old; else the same hour a day before, when it served `least` requests."""
    ladder = [hour_before_start(d, h, least) for h in range(1, watch_hours + look_back_hours + 1)]
    day_before = (
        f"({ttft_quantile(0.5, '1h', '1d')}\n"
        f"  and on ({IL}) sum by ({IL}) (increase({TTFT}_count[1h] offset 1d)) >= {least})"
    )
    return "(\n" + "\nor\n".join([*ladder, day_before]) + "\n)"


def build(d: Deployment) -> Heuristic:
    factor = 2.0
    least = 20  # requests in a baseline hour, and on each side of the restart the diagnosis compares: fewer is no steady state
    watch_hours = 6  # how long after a start the alert compares
    look_back_hours = 6  # how far before the start the last busy hour may lie
    current = "5m"  # the median the alert compares: the recorded p50 over this window
    hold = "15m"  # the seed's canary watches 10 to 30 minutes
    now = f"instance_lane:{TTFT}:p50_rate{current}"
    before = baseline(d, watch_hours, look_back_hours, least)
    watched = f"{age()} < {num(watch_hours * 3600 * d.settings.time_scale)}"
    probe = Probe(
        needs=("engine_log",),
        alert="EngineRegressionAfterRestart",
        sql=probe_sql(__name__, factor=num(factor), least=least),
        summary="Median TTFT on {instance} (lane {lane}) since its start at {started_utc} is {after_p50_ms:g} ms, {ratio:g}x"
        " the {before_p50_ms:g} ms of the steady state before it (start {before_started_utc}); p99 {before_p99_ms:g} ->"
        " {after_p99_ms:g} ms over {before_requests} and {after_requests} requests.",
        figures=(
            "before_p50_ms",
            "after_p50_ms",
            "before_p99_ms",
            "after_p99_ms",
            "ratio",
            "before_requests",
            "after_requests",
        ),
    )
    return Heuristic(
        evidence=Evidence(
            control="hour before",
            text="The same instance and lane before its restart and after.",
            this="median TTFT {after_p50_ms:g} ms after the restart ({after_requests} requests)",
            other="{before_p50_ms:g} ms before it ({before_requests} requests)",
            series="ttft",
        ),
        id="H18",
        title="Regression against the baseline after a change",
        incident="upgrade (no errors, so fine)",
        symptom=f"Within {spoken(f'{watch_hours}h')} of an engine start (a build or model change), the median TTFT over"
        f" {spoken(current)} is over {num(factor)}x the steady state before the start: the last hour with at least {least}"
        f" requests that ended before it, up to {spoken(f'{look_back_hours}h')} earlier (else the same hour a day before).",
        wrong_guess="no errors, so it is fine",
        check=Check(
            text="The baseline snapshot itself: the median before the start against the median since.",
            promql=f"{now}\n/ {before}",
        ),
        knobs=("roll back the build; compare builds on the same traffic",),
        thresholds=(
            Threshold(
                name="factor",
                value=factor,
                unit="ratio",
                meaning="median TTFT above this times the steady"
                " state before the restart (alert and diagnosis; the alert's fallback: the same hour a day"
                " before)",
            ),
            Threshold(
                name="least_requests",
                value=least,
                unit="requests",
                meaning="requests in a baseline hour (alert) and on each side of a restart (diagnosis)",
            ),
            Threshold(
                name="watch_hours", value=watch_hours, unit="h", meaning="how long after a start the alert compares"
            ),
            Threshold(
                name="look_back_hours",
                value=look_back_hours,
                unit="h",
                meaning="how far before a start the alert looks for its last busy hour",
            ),
        ),
        alerts=(
            Alert(
                name="EngineRegressionAfterRestart",
                severity="warning",
                expr=f"{now} > {num(factor)} * {before}\n  and on ({IL}) {watched}",
                for_=hold,
                summary=f"{INSTANCE} got slower after its restart.",
                description=f"Median TTFT on {INSTANCE} ({LANE}) is {SECONDS} over {last(current)}, over {num(factor)}x the"
                f" median of the last busy hour before its start {spoken(f'{watch_hours}h')} ago at most (or of the same"
                " hour yesterday, when none was busy).",
                latency=True,
            ),
        ),
        history="Seed 004 (upgrade): after the new model loaded, every new request shape rebuilt a graph; p99 latency"
        " went from 20 ms before the upgrade to 800 ms, requests queued and the health check failed, with no error"
        " logged. Its remedy is this comparison: the old build's steady state against the new one's, automatically.",
        diagnosis="Throughput, p99, queue, rebuilds and memory against the previous steady state need the store's"
        " history: `spyglass baseline --instance X [--deploy N]`.",
        probe=probe,
    )
