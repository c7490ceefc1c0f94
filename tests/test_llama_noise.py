"""The drift alarm has no blind spot: llama.cpp's lines that carry no signal are a catalogue of exact shapes
(collectors/llama_shapes.py, built from real output), and a line that holds a signal pattern's literal but
does not match its pattern is unreadable, whatever catalogued line it looks like. Each signal pattern's
literal, reworded in a real log one at a time, is counted unreadable on /metrics (the numerator of H19's
SpyglassSourceUnreadable) and by check-log."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from typer.testing import CliRunner

from spyglass.agent.pipeline import Pipeline
from spyglass.cli.app import app
from spyglass.cli.checklog import read_log
from spyglass.collectors.clock import ManualClock
from spyglass.collectors.grammar import Miss
from spyglass.collectors.llama_grammar import ALIASES, PATTERNS, SIGNAL_2024, Line, LlamaLineParser
from spyglass.collectors.llama_noise import RESERVED, SIGNAL_MARK, Catalogue, shape
from spyglass.collectors.llama_shapes import SHAPES
from spyglass.collectors.llama_wrap import unwrap
from spyglass.config import parse_config
from spyglass.exporters.prometheus import render
from spyglass.exporters.statefile import StateFile

FIXTURES = Path(__file__).parent / "fixtures"
# Real logs, the recorded builds' first (every version, verbosity and mode), then users' public ones.
REAL = (
    sorted(FIXTURES.glob("llama/*/*/server.log"))
    + sorted(FIXTURES.glob("llama_levels/*/*/server.log"))
    + [FIXTURES / "llama_server" / "llama-server.log"]
)
PUBLIC = sorted((FIXTURES / "llama_users").glob("*.log"))
MTIME = 1_796_000_000.0
PARSER = LlamaLineParser()
LITERALS = {kind: literal for kind, (_, literal, _) in PATTERNS.items() if literal}
# Signal kinds that no real log of the project holds a line of (nothing to reword): named, so one that
# turns up in a fixture is reworded too and this list shrinks.
UNSEEN = {"sleeping", "cache_load_failed", "cache_restore_failed", "restore_no_cells"}


def kind_of(payload: bytes) -> str | None:
    found = PARSER.parse(payload)
    return found.kind if isinstance(found, Line) else None


def first_lines(kind: str) -> tuple[Path, list[int]]:
    """The first real log with lines of `kind` that hold its literal, and those lines' numbers."""
    literal, kind = LITERALS[kind].encode(), ALIASES.get(kind, kind)
    for path in REAL + PUBLIC:
        lines = path.read_bytes().splitlines()
        found = [n for n, raw in enumerate(lines) if literal in raw and kind_of(unwrap(raw, MTIME).payload) == kind]
        if found:
            return path, found
    raise LookupError(kind)


def reword(literal: str) -> str:
    """The literal as a later build might word it: its longest word written otherwise (here, backwards)."""
    word = max(re.findall(r"[A-Za-z_]+", literal), key=len)
    return literal.replace(word, word[::-1], 1)


def unreadable_on_metrics(tmp: Path, log: bytes) -> tuple[int, dict[str, int]]:
    """spyglass_source_lines_total of the unusable outcomes (H19's numerator) on /metrics after it read `log`, and
    the unread shapes /debug/sources lists."""
    (tmp / "llama.log").write_bytes(log)
    os.utime(tmp / "llama.log", (MTIME, MTIME))
    text = (
        f'[agent]\nstate_dir = "{tmp / "state"}"\nhost = "h"\n[exporters.prometheus]\nenabled = false\n'
        f'[exporters.store]\nenabled = false\n[sources.llama]\nkind = "engine_log"\npreset = "llama_server"\n'
        f'path = "{tmp / "llama.log"}"\ninstance = "llama-a"\nlane = "normal"\n'
    )
    cfg = parse_config(tomllib.loads(text), "test")
    pipeline = Pipeline(cfg, ManualClock(), StateFile(cfg.state_dir() / "state.json"))
    try:
        pipeline.run_until_idle()
        metrics = render(pipeline.state).decode()
        shapes = pipeline.debug_sources()["llama"]["unread_shapes"]
    finally:
        pipeline.close()
    found = re.findall(
        r'spyglass_source_lines_total\{[^}]*outcome="(unmatched|unprefixed|invalid[^"]*)"[^}]*\} (\S+)', metrics
    )
    return sum(int(float(value)) for _, value in found), shapes


