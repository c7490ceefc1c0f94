"""The llama_server preset of the engine log: llama-server's lines, its relative stamps turned into UTC from
the writer's start instant (across a restart that reuses the file), and the Strata-shaped events the
engine signals, views and heuristics read unchanged. Lines here are written as llama-server writes them
(tools/server/server-context.cpp's formats); tests/test_llama_real.py reads the real build's own log."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import wait_until

from spyglass import collectors
from spyglass.collectors.engine_log import EngineLogOptions
from spyglass.collectors.llama_log import LlamaLineParser, LlamaLogSource, Writer, parse_args, request_id
from spyglass.collectors.trace_ids import trace_id_for
from spyglass.config import parse_config
from spyglass.config.signals import build_signals, metric_state
from spyglass.signals.state import MetricState

START = 1_796_000_000.0  # the writer's start instant, epoch seconds
ARGV = [
    "llama-server",
    "-m",
    "/models/tiny.gguf",
    "--port",
    "8081",
    "-np",
    "2",
    "-c",
    "4096",
    "--cache-ram",
    "1",
    "--log-file",
    "x.log",
]


def stamp(rel: float) -> str:
    us = round(rel * 1e6)
    return f"{us // 60_000_000}.{us // 1_000_000 % 60:02d}.{us // 1000 % 1000:03d}.{us % 1000:03d}"


def task_lines(rel: float, slot: int, task: int, prompt_ms: float, read: int, gen: int, n_tokens: int) -> list[str]:
    """One task as llama-server logs it: launch, the four timing lines, release."""
    s = f"slot print_timing: id  {slot} | task {task} | "
    return [
        f"{stamp(rel)} I slot launch_slot_: id  {slot} | task {task} | processing task, is_child = 0",
        f"{stamp(rel + 0.2)} I {s}prompt eval time =      {prompt_ms:.2f} ms /   {read} tokens (    0.03 ms per token,"
        f"  29771.96 tokens per second)",
        f"{stamp(rel + 0.2)} I {s}       eval time =       7.95 ms /     {gen} tokens (    0.99 ms per token,"
        f"  1006.29 tokens per second)",
        f"{stamp(rel + 0.2)} I {s}      total time =      28.27 ms /   {read + gen} tokens",
        f"{stamp(rel + 0.2)} I {s}   graphs reused =          7",
        f"{stamp(rel + 0.2)} I slot      release: id  {slot} | task {task} | stop processing: n_tokens = {n_tokens},"
        " truncated = 0",
    ]


def banner(rel: float = 0.0) -> list[str]:
    return [
        f"{stamp(rel)} I srv  llama_server: initializing ...",
        f"{stamp(rel + 0.01)} I srv    load_model: loading model '/models/tiny.gguf'",
        f"{stamp(rel + 0.15)} I srv  llama_server: listening on http://127.0.0.1:8081",
    ]


def source(tmp_path: Path, writers: list[Writer | None], instance: str = "llama-a") -> LlamaLogSource:
    log = tmp_path / "llama.log"
    log.touch()
    options = EngineLogOptions(path=log, instance=instance, preset="llama_server")
    queue = list(writers)
    made = collectors.load_all()["engine_log"].build("engine-a", options)
    assert isinstance(made, LlamaLogSource)
    made.writer_of = lambda path, now: queue.pop(0) if queue else None
    return made


def read(src: LlamaLogSource, lines: list[str], mtime: float):
    src.file_mtime(mtime)
    return src.handle_lines([line.encode() + b"\n" for line in lines])


def test_a_line_of_each_kind_is_parsed_to_its_fields() -> None:
    parser = LlamaLineParser()
    kinds = {}
    for text in [
        *banner(),
        *task_lines(6.165459, 1, 0, 20.32, 605, 8, 612),
        "0.07.000.000 I slot get_availabl: id  1 | task -1 | selected slot by LRU, t_last = -1",
        "0.07.000.000 I slot get_availabl: id  0 | task -1 | selected slot by LCP similarity, f_sim_best = 0.912"
        " (> 0.100 thold), f_keep = 0.987",
        "0.07.100.000 W srv         alloc:  - making room for prompt cache entry, removing oldest entry (size = 0.306 MiB)",
        "0.07.100.000 W srv        update:  - cache token limit (4096, est: 8000) reached, removing oldest entry"
        " (size = 0.500 MiB)",
        "0.07.200.000 I srv        update:  - cache state: 3 prompts, 0.918 MiB (limits: 1.000 MiB, 0 tokens, 3411 est)",
        "0.07.300.000 I slot update_slots: id  0 | task 9 | forcing full prompt re-processing due to lack of cache"
        " data (likely due to SWA or hybrid/recurrent memory, see x)",
        "0.07.400.000 W slot create_check: id  0 | task 9 | erasing old context checkpoint (pos_min = 0, pos_max = 511,"
        " n_tokens = 512, size = 0.125 MiB)",
        "0.08.000.000 E srv    load_model: failed to load model, '/models/gone.gguf'",
        "0.08.100.000 W common_sampler_init: backend sampling is not compatible with reasoning budget, disabling",
        "0.09.000.000 I slot print_timing: id  0 | task 4 | n_gen =    300, tg =  95.12 t/s, tg_3s =  90.00 t/s",
        "0.09.000.000 I slot print_timing: id  0 | task 4 | prompt processing, n_tokens =   4096, progress = 0.50,"
        " t =   3.10 s / 1321.29 tokens per second",
        "0.09.000.000 W slot update_slots: id  0 | task 4 | slot context shift, n_keep = 0, n_left = 2047, n_discard = 1023",
        "0.09.000.000 I srv  handle_sleep: server is entering sleeping state",
    ]:
        line = parser.parse(text.encode())
        assert not isinstance(line, str), text
        kinds.setdefault(line.kind, []).append(line)
    assert kinds["start"][0].fields == {"func": "llama_server"}
    assert kinds["launch"][0].rel == pytest.approx(6.165459)
    assert kinds["timing_prompt"][0].fields["ms"] == 20.32 and kinds["timing_prompt"][0].fields["tokens"] == 605
    assert kinds["timing_eval"][0].fields["tps"] == 1006.29
    assert kinds["release"][0].fields == {"func": "release", "slot": 1, "task": 0, "n_tokens": 612, "truncated": 0}
    assert [line.fields["by"] for line in kinds["slot_select"]] == ["LRU", "LCP similarity"]
    assert kinds["slot_select"][1].fields["similarity"] == 0.912
    assert [line.fields["mib"] for line in kinds["evict"]] == [0.306, 0.5]
    assert kinds["cache_state"][0].fields["prompts"] == 3 and kinds["cache_state"][0].fields["limit_mib"] == 1.0
    assert kinds["reprocess"][0].fields["task"] == 9
    assert kinds["checkpoint"][0].fields["action"] == "erasing old"
    assert kinds["error"][0].fields["component"] == "load"
    assert kinds["ready"][0].rel == pytest.approx(0.15)
    assert "reasoning budget" in kinds["reasoning_budget"][0].fields["message"]
    assert kinds["decode_progress"][0].fields["n_gen"] == 300 and kinds["prompt_progress"][0].fields["progress"] == 0.5
    assert kinds["context_shift"][0].fields["n_discard"] == 1023 and kinds["sleeping"][0].fields["action"] == "entering"


def test_lines_that_are_no_event_are_counted_and_never_raise(tmp_path: Path) -> None:
    src = source(tmp_path, [])
    events, misses, last = read(
        src,
        [
            *banner(),
            "no prefix at all",
            "0.00.200.000 I llama_model_loader: - kv   0:                       general.architecture str = qwen3moe",
            "0.00.300.000 D slot debug line",
            "0.00.400.000 I slot print_timing: id  x | task y |",
        ],
        START + 1,
    )
    # The loader dump is a known shape; a debug line of no known shape is unread like any other (levels are no filter).
    assert misses["unprefixed"] == 1 and misses["ignored"] == 1 and misses["unmatched"] == 2
    assert last.startswith(b"0.00.400.000")
    assert [e.kind for e in events] == ["start", "model_unreadable", "ready", "unread"]
    assert events[-1].fields == {
        "lines": 7,
        "unreadable": 3,
        "shape": "9.99.999.999 I slot print_timing: id  x | task y |",
    }


FIXTURE = Path(__file__).parent / "fixtures" / "llama_server" / "llama-server.log"


def test_the_real_builds_log_is_read_whole(tmp_path: Path) -> None:
    """A real log of the built llama-server: a start, six tasks with four evictions from a 1 MiB cache, a
    shutdown, then a second process appending to the file that fails to load a missing model."""
    src = source(tmp_path, [None])
    lines = FIXTURE.read_bytes().splitlines(keepends=True)
    src.file_mtime(START)
    events, misses, last = src.handle_lines(lines)
    assert misses == {"ignored": 0, "unmatched": 0, "unprefixed": 0, "joined": 28}, last  # 7 tasks of 4 timing lines
    kinds = [e.kind for e in events]
    assert kinds.count("start") == 2 and kinds.count("done") == 7 and kinds.count("evict") == 4
    assert [e.fields["anchor"] for e in events if e.kind == "start"] == ["next", "mtime"]
    assert kinds.count("error") == 10 and {e.fields["component"] for e in events if e.kind == "error"} == {"load"}
    done = [e.fields for e in events if e.kind == "done"]
    assert done[0]["prompt"] == 803 and done[0]["ttft_ms"] == 100 and done[0]["graphs_reused"] == 7
    assert done[-1]["prompt"] == 806
    prompts = [e.fields for e in events if e.kind == "prompt"]
    assert (prompts[-1]["read"], prompts[-1]["reused"]) == (804, 2)  # its first turn's cache entry was evicted
    ready = next(e for e in events if e.kind == "ready")
    assert ready.fields["seconds"] == 1.043
    assert events[-1].ts == START  # the last line is the file's latest write


def test_relative_stamps_count_from_the_writers_start(tmp_path: Path) -> None:
    src = source(tmp_path, [Writer(4242, START, ARGV)])
    events, _, _ = read(src, [*banner(), *task_lines(6.165459, 1, 0, 20.32, 605, 8, 612)], START + 7)
    start, args = events[0], events[1]
    assert (start.kind, start.ts, start.fields["anchor"], start.fields["pid"]) == ("start", START, "process", 4242)
    assert start.fields["build_name"] == "llama.cpp"
    assert args.kind == "args" and args.fields["cache_ram_mib"] == 1 and args.fields["slots"] == 2
    ready = next(e for e in events if e.kind == "ready")
    assert ready.ts == pytest.approx(START + 0.15) and ready.fields["seconds"] == 0.15
    queued = next(e for e in events if e.kind == "queued")
    assert queued.ts == pytest.approx(START + 6.165459)


def test_a_restart_that_appends_to_the_same_file_starts_a_new_segment(tmp_path: Path) -> None:
    second = START + 100
    src = source(tmp_path, [Writer(1, START, ARGV), Writer(2, second, ARGV)])
    read(src, [*banner(), *task_lines(30.0, 0, 0, 10.0, 100, 4, 103)], START + 31)
    events, _, _ = read(src, [*banner(), *task_lines(1.0, 0, 0, 12.0, 90, 4, 93)], second + 2)
    starts = [e for e in events if e.kind == "start"]
    assert len(starts) == 1 and starts[0].ts == second and starts[0].fields["pid"] == 2
    done = next(e for e in events if e.kind == "done")
    assert done.ts == pytest.approx(second + 1.2)
    # Task 0 again, but of another process: another request id.
    first_req = request_id("llama-a", START, 0, START + 30)
    assert done.request_id != first_req


def test_a_restart_is_also_seen_when_the_stamp_goes_back_without_a_banner(tmp_path: Path) -> None:
    src = source(tmp_path, [Writer(1, START, ARGV), None])
    read(src, [*banner(), *task_lines(30.0, 0, 0, 10.0, 100, 4, 103)], START + 31)
    events, _, _ = read(src, task_lines(0.5, 0, 0, 10.0, 100, 4, 103), START + 50)
    assert events[0].kind == "start" and events[0].fields["anchor"] == "mtime"
    assert events[0].ts == pytest.approx(START + 50 - 0.7)  # the mtime minus the last stamp read
    assert events[0].ts >= START + 30.2  # and never before the previous process's last line


def test_a_crash_loop_read_after_the_fact_places_each_run_before_the_next(tmp_path: Path) -> None:
    src = source(tmp_path, [None])
    lines = [*banner(), "0.00.300.000 E srv    load_model: failed to load model, '/m'"] * 3
    events, _, _ = read(src, lines, START + 10)
    starts = [e for e in events if e.kind == "start"]
    assert [e.fields["anchor"] for e in starts] == ["next", "next", "mtime"]
    assert [round(e.ts - START, 2) for e in starts] == [9.1, 9.4, 9.7]
    errors = [e for e in events if e.kind == "error"]
    assert [round(e.ts - START, 2) for e in errors] == [9.4, 9.7, 10.0]
    assert all(e.fields["component"] == "load" for e in errors)


def test_a_writer_that_started_after_the_lines_is_not_their_writer(tmp_path: Path) -> None:
    # The process that wrote these lines is gone; a newer one (started after the last line) runs.
    src = source(tmp_path, [Writer(9, START + 20, ARGV)])
    events, _, _ = read(src, [*banner(), *task_lines(5.0, 0, 0, 10.0, 100, 4, 103)], START + 10)
    assert events[0].fields["anchor"] == "mtime" and events[0].ts == pytest.approx(START + 10 - 5.2)
    assert "args" not in [e.kind for e in events]  # its budget is not the dead writer's


def test_lines_without_a_stamp_take_the_time_they_were_read(tmp_path: Path) -> None:
    src = source(tmp_path, [None])
    events, _, _ = read(
        src,
        [
            "I srv  llama_server: initializing ...",
            "W srv         alloc:  - making room for prompt cache entry, removing oldest entry (size = 0.306 MiB)",
        ],
        START + 3,
    )
    assert [(e.kind, e.ts) for e in events] == [("start", START + 3), ("evict", START + 3)]


def test_a_task_becomes_queued_prompt_and_done_with_one_request_id(tmp_path: Path) -> None:
    src = source(tmp_path, [Writer(1, START, ARGV)])
    events, _, _ = read(src, [*banner(), *task_lines(6.0, 1, 3, 20.32, 4, 8, 815)], START + 7)
    queued, prompt, done = (next(e for e in events if e.kind == k) for k in ("queued", "prompt", "done"))
    assert queued.request_id == prompt.request_id == done.request_id == request_id("llama-a", START, 3, START + 6)
    assert trace_id_for(done.request_id)  # a request id the trace command accepts
    # 815 tokens in the slot after 8 generated: an 808-token prompt, 4 processed, 804 restored from cache.
    assert prompt.fields == {"task": 3, "slot": 1, "prompt": 808, "reused": 804, "read": 4, "ms": 20}
    assert prompt.ts == pytest.approx(START + 6.02032)
    assert done.fields["ttft_ms"] == 20 and done.fields["completion"] == 8 and done.fields["decode_tps"] == 1006.29
    assert done.fields["finish"] == "unknown" and done.ts == pytest.approx(START + 6.2)
    assert queued.fields["prefill_depth"] == 0


def test_evictions_count_per_process_and_carry_the_command_line_budget(tmp_path: Path) -> None:
    src = source(
        tmp_path, [Writer(1, START, ARGV), Writer(2, START + 60, [a for a in ARGV if a not in ("--cache-ram", "1")])]
    )
    evict = "W srv         alloc:  - making room for prompt cache entry, removing oldest entry (size = 0.306 MiB)"
    events, _, _ = read(src, [*banner(), f"0.01.000.000 {evict}", f"0.02.000.000 {evict}"], START + 3)
    evicts = [e.fields for e in events if e.kind == "evict"]
    assert [f["evictions"] for f in evicts] == [1, 2]
    assert evicts[0]["bytes"] == round(0.306 * 2**20) and evicts[0]["budget"] == 2**20
    events, _, _ = read(src, [*banner(), f"0.01.000.000 {evict}"], START + 62)
    evicts = [e.fields for e in events if e.kind == "evict"]
    assert evicts == [
        {"bytes": round(0.306 * 2**20), "reason": "budget", "cause": "room", "evictions": 1}
    ]  # no budget logged


def test_the_checkpoint_keeps_the_segment_across_an_agent_restart(tmp_path: Path) -> None:
    src = source(tmp_path, [Writer(1, START, ARGV)])
    read(src, [*banner(), task_lines(6.0, 1, 3, 20.0, 4, 8, 815)[0]], START + 7)
    again = source(tmp_path, [])
    again.restore(src.checkpoint() or {})
    events, _, _ = read(again, task_lines(6.0, 1, 3, 20.0, 4, 8, 815)[1:], START + 8)
    done = next(e for e in events if e.kind == "done")
    assert done.ts == pytest.approx(START + 6.2) and done.request_id == request_id("llama-a", START, 3, START + 6)


def test_parse_args_reads_short_and_long_flags() -> None:
    assert parse_args(["x", "--parallel", "4", "-c", "8192", "-cram", "8192", "--model", "m.gguf"]) == {
        "slots": 4,
        "ctx": 8192,
        "cache_ram_mib": 8192,
        "model": "m.gguf",
    }


def test_the_engine_signals_count_llama_events_as_the_strata_engines(tmp_path: Path) -> None:
    config = parse_config(
        {
            "sources": {
                "engine-a": {
                    "kind": "engine_log",
                    "preset": "llama_server",
                    "path": str(tmp_path / "l.log"),
                    "instance": "llama-a",
                    "lane": "normal",
                }
            }
        }
    )
    state: MetricState = metric_state(config)
    signals = build_signals(config, state)["engine_log"]
    src = source(tmp_path, [Writer(1, START, ARGV)])
    evict = "W srv         alloc:  - making room for prompt cache entry, removing oldest entry (size = 0.306 MiB)"
    events, _, _ = read(src, [*banner(), *task_lines(6.0, 1, 3, 1500.0, 4, 8, 815), f"0.07.000.000 {evict}"], START + 8)
    for event in events:
        signals.apply(event)
    key = ("llama-a", "normal")
    assert state.series("spyglass_engine_evictions_total")[key] == 1
    assert state.series("spyglass_engine_evicted_bytes_total")[key] == round(0.306 * 2**20)
    assert state.series("spyglass_engine_cache_budget_bytes")[key] == 2**20
    assert state.series("spyglass_engine_slots")[key] == 2
    assert state.series("spyglass_engine_prompt_tokens_total")[key + ("reused",)] == 804
    assert state.series("spyglass_engine_requests_finished_total")[key + ("unknown",)] == 1
    assert state.total("spyglass_engine_ttft_seconds", instance="llama-a") == 1
    assert state.series("spyglass_engine_build_info")[key + ("llama.cpp", "", "")] == 1
    assert state.series("spyglass_engine_ready")[key] == 1


def test_the_writer_of_a_log_is_found_by_its_command_line(tmp_path: Path, spawns) -> None:
    """A real process naming the file with --log-file (a Python blocked on its stdin stands in: the rule
    reads only its command line, relative to its working folder)."""
    import subprocess
    import sys
    import time

    from spyglass.collectors.llama_log import find_writer

    log = tmp_path / "w.log"
    log.touch()
    before = time.time()
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()", "--log-file", log.name],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
    )  # runs until its stdin closes: no sleep to outlast
    try:

        def found() -> Writer | None:
            writer = find_writer(log, time.time)
            return writer if writer is not None and writer.pid == child.pid else None

        writer = wait_until(found, 20, "the blocked writer")
        assert before - 0.05 <= writer.start <= time.time() and "--log-file" in writer.argv
        assert find_writer(tmp_path / "other.log", time.time) is None
    finally:
        child.stdin.close()  # type: ignore[union-attr]
        child.wait(timeout=20)


# -- adversarial round 3: one bad stamp, a line out of order, an earlier-stamped error -------------------
EVICT = "W srv         alloc:  - making room for prompt cache entry, removing oldest entry (size = 0.306 MiB)"


def evictions(events) -> list[int]:
    return [e.fields["evictions"] for e in events if e.kind == "evict"]


@pytest.mark.parametrize("writer", [Writer(1, START, ARGV), None], ids=["process", "mtime"])
def test_a_line_stamped_three_days_ahead_blinds_nothing_after_it(tmp_path: Path, writer: Writer | None) -> None:
    """`4320.00.000.000` (+3 days): alone at the end of a read, then mid-read; refused each time, and every
    later line, of this process, of the next one and of a new file, is placed between the process's start
    and the file's mtime."""
    src = source(tmp_path, [writer, Writer(2, START + 100, ARGV) if writer else None])
    read(src, [*banner(), *task_lines(5.0, 0, 0, 10.0, 100, 4, 103)], START + 6)
    spike = "4320.00.000.000 I slot launch_slot_: id  0 | task 99 | processing task, is_child = 0"
    events, misses, _ = read(src, [spike], START + 7)
    assert events == [] and misses["invalid:stamp"] == 1
    later, misses, _ = read(src, [*task_lines(7.0, 1, 1, 10.0, 100, 4, 103), spike, f"0.08.000.000 {EVICT}"], START + 9)
    assert misses["invalid:stamp"] == 1
    restart, _, _ = read(src, [*banner(), f"0.01.000.000 {EVICT}"], START + 101)
    src.restore(src.checkpoint() or {})  # an agent restart, then a new file: the same source state
    newer, _, _ = read(src, task_lines(2.0, 0, 0, 10.0, 100, 4, 103), START + 103)
    assert [e.kind for e in later].count("done") == 1 and "start" not in [e.kind for e in later]
    assert all(START <= e.ts <= START + 9 for e in later)
    assert all(START + 9 <= e.ts <= START + 101 for e in restart) and evictions(restart) == [1]
    assert all(START + 9 <= e.ts <= START + 103 for e in newer) and [e.kind for e in newer].count("done") == 1


