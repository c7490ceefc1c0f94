"""Engine signals that combine events: CPU overlap between instances, checkpoint-only reuse."""

from __future__ import annotations

from spyglass.collectors.event import Event
from spyglass.signals import SignalsSettings, full_catalogue
from spyglass.signals.engine_log import EngineSignals
from spyglass.signals.state import MetricState


def apply(*events: Event) -> MetricState:
    state = MetricState(full_catalogue())
    signals = EngineSignals(state, settings=SignalsSettings(lanes={"strata-a": "fast", "strata-b": "normal"}))
    for event in events:
        signals.apply(event)
    return state


def cpus(instance: str, cpu_list: str, ts: float = 0.0) -> Event:
    return Event(ts, "e", "cpus", instance, {"cpus": cpu_list, "pool_workers": 24})


def test_shared_cpus_from_both_engines_start_lines():
    before = apply(cpus("strata-a", "0-31"), cpus("strata-b", "0-31"))  # incident 1: the same 32 cores
    assert before.values["spyglass_engine_shared_cpus"] == {
        ("strata-a", "fast", "strata-b"): 32,
        ("strata-b", "normal", "strata-a"): 32,
    }
    after = apply(
        cpus("strata-a", "0-31"), cpus("strata-b", "0-31"), cpus("strata-a", "0-15"), cpus("strata-b", "38-53")
    )  # pinned: taskset 0-15 and 38-53
    assert after.values["spyglass_engine_shared_cpus"] == {
        ("strata-a", "fast", "strata-b"): 0,
        ("strata-b", "normal", "strata-a"): 0,
    }


def prompt(total: int, reused: int) -> Event:
    return Event(
        0.0,
        "e",
        "prompt",
        "strata-b",
        {"task": 1, "prompt": total, "reused": reused, "read": total - reused, "ms": 1000},
    )


def test_checkpoint_only_reuse_uses_the_engines_own_checkpoint_step():
    args = Event(0.0, "e", "args", "strata-b", {"prompt_cache_every": 4096})
    state = apply(
        args,
        prompt(250_000, 16384),
        prompt(250_000, 12288),
        prompt(250_000, 249_000),
        prompt(150_000, 16384),
        prompt(250_000, 0),
    )
    key = ("strata-b", "normal")
    assert state.values["spyglass_engine_long_prompts_total"][key] == 4
    assert state.values["spyglass_engine_long_prompts_checkpoint_only_total"][key] == 2  # 16384 and 12288
