"""Real users' llama-server logs (tests/fixtures/llama_users/, each excerpt's source in its README): every
format and capture since 2024 yields the events its lines carry, and the signal lines are recognized."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spyglass import collectors
from spyglass.collectors.engine_log import EngineLogOptions
from spyglass.collectors.llama_log import LlamaLogSource
from spyglass.collectors.llama_wrap import unwrap

USERS = Path(__file__).parent / "fixtures" / "llama_users"
MTIME = 1_796_000_000.0
# A line that carries a signal of llama-server's (a task's launch, timings and release; an eviction; start,
# build and readiness; a crash; slot selection, cache state, re-processing, progress), by its wording.
SIGNAL = (
    "processing task",
    "stop processing",
    "slot released",
    "eval time",
    "total time",
    "removing oldest entry",
    "listening on",
    "model loaded",
    "build",
    "GGML_ASSERT",
    "Assertion",
    "ggml_abort",
    "selected slot by",
    "cache state",
    "forcing full prompt",
    "prompt processing, n_tokens",
    "n_decoded =",
    "n_gen =",
    "context checkpoint",
    "verbosity =",
    "initializing ...",
    "graphs reused",
    "terminate called",
)

# file: events by kind (each excerpt's first read also starts a segment)
EXPECTED: dict[str, dict[str, int]] = {
    "json-2024-llama.cpp-7637.log": {"start": 1, "prompt": 1, "done": 1},
    "json-2024-llama.cpp-7742.log": {"start": 1, "release": 1, "queued": 1},
    "text-2024-llama.cpp-9013.log": {"start": 1},
    "text-2025-ik_llama.cpp-257.log": {"start": 1},
    "text-2024-crash-llama.cpp-9170.log": {"start": 1, "error": 1},  # gdb's lines: catalogued from this log
    "plain-2025-llama.cpp-13688.log": {"start": 1, "release": 3, "queued": 3},
    "plain-2025-llama.cpp-14201.log": {"start": 1, "ready": 1, "queued": 1},
    "plain-2025-llama.cpp-14363.log": {"start": 1, "model_unreadable": 1},
    "plain-2025-llama.cpp-17071.log": {"start": 1, "release": 1, "slot_select": 1, "queued": 1},
    "plain-2025-llama.cpp-18546.log": {"start": 1},
    "plain-2025-docker-crash-llama.cpp-17060.log": {"start": 1, "queued": 1, "error": 1},
    "plain-2026-llama.cpp-pr19408.log": {"start": 1, "prompt": 1, "done": 1, "queued": 1, "reprocess": 1},
    "plain-2026-crash-llama.cpp-21512.log": {"start": 1, "error": 1},
    "plain-2026-ollama-18123.log": {"start": 1, "queued": 1, "prompt_progress": 1},
    "level-2026-pi-llama-19.log": {
        "start": 1,
        "decode_progress": 1,
        "prompt": 1,
        "done": 1,
        "slot_select": 1,
        "cache_state": 1,
        "cache_inventory": 1,  # its listing is empty: `0 prompts`
    },
    "level-2026-llama.cpp-25121.log": {
        "start": 1,
        "model_loaded": 1,
        "ready": 1,
        "slot_select": 1,
        "decode_progress": 2,
    },
    "level-2026-llama.cpp-23162-23613.log": {"start": 1},
    "router-2026-llama.cpp-pr23269.log": {"start": 1, "decode_progress": 3, "prompt": 2, "done": 2, "slot_select": 2},
    "journald-2026-llama.cpp-pr22929.log": {"start": 2, "checkpoint": 1, "decode_progress": 1, "prompt": 1, "done": 1},
    "journald-2023-ollama-1365.log": {},  # Ollama's own lines: catalogued from this log
    "compose-2024-ollama-4131.log": {},
    "dated-2024-ollama-fork-tc-mb-10.log": {},
    "llama-swap-2025-155.log": {},
    "lmstudio-2026-lmstudio-2006.log": {"start": 1, "slot_select": 1, "queued": 1, "prompt_progress": 1},
    "localai-2024-localai-771.log": {"start": 1, "slots_config": 1, "queued": 1, "unread": 1},  # llama_get_logits_ith
    "lemonade-2026-lemonade-1623.log": {},  # Lemonade's own lines and llama.cpp's start-up dump: known
    "lemonade-2025-lemonade-515.log": {"start": 1},
    "plain-2024-crash-llama.cpp-5023.log": {"start": 1, "error": 2},
    "level-2026-crash-llama.cpp-23469.log": {"start": 1, "error": 4},
    "windows-2023-crash-llamafile-98.log": {"start": 1, "error": 1},
    "windows-2026-llama.cpp-18546.log": {"start": 1},
    "windows-2025-llama.cpp-14826.log": {"start": 1},
    # the release, with no timings before it in the excerpt, ends the task as 2024's cancel would
    "text-2026-ik_llama.cpp-1346.log": {"start": 1, "checkpoint": 1, "done": 1},
    "level-2025-llama-box-41.log": {"start": 1, "slots_config": 1},
}
BUILDS = {
    "plain-2025-llama.cpp-18546.log": ["b6945-cc98f8d34"],
    "level-2026-llama.cpp-23162-23613.log": ["b9284-afcda09d1"],
    "plain-2025-llama.cpp-14363.log": ["b0-unknown"],
    "lemonade-2025-lemonade-515.log": ["b6510-703f9e32"],
    "windows-2026-llama.cpp-18546.log": ["b6945-cc98f8d34"],
    "windows-2025-llama.cpp-14826.log": ["b5966-14c28dfc"],
}


def source(path: Path) -> LlamaLogSource:
    made = collectors.load_all()["engine_log"].build(
        "engine-a", EngineLogOptions(path=path, instance="llama-a", preset="llama_server")
    )
    assert isinstance(made, LlamaLogSource)
    made.writer_of = lambda log, now: None
    made.file_mtime(MTIME)
    return made


def test_every_excerpt_is_in_the_table() -> None:
    assert sorted(EXPECTED) == sorted(p.name for p in USERS.glob("*.log"))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_an_excerpt_yields_its_events(name: str) -> None:
    src = source(USERS / name)
    events, misses, _ = src.handle_lines((USERS / name).read_bytes().splitlines(keepends=True))
    assert dict(Counter(e.kind for e in events)) == EXPECTED[name], misses
    assert src.builds == BUILDS.get(name, [])
    assert all(MTIME - 1000 * 86400 < e.ts <= MTIME + 1 for e in events)  # wrappers' and 2024's own times included


def test_a_joined_task_has_its_timings() -> None:
    """2025's print_timing: a header, then continuation lines without a prefix, joined to the header's task,
    in a router child's `[PORT] ` lines; and a 2024 JSON task timed by its own extras."""
    events, _, _ = source(USERS / "x").handle_lines(
        (USERS / "router-2026-llama.cpp-pr23269.log").read_bytes().splitlines()
    )
    done = [e.fields for e in events if e.kind == "done"]
    assert [(d["task"], d["ttft_ms"], d["completion"], d["decode_tps"], d["n_tokens"]) for d in done] == [
        (388, 789, 192, 11.92, 218),
        (970, 752, 192, 11.9, 216),
    ]
    events, _, _ = source(USERS / "x").handle_lines((USERS / "json-2024-llama.cpp-7637.log").read_bytes().splitlines())
    done = next(e for e in events if e.kind == "done")
    assert (done.fields["ttft_ms"], done.fields["completion"], done.fields["prompt"], done.ts) == (
        2684,
        25,
        299,
        1717067386,
    )


