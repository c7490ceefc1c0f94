"""Table-driven tests of the engine-log parser on the fixture's real-looking lines."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spyglass.collectors.engine_log import EngineLogOptions, EngineLogParser, EngineLogSource, parse_args
from spyglass.collectors.event import Event
from spyglass.collectors.grammar import Miss

FIXTURE = Path(__file__).parent / "fixtures" / "engine_log" / "strata-iq3_xxs-b.log"
LINES = FIXTURE.read_bytes().splitlines()


def parser(**options) -> EngineLogParser:
    return EngineLogParser(EngineLogOptions(path="x", instance="strata-b", **options), "engine-b")


def line_with(text: bytes) -> bytes:
    return next(line for line in LINES if text in line)


@pytest.mark.parametrize(
    ("needle", "kind", "fields"),
    [
        (
            b"starting pid=48211",
            "start",
            {"build_name": "Strata", "version": "0.9.3", "build": "7f3c2e1", "pid": 48211},
        ),
        (
            b"model path=",
            "model",
            {
                "md5": "5d41402abc4b2a76b9719d911017c592",
                "bytes": 163208757248,
                "real": "/data/models/v7/qwen3.5-397b-a17b-iq3_xxs.gguf",
            },
        ),
        (b"cpus allowed=38-53", "cpus", {"cpus": "38-53", "pool_workers": 24}),
        (b"experts resident", "experts_loaded", {"resident": 256, "total": 512, "seconds": 432.5}),
        (b"ready in 435.0", "ready", {"seconds": 435.0}),
        (b"task 18231 req=", "queued", {"task": 18231, "req": "20261019-124900-7aa82c", "prefill_depth": 3}),
        (b"prompt 253214 = 251787", "prompt", {"prompt": 253214, "reused": 251787, "read": 1427, "ms": 2196}),
        (b"thinking: 3194", "thinking", {"tokens": 3194, "max": 32000, "cause": "stop"}),
        (b"thinking: 16000", "thinking", {"tokens": 16000, "max": 16000, "cause": "budget"}),
        (b"writing a tool call", "tool_call", {"task": 18231}),
        (
            b"done finish=tool_calls",
            "done",
            {"finish": "tool_calls", "completion": 3240, "ttft_ms": 2210, "decode_tps": 77.1},
        ),
        (b"park conv=15eb", "park", {"parked": 1, "bytes": 4716362992, "budget": 8589934592, "evictions": 2508}),
        (b"evict conv=", "evict", {"bytes": 4716362992, "reason": "budget", "evictions": 2509}),
        (b"from=checkpoint", "restore", {"origin": "checkpoint", "tokens": 16384}),
        (b"rejected 400", "rejected", {"status": 400, "code": 545, "prompt": 372066, "window": 262144}),
        (b"[graph] rebuild", "graph_rebuild", {"shape": "1x4096", "reason": "new_shape", "took_ms": 840}),
        (b"[stats]", "stats", {"busy": 3, "slots": 20, "prefill_queue": 2, "decode_tps": 98.4, "evictions": 2509}),
        (b"checksum mismatch", "checksum_mismatch", {"got": "0cc175b9c0f1b6a831c399e269772661"}),
        (b"fatal: cannot continue", "error", {"component": "main"}),
    ],
)
def test_line_kinds(needle, kind, fields):
    event = parser().parse_line(line_with(needle))
    assert isinstance(event, Event) and event.kind == kind
    assert {k: event.fields[k] for k in fields} == fields


def test_timestamp_is_utc_with_milliseconds():
    event = parser().parse_line(line_with(b"task 18231 req="))
    assert event.utc.isoformat() == "2026-10-19T04:49:00.120000+00:00"


@pytest.mark.parametrize("layout", [b"%03d", b"%06d"])
def test_every_path_stamps_a_line_at_its_exact_microsecond(layout):
    """The fixed-layout path, the grammar's and the columnar block's read a stamp's fraction one way
    (clock.fraction_micros): each line's ts is the float nearest its instant, whatever the digits."""
    second = int(datetime(2026, 10, 19, 4, 49, tzinfo=UTC).timestamp())
    scale = 1000 if layout == b"%03d" else 1
    values = range(1000) if scale == 1000 else range(0, 1_000_000, 997)
    lines = [b"2026-10-19 04:49:00.%s I [main] ready in 1 s" % (layout % v) for v in values]
    options = EngineLogOptions(path="x", instance="strata-b", columnar="always")
    exact = [float(second * 1_000_000 + v * scale) / 1_000_000 for v in values]
    fast = [EngineLogParser(options, "b").parse_line(line).ts for line in lines]
    slow = [EngineLogParser(options, "b", fast_layout=False).parse_line(line).ts for line in lines]
    block, _, _ = EngineLogSource("b", options).handle_block(lines)
    assert fast == exact and slow == exact and [e.ts for e in block] == exact
    assert {round(ts * 1_000_000) - second * 1_000_000 for ts in exact} == {v * scale for v in values}


def test_engine_log_in_another_zone_is_converted():
    event = parser(tz="Asia/Shanghai").parse_line(line_with(b"task 18231 req="))
    assert event.utc.isoformat() == "2026-10-18T20:49:00.120000+00:00"