def test_a_line_one_millisecond_out_of_order_is_no_restart(tmp_path: Path) -> None:
    src = source(tmp_path, [None])
    events, _, _ = read(
        src, [*banner(), f"0.10.000.000 {EVICT}", f"0.09.999.000 {EVICT}", f"0.10.001.000 {EVICT}"], START + 11
    )
    assert [e.kind for e in events].count("start") == 1 and evictions(events) == [1, 2, 3]
    alone, _, _ = read(src, [f"0.10.999.000 {EVICT}"], START + 12)  # each line its own read
    alone += read(src, [f"0.10.998.000 {EVICT}"], START + 12)[0]
    assert evictions(alone) == [4, 5] and "start" not in [e.kind for e in alone]


def test_an_earlier_stamped_error_does_not_reset_the_eviction_count(tmp_path: Path) -> None:
    src = source(tmp_path, [None])
    events, _, _ = read(src, [*banner(), *(f"0.10.{n:02d}0.000 {EVICT}" for n in range(3))], START + 11)
    assert evictions(events) == [1, 2, 3]
    forged = "0.00.500.000 E srv    load_model: failed to load model, '/models/gone.gguf'"
    events, _, _ = read(src, [forged], START + 12)
    assert [e.kind for e in events] == ["error"]
    events, _, _ = read(src, [f"0.11.000.000 {EVICT}"], START + 12)
    assert evictions(events) == [4]
    events, _, _ = read(src, [forged, f"0.11.500.000 {EVICT}"], START + 13)
    assert [e.kind for e in events] == ["error", "evict"] and evictions(events) == [5]


