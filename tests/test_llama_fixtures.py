"""Every recorded llama-server log of every build in the matrix yields the events its workload caused.

tests/fixtures/llama/<version>/ holds what `scripts/record-llama VERSION` recorded from a real build of that
llama-cpp-python version (engine/llama/versions.py): one log per logging mode, a load failure, and the
/metrics, /slots and /props bodies. `expected.json` counts, per log, the events by kind from what the
workload did (requests answered, tasks started, processes started), never from this parser. No build runs
here: CI reads every version's fixtures, and builds and runs only the pinned version live
(tests/test_llama_real.py). One test per (version, log), so a format the parser does not know yet fails by name.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from spyglass import collectors
from spyglass.collectors.engine_log import EngineLogOptions
from spyglass.collectors.event import Event
from spyglass.collectors.llama_log import LlamaLogSource
from spyglass.collectors.llama_server import parse_metrics, summarise_slots
from spyglass.config import parse_config
from spyglass.config.signals import build_signals, metric_state
from spyglass.engine.llama.versions import VERSIONS

FIXTURES = Path(__file__).parent / "fixtures" / "llama"
MTIME = 1_800_000_000.0  # after every recording: a line is written before its file's mtime


def recorded() -> list[tuple[str, str, dict]]:
    cases = []
    for expected in sorted(FIXTURES.glob("*/expected.json")):
        for mode, log in json.loads(expected.read_text())["logs"].items():
            cases.append((expected.parent.name, mode, log))
    return cases


CASES = recorded()


def events_of(path: Path) -> tuple[list[Event], dict[str, int]]:
    options = EngineLogOptions(path=path, instance="llama-a", preset="llama_server")
    source = collectors.load_all()["engine_log"].build("engine-a", options)
    assert isinstance(source, LlamaLogSource)
    source.writer_of = lambda path, now: None  # no running writer: the stamps are placed from the mtime
    source.file_mtime(MTIME)
    events, misses, _ = source.handle_lines(path.read_bytes().splitlines(keepends=True))
    return events, misses


def parse(path: Path) -> tuple[Counter[str], dict[str, int]]:
    events, misses = events_of(path)
    return Counter(e.kind for e in events), misses


def test_every_version_of_the_table_with_a_build_has_its_fixtures() -> None:
    recorded_versions = {p.parent.name for p in FIXTURES.glob("*/expected.json")}
    assert recorded_versions <= set(VERSIONS)
    missing = {v for v, row in VERSIONS.items() if not row.unbuilt} - recorded_versions
    assert not missing, f"versions with no fixtures and no reason in versions.py: {sorted(missing)}"


@pytest.mark.parametrize(("version", "mode", "log"), CASES, ids=[f"{v}-{m}" for v, m, _ in CASES])
def test_a_recorded_log_yields_the_events_of_its_workload(version: str, mode: str, log: dict) -> None:
    kinds, misses = parse(FIXTURES / version / log["log"])
    found = {kind: kinds.get(kind, 0) for kind in log["events"]}
    assert found == log["events"], f"{version} {mode}: events by kind; lines not read: {misses}"
    for kind, least in log.get("at_least", {}).items():
        assert kinds.get(kind, 0) >= least, f"{version} {mode}: {kind} at least {least}"


@pytest.mark.parametrize(("version", "mode", "log"), CASES, ids=[f"{v}-{m}" for v, m, _ in CASES])
def test_every_request_of_a_recorded_log_ends_with_the_outcome_its_client_saw(
    version: str, mode: str, log: dict
) -> None:
    """The workload's answered requests are `done`, its aborted stream `cancelled` (a 2024 build logs no cancel:
    it releases the task without its timings), and no task is left without an outcome."""
    events, _ = events_of(FIXTURES / version / log["log"])
    outcomes = Counter(str(e.fields.get("outcome")) for e in events if e.kind == "done")
    assert dict(outcomes) == {k: v for k, v in log.get("outcomes", {}).items() if v}, f"{version} {mode}"
    ended = {e.request_id for e in events if e.kind == "done"}
    open_tasks = {e.request_id for e in events if e.kind == "queued"} - ended
    assert len(open_tasks) == (1 if "cut" in log else 0), f"{version} {mode}: tasks with no outcome {open_tasks}"


BODIES = sorted(FIXTURES.glob("*/*/metrics.txt"))


@pytest.mark.parametrize("metrics", BODIES, ids=[f"{p.parts[-3]}-{p.parts[-2]}" for p in BODIES])
def test_each_builds_bodies_are_read_and_absent_families_stay_absent(metrics: Path) -> None:
    text = metrics.read_text()
    invalid: list[str] = []
    found = parse_metrics(text, invalid)
    written = {
        line.split()[0].removeprefix("llamacpp:")
        for line in text.splitlines()
        if line.startswith("llamacpp:") and "{" not in line
    }
    assert set(found) == written and not invalid  # every family the build wrote, and only those
    assert found["prompt_tokens_total"] > 0 and found["tokens_predicted_total"] > 0
    slots = metrics.parent / "slots.json"
    if slots.exists():
        summary = summarise_slots(json.loads(slots.read_text()))
        assert summary["total"] == 2 and summary["busy"] == 0  # -np 2, read after the workload, idle
    busy = metrics.parent / "slots-busy.json"
    if busy.exists():
        assert summarise_slots(json.loads(busy.read_text()))["busy"] == 1  # while the aborted request ran


FAMILY_METRICS = {
    "kv_cache_usage_ratio": "spyglass_llama_kv_cache_usage_ratio",
    "kv_cache_tokens": "spyglass_llama_kv_cache_tokens",
    "n_busy_slots_per_decode": "spyglass_llama_busy_slots_per_decode",
    "spec_decode_num_drafts_total": "spyglass_llama_draft_verifications_total",
}


@pytest.mark.parametrize("metrics", BODIES, ids=[f"{p.parts[-3]}-{p.parts[-2]}" for p in BODIES])
def test_a_family_the_build_does_not_write_is_not_exported(metrics: Path) -> None:
    """Absent stays absent: 2024's kv_cache_* are exported for 2024 builds only, never a 0 for the others."""
    config = parse_config({"sources": {"m": {"kind": "llama_server", "url": "http://127.0.0.1:1", "instance": "a"}}})
    state = metric_state(config)
    found = parse_metrics(metrics.read_text())
    fields: dict = {"health": "ok", "metrics": found}
    slots = metrics.parent / "slots.json"
    if slots.exists():
        fields["slots"] = summarise_slots(json.loads(slots.read_text()))
    build_signals(config, state)["llama_server"].apply(Event(1.0, "m", "llama_status", "a", fields))
    for family, metric in FAMILY_METRICS.items():
        assert (("a", "") in state.series(metric)) == (family in found), (family, metric)
    assert state.series("spyglass_llama_prompt_tokens_total")[("a", "", "processed")] == found["prompt_tokens_total"]
    assert (("a", "", "cached") in state.series("spyglass_llama_prompt_tokens_total")) == (
        "prompt_tokens_cached_total" in found
    )


