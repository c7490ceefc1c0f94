"""Time: the injected clock, and naive local timestamps turned into UTC epoch seconds.

Every source declares the IANA zone its naive timestamps are written in; `ZonedParser` turns
them into UTC. DST is handled by zoneinfo (PEP 495, fold=0): a wall time in the repeated hour
when clocks go back is its first occurrence; one in the skipped hour is read with the offset in
force before the jump.
"""

from __future__ import annotations

import contextlib
import os
import time
from datetime import UTC, datetime, timezone
from pathlib import Path
from typing import Protocol
from zoneinfo import ZoneInfo

UTC = UTC
# The zone of the seeds, the Strata stack's request ids and its own local logs (a source's zone, not the display
# zone: that is [agent] display_tz, display_zone()); the one place it is named.
BEIJING_ZONE_NAME = "Asia/Shanghai"
BEIJING = ZoneInfo(BEIJING_ZONE_NAME)


class Clock(Protocol):
    """Where "now" comes from. Tests pass a ManualClock; nothing else reads the wall clock."""

    def now(self) -> float: ...

    def monotonic(self) -> float: ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to. It starts by default at 2027-01-15, after every dated
    line the tests replay: the pipeline refuses a timestamp more than a day past its clock."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._t = start
        self._mono = 0.0

    def now(self) -> float:
        return self._t

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._t += seconds
        self._mono += seconds


def zone(name: str) -> ZoneInfo | timezone:
    """The zone called `name`; raises ValueError for an unknown one."""
    if name.upper() in ("UTC", "Z", "ETC/UTC"):
        return UTC
    try:
        return ZoneInfo(name)
    except Exception as exc:  # ZoneInfoNotFoundError, ValueError on odd keys
        raise ValueError(f"unknown time zone {name!r}") from exc


def local_to_epoch(wall: datetime, tz: ZoneInfo | timezone) -> float:
    """Epoch seconds of the naive wall time `wall` read in `tz` (PEP 495 with fold=0)."""
    return wall.replace(tzinfo=tz, fold=0).timestamp()


MICROS = 1_000_000  # per second


def fraction_micros(digits: bytes | None) -> int:
    """The microseconds a stamp's fraction digits name (b"5" 500000, b"004" 4000, none 0), past the sixth
    digit dropped: the one reading of a fraction, per line and column-wise (collectors/columnar.py)."""
    return int(digits[:6].ljust(6, b"0")) if digits else 0


class ZonedParser:
    """Parses 'YYYY-MM-DD HH:MM:SS' (bytes or str) in one zone, caching per wall-clock second and
    per minute.

    Log lines arrive many per second, so the cache turns the zone arithmetic into a dict lookup. A
    new second of a minute already seen costs an addition: within a minute whose offset does not
    change, local seconds and epoch seconds advance together. A minute with a change of offset in
    it (none on a whole minute in tzdata, but historical offsets had seconds) is not cached.
    """

    def __init__(self, tz_name: str) -> None:
        self.tz = zone(tz_name)
        self._cache: dict[bytes, int] = {}  # stamp -> epoch microseconds of its second
        self._minutes: dict[bytes, int] = {}  # 'YYYY-MM-DD HH:MM' -> epoch microseconds of its :00

    def seconds(self, stamp: bytes) -> float:
        """Epoch seconds of a 19-byte 'YYYY-MM-DD HH:MM:SS' stamp; ValueError if malformed."""
        return self.micros(stamp, 0) / MICROS

    def micros(self, stamp: bytes, fraction: int) -> int:
        """Epoch microseconds of a stamp and its fraction (fraction_micros): the one reading of a stamp.
        An Event's `ts` is float(this) / MICROS, per line and column-wise (collectors/columnar.py)."""
        hit = self._cache.get(stamp)
        if hit is None:
            start, second = self._minutes.get(stamp[:16]), int(stamp[17:19])
            hit = start + second * MICROS if start is not None and 0 <= second <= 59 else self._exactly(stamp)
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[stamp] = hit
        return hit + fraction

    def _exactly(self, stamp: bytes) -> int:
        wall = datetime(
            int(stamp[0:4]), int(stamp[5:7]), int(stamp[8:10]), int(stamp[11:13]), int(stamp[14:16]), int(stamp[17:19])
        )
        start = local_to_epoch(wall.replace(second=0), self.tz)
        if local_to_epoch(wall.replace(second=59), self.tz) - start == 59:
            if len(self._minutes) > 4096:
                self._minutes.clear()
            self._minutes[stamp[:16]] = int(start) * MICROS
        return int(local_to_epoch(wall, self.tz)) * MICROS