def test_a_restart_without_a_banner_is_seen_when_each_line_is_read_alone(tmp_path: Path) -> None:
    src = source(tmp_path, [None, None])
    read(src, [*banner(), *task_lines(30.0, 0, 0, 10.0, 100, 4, 103)], START + 31)
    kinds = []
    for line in task_lines(0.5, 0, 0, 10.0, 100, 4, 103):
        kinds += [e.kind for e in read(src, [line], START + 40)[0]]
    assert kinds.count("start") == 1 and kinds.count("done") == 1


# -- adversarial round 4: a clock is evidence, not authority ----------------------------------------------
def journald(at: float, line: str) -> str:
    """`line` as `journalctl -o short-iso` shows it, at epoch `at`."""
    from datetime import UTC, datetime

    return f"{datetime.fromtimestamp(at, tz=UTC):%Y-%m-%dT%H:%M:%S+0000} host llama-server[42]: {line}"


FORGED_ANCHORS = {
    "syslog-5424 in 9999": "<13>1 9999-12-31T23:59:59Z host llama - - - 0.00.000.001 I srv  llama_server: initializing ...",
    "journald json, 19 digits": '{"__REALTIME_TIMESTAMP": "9999999999999999999", "MESSAGE": "0.00.000.001 I srv  '
    'llama_server: initializing ..."}',
}


