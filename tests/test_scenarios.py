"""Every scenario end to end: the emulated stack under a real supervisord, driven on 127.0.0.1,
read by spyglass from all its sources; the expected signals move, and `healthy` moves none."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from spyglass.agent.pipeline import Pipeline
from spyglass.collectors.clock import SystemClock
from spyglass.config import parse_config
from spyglass.engine.emulator.scenarios import HUNG_REQUESTS, SCENARIOS, run_scenario
from spyglass.engine.emulator.stack import Stack
from spyglass.exporters.statefile import StateFile
from spyglass.ports import free_port_base
from spyglass.signals.state import MetricState

pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier


def run(name: str, folder: Path) -> MetricState:
    scenario = SCENARIOS[name]
    stack = Stack(
        folder / "stack",
        free_port_base(),
        dict(scenario.engine_patch),
        dict(scenario.gateway_patch),
        set(scenario.crash_loop),
    )
    config = parse_config(stack.spyglass_config(folder / "spyglass"), name)
    with stack:
        stack.wait_ready(scenario.ready)
        asyncio.run(run_scenario(scenario, stack.url))
        stack.flush()
        pipeline = Pipeline(config, SystemClock(), StateFile(folder / "spyglass" / "state.json"))
        pipeline.run_until_idle()  # status, supervisord API and host while the stack runs
    pipeline.run_until_idle()  # and what the logs gained while it stopped
    pipeline.close()
    return pipeline.state


INCIDENT_SIGNALS = [
    ("spyglass_engine_evictions_total", {}),
    ("spyglass_engine_long_prompts_checkpoint_only_total", {}),
    ("spyglass_infer_thinking_only_total", {}),
    ("spyglass_infer_plan_then_stop_total", {}),
    ("spyglass_infer_anchor_lost_total", {}),
    ("spyglass_gateway_overfits_total", {}),
    ("spyglass_gateway_blind_retries_total", {}),
    ("spyglass_gateway_concurrency_rejections_total", {}),
    ("spyglass_supervisord_exits_total", {"expected": "false"}),
    ("spyglass_supervisord_fatal_total", {}),
    ("spyglass_engine_shared_cpus", {}),
    ("spyglass_engine_rejections_total", {}),
]

EXPECTED = {
    "eviction-storm": lambda v: (
        v("spyglass_engine_evictions_total", instance="strata-b") >= 3
        and v("spyglass_engine_long_prompts_checkpoint_only_total") >= 1
        and v("spyglass_engine_prompt_restores_total", origin="checkpoint") >= 1
    ),
    "special-tokens": lambda v: (
        v("spyglass_infer_thinking_only_total", lane="normal", special_tokens="yes") >= 3
        and v("spyglass_infer_thinking_only_total", lane="fast") == 0
        and v("spyglass_serve_measures_escapes", instance="strata-b") == 0
        and v("spyglass_serve_prompt_escape_calls_total", instance="strata-a") >= 4
    ),
    "plan-then-eos": lambda v: v("spyglass_infer_plan_then_stop_total", lane="fast") >= 4,
    "assembly-drop": lambda v: (
        v("spyglass_infer_anchor_lost_total") >= 3
        and v("spyglass_gateway_assembly_dropped_most_total") >= 3
        and v("spyglass_infer_plan_then_stop_total") >= 3
    ),
    "token-count": lambda v: (
        v("spyglass_gateway_overfits_total") >= 1
        and v("spyglass_gateway_blind_retries_total") >= 1
        and v("spyglass_engine_rejections_total", status="400") >= 2
        and v("spyglass_gateway_clamps_total") >= 1
    ),
    "concurrency": lambda v: (
        v("spyglass_gateway_concurrency_rejections_total") >= 3  # a reject line names no lane
        and v("spyglass_infer_requests_total", status="429") >= 3
        and v("spyglass_gateway_requests_total", status="200") >= 2
    ),
    "crash-loop": lambda v: (
        v("spyglass_supervisord_spawns_total", program="strata-b") >= 3
        and v("spyglass_supervisord_exits_total", program="strata-b", cause="SIGABRT") >= 2
        and v("spyglass_supervisord_fatal_total", program="strata-b") == 0
    ),
    # A hung engine: one request finished, twelve accepted, logged queued and never answered (the serve's
    # ready state and queue while it hangs are gone once the stack stops: tests/test_pager_e2e.py pages on
    # them live); its queue depth comes from the queued lines, its last progress is the one done line.
    "hung-engine": lambda v: (
        v("spyglass_engine_requests_finished_total", instance="strata-b") == 1
        and v("spyglass_gateway_requests_received_total", lane="normal") == 1 + HUNG_REQUESTS
        and v("spyglass_engine_prefill_queue_depth", instance="strata-b") == HUNG_REQUESTS
        and v("spyglass_gateway_requests_total", lane="normal") == 1
        and v("spyglass_gateway_requests_total", lane="fast") == 0
    ),
    "slow-load": lambda v: (
        v("spyglass_serve_state", instance="strata-b", state="loading") == 1
        and v("spyglass_engine_ready", instance="strata-b") == 0
        and v("spyglass_engine_ready", instance="strata-a") == 1
    ),
    "recompile-storm": lambda v: v("spyglass_engine_graph_rebuilds_total", instance="strata-a") >= 8,
    "contention": lambda v: (
        v("spyglass_engine_shared_cpus", instance="strata-a") == 32
        and v("spyglass_engine_decode_tokens_per_second", instance="strata-a") < 10
    ),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_end_to_end(name, tmp_path):
    state = run(name, tmp_path)

    def v(metric: str, /, **labels: str) -> float:
        return state.total(metric, **labels)

    assert v("spyglass_source_lines_total", outcome="unmatched") == 0, "a line of the stack did not parse"
    if name == "healthy":
        moved = [(metric, v(metric, **labels)) for metric, labels in INCIDENT_SIGNALS if v(metric, **labels)]
        assert moved == []
        assert v("spyglass_serve_up") == 2 and v("spyglass_gateway_requests_total", status="200") >= 10
    else:
        families = ("spyglass_engine", "spyglass_infer", "spyglass_gateway", "spyglass_supervisord")
        assert EXPECTED[name](v), {m: v(m) for m in sorted(state.values) if m.startswith(families) and v(m)}
