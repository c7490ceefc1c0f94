"""How each llama-server request ends, and the KV cache's pressure: the lines of every build that prints them
read as events (table-driven), the task state that turns them into one `done` per request with its outcome,
the metrics they move, and the recording of the real build (tests/fixtures/llama/0.3.36/outcomes/: its log
and what each client saw, `python -m spyglass.engine.llama.outcomes`). The live run is tests/test_llama_real.py."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spyglass import collectors
from spyglass.collectors.engine_log import EngineLogOptions
from spyglass.collectors.event import Event
from spyglass.collectors.llama_grammar import LlamaLineParser
from spyglass.collectors.llama_log import LlamaLogSource
from spyglass.collectors.llama_outcome import error_reason
from spyglass.forensics.finder import Filters, requests_query, with_values
from spyglass.forensics.run import Window
from spyglass.signals import SignalsSettings, full_catalogue
from spyglass.signals.engine_log import EngineSignals
from spyglass.signals.spans import engine_span
from spyglass.signals.state import MetricState

RECORDED = Path(__file__).parent / "fixtures" / "llama" / "0.3.36" / "outcomes"
LOG_0_3_1 = Path(__file__).parent / "fixtures" / "llama" / "0.3.1" / "default" / "server.log"

# (line as the build writes it, its kind, fields it must carry). Where: the recorded 0.3.36 log
# (tests/fixtures/llama/0.3.36/outcomes/server.log), 0.3.1's recorded log, and for the wordings no build here
# prints, the build's own format string (cited).
LINES = [
    # 0.3.36, recorded
    (
        b"0.00.565.358 E srv    send_error: task id = 9, error: request (1833 tokens) exceeds the available"
        b" context size (1024 tokens), try increasing it",
        "task_error",
        {"task": 9},
    ),
    (b"0.00.565.372 W srv          stop: cancel task, id_task = 9", "cancel", {"task": 9}),
    (b"0.01.112.905 W decode: failed to find a memory slot for batch of size 203", "kv_no_slot", {"batch": 203}),
    (
        b"0.01.112.914 W srv        decode: failed to find free space in the KV cache, retrying with smaller batch"
        b" size, off = 411, n_batch = 256, ret = 1",
        "kv_retry",
        {"n_batch": 256},
    ),
    (
        b"0.01.113.344 E srv        decode: Context size has been exceeded. off = 411, n_batch = 1, ret = 1",
        "decode_failed",
        {"ret": 1, "message": "Context size has been exceeded."},
    ),
    (
        b"0.01.113.818 E srv  update_slots: decode() failed: Context size has been exceeded.",
        "decode_failed",
        {"cause": "Context size has been exceeded."},
    ),
    # 0.3.36's libllama and server sources (src/llama-kv-cache.cpp state_read_meta, src/llama-context.cpp,
    # tools/server/server-task.cpp): a prompt from the host cache that does not fit back
    (
        b"0.09.000.001 E state_read_meta: failed to find 12 available cells in kv cache",
        "restore_no_cells",
        {"cells": 12},
    ),
    (
        b"0.09.000.002 E srv          load: failed to restore state with size 1234",
        "cache_restore_failed",
        {"state_bytes": 1234},
    ),
    (b"0.09.000.003 E llama_state_seq_set_data: failed to restore sequence state", "cache_restore_failed", {}),
    (b"0.09.000.004 E llama_decode: failed to decode, ret = 1", "decode_failed", {"ret": 1}),
    (
        b"0.09.000.005 W slot update_slots: id  0 | task 7 | slot context shift, n_keep = 1, n_left = 2046, n_discard = 1023",
        "context_shift",
        {"task": 7, "n_discard": 1023},
    ),
    # 0.3.1, recorded (no level letter, no stamp)
    (b"srv  cancel_tasks: cancel task, id_task = 81", "cancel", {"task": 81}),
    # 0.3.1's sdist (examples/server/server.cpp, src/llama.cpp): its KV-full decode line, and libllama's reason
    # for a restore that does not fit (no count); it prints no memory-slot line
    (
        b"srv  update_slots: failed to decode the batch: KV cache is full - try increasing it via the context size,"
        b" i = 0, n_batch = 1, ret = 1",
        "decode_failed",
        {"ret": 1},
    ),
    (b"llama_state_seq_set_data: failed to find available cells in kv cache", "restore_no_cells", {}),
    (b"que          post: new task, id = 81, front = 0", "arrival", {"task": 81}),
    # 2025's libllama (llama_decode_internal's LLAMA_LOG_WARN, a public llama.cpp source of the period)
    (b"llama_decode_internal: failed to find KV cache slot for ubatch of size 512", "kv_no_slot", {"batch": 512}),
    (
        b"srv  update_slots: failed to find free space in the KV cache, retrying with smaller batch size - try"
        b" increasing it via the context size or enable defragmentation, i = 0, n_batch = 2048, ret = 1",
        "kv_retry",
        {"n_batch": 2048},
    ),
    # 0.2.56's sdist (examples/server/server.cpp: LOG_TEE), and mid 2024's LOG_ERROR("task error", {id_task, error})
    (
        b"task 5 - error: Input prompt is too big compared to KV size. Please try increasing KV size.",
        "task_error",
        {"task": 5},
    ),
    (
        b"update_slots : failed to find free space in the KV cache, retrying with smaller n_batch = 256",
        "kv_retry",
        {"n_batch": 256},
    ),
    (b"update_slots : failed to decode the batch, n_batch = 1, ret = 1", "decode_failed", {"ret": 1}),
    (
        b'{"tid":"1","timestamp":1717504935,"level":"ERR","function":"send_error","line":1,"msg":"task error",'
        b'"id_multi":-1,"id_task":5,"error":"Input prompt is too big compared to KV size. Please try increasing KV size."}',
        "task_error",
        {"task": 5},
    ),
]


@pytest.mark.parametrize(("line", "kind", "fields"), LINES, ids=[f"{k}-{i}" for i, (_, k, _) in enumerate(LINES)])
def test_each_wording_of_an_outcome_or_kv_line_is_its_event(line: bytes, kind: str, fields: dict) -> None:
    parsed = LlamaLineParser().parse(line)
    assert not isinstance(parsed, str) and parsed.kind == kind, parsed
    assert {k: parsed.fields.get(k) for k in fields} == fields


def test_the_recorded_kv_lines_of_the_real_build_are_all_read() -> None:
    """In the recorded run the KV cache filled up: every one of its memory-slot and retry lines is an event,
    none is unreadable (issue 37: they were 48% of a log, read as drift)."""
    raw = (RECORDED / "server.log").read_bytes().splitlines()
    events, misses = read(RECORDED / "server.log")
    kinds = Counter(e.kind for e in events)
    assert kinds["kv_no_slot"] == sum(b"failed to find a memory slot" in line for line in raw) > 10
    assert kinds["kv_retry"] == sum(b"failed to find free space in the KV cache" in line for line in raw) > 10
    assert misses["unmatched"] == misses["unprefixed"] == 0


@pytest.mark.parametrize(
    ("message", "reason", "status"),
    [
        (
            "request (1833 tokens) exceeds the available context size (1024 tokens), try increasing it",
            "context_exceeded",
            400,
        ),
        ("Context size has been exceeded.", "context_exceeded", 500),
        ("Input prompt is too big compared to KV size. Please try increasing KV size.", "context_exceeded", 500),
        ("Invalid slot ID", "invalid_request", 400),
        ("got exception: stoi", "internal", 500),
        ("something new", "other", None),
    ],
)
def test_an_errors_reason_and_status_come_from_llama_cpps_own_message(message: str, reason: str, status: int) -> None:
    assert error_reason(message) == (reason, status)


def read(path: Path, lines: list[bytes] | None = None) -> tuple[list[Event], dict[str, int]]:
    options = EngineLogOptions(path=path, instance="llama-a", preset="llama_server")
    source = collectors.load_all()["engine_log"].build("engine-a", options)
    assert isinstance(source, LlamaLogSource)
    source.writer_of = lambda p, now: None
    # a fixed time for the logs stamped relative to the start; a 2024 JSON log's own stamps lie before its mtime
    source.file_mtime(max(1_796_405_700.0, path.stat().st_mtime if path.exists() else 0.0))
    events, misses, _ = source.handle_lines(lines if lines is not None else path.read_bytes().splitlines(True))
    return events, misses


RECORDINGS = sorted(RECORDED.parent.parent.glob("*/outcomes"))


@pytest.mark.parametrize("recording", RECORDINGS, ids=[r.parent.name for r in RECORDINGS])
def test_every_request_of_the_recorded_run_ends_as_its_client_saw_it(recording: Path) -> None:
    """Per request, the driver's outcome and error status against spyglass's `done` (one each), for every build
    that ran the workload. The pinned build's: the warm request, a prompt over the context (400), a stream the
    client closed, two requests failed at KV-full (500 in the stream's error event), a burst of six; an older
    build (no --kv-unified: each slot its own -c/-np cells) answers some of them otherwise, and its own client
    saw what it did. Tasks are numbered in arrival order; the two concurrent groups are compared as sets."""
    client = json.loads((recording / "client.json").read_text())["requests"]
    events, _ = read(recording / "server.log")
    done = sorted((e for e in events if e.kind == "done"), key=lambda e: e.fields["task"])
    assert len(done) == len(client) == len({e.request_id for e in done})
    theirs = Counter((c["outcome"], c["error_status"]) for c in client)
    ours = Counter((e.fields["outcome"], e.fields.get("status")) for e in done)
    assert ours == theirs
    assert [e.fields["outcome"] for e in done[:3]] == [c["outcome"] for c in client[:3]]  # sent one at a time
    assert {e.fields.get("error_reason") for e in done if e.fields["outcome"] == "error"} <= {"context_exceeded"}


def test_a_log_stamped_in_whole_seconds_claims_no_wait() -> None:
    """0.2.56's JSON log stamps whole seconds: a release and the launch after it look alike whether the task was
    deferred or not, so its recorded burst reports no wait (read anyway, the waits were up to 2 s too long)."""
    events, _ = read(RECORDINGS[0] / "server.log")
    assert RECORDINGS[0].parent.name == "0.2.56"
    done = [e for e in events if e.kind == "done"]
    assert len(done) == 11 and not any("client_wait_ms" in e.fields or "queue_ms" in e.fields for e in done)


def test_the_pinned_builds_recording_has_each_outcome() -> None:
    client = json.loads((RECORDED / "client.json").read_text())["requests"]
    assert Counter(c["outcome"] for c in client) == {"done": 7, "error": 3, "cancelled": 1}


def lines(*texts: str) -> list[bytes]:
    return [t.encode() + b"\n" for t in texts]


LAUNCH = "0.01.{ms:03d}.000 I slot launch_slot_: id  {slot} | task {task} | processing task, is_child = 0"
RELEASE = (
    "0.01.{ms:03d}.000 I slot      release: id  {slot} | task {task} | stop processing: n_tokens = 5, truncated = {t}"
)
TIMING = (
    "0.01.{ms:03d}.000 I slot print_timing: id  {slot} | task {task} | prompt eval time =  1.00 ms /  4 tokens (  0.25 ms"
    " per token, 4000.00 tokens per second)",
    "0.01.{ms:03d}.000 I slot print_timing: id  {slot} | task {task} |        eval time =  1.00 ms /  2 tokens (  0.50 ms"
    " per token, 2000.00 tokens per second)",
    "0.01.{ms:03d}.000 I slot print_timing: id  {slot} | task {task} |       total time =  2.00 ms /  6 tokens",
)


def test_orders_of_error_cancel_and_release_give_one_outcome_each() -> None:
    """An error before the release then the handler's cancel (0.3.36), a release then the cancel, a stream
    cancelled mid-decode, a truncated generation, and a task refused before it had a slot: one `done` each."""
    log = lines(
        LAUNCH.format(ms=1, slot=0, task=1),
        "0.01.002.000 E srv    send_error: task id = 1, error: Context size has been exceeded.",
        "0.01.003.000 W srv          stop: cancel task, id_task = 1",
        RELEASE.format(ms=4, slot=0, task=1, t=0),
        LAUNCH.format(ms=5, slot=1, task=2),
        "0.01.006.000 E srv    send_error: task id = 2, error: request (9 tokens) exceeds the available context size"
        " (4 tokens), try increasing it",
        RELEASE.format(ms=7, slot=1, task=2, t=0),
        "0.01.008.000 W srv          stop: cancel task, id_task = 2",
        LAUNCH.format(ms=9, slot=0, task=3),
        "0.01.010.000 W srv          stop: cancel task, id_task = 3",
        RELEASE.format(ms=11, slot=0, task=3, t=0),
        LAUNCH.format(ms=12, slot=1, task=4),
        RELEASE.format(ms=13, slot=1, task=4, t=1),
        *(t.format(ms=14, slot=1, task=4) for t in TIMING),
        "0.01.015.000 E srv    send_error: task id = 5, error: Invalid slot ID",
        "0.01.016.000 W srv          stop: cancel task, id_task = 6",
    )
    events, _ = read(Path("/nonexistent.log"), log)
    done = {e.fields["task"]: e for e in events if e.kind == "done"}
    assert {
        t: (e.fields["outcome"], e.fields.get("error_reason"), e.fields.get("status")) for t, e in done.items()
    } == {
        1: ("error", "context_exceeded", 500),
        2: ("error", "context_exceeded", 400),
        3: ("cancelled", None, None),
        4: ("truncated", None, None),
        5: ("error", "invalid_request", 400),
        6: ("cancelled", None, None),
    }
    assert len([e for e in events if e.kind == "done"]) == 6
    queued = {e.fields["task"]: e.request_id for e in events if e.kind == "queued"}
    assert all(done[t].request_id == req for t, req in queued.items())
    assert all(e.request_id == done[e.fields["task"]].request_id for e in events if e.kind in ("cancel", "task_error"))


def test_a_2024_build_that_releases_a_task_without_its_timings_was_cancelled() -> None:
    """2024 builds print a task's timings before its release and log no cancel: a release without them
    (0.2.56's text log, the aborted stream) is the client gone."""
    log = Path(__file__).parent / "fixtures" / "llama" / "0.2.56" / "text" / "server.log"
    events, _ = read(log)
    ended = Counter(e.fields["outcome"] for e in events if e.kind == "done")
    assert ended == {"done": 9, "cancelled": 1}


def test_a_cancelled_task_of_0_3_1_ends_cancelled() -> None:
    events, _ = read(LOG_0_3_1)
    assert Counter(e.fields["outcome"] for e in events if e.kind == "done") == {"done": 9, "cancelled": 1}


def signals(*events: Event) -> MetricState:
    state = MetricState(full_catalogue())
    engine = EngineSignals(state, settings=SignalsSettings(lanes={"llama-a": "normal"}))
    for event in events:
        engine.apply(event)
    return state


def test_outcomes_and_kv_pressure_are_counted_in_closed_labels() -> None:
    events, _ = read(RECORDED / "server.log")
    state = signals(*events)
    outcomes = state.values["spyglass_engine_request_outcomes_total"]
    assert outcomes == {
        ("llama-a", "normal", "done", "none"): 7,
        ("llama-a", "normal", "error", "context_exceeded"): 3,
        ("llama-a", "normal", "cancelled", "none"): 1,
    }
    pressure = state.values["spyglass_engine_kv_pressure_events_total"]
    raw = (RECORDED / "server.log").read_bytes()
    assert pressure[("llama-a", "normal", "memory_slot")] == raw.count(b"failed to find a memory slot")
    assert pressure[("llama-a", "normal", "batch_retry")] == raw.count(b"retrying with smaller batch size")
    assert pressure[("llama-a", "normal", "context_full")] == 1
    # the refused decode is a cache error, not a failed model load (issue 37)
    assert state.values["spyglass_engine_errors_total"] == {("llama-a", "normal", "cache"): 1}
    # a task cancelled or failed before its timings adds no TTFT
    assert [sum(counts) for counts, _ in state.hists["spyglass_engine_ttft_seconds"].values()] == [7]


def test_a_strata_done_is_read_off_its_finish_and_an_unknown_outcome_is_other() -> None:
    strata = [
        Event(0.0, "engine-b", "done", "strata-b", {"finish": finish, "completion": 1, "ttft_ms": 1, "decode_tps": 1.0})
        for finish in ("stop", "abort", "error")
    ]
    odd = Event(0.0, "engine-a", "done", "llama-a", {"finish": "unknown", "outcome": "exploded"})
    state = MetricState(full_catalogue())
    engine = EngineSignals(state, settings=SignalsSettings(lanes={"strata-b": "normal", "llama-a": "normal"}))
    for e in [*strata, odd]:
        engine.apply(e)
    assert state.values["spyglass_engine_request_outcomes_total"] == {
        ("strata-b", "normal", "done", "none"): 1,
        ("strata-b", "normal", "cancelled", "none"): 1,
        ("strata-b", "normal", "error", "other"): 1,
        ("llama-a", "normal", "other", "none"): 1,
    }


def test_the_trace_of_a_failed_or_cancelled_task_says_what_happened() -> None:
    events, _ = read(RECORDED / "server.log")
    by_request: dict[str, list[Event]] = {}
    for e in events:
        if e.request_id:
            by_request.setdefault(e.request_id, []).append(e)
    said = {}
    for req, mine in by_request.items():
        outcome = next(e.fields["outcome"] for e in mine if e.kind == "done")
        span = engine_span(mine)
        assert span is not None, f"{req}: no span"
        said[outcome] = span.error
    assert said["cancelled"] == "cancelled: the client went away before the answer was complete"
    assert said["error"] is not None and said["error"].startswith("error context_exceeded (HTTP ")
    assert said["done"] is None


def test_requests_filters_by_outcome_and_the_table_drops_empty_columns() -> None:
    query = requests_query(Window(None, None), Filters(outcome="cancelled"))
    assert "outcome = $outcome" in query.sql and query.params["outcome"] == "cancelled"
    with pytest.raises(ValueError, match="--outcome"):
        requests_query(Window(None, None), Filters(outcome="exploded"))
    rows = [
        {"request_id": "a", "session": None, "outcome": "done"},
        {"request_id": "b", "session": None, "outcome": None},
    ]
    assert with_values(rows) == [{"request_id": "a", "outcome": "done"}, {"request_id": "b", "outcome": None}]


@given(st.binary(max_size=300))
def test_no_bytes_after_an_outcome_prefix_break_the_parser(tail: bytes) -> None:
    for head in (
        b"0.01.001.000 E srv    send_error: task id = 3, error: ",
        b"srv  cancel_tasks: cancel task, id_task = ",
    ):
        parsed = LlamaLineParser().parse(head + tail)
        assert isinstance(parsed, str) or parsed.kind is None or isinstance(parsed.kind, str)


def test_the_client_wait_of_each_queued_request_of_the_recorded_burst_is_its_time_to_first_byte() -> None:
    """Six streamed requests at once on two slots (0.3.36 at the default verbosity: no arrival line): four
    waited for a slot. spyglass's client wait (its wait for a slot, bounded by the run of full slots, plus
    the engine's prefill) is within 100 ms of each client's time to its first byte; matched by rank, as the
    log does not say which request a task was."""
    client = json.loads((RECORDED / "client.json").read_text())["requests"]
    events, _ = read(RECORDED / "server.log")
    burst = sorted(c["ttfb"] * 1000 for c in client if c["name"].startswith("burst-"))
    done = [
        e
        for e in events
        if e.kind == "done" and e.fields["task"] > max(e.fields["task"] for e in events if e.kind == "task_error")
    ]
    ours = sorted(e.fields["client_wait_ms"] for e in done)
    assert len(ours) == len(burst) == 6
    assert [e.fields["queue_basis"] for e in sorted(done, key=lambda e: e.fields["queue_ms"])].count("slots_full") == 4
    assert all(abs(a - b) <= 100 for a, b in zip(ours, burst, strict=True)), (ours, burst)
    assert max(ours) > 300  # the last two waited for two requests each: a wait worth measuring


def test_an_arrival_line_gives_the_wait_exactly_and_a_free_slot_waits_nothing() -> None:
    log = lines(
        "0.01.000.001 I srv    load_model: initializing, n_slots = 1, n_ctx_slot = 4096, kv_unified = 'false'",
        "0.02.000.000 D que          post: new task, id = 1, front = 0",
        LAUNCH.format(ms=5, slot=0, task=1).replace("0.01.", "0.02."),
        "0.02.100.000 D que          post: new task, id = 2, front = 0",
        RELEASE.format(ms=900, slot=0, task=1, t=0).replace("0.01.", "0.02."),
        LAUNCH.format(ms=901, slot=0, task=2).replace("0.01.", "0.02."),
    )
    events, _ = read(Path("/nonexistent.log"), log)
    waits = {
        e.fields["task"]: (e.fields.get("queue_ms"), e.fields.get("queue_basis")) for e in events if e.kind == "queued"
    }
    assert waits == {1: (5, "arrival"), 2: (801, "arrival")}


def test_without_arrival_lines_a_deferred_task_waits_from_the_run_of_full_slots() -> None:
    log = lines(
        "0.01.000.001 I srv    load_model: initializing, n_slots = 1, n_ctx_slot = 4096, kv_unified = 'false'",
        LAUNCH.format(ms=100, slot=0, task=1),
        RELEASE.format(ms=600, slot=0, task=1, t=0),
        LAUNCH.format(ms=601, slot=0, task=2),  # deferred: launched as the slot was freed
        RELEASE.format(ms=900, slot=0, task=2, t=0),
        LAUNCH.format(ms=950, slot=0, task=3),  # 50 ms later: it found the slot free
    )
    events, _ = read(Path("/nonexistent.log"), log)
    waits = {
        e.fields["task"]: (e.fields.get("queue_ms"), e.fields.get("queue_basis")) for e in events if e.kind == "queued"
    }
    assert waits == {1: (0, "none"), 2: (501, "slots_full"), 3: (0, "none")}


def test_the_poller_keeps_the_time_with_a_queue() -> None:
    from spyglass.signals.llama_server import LlamaServerSignals

    state = MetricState(full_catalogue())
    poller = LlamaServerSignals(state, settings=SignalsSettings(lanes={"llama-a": "normal"}))
    for ts, deferred in ((0.0, 0), (1.0, 3), (2.0, 1), (3.0, 0), (60.0, 2), (61.0, 0)):
        poller.apply(
            Event(
                ts, "metrics-a", "llama_status", "llama-a", {"health": "ok", "metrics": {"requests_deferred": deferred}}
            )
        )
    key = ("llama-a", "normal")
    assert state.values["spyglass_llama_queue_seconds_total"][key] == 3.0  # 1-2, 2-3 and 60-61; not the gap 3-60
    assert state.values["spyglass_llama_queued_request_seconds_total"][key] == 3 + 1 + 2


VERBOSE = Path(__file__).parent / "fixtures" / "llama" / "0.3.36" / "verbose" / "server.log"


def test_each_listing_of_the_prompt_cache_is_kept_and_sets_its_gauges() -> None:
    """The real build at -v lists the host cache after each update: every listing is an inventory, every entry
    an event at its update's time; the gauges read the last listing (entries, bytes, the limit, the largest)."""
    raw = VERBOSE.read_bytes()
    events, misses = read(VERBOSE)
    inventories = [e for e in events if e.kind == "cache_inventory"]
    entries = [e for e in events if e.kind == "cache_prompt"]
    assert len(inventories) == raw.count(b"- cache state:") and len(entries) == raw.count(b"- prompt 0x") > 0
    assert all(i.fields["parked"] == sum(e.ts == i.ts for e in entries) for i in inventories)
    last = inventories[-1].fields
    assert last == {
        "parked": 3,
        "used": round(0.969 * 2**20),
        "budget": 2**20,
        "largest": round(0.371 * 2**20),
        "limit_tokens": 4096,
    }
    key = ("llama-a", "normal")
    state = signals(*events)
    assert state.values["spyglass_engine_cache_parked_snapshots"][key] == 3
    assert state.values["spyglass_engine_cache_used_bytes"][key] == last["used"]
    assert state.values["spyglass_engine_cache_budget_bytes"][key] == 2**20
    assert state.values["spyglass_engine_cache_largest_snapshot_bytes"][key] == last["largest"]
    assert misses["unmatched"] == 0


def test_the_prompt_cache_report_shows_what_the_cache_held_and_what_left_it(tmp_path: Path, spawns: None) -> None:
    from typer.testing import CliRunner

    from spyglass.cli.app import app

    log = tmp_path / "llama.log"
    log.write_bytes(VERBOSE.read_bytes())
    (tmp_path / "spyglass.toml").write_text(
        f'[agent]\nstate_dir = "{tmp_path}"\n[exporters.prometheus]\nenabled = false\n[exporters.store]\nenabled = true\n'
        f'[sources.llama-a]\nkind = "engine_log"\npreset = "llama_server"\npath = "{log}"\ninstance = "llama-a"\n'
    )
    config = str(tmp_path / "spyglass.toml")
    assert CliRunner().invoke(app, ["ingest", "--config", config]).exit_code == 0
    result = CliRunner().invoke(app, ["report", "prompt-cache", "--config", config, "--format", "json"])
    assert result.exit_code == 0, result.output
    listed = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert len(listed) == VERBOSE.read_bytes().count(b"- cache state:")
    assert listed[-1]["held"] == "0x564123b9d060:742:0.371 0x564121a46dd0:741:0.37 0x564121a499d0:455:0.227"
    assert listed[-1]["used_percent"] == 96.9
    # an address is reused by a new entry: the 455-token prompt at 0x564123b9d060 left when the 742-token one came
    gone = [row["left_since_before"] for row in listed if row["left_count"]]
    assert gone == ["0x564123b9d060:455:0.227", "0x564121a499d0:253:0.127"]


def test_a_deferred_task_launched_after_the_second_of_two_releases_is_deferred() -> None:
    """Both slots released 1.8 ms apart, the deferred tasks launched 1.6 ms after the second (a live run):
    each release of the run of full slots may launch one."""
    log = lines(
        "0.01.000.001 I srv    load_model: initializing, n_slots = 2, n_ctx_slot = 4096, kv_unified = 'false'",
        LAUNCH.format(ms=100, slot=0, task=1),
        LAUNCH.format(ms=101, slot=1, task=2),
        RELEASE.format(ms=700, slot=0, task=1, t=0),
        RELEASE.format(ms=702, slot=1, task=2, t=0),
        LAUNCH.format(ms=704, slot=0, task=4),
        LAUNCH.format(ms=705, slot=1, task=3),
    )
    events, _ = read(Path("/nonexistent.log"), log)
    waits = {
        e.fields["task"]: (e.fields.get("queue_ms"), e.fields.get("queue_basis")) for e in events if e.kind == "queued"
    }
    assert waits == {1: (0, "none"), 2: (0, "none"), 3: (604, "slots_full"), 4: (603, "slots_full")}


def test_a_refused_request_says_its_own_prompt_not_what_its_slot_held() -> None:
    """A new user's 16,391-token prompt answered 400 showed n_tokens=74: its slot's previous conversation, from
    the release after the error. Its own size is in llama.cpp's message."""
    events, _ = read(RECORDED / "server.log")
    refused = next(e for e in events if e.kind == "done" and e.fields.get("status") == 400)
    assert refused.fields["prompt"] == 1833 and "n_tokens" not in refused.fields
    error = next(e for e in events if e.kind == "task_error" and e.fields.get("status") == 400)
    assert error.fields["prompt"] == 1833


def test_an_empty_prompt_cache_report_says_which_verbosity_lists_the_cache(tmp_path: Path, spawns: None) -> None:
    """A new user's `report prompt-cache` at the default verbosity said only that it found nothing."""
    from typer.testing import CliRunner

    from spyglass.cli.app import app

    log = tmp_path / "llama-a.log"
    log.write_bytes((RECORDED / "server.log").read_bytes())  # the default verbosity: no `- cache state:` listing
    config = tmp_path / "spyglass.toml"
    config.write_text(
        f'[agent]\nstate_dir = "{tmp_path / "state"}"\n[exporters.prometheus]\nenabled = false\n'
        f'[sources.llama-a]\nkind = "engine_log"\npreset = "llama_server"\npath = "{log}"\ninstance = "llama-a"\n'
    )
    assert CliRunner().invoke(app, ["ingest", "--config", str(config)]).exit_code == 0
    said = CliRunner().invoke(app, ["report", "prompt-cache", "--config", str(config)])
    assert said.exit_code == 1 and "found nothing" in said.output and "at -lv 4 (or -v) only" in said.output, (
        said.output
    )


def test_a_forged_prompt_size_in_an_error_line_stays_a_number_the_store_holds() -> None:
    """The worst such line: a prompt size past any integer column; its size is left out, the line still read."""
    forged = b"0.00.565.358 E srv    send_error: task id = 9, error: request (" + b"9" * 40 + b" tokens) exceeds it"
    events, misses = read(RECORDED / "x.log", lines=[forged + b"\n"])
    errors = [e for e in events if e.kind == "task_error"]
    assert len(errors) == 1 and "prompt" not in errors[0].fields, errors