@pytest.mark.parametrize("forged", list(FORGED_ANCHORS.values()), ids=list(FORGED_ANCHORS))
def test_a_forged_wrapper_clock_anchors_nothing(tmp_path: Path, forged: str) -> None:
    """One line whose wrapper claims the year 9999 (or 19 digits of microseconds) is refused as `invalid:clock`;
    every later line, a restart's, an agent restart's and a new file's, is read and placed before the mtime."""
    src = source(tmp_path, [None, None, None])
    read(src, [*banner(), f"0.05.000.000 {EVICT}"], START + 6)
    events, misses, _ = read(src, [forged, f"0.06.000.000 {EVICT}"], START + 7)
    assert evictions(events) == [2] and all(START <= e.ts <= START + 7 for e in events)
    assert misses["invalid:clock"] == 1
    later, misses, _ = read(src, [forged, *task_lines(8.0, 0, 1, 10.0, 100, 4, 103)], START + 9)
    restart, _, _ = read(src, [*banner(), f"0.01.000.000 {EVICT}"], START + 101)
    src.restore(src.checkpoint() or {})  # an agent restart, then a new file: the same source state
    newer, _, _ = read(src, [forged, *task_lines(2.0, 0, 0, 10.0, 100, 4, 103)], START + 103)
    assert [e.kind for e in later].count("done") == 1 and [e.kind for e in newer].count("done") == 1
    assert evictions(restart) == [1] and "start" in [e.kind for e in restart]
    assert all(START <= e.ts <= START + 103 for e in [*events, *later, *restart, *newer])