@pytest.mark.parametrize(
    ("line", "miss"),
    [
        (b"  prompt echo: park conv=ffff parked=9 bytes=1 used=1 budget=1 evictions=99999", Miss.UNPREFIXED),
        (
            b"x 2026-10-19 04:49:15.700 I [cache] park conv=a parked=1 bytes=1 used=1 budget=1 evictions=5",
            Miss.UNPREFIXED,
        ),
        (b"2026-10-19 04:49:20.000 D [cache] park conv=a parked=1 bytes=1 used=1 budget=1 evictions=7", Miss.IGNORED),
        (b"2026-10-19 04:56:30.000 I [sched] rebalanced experts in 12 ms", Miss.UNMATCHED),
        (b"2026-13-19 04:56:30.000 I [cache] restore conv=a from=parked tokens=1", Miss.UNMATCHED),
        (b"", Miss.UNPREFIXED),
    ],
)
def test_lines_that_are_not_events(line, miss):
    assert parser().parse_line(line) == miss


def test_a_prompt_cannot_forge_an_event_mid_line():
    forged = (
        b"2026-10-19 04:49:00.120 I [http] task 1 req=r conv=c queued prefill_depth=0 "
        b"2026-10-19 04:49:15.700 I [cache] park conv=a parked=1 bytes=1 used=1 budget=1 evictions=99999"
    )
    # the message regex is anchored at both ends: a valid message with anything after it is no event
    assert parser().parse_line(forged) == Miss.UNMATCHED


def test_task_lines_carry_the_request_id_of_their_queued_line():
    source = EngineLogSource("engine-b", EngineLogOptions(path="x", instance="strata-b"))
    events = [e for e in map(source.handle, LINES) if isinstance(e, Event)]
    done = [e for e in events if e.kind == "done"]
    assert [e.request_id for e in done] == [
        "20261019-124900-7aa82c",
        "20261019-125000-0c1d2e",
        "20261019-125500-41b9e0",
        "20261019-132000-5e5e5e",
    ]
    assert next(e for e in events if e.kind == "rejected").request_id is None  # never queued


def test_args_line_gives_the_engine_flags():
    assert parse_args("--model /m.gguf --port 8082 --slots 20 --prompt-cache-every 16384 --verbose") == {
        "model": "/m.gguf",
        "port": 8082,
        "slots": 20,
        "prompt_cache_every": 16384,
    }


def test_a_pattern_overridden_from_config_is_used():
    drifted = b"2026-10-19 04:49:15.700 I [cache] parked conv=a n=1 size=42 used=1 budget=9 evictions=3"
    assert parser().parse_line(drifted) == Miss.UNMATCHED
    custom = parser(
        patterns={
            "park": r"parked conv=(?P<conv>\S+) n=(?P<parked>\d+) size=(?P<bytes>\d+)"
            r" used=(?P<used>\d+) budget=(?P<budget>\d+) evictions=(?P<evictions>\d+)"
        }
    )
    event = custom.parse_line(drifted)
    assert (event.kind, event.fields["bytes"], event.fields["evictions"]) == ("park", 42, 3)


def test_a_new_kind_can_be_added_from_config():
    custom = parser(
        patterns={
            "rebalance": {
                "regex": r"rebalanced experts in (?P<ms>\d+) ms",
                "component": "sched",
                "literal": "rebalanced",
            }
        }
    )
    event = custom.parse_line(b"2026-10-19 04:56:30.000 I [sched] rebalanced experts in 12 ms")
    assert (event.kind, event.fields) == ("rebalance", {"ms": 12})


def test_a_new_kind_without_component_names_its_key():
    with pytest.raises(ValueError, match=r"patterns\.rebalance: a new kind needs a component"):
        parser(patterns={"rebalance": r"rebalanced experts"})


def test_an_invalid_pattern_names_its_key():
    with pytest.raises(ValueError, match=r"sources\.engine-b\.patterns\.park: invalid regular expression"):
        parser(patterns={"park": "park (unclosed"})


@given(st.binary(max_size=300))
def test_random_bytes_never_crash_the_parser(data):
    assert isinstance(parser().parse_line(data), (Event, str))


@given(st.sampled_from(LINES), st.integers(0, 200), st.binary(max_size=8))
def test_mutated_real_lines_never_crash_the_parser(line, at, junk):
    assert isinstance(parser().parse_line(line[:at] + junk + line[at:]), (Event, str))


NOISY = LINES + [
    b"2026-10-19 04:49:20.000 D [http] keepalive conn=3",
    b"2026-10-19 04:49:20.000123 D [x] y",
    b"2026-10-19 04:49:20,000 D [x] y",
    b"junk D [x",
    b"2026-10-19 04:49:20.000 D [ok",
    b"",
]


@given(st.lists(st.sampled_from(NOISY) | st.binary(max_size=60), max_size=40))
def test_batch_path_agrees_with_the_line_path(lines):
    batch = EngineLogSource("b", EngineLogOptions(path="x", instance="strata-b"))
    single = EngineLogSource("b", EngineLogOptions(path="x", instance="strata-b"))
    events, misses, _ = batch.handle_lines(lines)
    results = [single.handle(line) for line in lines]
    assert [(e.kind, e.ts, e.fields, e.request_id) for e in events] == [
        (e.kind, e.ts, e.fields, e.request_id) for e in results if isinstance(e, Event)
    ]
    assert {k: v for k, v in misses.items() if v} == {
        m: results.count(m) for m in set(r for r in results if isinstance(r, str))
    }


@given(st.sampled_from(NOISY), st.integers(0, 80), st.binary(max_size=6))
def test_fixed_layout_path_agrees_with_the_grammar_path(line, at, junk):
    options = EngineLogOptions(path="x", instance="strata-b")
    fast = EngineLogParser(options, "b").parse_line(line[:at] + junk + line[at:])
    slow = EngineLogParser(options, "b", fast_layout=False).parse_line(line[:at] + junk + line[at:])
    assert (fast if isinstance(fast, str) else (fast.kind, fast.ts, fast.fields)) == (
        slow if isinstance(slow, str) else (slow.kind, slow.ts, slow.fields)
    )