def host_zone() -> str:
    """The host's IANA zone: $TZ, else the zone /etc/localtime links to, else /etc/timezone, else UTC."""
    name = os.environ.get("TZ", "").lstrip(":")
    if not name:
        with contextlib.suppress(OSError):
            link = os.readlink("/etc/localtime")
            name = link.split("zoneinfo/", 1)[1] if "zoneinfo/" in link else ""
    if not name:
        with contextlib.suppress(OSError):
            name = Path("/etc/timezone").read_text().strip()
    try:
        zone(name or "UTC")
    except ValueError:
        return "UTC"
    return name or "UTC"


_DISPLAY: list[str] = []  # the process's display zone ([agent] display_tz), set once its config is loaded


def set_display_zone(name: str) -> None:
    """The zone every second clock is shown in (`[agent] display_tz`): set where a config file is loaded."""
    zone(name)
    _DISPLAY[:] = [name]


def display_zone() -> str:
    """`[agent] display_tz` of the loaded config, else the host's zone."""
    return _DISPLAY[0] if _DISPLAY else host_zone()


UTC_NAMES = frozenset({"UTC", "Z", "ETC/UTC", "ETC/UCT", "UCT", "ETC/ZULU", "ZULU", "UNIVERSAL", "ETC/UNIVERSAL"})


def is_utc(name: str) -> bool:
    """The zone is UTC under one of its names: a second clock in it would repeat the first."""
    return name.upper() in UTC_NAMES


def zone_label(name: str, when: datetime | None = None) -> str:
    """A short name of the zone for a column or a clock: UTC, or its abbreviation then (CST, CET)."""
    if is_utc(name):
        return "UTC"
    return (when or datetime.now(UTC)).astimezone(zone(name)).strftime("%Z") or name


def offset_note(name: str, when: datetime | None = None) -> str:
    """`Asia/Shanghai is UTC+08:00`: what a column of the display zone left out of a table was."""
    offset = (when or datetime.now(UTC)).astimezone(zone(name)).strftime("%z")
    return f"{name} is UTC{offset[:3]}:{offset[3:]}" if offset else f"{name} is UTC"


def format_both(ts: float, tz: str | None = None) -> str:
    """'2026-10-19 04:49:00Z (12:49:00 Asia/Shanghai)': storage is UTC, analysts also read the display zone (not
    when that is UTC too)."""
    name = tz or display_zone()
    utc = datetime.fromtimestamp(ts, tz=UTC)
    if is_utc(name):
        return f"{utc:%Y-%m-%d %H:%M:%S}Z"
    local = utc.astimezone(zone(name))
    day = "" if local.date() == utc.date() else local.strftime("%m-%d ")
    return f"{utc:%Y-%m-%d %H:%M:%S}Z ({day}{local:%H:%M:%S} {name})"


def to_iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


__all__ = [
    "Clock",
    "SystemClock",
    "ManualClock",
    "ZonedParser",
    "zone",
    "local_to_epoch",
    "format_both",
    "host_zone",
    "display_zone",
    "set_display_zone",
    "zone_label",
    "offset_note",
    "to_iso",
    "UTC",
    "BEIJING",
    "BEIJING_ZONE_NAME",
]