def test_an_anchor_later_lines_contradict_is_dropped(tmp_path: Path) -> None:
    """A forged start-up line with a believable but false clock (a year early) starts a process of its own;
    the real lines after it contradict it: the first is refused, the second agrees with it and moves the anchor,
    and every line after is placed by the real clock, across an agent restart too."""
    src = source(tmp_path, [None])
    lines = [journald(START + 0.0, line) for line in banner()]
    read(src, lines, START + 1)
    forged = journald(START - 365 * 86400, "0.00.000.001 I srv  llama_server: initializing ...")
    after = [journald(START + 5 + n, f"0.{5 + n:02d}.000.000 {EVICT}") for n in range(4)]
    events, misses, _ = read(src, [forged, *after], START + 9)
    placed = [e for e in events if e.kind == "evict"]
    assert len(placed) >= 3 and all(abs(e.ts - (START + 5 + n)) < 2 for e, n in zip(placed[::-1], range(3, -1, -1)))
    assert misses.get("invalid:stamp", 0) <= 1, misses
    src.restore(src.checkpoint() or {})
    again, _, _ = read(src, [journald(START + 20, f"0.20.000.000 {EVICT}")], START + 21)
    assert [round(e.ts - START) for e in again if e.kind == "evict"] == [20]


def test_two_forged_stamps_in_a_row_neither_freeze_nor_rewind_the_eviction_counter(tmp_path: Path) -> None:
    """Round 4: two lines stamped back in time start a phantom process; its evict lines then count from 1,
    below the 30 already exported, and were dropped as implausible: 30 stayed 30 after 25 more evictions.
    The counter is a sum of the evict events stored: 55, and it never went down on the way."""
    config = parse_config(
        {"sources": {"engine-a": {"kind": "engine_log", "preset": "llama_server", "path": str(tmp_path / "l.log")}}}
    )
    config.sources["engine-a"].instance, config.sources["engine-a"].lane = "llama-a", "normal"
    state: MetricState = metric_state(config)
    signals = build_signals(config, state)["engine_log"]
    src = source(tmp_path, [None, None])
    key = ("llama-a", "normal")
    seen: list[float] = []

    def apply(lines: list[str], mtime: float) -> None:
        for event in read(src, lines, mtime)[0]:
            signals.apply(event)
            seen.append(state.series("spyglass_engine_evictions_total").get(key, 0.0))

    apply([*banner(), *(f"0.{10 + n // 10}.{n % 10:01d}00.000 {EVICT}" for n in range(30))], START + 14)
    forged = "0.00.500.000 E srv    load_model: failed to load model, '/models/gone.gguf'"
    apply([forged, forged], START + 14)
    apply([f"0.{20 + n // 10}.{n % 10:01d}00.000 {EVICT}" for n in range(25)], START + 23)
    assert state.series("spyglass_engine_evictions_total")[key] == 55
    assert seen == sorted(seen)