def test_a_runners_wrapper_gives_its_clock() -> None:
    """LM Studio's header line dates the lines after it; LocalAI's time of day falls on the file's day (or the
    day before, when that would be ahead of the file); Lemonade's stamp is to the millisecond."""
    lines = (USERS / "lmstudio-2026-lmstudio-2006.log").read_bytes().splitlines()
    events, _, _ = source(USERS / "x").handle_lines(lines)
    queued = next(e for e in events if e.kind == "queued")
    assert abs(queued.ts - datetime(2026, 6, 4, 12, 9, 49, tzinfo=UTC).timestamp()) < 0.01
    progress = next(e for e in events if e.kind == "prompt_progress")  # 13:06:21, 68 min into the process
    assert abs(progress.ts - datetime(2026, 6, 4, 13, 6, 21, tzinfo=UTC).timestamp()) < 1
    events, _, _ = source(USERS / "x").handle_lines((USERS / "localai-2024-localai-771.log").read_bytes().splitlines())
    queued = next(e for e in events if e.kind == "queued")
    at = datetime.fromtimestamp(queued.ts, tz=UTC)
    assert (at.hour, at.minute) == (19, 23) and 0 < MTIME - queued.ts < 86400
    line = (USERS / "lemonade-2026-lemonade-1623.log").read_bytes().splitlines()[10]
    assert unwrap(line, MTIME).wall == datetime(2026, 4, 9, 21, 52, 11, 806000, tzinfo=UTC).timestamp()