@pytest.mark.parametrize("kind", sorted(set(LITERALS) - UNSEEN))
def test_a_reworded_signal_literal_is_unreadable_on_metrics_and_in_check_log(kind: str, tmp_path: Path) -> None:
    path, numbers = first_lines(kind)
    lines = path.read_bytes().splitlines(keepends=True)
    literal = LITERALS[kind]
    reworded = list(lines)
    for n in numbers:
        reworded[n] = lines[n].replace(literal.encode(), reword(literal).encode(), 1)
    assert all(kind_of(unwrap(reworded[n].rstrip(), MTIME).payload) != ALIASES.get(kind, kind) for n in numbers)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    before, _ = unreadable_on_metrics(tmp_path / "a", b"".join(lines))
    after, shapes = unreadable_on_metrics(tmp_path / "b", b"".join(reworded))
    assert after - before == len(numbers), (kind, path.name, reword(literal))
    # /debug/sources names the new shape (or the signal's words left in a line no longer its pattern's)
    assert any(reword(literal) in listed or listed.startswith(SIGNAL_MARK) for listed in shapes), shapes
    checked = [read_log(tmp_path / d / "llama.log", "llama_server").unreadable for d in ("a", "b")]
    assert checked[1] - checked[0] == len(numbers)


def test_every_signal_literal_is_reworded_or_named_unseen() -> None:
    for kind in sorted(set(LITERALS) - UNSEEN):
        first_lines(kind)
    for kind in UNSEEN:
        with pytest.raises(LookupError):
            first_lines(kind)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"0.02.599.869 W srv         alloc:  - prompt cache full, dropping oldest entry (size = 0.306 MiB)", "reword"),
        (b"0.02.599.869 W srv         alloc:  - making room for prompt cache entry, dropping oldest entry", "reword"),
        (b"0.01.512.329 I slot launch_slot_: id  1 | task 0 | starting task, is_child = 0", "reword"),
        (b"0.01.635.223 I slot      release: id  1 | task 0 | finished processing: n_tokens = 375", "reword"),
        (b"0.01.105.654 I srv  llama_server: model ready", "reword"),
        (
            b"0.01.635.223 I slot      release: id  1 | task 0 | stop processing: n_tokens = 375, truncated = 0, x",
            "guard",
        ),
        (b"0.02.599.869 W srv alloc: - cache size limit reached, removing oldest entry (size = 3 KiB)", "guard"),
        (b"0.01.105.654 I srv  llama_server: model loaded in 3.2 s", "guard"),
        (b"0.00.470.710 I srv  update_slots: all slots are idle, 3 queued", "whole line"),
        (b"0.00.470.710 I srv  update_slots: all slots are idle now", "whole line"),
    ],
)
def test_a_line_that_says_something_new_is_never_noise(line: bytes, why: str) -> None:
    """Seed 004 (an upgrade that changed what the engine wrote): an eviction in other words is unreadable,
    a line that starts like a known one but goes on is unreadable, a literal outside its pattern is."""
    found = PARSER.parse(line)
    assert isinstance(found, Line) and found.kind is None, why


def test_no_catalogued_shape_holds_a_signal() -> None:
    """No shape holds a signal pattern's literal, 2024's signal messages or a wording becoming a signal."""
    words = [*LITERALS.values(), *(w.decode() for w in SIGNAL_2024), *RESERVED]
    for where, entries in SHAPES.items():
        assert where.strip() and entries, where
        for entry in entries:
            assert not [w for w in words if w in entry], (where, entry)


def test_a_known_shape_matches_the_whole_line_and_slots_only_their_value() -> None:
    known = Catalogue(["srv load: <w>", "print_info: <*> = <*>", "srv update_slots: all slots are idle"])
    assert known.knows(b"srv  load: --ctx-size") and not known.knows(b"srv  load: --ctx-size 4096")
    assert known.knows(b"print_info: file type   = Q4_K - Medium") and not known.knows(b"print_info: n_vocab")
    assert known.knows(b"srv  update_slots: all slots are idle")
    assert not known.knows(b"srv  update_slots: all slots are idle, 2 deferred")
    assert shape(b"slot update_slots: id  3 | task 4412 | kv cache rm [0x7f00ab, end)") == (
        "slot update_slots: id <n> | task <n> | kv cache rm [<x>, end)"
    )


@pytest.mark.parametrize(
    "line",
    [
        b"0.01.512.329 D slot launch_slot_: id  1 | task 0 | processing task, is_child = 0",
        b'{"function":"launch_slot_with_data","id_slot":0,"id_task":1,"level":"VERB","msg":"slot is processing task"}',
        b'{"function":"launch_slot_with_data","id_slot":0,"id_task":1,"level":"DEBUG","msg":"slot is processing task"}',
        b'DEBUG [    launch_slot_with_data] slot is processing task | tid="1" timestamp=1 id_slot=0 id_task=1',
    ],
)
def test_levels_are_no_filter(line: bytes) -> None:
    found = PARSER.parse(line)
    assert isinstance(found, Line) and found.kind == "launch", found


