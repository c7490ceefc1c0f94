"""The columnar block path (collectors/columnar.py) against the per-line path: the same events, the
same misses and last unmatched line and the same task joins (so the same metric state), on generated
logs full of the RE2 / Python `re` traps; patterns RE2 cannot run keep their source per line."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spyglass.collectors.columnar import NotRe2, re2_checked, to_re2
from spyglass.collectors.engine_log import EngineLogOptions, EngineLogSource

FIXTURE = Path(__file__).parent / "fixtures" / "engine_log" / "strata-iq3_xxs-b.log"
LINES = FIXTURE.read_bytes().splitlines()

# Text a field may hold: \v (\s in Python, not in RE2), multibyte, invalid UTF-8, NUL, CR, tab.
ODD = st.sampled_from(
    [
        b"a",
        b"\x0b",
        b"\xc3\xa9",
        "→".encode(),
        "中文".encode(),
        b"\xff\xfe",
        b"\xed\xa0\x80",
        b"\0",
        b"\r",
        b"\t",
        b" ",
        b"]",
        b":",
        b".",
        b"#",
        b"9" * 20,
        b"-",
        b"\x85",
        b"\xa0",
    ]
)
TEXT = st.lists(ODD, min_size=0, max_size=4).map(b"".join)
LONG = st.integers(1000, 70_000).map(lambda n: b"w" * n)
WORD = st.one_of(
    st.sampled_from([b"15eb3770", b"budget", b"stop", b"parked", b"a\x0bb", "é→中".encode(), b"\xffx"]),
    st.sampled_from([b"15eb3770", b"a\x0bb"]),
    TEXT,
    LONG,
)
DIGITS = st.integers(0, 10**6).map(lambda n: str(n).encode())
NUMBER = st.one_of(
    DIGITS,
    DIGITS,
    DIGITS,
    DIGITS,
    st.sampled_from([b"9007199254740992", b"9007199254740993", b"9" * 400, b"007", b"", b"1.5"]),
)
FLOAT = st.one_of(NUMBER, st.sampled_from([b"1.2.3", b".", b"5.", b".5", b"77.1", b"9" * 400 + b".0"]))
STAMP = st.sampled_from(
    [b"2026-10-19 04:49:00.120"] * 8
    + [
        b"2026-10-19 04:49:00.003",
        b"2026-10-19 04:49:00,120",
        b"2026-10-19 04:49:00.1",
        b"2026-10-19 04:49:00.123456",
        b"2026-10-19 04:49:00",
        b"2026-02-30 04:49:00.120",
        b"2026-13-01 00:00:00.000",
        b"2026-10-19 23:59:60.000",
        b"0000-01-01 00:00:00.000",
        b"2026-10-19 04:49:01.999",
        b"2026-10-19 04:49:0x.120",
    ]
)
LEVEL = st.sampled_from([b"I", b"W", b"E", b"D", b"X", b""])
COMPONENT = st.sampled_from(
    [b"main", b"load", b"http", b"slot 3", b"slot", b"cache", b"graph", b"stats", b"sched", b"cache x", b"", b"a" * 41]
)


@st.composite
def messages(draw) -> tuple[bytes, bytes]:
    """(component, message) of one kind, with fields drawn from the odd values above."""
    t, n, f, w = draw(st.sampled_from([1, 2, 3, 18231])), NUMBER, FLOAT, WORD
    d = draw
    choices = [
        (b"http", b"task %d req=%s conv=%s queued prefill_depth=%s" % (t, d(w), d(w), d(n))),
        (
            b"http",
            b"task %d rejected %s%s %s%s"
            % (
                t,
                d(st.sampled_from([b"400", b"503", b"4000", b"40"])),
                d(st.sampled_from([b"", b" #545", b" #"])),
                d(TEXT),
                d(st.sampled_from([b"", b": 372066 > 262144", b": " + d(TEXT), b":"])),
            ),
        ),
        (b"slot 3", b"task %d prompt %s = %s reused + %s read in %s ms" % (t, d(n), d(n), d(n), d(n))),
        (
            b"slot 3",
            b"task %d thinking: %s of max %s %s done (%s)"
            % (t, d(n), d(n), d(st.sampled_from(["→".encode(), b"->", b"=>"])), d(w)),
        ),
        (b"slot 3", b"task %d writing a tool call" % t),
        (
            b"slot 3",
            b"task %d done finish=%s prompt=%s completion=%s ttft_ms=%s decode_tps=%s"
            % (t, d(w), d(n), d(n), d(n), d(f)),
        ),
        (
            b"cache",
            b"park conv=%s parked=%s bytes=%s used=%s budget=%s evictions=%s" % (d(w), d(n), d(n), d(n), d(n), d(n)),
        ),
        (
            b"cache",
            b"evict conv=%s bytes=%s reason=%s parked=%s used=%s budget=%s evictions=%s"
            % (d(w), d(n), d(w), d(n), d(n), d(n), d(n)),
        ),
        (b"cache", b"restore conv=%s from=%s tokens=%s" % (d(w), d(w), d(n))),
        (b"main", b"Strata 0.9.3 (build %s) starting pid=%s" % (d(w), d(n))),
        (b"main", b"args: --port %s --slots %s --prompt-cache-every %s%s" % (d(n), d(n), d(n), d(TEXT))),
        (b"main", b"ready in %s s" % d(f)),
        (
            b"stats",
            b"busy=%s/%s prefill_queue=%s decode_tps=%s parked=%s used=%s budget=%s evictions=%s"
            % (d(n), d(n), d(n), d(f), d(n), d(n), d(n), d(n)),
        ),
        (b"graph", b"rebuild shape=%s reason=%s took_ms=%s" % (d(w), d(w), d(n))),
        (d(COMPONENT), d(TEXT)),
    ]
    return d(st.sampled_from(choices))


@st.composite
def lines(draw) -> bytes:
    shape = draw(st.sampled_from(["event"] * 6 + ["fixture", "raw", "empty", "long"]))
    if shape == "fixture":
        return draw(st.sampled_from(LINES))
    if shape == "raw":
        return draw(st.binary(max_size=80))
    if shape == "empty":
        return b""
    component, message = draw(messages())
    if draw(st.integers(0, 4)) == 0:
        component = draw(COMPONENT)
    level = draw(st.sampled_from([b"I", b"I", b"E", b"D"]) | LEVEL)
    line = b"%s %s [%s] %s" % (draw(STAMP), level, component, message)
    if shape == "long":
        line += b"x" * draw(st.integers(1000, 70_000))
    junk = draw(st.sampled_from([b""] * 12 + [b"\r", b"\0", b" ", b"\n", b"\x0b", b"\r\n"]))
    at = draw(st.sampled_from([len(line), len(line), 0, draw(st.integers(0, len(line)))]))
    return line[:at] + junk + line[at:]


def sources(**options) -> tuple[EngineLogSource, EngineLogSource]:
    made = [
        EngineLogSource(
            "engine-b", EngineLogOptions(path="x", instance="strata-b", lane="normal", **options), host="h", max_tasks=4
        )
        for _ in range(2)
    ]
    return made[0], made[1]


def run_both(blocks: list[list[bytes]], **options) -> tuple[EngineLogSource, EngineLogSource]:
    line_path, block_path = sources(**options)
    for block in blocks:
        a = line_path.handle_each(block)
        b = block_path.handle_block(block) if block_path.parser.block is not None else block_path.handle_lines(block)
        assert b[0] == a[0]  # Event is a dataclass: ts, source, kind, instance, fields, request id, host
        assert {k: v for k, v in b[1].items() if v} == {k: v for k, v in a[1].items() if v}
        assert b[2] == a[2]
        assert block_path.checkpoint() == line_path.checkpoint()
    return line_path, block_path


@given(st.lists(st.lists(lines(), max_size=60), min_size=1, max_size=4))
def test_columnar_path_equals_the_line_path(blocks):
    _, block_path = run_both(blocks)
    assert block_path.parser.block is not None


@given(st.lists(st.lists(lines(), max_size=40), min_size=1, max_size=3))
def test_columnar_path_equals_the_line_path_with_overrides_re2_can_run(blocks):
    """Overrides RE2 runs after translation: \\s, an optional group that can be empty, no literal."""
    _, block_path = run_both(
        blocks,
        patterns={
            "restore": r"restore\s+conv=(?P<conv>\S+)\s+from=(?P<origin>\w*) tokens=(?P<tokens>\d+)",
            "graph_rebuild": {
                "regex": r"rebuild shape=(?P<shape>[^ ]*)(?: reason=(?P<reason>\w*))? took_ms=(?P<took_ms>\d+)",
                "literal": "",
            },
            "ready": r"ready in (?P<seconds>[\d.]+) (s|sec)",
        },
    )
    assert block_path.parser.block is not None


@pytest.mark.parametrize(
    "override",
    [
        r"evict conv=(?P<conv>\S+)(?= ) bytes=(?P<bytes>\d+) .*",  # lookahead
        r"evict conv=(?P<conv>\w+) bytes=(?P<bytes>\d+) reason=(?P=conv).*",  # backreference
        r"evict conv=(?P<conv>\S+) bytes=(?P<bytes>\d+).*\Z",  # \Z
        r"(?x:evict \s conv=(?P<conv>\S+) .*)",  # verbose
        r"evict conv=(?P<conv>\S++) bytes=(?P<bytes>\d+).*",  # possessive
        r"evict conv=(?>(?P<conv>\S+)) bytes=(?P<bytes>\d+).*",  # atomic
        r"evict conv=(?P<conv>\S{,40}) bytes=(?P<bytes>\d+).*",  # {,n}: literal in RE2
        r"evict conv=(?P<conv>[a[:alnum:]]+) bytes=(?P<bytes>\d+).*",  # POSIX class: a set in Python
        r"evict conv=(?P<conv>[\S]+) bytes=(?P<bytes>\d+).*",  # \S inside a class
    ],
)
def test_a_pattern_re2_cannot_run_keeps_the_source_per_line(override):
    blocks = [LINES * 3, LINES]
    line_path, block_path = run_both(blocks, patterns={"evict": override})
    assert block_path.parser.block is None
    assert block_path.parse_note.startswith("per line only: patterns.evict:")


@given(st.lists(lines(), max_size=40))
def test_a_pattern_re2_cannot_run_still_parses_generated_logs_alike(block):
    run_both(
        [block], patterns={"restore": r"restore conv=(?P<conv>\S+)(?<! ) from=(?P<origin>\w+) tokens=(?P<tokens>\d+)"}
    )


def test_auto_mode_chooses_by_block_size_and_never_forces_the_line_path():
    auto, _ = sources(columnar_min_lines=10)
    never, _ = sources(columnar="never")
    assert never.parser.block is None and never.parse_note == "columnar: never (configured)"
    calls = []
    auto.handle_block = lambda lines: calls.append(len(lines)) or ([], {}, b"")  # type: ignore[method-assign]
    auto.handle_lines(LINES[:9])
    auto.handle_lines(LINES[:10])
    assert calls == [10]


@pytest.mark.parametrize(
    ("python", "re2"),
    [
        (r"a\sb", r"a[\t\n\x0b\f\r ]b"),
        (r"[\s,]", r"[\t\n\x0b\f\r ,]"),
        (r"(x)(?P<y>z)", r"(?:x)(?P<y>z)"),
        (r"[]a]", r"[\]a]"),
    ],
)
def test_translation(python, re2):
    assert to_re2(python, message=True) == re2


def test_message_anchors_are_refused():
    with pytest.raises(NotRe2):
        to_re2(r"^evict", message=True)
    with pytest.raises(NotRe2):
        to_re2(r"\bevict", message=True)
    assert to_re2(r"^x\b", message=False) == r"^x\b"


def test_re2_checked_compiles_the_pattern():
    """RE2 compiles a pattern only for an array with a row: against an empty one any pattern passed."""
    assert re2_checked(r"^(?P<a>\d+) x") == r"^(?P<a>\d+) x"
    with pytest.raises(NotRe2, match="RE2: .*invalid perl operator"):
        re2_checked(r"(?<=a)b")


def test_debug_sources_names_the_pattern_that_keeps_a_source_per_line(tmp_path):
    import tomllib

    from spyglass.agent.pipeline import Pipeline
    from spyglass.collectors.clock import ManualClock
    from spyglass.config import engine_log_toml, parse_config
    from spyglass.exporters.statefile import StateFile

    log = tmp_path / "engine.log"
    log.write_bytes(b"\n".join(LINES) + b"\n")
    text = (
        engine_log_toml(log, tmp_path / "state", store=False)
        + "[sources.engine-b.patterns]\nrestore = 'restore conv=(?P<conv>\\S+)(?= ) from=(?P<origin>\\w+) tokens=(?P<tokens>\\d+)'\n"
    )
    cfg = parse_config(tomllib.loads(text), "test")
    pipeline = Pipeline(cfg, ManualClock(), StateFile(cfg.state_dir() / "state.json"))
    try:
        pipeline.run_until_idle()
        note = pipeline.debug_sources()["engine-b"]["parser"]
        assert note.startswith("per line only: patterns.restore:") and "(?=" in note
        assert pipeline.debug_sources()["engine-b"]["outcomes"]["event"] == 35
    finally:
        pipeline.close()


@given(st.lists(lines(), min_size=8, max_size=80))
def test_a_block_split_across_two_threads_equals_the_line_path(block):
    (line_path,) = sources()[:1]
    threaded = EngineLogSource(
        "engine-b",
        EngineLogOptions(path="x", instance="strata-b", lane="normal", columnar_threads=2, columnar_min_lines=4),
        host="h",
        max_tasks=4,
    )
    try:
        a, b = line_path.handle_each(block), threaded.handle_lines(block)
        assert b[0] == a[0] and b[2] == a[2]
        assert {k: v for k, v in b[1].items() if v} == {k: v for k, v in a[1].items() if v}
        assert threaded._pool is not None  # the block did go through the threads
    finally:
        threaded.close()


def test_a_signed_number_group_is_an_int_on_the_columnar_path_too():
    """A capture's type comes from its regex (collectors/fields.capture_type) on both paths: -?\\d+ is an int."""
    block = [
        b"2026-10-19 04:49:00.120 I [cache] restore conv=c%d from=parked tokens=%d" % (i, tokens)
        for i, tokens in enumerate([-5000, 7, -1, 107348])
    ]
    _, block_path = run_both(
        [block], patterns={"restore": r"restore conv=(?P<conv>\S+) from=(?P<origin>\w+) tokens=(?P<tokens>-?\d+)"}
    )
    assert block_path.parser.block is not None
    events, _, _ = sources(
        patterns={
            "restore": r"restore conv=(?P<conv>\S+) from=(?P<origin>\w+)"
            r" tokens=(?P<tokens>-?\d+)"
        }
    )[1].handle_block(block)
    assert [(e.fields["tokens"], type(e.fields["tokens"])) for e in events] == [
        (-5000, int),
        (7, int),
        (-1, int),
        (107348, int),
    ]
