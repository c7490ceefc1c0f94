"""Counters whose labels are known from the config exist at 0 before their first event, so that
rate() and increase() see the first increment (the first checksum mismatch since the agent
started must page); counters that copy a source's own cumulative count are not started at 0
(a first report of evictions=500 is no storm of 500); a restart keeps what it restored."""

from __future__ import annotations

from pathlib import Path

from spyglass.agent.pipeline import Pipeline
from spyglass.collectors.clock import ManualClock
from spyglass.config import parse_config
from spyglass.exporters.statefile import StateFile

MISMATCH = (
    b"2026-10-19 05:10:00.000 E [load] checksum mismatch reading /models/current.gguf:"
    b" expected md5=5d41402abc4b2a76b9719d911017c592 got=0cc175b9c0f1b6a831c399e269772661\n"
)
STATS = (
    b"2026-10-19 05:10:10.000 I [stats] busy=1/20 prefill_queue=0 decode_tps=11.2 parked=1 used=4610021888"
    b" budget=8589934592 evictions=500\n"
)


def config(tmp_path: Path) -> dict:
    for name in ("a.log", "b.log", "gateway.log"):
        (tmp_path / name).touch()
    return {
        "agent": {"state_dir": str(tmp_path / "state")},
        "exporters": {"prometheus": {"enabled": False}, "store": {"enabled": False}},
        "sources": {
            "engine-a": {"kind": "engine_log", "path": str(tmp_path / "a.log"), "instance": "strata-a", "lane": "fast"},
            "engine-b": {
                "kind": "engine_log",
                "path": str(tmp_path / "b.log"),
                "instance": "strata-b",
                "lane": "normal",
            },
            "gateway": {"kind": "gateway_log", "path": str(tmp_path / "gateway.log"), "instance": "rag-proxy"},
        },
    }


def run(tmp_path: Path) -> Pipeline:
    pipeline = Pipeline(
        parse_config(config(tmp_path), "test"), ManualClock(start=1_792_400_000.0), StateFile(tmp_path / "state.json")
    )
    pipeline.run_until_idle()
    return pipeline


def exposed_and_closed(pipeline: Pipeline, *names: str) -> list[dict]:
    """The exposed series of `names`, then the pipeline closed."""
    try:
        with pipeline.exposed.lock:
            return [dict(pipeline.exposed.series(name)) for name in names]
    finally:
        pipeline.close()


def test_known_counters_are_exposed_at_zero_before_any_event(tmp_path):
    mismatches, retries, by_status = exposed_and_closed(
        run(tmp_path),
        "spyglass_engine_model_checksum_mismatches_total",
        "spyglass_gateway_blind_retries_total",
        "spyglass_gateway_requests_total",
    )
    assert mismatches == {("strata-a", "fast"): 0.0, ("strata-b", "normal"): 0.0}
    assert retries == {("fast",): 0.0, ("normal",): 0.0, ("unknown",): 0.0}  # unknown: a line naming no lane
    assert by_status == {}  # a label of open values (status) waits for its first event


def test_first_event_after_the_zero_is_an_increment_and_a_mirrored_counter_starts_at_the_source(tmp_path):
    run(tmp_path).close()
    (tmp_path / "b.log").write_bytes(MISMATCH + STATS)
    mismatches, evictions = exposed_and_closed(  # restarted from the saved state: the zeros it saved, now the events
        run(tmp_path), "spyglass_engine_model_checksum_mismatches_total", "spyglass_engine_evictions_total"
    )
    assert mismatches == {("strata-a", "fast"): 0.0, ("strata-b", "normal"): 1.0}
    # a sum of evict events since round 4 (the stats line's evictions=500 is no event): known, so from 0
    assert evictions == {("strata-a", "fast"): 0.0, ("strata-b", "normal"): 0.0}


def test_a_restart_keeps_restored_counters(tmp_path):
    (tmp_path / "state").mkdir()
    (tmp_path / "b.log").write_bytes(MISMATCH * 3)
    run(tmp_path).close()
    pipeline = run(tmp_path)
    try:
        value = pipeline.state.series("spyglass_engine_model_checksum_mismatches_total")[("strata-b", "normal")]
    finally:
        pipeline.close()
    assert value == 3.0


def test_a_counter_only_strata_gives_is_absent_for_a_llama_server_not_zero(tmp_path):
    """docs/llama-server.md: what a build does not have, spyglass does not report. A new user's /metrics showed
    a llama-server's thinking tokens, tool calls and checksum mismatches at 0 (MetricSpec.engines)."""
    settings = config(tmp_path)
    settings["sources"]["engine-a"]["preset"] = "llama_server"
    settings["sources"]["engine-a"]["instance"] = "llama-a"
    pipeline = Pipeline(parse_config(settings, "test"), ManualClock(start=1_792_400_000.0), StateFile(tmp_path / "s"))
    pipeline.run_until_idle()
    thinking, evictions = exposed_and_closed(
        pipeline, "spyglass_engine_thinking_tokens_total", "spyglass_engine_evictions_total"
    )
    assert thinking == {("strata-b", "normal"): 0.0}
    assert evictions == {("llama-a", "fast"): 0.0, ("strata-b", "normal"): 0.0}  # what both give starts for both
