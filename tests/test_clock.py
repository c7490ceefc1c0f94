"""Naive timestamps in a declared zone become UTC, DST included."""
from __future__ import annotations

from datetime import UTC, datetime

import pytest

from collectors.clock import ManualClock, ZonedParser, format_both, zone


def utc(stamp: bytes, tz: str) -> str:
    return datetime.fromtimestamp(ZonedParser(tz).seconds(stamp), tz=UTC).isoformat()


@pytest.mark.parametrize(("stamp", "tz", "expected"), [
    (b"2026-10-19 04:49:00", "UTC", "2026-10-19T04:49:00+00:00"),
    (b"2026-10-19 12:49:00", "Asia/Shanghai", "2026-10-19T04:49:00+00:00"),
    (b"2026-10-20 01:33:10", "Asia/Shanghai", "2026-10-19T17:33:10+00:00"),  # across midnight
    (b"2026-03-29 01:30:00", "Europe/Berlin", "2026-03-29T00:30:00+00:00"),  # winter time
    (b"2026-03-29 03:30:00", "Europe/Berlin", "2026-03-29T01:30:00+00:00"),  # summer time
    (b"2026-03-29 02:30:00", "Europe/Berlin", "2026-03-29T01:30:00+00:00"),  # in the gap: shifted forward
    (b"2026-10-25 02:30:00", "Europe/Berlin", "2026-10-25T00:30:00+00:00"),  # repeated hour: first one
    (b"2026-11-01 01:30:00", "America/New_York", "2026-11-01T05:30:00+00:00"),
])
def test_naive_local_time_to_utc(stamp, tz, expected):
    assert utc(stamp, tz) == expected


def test_unknown_zone_is_an_error():
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Olympus'"):
        zone("Mars/Olympus")


def test_malformed_stamp_raises_value_error():
    with pytest.raises(ValueError):
        ZonedParser("UTC").seconds(b"2026-02-30 00:00:00")


def test_both_zones_for_humans():
    ts = ZonedParser("UTC").seconds(b"2026-10-19 04:49:00")
    assert format_both(ts) == "2026-10-19 04:49:00Z (12:49:00 Beijing)"
    late = ZonedParser("UTC").seconds(b"2026-10-19 17:33:10")
    assert format_both(late) == "2026-10-19 17:33:10Z (10-20 01:33:10 Beijing)"


def test_manual_clock_moves_only_when_told():
    clock = ManualClock(start=100.0)
    assert (clock.now(), clock.monotonic()) == (100.0, 0.0)
    clock.advance(2.5)
    assert (clock.now(), clock.monotonic()) == (102.5, 2.5)
