"""Times an analyst types, and how instants are written back: UTC and Beijing side by side.

Input without a zone is read in the zone given (UTC unless `--tz` says otherwise); output is
ISO-8601 with milliseconds, `Z` for UTC and `+08:00` for Beijing. Pure functions.
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

from collectors.clock import BEIJING, zone
from spyglass.forensics.run import Window
from spyglass.trace import REQUEST_ID


def parse_time(text: str, tz: str = "UTC") -> datetime:
    """`2026-10-19 04:49`, `2026-10-19T04:49:00.120Z`, `2026-10-19 12:49+08:00`, `2026-10-19`;
    naive times are in `tz`. ValueError with the accepted forms otherwise."""
    try:
        stamp = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"not a time: {text!r} (expected e.g. 2026-10-19 04:49, 2026-10-19T04:49:00Z"
                         " or 2026-10-19 12:49+08:00)") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=zone(tz))
    return stamp.astimezone(UTC)


def window(start: str | None, end: str | None, tz: str = "UTC") -> Window:
    """The window [start, end); ValueError when start is after end."""
    w = Window(parse_time(start, tz) if start else None, parse_time(end, tz) if end else None)
    if w.start and w.end and w.start > w.end:
        raise ValueError(f"--from {w.start:%Y-%m-%d %H:%M:%S}Z is after --to {w.end:%Y-%m-%d %H:%M:%S}Z")
    return w


def request_window(request_id: str) -> Window:
    """Where a request's events lie: its id is its Beijing arrival time; its lines follow within an hour."""
    if not REQUEST_ID.match(request_id):
        raise ValueError(f"not a request id: {request_id!r} (expected YYYYMMDD-HHMMSS-hex)")
    arrived = datetime.strptime(request_id[:15], "%Y%m%d-%H%M%S").replace(tzinfo=BEIJING).astimezone(UTC)
    return Window(arrived - timedelta(minutes=1), arrived + timedelta(hours=1))


def utc_text(value: datetime) -> str:
    aware = value if value.tzinfo else value.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def beijing_text(value: datetime) -> str:
    """A naive Beijing wall time (the views' `_beijing` columns) or any aware instant, in Beijing."""
    local = value.replace(tzinfo=BEIJING) if value.tzinfo is None else value.astimezone(BEIJING)
    return local.isoformat(timespec="milliseconds")


def describe(w: Window) -> str:
    def one(t: datetime | None, open_end: str) -> str:
        return f"{utc_text(t)} ({beijing_text(t)} Beijing)" if t else open_end
    return f"between {one(w.start, 'the beginning')} and {one(w.end, 'the end')}"