def test_the_docs_table_of_builds_is_the_version_table_and_its_fixtures() -> None:
    from spyglass.engine.llama.versions import docs_rows

    recorded = {p.parent.name: list(json.loads(p.read_text())["logs"]) for p in FIXTURES.glob("*/expected.json")}
    doc = (Path(__file__).parent.parent / "docs" / "llama-server.md").read_text()
    assert docs_rows(recorded) in doc, "docs/llama-server.md's table of builds: paste versions.docs_rows()"


ROUTER_TWO = FIXTURES / "0.3.36" / "router-two" / "server.log"


@pytest.mark.parametrize("batch", [0, 7], ids=["whole", "7-line reads, restarted between"])
def test_router_mode_keeps_one_timeline_per_child(batch: int) -> None:
    """Round 4: in router mode the `[PORT] ` prefix was stripped and two children's lines merged into one
    process: each burst of the other child looked like a restart (phantom starts), its tasks' request ids
    collided with the other's, and evictions counted across both. The real build's router serving two
    models (the second child started seconds after the first): one timeline per child, keyed by its port."""
    from collections import Counter

    from spyglass.collectors.clock import ManualClock

    options = EngineLogOptions(path=ROUTER_TWO, instance="llama-a", preset="llama_server")
    lines = ROUTER_TWO.read_bytes().splitlines(keepends=True)
    events, source = [], None
    for n in range(0, len(lines), batch or len(lines)):
        fresh = collectors.load_all()["engine_log"].build("engine-a", options)
        assert isinstance(fresh, LlamaLogSource)
        fresh.writer_of, fresh.clock = lambda path, now: None, ManualClock(MTIME)  # read just after its last write
        if source is not None:
            fresh.restore(source.checkpoint() or {})  # an agent restart between reads
        source = fresh
        source.file_mtime(MTIME)
        events += source.handle_lines(lines[n : n + (batch or len(lines))])[0]
    starts = [e for e in events if e.kind == "start"]
    ports = sorted({line[1:6].decode() for line in lines if line.startswith(b"[")})
    assert sorted(e.fields.get("child", "") for e in starts) == ["", *ports]
    assert sorted(e.fields.get("child_model", "") for e in starts) == ["", "tiny-moe-f32-a", "tiny-moe-f32-b"]
    done = [e for e in events if e.kind == "done"]
    workload = json.loads((FIXTURES / "0.3.36" / "expected.json").read_text())["logs"]["router-two"]["workload"]
    ended = workload["completed"] + workload["aborted"]  # each request ends in one `done` (its outcome a field)
    assert len(done) == len({e.request_id for e in done}) == ended  # no two tasks share a request id
    per_child = Counter(line[1:6] for line in lines if line.startswith(b"[") and b"removing oldest" in line)
    evictions = sorted(e.fields["evictions"] for e in events if e.kind == "evict")
    assert evictions == sorted(n for count in per_child.values() for n in range(1, count + 1))
