"""The one grammar of times and durations a person types, for every command that takes a window.

A time is any of:
- RFC 3339 / ISO 8601: `2026-10-19T04:49:00Z`, `2026-10-19 12:49+08:00`, `2026-10-19 04:49`,
  `2026-10-19` (no offset: the zone given, UTC unless `--tz` says otherwise);
- epoch seconds: `1792385340`, `1792385340.5`;
- relative to now: `now`, `now-1h`, `now - 90m`, `now+5m`.
A duration is Prometheus's: `15s`, `5m`, `1h30m`, `2d`, `1w`, `500ms`. `--since D` is `--from now-D`;
`--since` also takes a time.

Pure: the present is passed in (`now`), never read here. ValueError says what was expected.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from spyglass.collectors.clock import zone

UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
RELATIVE = re.compile(r"^now\s*(?:([+-])\s*(\S+))?$")
EPOCH = re.compile(r"^\d{9,11}(\.\d+)?$")  # 1973 to 5138: a bare year or date is no epoch
EARLIEST, LATEST = datetime(1970, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, tzinfo=UTC)
FORMS = "e.g. 2026-10-19 04:49, 2026-10-19T04:49:00Z, 2026-10-19 12:49+08:00, epoch seconds (1792385340), now-1h"


def parse_duration(text: str) -> float:
    """Seconds of a Prometheus duration (`15s`, `1h30m`, `2d`); ValueError unless it is one and positive."""
    stripped = text.strip()
    parts = DURATION.findall(stripped)
    if not parts or "".join(n + u for n, u in parts) != stripped:
        raise ValueError(f"not a duration: {text!r} (use e.g. 15s, 5m, 1h30m, 2d)")
    seconds = sum(float(n) * UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"a duration must be positive: {text!r}")
    return seconds


def parse_time(text: str, tz: str = "UTC", now: datetime | None = None) -> datetime:
    """The UTC instant `text` names, in the grammar above; naive times are in `tz`. `now` is needed
    only for `now...` forms."""
    stripped = text.strip()
    relative = RELATIVE.match(stripped)
    if relative:
        if now is None:
            raise ValueError(f"{text!r}: no present time given to count from")
        sign, amount = relative.groups()
        seconds = parse_duration(amount) if amount else 0.0
        try:
            offset = timedelta(seconds=seconds)
            return checked(now + offset if sign == "+" else now - offset, text)
        except OverflowError:
            raise ValueError(f"{text!r} is outside 1970-9999") from None
    if EPOCH.match(stripped):
        return checked(datetime.fromtimestamp(float(stripped), UTC), text)
    try:
        stamp = datetime.fromisoformat(stripped)
    except ValueError:
        raise ValueError(f"not a time: {text!r} ({FORMS})") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=zone(tz))
    return checked(stamp.astimezone(UTC), text)


def checked(moment: datetime, text: str) -> datetime:
    if not EARLIEST <= moment <= LATEST:
        raise ValueError(f"{text!r} is outside 1970-9999")
    return moment


def parse_since(text: str, tz: str = "UTC", now: datetime | None = None) -> datetime:
    """`--since`: a duration back from now (`15m`), or a time (`2026-11-02 02:00`, `now-1h`)."""
    try:
        seconds = parse_duration(text)
    except ValueError:
        return parse_time(text, tz, now)
    if now is None:
        raise ValueError(f"--since {text}: no present time given to count from")
    try:
        return checked(now - timedelta(seconds=seconds), text)  # timedelta too overflows past 2.7 million years
    except OverflowError:
        raise ValueError(f"--since {text!r} reaches before 1970") from None