def test_logger_s_default_line_names_no_host() -> None:
    line = b"<13>Dec  4 14:57:03 llama-server: 0.00.028.850 I srv  llama_server: initializing ..."
    events, misses, _ = source(USERS / "x").handle_lines([line])
    assert [e.kind for e in events] == ["start"] and not misses["unprefixed"] + misses["unmatched"]
    started = datetime.fromtimestamp(events[0].ts + 0.028850, tz=UTC)  # the start: the stamp's time before the line
    assert started.strftime("%m-%d %H:%M:%S.%f") == "12-04 14:57:03.000000"


def recognized_share(paths: list[Path]) -> tuple[int, int]:
    """(signal lines recognized, signal lines): each line fed on its own, recognized when it made an event
    or joined one."""
    seen = found = 0
    for path in paths:
        src = source(path)
        for line in path.read_bytes().splitlines():
            events, misses, _ = src.handle_lines([line])
            if any(word.encode() in line for word in SIGNAL) and b"HTTP server listening" not in line:
                seen += 1
                found += bool(events) or misses.get("joined", 0) > 0
    return found, seen


def test_nine_in_ten_signal_lines_of_users_logs_are_recognized() -> None:
    found, seen = recognized_share(sorted(USERS.glob("*.log")))
    assert seen >= 70 and found / seen >= 0.9, (found, seen)


FRAGMENTS = [line for path in sorted(USERS.glob("*.log")) for line in path.read_bytes().splitlines()[:6]]


@given(
    st.lists(
        st.one_of(
            st.sampled_from(FRAGMENTS),
            st.binary(max_size=120),
            st.builds(
                lambda a, b, n: a[:n] + b, st.sampled_from(FRAGMENTS), st.sampled_from(FRAGMENTS), st.integers(0, 120)
            ),
        ),
        max_size=30,
    )
)
@settings(max_examples=300, deadline=None)
def test_any_mix_of_real_lines_cut_and_joined_never_raises(lines: list[bytes]) -> None:
    """Real lines of every format and capture, cut and spliced into each other or replaced by noise: every
    line is counted once (an outcome, or part of an event), and every event has a number for a time."""
    src = source(USERS / "fuzz.log")
    events, misses, _ = src.handle_lines([line + b"\n" for line in lines])
    assert all(isinstance(e.ts, float) and e.ts == e.ts for e in events)
    unusable = misses["unmatched"] + misses["unprefixed"] + sum(n for m, n in misses.items() if m.startswith("invalid"))
    assert src.lines_read == len(lines) and src.lines_unread == unusable
