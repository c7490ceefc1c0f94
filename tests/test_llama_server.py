"""The llama_server poller's pure parts and its signals: /metrics text as llama-server writes it
(tools/server/server-task.cpp's to_metrics), /slots as it answers, counters across a restart, gauges
dropped while it does not answer. tests/test_llama_real.py polls the real server."""

from __future__ import annotations

import pytest

from spyglass.collectors.event import Event
from spyglass.collectors.llama_server import parse_metrics, summarise_slots
from spyglass.config import parse_config
from spyglass.config.signals import build_signals, metric_state
from spyglass.signals.state import MetricState


def metrics_text(prompt: float, cached: float, deferred: float, processing: float) -> str:
    items = [
        ("counter", "prompt_tokens_total", prompt),
        ("counter", "prompt_tokens_cached_total", cached),
        ("counter", "prompt_seconds_total", 0.25),
        ("counter", "tokens_predicted_total", 64),
        ("counter", "tokens_predicted_seconds_total", 0.5),
        ("counter", "n_decode_total", 70),
        ("counter", "n_tokens_max", 900),
        ("gauge", "prompt_tokens_seconds", 3000.5),
        ("gauge", "predicted_tokens_seconds", 128.25),
        ("gauge", "requests_processing", processing),
        ("gauge", "requests_deferred", deferred),
        ("gauge", "n_busy_slots_per_decode", 1),
    ]
    return "".join(
        f"# HELP llamacpp:{name} x\n# TYPE llamacpp:{name} {kind}\nllamacpp:{name} {value:g}\n"
        for kind, name, value in items
    )


def test_metrics_text_gives_the_known_families_by_short_name() -> None:
    found = parse_metrics(metrics_text(1200, 800, 3, 1) + "llamacpp:unknown_thing 5\n")
    assert found["prompt_tokens_total"] == 1200 and found["prompt_tokens_cached_total"] == 800
    assert found["requests_deferred"] == 3 and found["predicted_tokens_seconds"] == 128.25
    assert "unknown_thing" not in found


def test_slots_are_summarised_and_a_body_of_another_shape_is_refused() -> None:
    body = [
        {"id": 0, "is_processing": True, "n_prompt_tokens_cache": 800, "n_prompt_tokens_processed": 12},
        {"id": 1, "is_processing": False, "n_prompt_tokens_cache": 5},
    ]
    assert summarise_slots(body) == {"total": 2, "busy": 1, "cached_tokens": 800, "processed_tokens": 12}
    with pytest.raises(ValueError):
        summarise_slots({"slots": []})


def status(ts: float, **fields) -> Event:
    return Event(ts, "metrics-a", "llama_status", "llama-a", fields)


@pytest.fixture
def applied() -> tuple[MetricState, object]:
    config = parse_config(
        {"sources": {"metrics-a": {"kind": "llama_server", "url": "http://127.0.0.1:1", "instance": "llama-a"}}}
    )
    state = metric_state(config)
    return state, build_signals(config, state)["llama_server"]


def test_counters_continue_across_a_restart_and_gauges_drop_while_it_is_down(applied) -> None:
    state, signals = applied
    key = ("llama-a", "")
    signals.apply(
        status(
            1,
            health="ok",
            metrics=parse_metrics(metrics_text(1000, 500, 2, 1)),
            slots={"total": 2, "busy": 1, "cached_tokens": 0, "processed_tokens": 0},
        )
    )
    signals.apply(status(2, health="ok", metrics=parse_metrics(metrics_text(1500, 700, 0, 0))))
    assert state.series("spyglass_llama_prompt_tokens_total")[key + ("processed",)] == 1500
    assert state.series("spyglass_llama_requests_deferred")[key] == 0
    assert state.series("spyglass_engine_slots_busy")[key] == 0  # requests_processing, when /slots is off
    signals.apply(Event(3, "metrics-a", "poll_error", "llama-a", {"error": "timeout"}))
    assert state.series("spyglass_llama_up")[key] == 0
    assert key not in state.series("spyglass_engine_slots_busy")
    signals.apply(status(4, health="ok", metrics=parse_metrics(metrics_text(100, 0, 0, 0))))  # a new process
    assert state.series("spyglass_llama_prompt_tokens_total")[key + ("processed",)] == 1600
    assert state.series("spyglass_llama_prompt_tokens_total")[key + ("cached",)] == 700
    assert state.series("spyglass_llama_restarts_total")[key] == 1
    signals.apply(status(5, health="loading"))
    assert state.series("spyglass_llama_ready")[key] == 0


def test_a_family_typed_counter_without_total_keeps_its_name() -> None:
    """Late-2024 builds type n_busy_slots_per_decode a counter; prometheus_client names its sample with _total."""
    text = (
        "# TYPE llamacpp:n_busy_slots_per_decode counter\nllamacpp:n_busy_slots_per_decode 1.5\n"
        "# TYPE llamacpp:n_tokens_max counter\nllamacpp:n_tokens_max 900\n"
    )
    assert parse_metrics(text) == {"n_busy_slots_per_decode": 1.5, "n_tokens_max": 900}


def test_slots_of_late_2024_say_state_not_is_processing() -> None:
    body = [{"id": 0, "state": 3, "n_ctx": 2048}, {"id": 1, "state": 0}, {"id": 2, "state": "1"}]
    assert summarise_slots(body)["busy"] == 1  # 3: generating; "1" is no state llama-server writes
