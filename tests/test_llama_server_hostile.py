"""Issue 27, item 6: what a llama-server's endpoints answer cannot keep `up` at 1 or move a counter backwards.

A real HTTP server on 127.0.0.1 (http.server) answers /health, /metrics, /slots and /props with the bodies a
test chooses: a /slots nested 200,000 deep (json.loads raises RecursionError), a `llamacpp:prompt_tokens_total`
of -1000000, a negative gauge, a ratio above 1. Each poll goes through the real source and its signals.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from spyglass.collectors.llama_server import LlamaServerOptions, LlamaServerSource
from spyglass.config import parse_config
from spyglass.config.signals import build_signals, metric_state
from spyglass.signals.state import MetricState

KEY = ("llama-a", "")
SLOTS = b'[{"id": 0, "is_processing": true}, {"id": 1, "is_processing": false}]'


def metrics(prompt: float, deferred: float = 1, ratio: float | None = None) -> bytes:
    lines = [
        f"# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total {prompt:g}",
        "# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total 64",
        f"# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred {deferred:g}",
    ]
    if ratio is not None:
        lines.append(f"# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio {ratio:g}")
    return ("\n".join(lines) + "\n").encode()


class FakeLlama(ThreadingHTTPServer):
    """Answers each path with the body set in `bodies` (200), or 404."""

    bodies: dict[str, bytes]


class Handler(BaseHTTPRequestHandler):
    server: FakeLlama

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = self.server.bodies.get(self.path.split("?")[0])
        self.send_response(200 if body is not None else 404)
        self.send_header("content-length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake() -> Iterator[FakeLlama]:
    server = FakeLlama(("127.0.0.1", 0), Handler)
    server.bodies = {
        "/health": b'{"status":"ok"}',
        "/metrics": metrics(1000),
        "/slots": SLOTS,
        "/props": b'{"build_info": "b7000-abc"}',
    }
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def wired(fake: FakeLlama) -> tuple[LlamaServerSource, MetricState, object]:
    url = f"http://127.0.0.1:{fake.server_address[1]}"
    config = parse_config({"sources": {"metrics-a": {"kind": "llama_server", "url": url, "instance": "llama-a"}}})
    state = metric_state(config)
    source = LlamaServerSource("metrics-a", LlamaServerOptions(url=url, instance="llama-a", timeout_seconds=10))
    return source, state, build_signals(config, state)["llama_server"]


def poll(wired: tuple[LlamaServerSource, MetricState, object], now: float) -> bool:
    source, _, signals = wired
    result = source.poll(now)
    for event in result.events:
        signals.apply(event)  # type: ignore[attr-defined]
    return result.ok


def test_a_slots_body_200000_deep_is_a_failed_poll_not_a_crash_and_not_a_stale_healthy_server(wired, fake) -> None:
    _, state, _ = wired
    assert poll(wired, 1)
    assert state.series("spyglass_llama_up")[KEY] == 1 and state.series("spyglass_engine_slots_busy")[KEY] == 1
    fake.bodies["/slots"] = b"[" * 200_000 + b"]" * 200_000
    assert not poll(wired, 2)  # before: RecursionError out of poll(), up and ready left at 1
    assert state.series("spyglass_llama_up")[KEY] == 0
    assert state.series("spyglass_llama_poll_errors_total")[KEY + ("invalid_json",)] == 1
    for gauge in (
        "spyglass_llama_ready",
        "spyglass_engine_slots",
        "spyglass_engine_slots_busy",
        "spyglass_llama_requests_deferred",
    ):
        assert KEY not in state.series(gauge), gauge
    fake.bodies["/slots"] = b'{"slots": []}'  # valid JSON, not llama-server's shape
    assert not poll(wired, 3)
    assert state.series("spyglass_llama_poll_errors_total")[KEY + ("bad_body",)] == 1
    fake.bodies["/slots"] = SLOTS
    assert poll(wired, 4) and state.series("spyglass_llama_up")[KEY] == 1


def test_a_negative_counter_moves_nothing_and_is_counted(wired, fake) -> None:
    _, state, _ = wired
    assert poll(wired, 1)
    processed = state.series("spyglass_llama_prompt_tokens_total")
    assert processed[KEY + ("processed",)] == 1000
    fake.bodies["/metrics"] = metrics(-1_000_000, deferred=-5, ratio=7.5)
    assert poll(wired, 2)  # the server answered: up, but nothing it said out of range is taken
    assert state.series("spyglass_llama_prompt_tokens_total")[KEY + ("processed",)] == 1000  # before: -999000
    assert KEY not in state.series("spyglass_llama_restarts_total")
    assert KEY not in state.series("spyglass_llama_requests_deferred")  # before: -5 exported
    assert KEY not in state.series("spyglass_llama_kv_cache_usage_ratio")
    invalid = state.series("spyglass_source_invalid_fields_total")
    assert {field: invalid[("metrics-a", field)] for source, field in invalid if source == "metrics-a"} == {
        "metrics.prompt_tokens_total": 1,
        "metrics.requests_deferred": 1,
        "metrics.kv_cache_usage_ratio": 1,
    }
    fake.bodies["/metrics"] = metrics(1500, ratio=0.25)
    assert poll(wired, 3)
    assert state.series("spyglass_llama_prompt_tokens_total")[KEY + ("processed",)] == 1500  # the next good sample
    assert state.series("spyglass_llama_kv_cache_usage_ratio")[KEY] == 0.25


def test_a_counter_beyond_2_to_the_53_is_refused(wired, fake) -> None:
    _, state, _ = wired
    fake.bodies["/metrics"] = metrics(9e15 * 10)
    assert poll(wired, 1)
    assert KEY + ("processed",) not in state.series("spyglass_llama_prompt_tokens_total")
    assert state.series("spyglass_source_invalid_fields_total")[("metrics-a", "metrics.prompt_tokens_total")] == 1


def test_a_counter_alternating_0_and_9e15_neither_inflates_nor_counts_restarts(wired, fake) -> None:
    """Round 4: a /metrics counter alternating 0 and 9e15 inflated prompt_tokens_total to 3.6e16 and counted a
    restart every other poll. An increment no server makes in the time since the last poll is refused."""
    _, state, _ = wired
    assert poll(wired, 1000)
    for n in range(8):
        fake.bodies["/metrics"] = metrics(0 if n % 2 == 0 else 9e15)
        assert poll(wired, 1015 + 15 * n)
    assert state.series("spyglass_llama_prompt_tokens_total")[KEY + ("processed",)] <= 1000
    assert state.series("spyglass_llama_restarts_total")[KEY] == 1  # the first 0: a restart, once
    invalid = state.series("spyglass_source_invalid_fields_total")
    assert invalid[("metrics-a", "metrics.prompt_tokens_total")] == 4
    fake.bodies["/metrics"] = metrics(700)
    assert poll(wired, 1200)  # a believable count after the 0 goes on from it
    assert state.series("spyglass_llama_prompt_tokens_total")[KEY + ("processed",)] == 1000 + 700


def test_a_slots_sum_past_2_to_the_63_keeps_the_polls_event(wired, fake) -> None:
    """Round 4: 2,000 busy slots of 2^53 prompt tokens each summed past 2^63, and the store discarded that
    poll's event; the sum is now left out and the rest of the poll kept."""
    source, state, _ = wired
    slot = '{"id": 0, "is_processing": true, "n_prompt_tokens_processed": 9007199254740992}'
    fake.bodies["/slots"] = ("[" + ", ".join([slot] * 2000) + "]").encode()
    result = source.poll(1)
    [status] = [e for e in result.events if e.kind == "llama_status"]
    assert status.fields["slots"]["busy"] == 2000 and "processed_tokens" not in status.fields["slots"]
    assert all(abs(v) < 2**63 for v in status.fields["slots"].values())
