"""Naive timestamps in a declared zone become UTC, DST included."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spyglass.collectors.clock import (
    ManualClock,
    ZonedParser,
    display_zone,
    format_both,
    fraction_micros,
    host_zone,
    local_to_epoch,
    zone,
)
from spyglass.config import ConfigError, load_config


@pytest.mark.parametrize(
    ("digits", "micros"),
    [
        (b"5", 500_000),
        (b"004", 4_000),
        (b"120", 120_000),
        (b"123456", 123_456),
        (b"1234567", 123_456),
        (b"", 0),
        (None, 0),
    ],
)
def test_a_fraction_is_read_as_microseconds(digits, micros):
    assert fraction_micros(digits) == micros


def utc(stamp: bytes, tz: str) -> str:
    return datetime.fromtimestamp(ZonedParser(tz).seconds(stamp), tz=UTC).isoformat()


@pytest.mark.parametrize(
    ("stamp", "tz", "expected"),
    [
        (b"2026-10-19 04:49:00", "UTC", "2026-10-19T04:49:00+00:00"),
        (b"2026-10-19 12:49:00", "Asia/Shanghai", "2026-10-19T04:49:00+00:00"),
        (b"2026-10-20 01:33:10", "Asia/Shanghai", "2026-10-19T17:33:10+00:00"),  # across midnight
        (b"2026-03-29 01:30:00", "Europe/Berlin", "2026-03-29T00:30:00+00:00"),  # winter time
        (b"2026-03-29 03:30:00", "Europe/Berlin", "2026-03-29T01:30:00+00:00"),  # summer time
        (b"2026-03-29 02:30:00", "Europe/Berlin", "2026-03-29T01:30:00+00:00"),  # in the gap: shifted forward
        (b"2026-10-25 02:30:00", "Europe/Berlin", "2026-10-25T00:30:00+00:00"),  # repeated hour: first one
        (b"2026-11-01 01:30:00", "America/New_York", "2026-11-01T05:30:00+00:00"),
    ],
)
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
    assert format_both(ts, "Asia/Shanghai") == "2026-10-19 04:49:00Z (12:49:00 Asia/Shanghai)"
    late = ZonedParser("UTC").seconds(b"2026-10-19 17:33:10")
    assert format_both(late, "Asia/Shanghai") == "2026-10-19 17:33:10Z (10-20 01:33:10 Asia/Shanghai)"
    assert format_both(late, "America/New_York") == "2026-10-19 17:33:10Z (13:33:10 America/New_York)"
    assert format_both(late, "Etc/UTC") == format_both(late, "UTC") == "2026-10-19 17:33:10Z"  # no second clock


def test_the_display_zone_is_the_configs_else_the_hosts(monkeypatch, tmp_path):
    monkeypatch.setenv("TZ", "Europe/Berlin")
    assert host_zone() == "Europe/Berlin" and display_zone() == "Europe/Berlin"
    config = tmp_path / "spyglass.toml"
    config.write_text('[agent]\ndisplay_tz = "Asia/Shanghai"\n')
    assert load_config(config).agent.display_tz == "Asia/Shanghai" and display_zone() == "Asia/Shanghai"
    config.write_text('[agent]\ndisplay_tz = "Mars/Olympus"\n')
    with pytest.raises(ConfigError, match="agent.display_tz"):
        load_config(config)


def test_manual_clock_moves_only_when_told():
    clock = ManualClock(start=100.0)
    assert (clock.now(), clock.monotonic()) == (100.0, 0.0)
    clock.advance(2.5)
    assert (clock.now(), clock.monotonic()) == (102.5, 2.5)


ZONES = [
    "UTC",
    "Asia/Shanghai",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
    "Africa/Monrovia",
    "America/St_Johns",
]  # half-hour DST; a 5:45 offset; a historical offset with seconds


@given(
    st.sampled_from(ZONES),
    st.lists(st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2040, 12, 31)), min_size=1, max_size=40),
    st.data(),
)
def test_the_minute_cache_gives_what_the_zone_arithmetic_gives(tz, walls, data):
    """Stamps near one another (the same minutes, other seconds), in any order, through one parser."""
    parser = ZonedParser(tz)
    stamps = [wall.replace(second=data.draw(st.integers(0, 59))) for wall in walls for _ in range(3)]
    for wall in data.draw(st.permutations(stamps)):
        stamp = wall.strftime("%Y-%m-%d %H:%M:%S").encode()
        assert parser.seconds(stamp) == local_to_epoch(wall.replace(microsecond=0), zone(tz)), stamp


@pytest.mark.parametrize("stamp", [b"2026-10-19 04:49:60", b"2026-10-19 04:49:-1", b"2026-10-19 04:49:xx"])
def test_a_second_out_of_range_is_malformed_even_in_a_cached_minute(stamp):
    parser = ZonedParser("UTC")
    parser.seconds(b"2026-10-19 04:49:00")
    with pytest.raises(ValueError):
        parser.seconds(stamp)


def test_a_minute_with_an_offset_change_inside_is_exact_per_second():
    # Monrovia went from -0:44:30 to GMT on 1972-01-07, at 00:44:30 local time: in the middle of a minute.
    parser, tz = ZonedParser("Africa/Monrovia"), zone("Africa/Monrovia")
    for second in (0, 20, 40, 59, 10):
        wall = datetime(1972, 1, 7, 0, 44, second)
        assert parser.seconds(wall.strftime("%Y-%m-%d %H:%M:%S").encode()) == local_to_epoch(wall, tz)
