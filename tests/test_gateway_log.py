"""Gateway log: every line kind, the date recovered across midnight, a restart and a gap."""

from __future__ import annotations

from datetime import UTC, datetime

from conftest import FIXTURES

from spyglass.collectors.event import Event
from spyglass.collectors.gateway_log import GatewayLogOptions, GatewayLogSource

FIXTURE = FIXTURES / "gateway_log" / "rag-proxy.log"
MTIME = datetime(2026, 10, 19, 23, 59, 59, tzinfo=UTC).timestamp()  # a clone resets the real one


def events() -> list[Event]:
    source = GatewayLogSource("gw", GatewayLogOptions(path="x", instance="rag-proxy"))
    source.file_mtime(MTIME)
    found, misses, unmatched = source.handle_lines(FIXTURE.read_bytes().splitlines())
    assert {k: v for k, v in misses.items() if v} == {"unmatched": 1, "unprefixed": 2}
    assert unmatched == b"[03:00:01] upstream pool warm: 2 lanes"
    return found


def utc(e: Event) -> str:
    return datetime.fromtimestamp(e.ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def test_dates_are_recovered():
    assert [(e.kind, utc(e)) for e in events()] == [
        ("started", "2026-10-19 23:59:40"),  # no id yet: the file's mtime
        ("request", "2026-10-19 23:59:50"),  # 07:59:50 Beijing on the 20th
        ("precheck", "2026-10-19 23:59:50"),
        ("done", "2026-10-20 00:00:05"),  # past midnight: the time went back, the id says so
        ("reject", "2026-10-20 00:10:00"),
        ("request", "2026-10-20 04:49:00"),
        ("precheck", "2026-10-20 04:49:00"),
        ("clamp", "2026-10-20 04:49:00"),
        ("done", "2026-10-20 04:49:15"),
        ("request", "2026-10-20 06:14:58"),
        ("overfit", "2026-10-20 06:14:58"),
        ("retry_on_overfit", "2026-10-20 06:14:58"),
        ("started", "2026-10-20 22:00:00"),
        ("started", "2026-10-21 03:00:00"),  # back by 19 h with no id: a new UTC day
        ("request", "2026-10-24 09:00:00"),  # a quiet gap of days, closed by the next id
        ("done", "2026-10-24 09:00:30"),
        ("reject", "2026-10-24 17:33:10"),  # 01:33:10 Beijing on the 25th
    ]


def test_later_lines_carry_the_request_context():
    done = [e for e in events() if e.kind == "done"][1]
    assert done.request_id == "20261020-124900-7aa82c"
    assert {k: done.fields[k] for k in ("lane", "mode", "est_tokens", "client_msgs", "sent_msgs", "engine_prompt")} == {
        "lane": "fast",
        "mode": "assembled",
        "est_tokens": 516561,
        "client_msgs": 315,
        "sent_msgs": 147,
        "engine_prompt": 154796,
    }
    overfit = next(e for e in events() if e.kind == "overfit")
    assert (overfit.fields["lane"], overfit.fields["upstream"]) == ("normal", "#545 prompt too long: 372066 > 262144")


def test_context_survives_a_restart_through_the_checkpoint():
    lines = FIXTURE.read_bytes().splitlines()
    first = GatewayLogSource("gw", GatewayLogOptions(path="x"))
    first.file_mtime(MTIME)
    first.handle_lines(lines[:6])
    second = GatewayLogSource("gw", GatewayLogOptions(path="x"))
    second.restore(first.checkpoint())
    later, _, _ = second.handle_lines(lines[6:9])
    assert [(e.kind, utc(e), e.fields.get("lane")) for e in later] == [
        ("precheck", "2026-10-20 04:49:00", "fast"),
        ("clamp", "2026-10-20 04:49:00", "fast"),
        ("done", "2026-10-20 04:49:15", "fast"),
    ]


def test_a_request_lets_go_of_its_context_at_its_last_line():
    source = GatewayLogSource("gw", GatewayLogOptions(path="x"))
    source.file_mtime(MTIME)
    source.handle_lines(FIXTURE.read_bytes().splitlines())
    assert source.checkpoint()["requests"] == {}  # every request in the fixture finished


def test_a_log_written_in_another_zone():
    lines = [
        b"[12:49:00] req=20261020-124900-7aa82c session=auto:1 lane=fast mode=assembled client_msgs=1"
        b" sent_msgs=1 chars=9 cjk=0.000 est_tokens=7 max_tokens=9",
        b"[00:00:30] rag-proxy started pid=1 version=2026.10.20-1",
    ]  # back by 12 h 48 m: the next day
    source = GatewayLogSource("gw", GatewayLogOptions(path="x", tz="Asia/Shanghai"))
    events, _, _ = source.handle_lines(lines)
    assert [utc(e) for e in events] == ["2026-10-20 04:49:00", "2026-10-20 16:00:30"]