# -- adversarial round 4: a deeply nested line is one invalid line, never a lost batch ----------------------
DEEP = {
    # a 60 KB journald JSON line nested 5,000 deep
    "journald json": b'{"__REALTIME_TIMESTAMP": "1796000005000000", "MESSAGE": "x", "a": '
    + b"[" * 5000
    + b"]" * 5000
    + b"}",
    # llama.cpp's 2024 JSON log
    "2024 json": b'{"level": "INFO", "msg": "x", "a": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    # a 2024 text line's ` | key=value` tail
    "2024 extras": b"INFO [            main] x | tid=1 timestamp=1796000005 a=" + b"[" * 5000 + b"]",
}


@pytest.mark.parametrize("line", list(DEEP.values()), ids=list(DEEP))
def test_a_line_nested_five_thousand_deep_costs_itself_only(tmp_path: Path, line: bytes) -> None:
    """Round 4: RecursionError escaped the JSON wrapper's decoder and every line of the batch was counted
    invalid (16 of 398 evictions counted at one such line a second). Now it is at most that one line."""
    src = source(tmp_path, [None])
    src.file_mtime(START + 9)
    lines = [f"{text}\n".encode() for text in [*banner(), f"0.05.000.000 {EVICT}"]]
    events, misses, _ = src.handle_lines([*lines, line + b"\n", f"0.06.000.000 {EVICT}\n".encode()])
    assert evictions(events) == [1, 2]
    assert sum(n for miss, n in misses.items() if miss != "joined") <= 1, misses


def test_check_log_reads_a_deeply_nested_line_as_one_invalid_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from spyglass.cli.app import app

    log = tmp_path / "deep.log"
    log.write_bytes(
        b"\n".join([*(t.encode() for t in banner()), DEEP["journald json"], f"0.05.000.000 {EVICT}".encode()])
    )
    result = CliRunner().invoke(app, ["check-log", str(log), "--preset", "llama_server"])
    assert result.exit_code == 0 and result.exception is None, result.output
    assert "1 invalid" in result.output and "evict 1" in result.output, result.output