def test_check_log_prints_a_logs_unknown_shapes_as_a_catalogue_group(tmp_path: Path) -> None:
    log = tmp_path / "new.log"
    log.write_bytes(
        b"0.00.028.850 I srv  llama_server: initializing ...\n"
        b"0.00.030.000 I srv  load_model: warming the frobnicator, 3 of 12\n"
        b"0.00.031.000 W srv  alloc:  - making room for prompt cache entry, removing oldest entry (3 KiB)\n"
        b"0.00.032.000 I srv  stop: cancel task, id_task = 4\n"
    )
    result = CliRunner().invoke(app, ["check-log", str(log), "--catalogue", "https://example.org/issue/1"])
    assert result.exit_code == 0, result.output
    assert result.output == (
        "    'https://example.org/issue/1': (\n        'srv load_model: warming the frobnicator, <n> of <n>',\n    ),\n"
    )
    listed = CliRunner().invoke(app, ["check-log", str(log)])
    assert "srv load_model: warming the frobnicator, <n> of <n>" in listed.output
    assert "(a signal's words) srv alloc: - making room" in listed.output


@pytest.mark.parametrize("path", REAL, ids=[str(p.relative_to(FIXTURES)) for p in REAL])
def test_a_recorded_run_is_read_but_for_its_signals_in_the_making(path: Path) -> None:
    """Every line of every recorded build, verbosity and mode is read or known, but for a record cut in two
    (2024's JSON) and the lines the outcome patterns are being written for (cancels, the cache inventory)."""
    reading = read_log(path, "llama_server", shapes=None)
    left = {s for s in reading.source.shapes if not any(w in s for w in RESERVED)}
    assert left <= {"{…}"}, left
    assert reading.misses[Miss.UNPREFIXED] + reading.misses[Miss.UNMATCHED] == reading.unreadable


NOISE_FLOOR = [
    *sorted(FIXTURES.glob("llama_levels/*/lv*/server.log")),
    *sorted(FIXTURES.glob("llama_levels/*/router-lv*/server.log")),
    *sorted(FIXTURES.glob("llama/*/default/server.log")),
    *sorted(FIXTURES.glob("llama/*/verbose/server.log")),
]


def noise_floor_rows() -> str:
    """docs/llama-server.md's table of the drift alarm's noise floor, measured on the recorded real runs."""
    rows = []
    for path in NOISE_FLOOR:
        reading = read_log(path, "llama_server", shapes=None)
        version, mode = path.parts[-3], path.parts[-2]
        level = f"`-lv {mode.rsplit('lv', 1)[-1]}`" + (" (router mode)" if mode.startswith("router") else "")
        flags = {"default": "default (3)", "verbose": "`-v`"}.get(mode, level)
        share = reading.unreadable / reading.lines if reading.lines else 0.0
        shapes = reading.source.shapes.most_common()
        left = ", ".join(f"`{s}` ({n})".replace("|", "\\|") for s, n in shapes) or "none"
        rows.append(f"| {version} | {flags} | {reading.lines:,} | {reading.unreadable:,} | {share:.1%} | {left} |")
    return "\n".join(rows)


def test_the_noise_floor_is_measured_in_the_docs_and_under_two_percent_at_the_default_level() -> None:
    default = read_log(FIXTURES / "llama_levels" / "0.3.36" / "lv3" / "server.log", "llama_server")
    assert default.lines >= 50 and default.unreadable / default.lines <= 0.02
    doc = (Path(__file__).parent.parent / "docs" / "llama-server.md").read_text()
    assert noise_floor_rows() in doc, (
        "docs/llama-server.md's noise floor: paste tests/test_llama_noise.noise_floor_rows()"
    )


KNOWN_EXACT = sorted(
    {
        line
        for path in REAL
        for line in path.read_bytes().splitlines()[:400]
        if PARSER.parse(line) == Miss.IGNORED
        and shape(PARSER.message_key(line)) in PARSER.noise.exact
        and line.endswith(PARSER.message_key(line))  # the message ends the line (2024's extras follow theirs)
        and not shape(PARSER.message_key(line)).endswith("{…}")  # a JSON value runs to the line's end
    }
)


@given(st.sampled_from(KNOWN_EXACT), st.sampled_from([b" and more", b", 3 deferred", b" (retrying)", b" x"]))
def test_a_known_line_that_goes_on_is_no_longer_known(line: bytes, tail: bytes) -> None:
    """Nothing is known by its start: a real known line of an exact shape, with words after it, is unread
    (unless a value slot of another entry takes the words: a slot matches any value, by design)."""
    slotted = PARSER.noise.slotted
    assume(slotted is None or slotted.fullmatch(shape(PARSER.message_key(line + tail))) is None)
    assert PARSER.parse(line + tail) != Miss.IGNORED
