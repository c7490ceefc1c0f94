"""The range a timestamp from outside may have: from the year 2000 to a day past now.

Every timestamp that enters from outside (a log line, a polled body, a POSTed span, alert or
smoke result) is checked against this range where it enters, in its own unit, and refused with
a reason when outside it: `1e300`, `Infinity`, `NaN` and the year 10000 never reach the store,
whose timestamp column (microseconds in 64 bits) and Parquet's partitions (Python dates, year
9999 at most) could not take them. A day of slack forgives a clock running ahead; nothing
observed here is legitimately from the future beyond that.
"""

from __future__ import annotations

import math

EARLIEST_SECONDS = 946_684_800.0  # 2000-01-01T00:00:00Z
FUTURE_SLACK_SECONDS = 86_400.0
UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}


def window(now: float) -> tuple[float, float]:
    """The accepted range at `now`, in epoch seconds: `lo <= ts <= hi` is false for NaN too."""
    return EARLIEST_SECONDS, now + FUTURE_SLACK_SECONDS


def problem(value: float, now: float, unit: str = "s") -> str | None:
    """Why `value` (a timestamp in `unit`) is not one to accept at `now` (epoch seconds); None if it is."""
    scale = UNITS[unit]
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        return f"{value!r} is not a finite number"
    if value < EARLIEST_SECONDS * scale:
        return f"{value:g} {unit} is before 2000-01-01"
    if value > (now + FUTURE_SLACK_SECONDS) * scale:
        return f"{value:g} {unit} is more than a day past now"
    return None


def check(value: float, now: float, where: str, unit: str = "s") -> float:
    """`value` if it is a timestamp to accept at `now`; else ValueError naming `where` and why."""
    reason = problem(value, now, unit)
    if reason is not None:
        raise ValueError(f"{where}: {reason} (timestamps must lie between 2000-01-01 and a day past now)")
    return value
