"""Times an analyst types, and how instants are written back: UTC and the display zone side by side.

Input is spyglass.terminal.timeinput's grammar (RFC 3339, epoch seconds, `now-1h`, `--since 15m`); a time
without a zone is read in the zone given (UTC unless `--tz` says otherwise); output is
ISO-8601 with milliseconds, `Z` for UTC and the offset (`+08:00`) for the display zone, `[agent]
display_tz` (collectors.clock.display_zone: the host's zone unless the config names one). A request id's
time is read in the zone of the source that makes such ids (`request_id_zones`). Pure functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from spyglass.collectors.clock import BEIJING_ZONE_NAME, display_zone, zone
from spyglass.config import Config
from spyglass.forensics.run import Window
from spyglass.forensics.trace import REQUEST_ID
from spyglass.terminal import timeinput


def parse_time(text: str, tz: str = "UTC", now: datetime | None = None) -> datetime:
    """`2026-10-19 04:49`, `2026-10-19T04:49:00.120Z`, `2026-10-19 12:49+08:00`, `2026-10-19`, epoch
    seconds, `now-1h` (spyglass.terminal.timeinput, the one grammar); naive times are in `tz`. ValueError with
    the accepted forms otherwise."""
    return timeinput.parse_time(text, tz, now)


def window(
    start: str | None, end: str | None, tz: str = "UTC", since: str | None = None, now: datetime | None = None
) -> Window:
    """The window [start, end), or [since, end) with `since` a duration back from `now` (`15m`) or a
    time; ValueError when start is after end, or both start and since are given."""
    if since and start:
        raise ValueError("give --since or --from, not both")
    first = timeinput.parse_since(since, tz, now) if since else parse_time(start, tz, now) if start else None
    w = Window(first, parse_time(end, tz, now) if end else None)
    if w.start and w.end and w.start > w.end:
        raise ValueError(f"--from {w.start:%Y-%m-%d %H:%M:%S}Z is after --to {w.end:%Y-%m-%d %H:%M:%S}Z")
    return w


def request_window(request_id: str, zones: Iterable[str] = (BEIJING_ZONE_NAME,)) -> Window:
    """Where a request's events lie: its id holds its arrival time in the zone of the source that made it
    (`zones`: each zone a configured source writes its ids in, request_id_zones; the window covers every
    reading); its lines follow within an hour."""
    if not REQUEST_ID.match(request_id):
        raise ValueError(f"not a request id: {request_id!r} (expected YYYYMMDD-HHMMSS-hex)")
    wall = datetime.strptime(request_id[:15], "%Y%m%d-%H%M%S")
    arrivals = [wall.replace(tzinfo=zone(name)).astimezone(UTC) for name in sorted(set(zones)) or ["UTC"]]
    return Window(min(arrivals) - timedelta(minutes=1), max(arrivals) + timedelta(hours=1))


def request_id_zones(config: Config) -> set[str]:
    """The zones the configured sources write request ids in (each kind's options say: `request_id_zone`):
    llama-server's tasks' ids are UTC, the Strata gateway's and serve's Beijing time as configured."""
    found = {z for o in config.sources.values() if (z := getattr(o, "request_id_zone", lambda: None)())}
    return found or {"UTC"}


def utc_text(value: datetime) -> str:
    aware = value if value.tzinfo else value.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def local_text(value: datetime, tz: str | None = None) -> str:
    """A naive wall time of the display zone (the views' `_local` columns) or any aware instant, in that zone."""
    where = zone(tz or display_zone())
    local = value.replace(tzinfo=where) if value.tzinfo is None else value.astimezone(where)
    return local.isoformat(timespec="milliseconds")


def describe(w: Window) -> str:
    """`between 2026-12-03 09:00:00Z (17:00:00 Asia/Shanghai) and 09:20:00Z (17:20:00 Asia/Shanghai)`: the end's date
    only where it differs from the start's."""
    from spyglass.collectors.clock import format_both

    start = format_both(w.start.timestamp()) if w.start else "the beginning"
    end = format_both(w.end.timestamp()) if w.end else "the end"
    if w.start and w.end and w.start.astimezone(UTC).date() == w.end.astimezone(UTC).date():
        end = end[11:]
    return f"between {start} and {end}"
