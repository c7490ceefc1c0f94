"""EngineSignals.apply_many (column-wise) against apply one event at a time: the same metric state
(values, series order, memo, dropped series counts), the same events refused with the same
errors, on generated event sequences cut into random batches; and on the benchmark-like fixture."""
from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from bench.gen_log import generate
from collectors.engine_log import EngineLogOptions, EngineLogSource
from collectors.event import Event
from signals import SignalsSettings, full_catalogue
from signals.engine import EngineSignals
from signals.state import MetricState

FIXTURE = Path(__file__).parent / "fixtures" / "engine_log" / "strata-iq3_xxs-b.log"

NUM = st.one_of(st.integers(0, 50), st.integers(0, 50), st.integers(0, 2 ** 53),
                st.sampled_from([0.5, 1.25, 1e-3, 0.1, 2.0 ** 63, 2.0 ** 64, float("nan"), "12", None, True]))
LABEL = st.sampled_from(["stop", "length", "budget", "lru", "parked", "none", "disk", "new_shape", "main",
                         "cache", "weird", 429, 200, 999, "eos", "ttl"])
FIELDS = {  # kind -> the fields its handler reads
    "queued": ("prefill_depth", "task"), "rejected": ("status",), "prompt": ("prompt", "reused", "read", "ms"),
    "restore": ("origin",), "thinking": ("tokens", "max", "cause"), "tool_call": (),
    "done": ("finish", "completion", "ttft_ms", "decode_tps"),
    "park": ("bytes", "parked", "used", "budget", "evictions"),
    "evict": ("reason", "bytes", "parked", "used", "budget", "evictions"), "graph_rebuild": ("reason", "took_ms"),
    "stats": ("busy", "slots", "prefill_queue", "decode_tps", "parked", "used", "budget", "evictions"),
    "error": ("component",), "checksum_mismatch": (),
    "start": ("build_name", "version", "build"), "args": ("prompt_cache_every", "slots"),
    "ready": ("seconds",), "experts_loaded": ("resident", "total"), "unknown": (),
}
TEXT = {"status", "origin", "cause", "finish", "reason", "component", "build_name", "version", "build"}


@st.composite
def events(draw) -> Event:
    kind = draw(st.sampled_from(sorted(FIELDS) + ["prompt", "done", "park", "evict", "stats"] * 3))
    fields = {}
    for name in FIELDS[kind]:
        if draw(st.integers(0, 30)) == 0:
            continue  # a field an override left out
        fields[name] = draw(LABEL if name in TEXT else st.one_of(NUM, st.integers(0, 40), st.integers(0, 40)))
    if kind == "evict" and isinstance(fields.get("evictions"), int) and draw(st.booleans()):
        fields["evictions"] = draw(st.integers(0, 6))  # small values: plausible runs and resyncs
    if draw(st.integers(0, 8)) == 0:
        fields["orphan"] = True
    instance = draw(st.sampled_from(["strata-b", "strata-b", "strata-b", "strata-a", "x"]))
    request_id = draw(st.sampled_from([None, "20261019-124900-7aa82c", "20261019-124901-7aa82d"]))  # exemplars
    return Event(float(draw(st.integers(0, 10))), draw(st.sampled_from(["engine-b", "engine-a"])), kind, instance,
                 fields, request_id)


def state_of(batches: list[list[Event]], many: bool, max_series: int, memo: dict | None = None) -> tuple:
    state = MetricState(full_catalogue(), max_series=max_series)
    if memo is not None:
        state.memo = {"engine_log": {k: dict(v) for k, v in memo.items()}}
    signals = EngineSignals(state, settings=SignalsSettings(lanes={"strata-b": "normal"}, long_prompt_tokens=20,
                                                            default_prompt_cache_every=4))
    signals.min_batch = 1  # column-wise for every batch, however small
    refused = []
    for batch in batches:
        copies = [Event(e.ts, e.source, e.kind, e.instance, dict(e.fields), e.request_id) for e in batch]
        failures = signals.apply_many(copies) if many else None
        if failures is not None:
            refused += [(batch[i].kind, repr(exc)) for i, exc in failures]
            continue
        for event in copies:
            try:
                signals.apply(event)
            except Exception as exc:  # noqa: BLE001 - the pipeline counts these invalid
                refused.append((event.kind, repr(exc)))
    return state.to_json(), state.copy_exemplars(), refused


@given(st.lists(events(), max_size=60), st.lists(st.integers(0, 60), max_size=4),
       st.sampled_from([2000, 2000, 3, 8]),
       st.one_of(st.none(), st.fixed_dictionaries({"strata-b": st.fixed_dictionaries(
           {"value": st.one_of(st.integers(0, 5), st.just("x")), "evicts": st.one_of(st.integers(0, 3), st.none())})})))
def test_apply_many_equals_apply_one_by_one(sequence, cuts, max_series, memo):
    bounds = sorted({0, len(sequence), *[c for c in cuts if c <= len(sequence)]})
    batches = [sequence[a:b] for a, b in zip(bounds, bounds[1:])]
    assert state_of(batches, True, max_series, memo) == state_of(batches, False, max_series, memo)


def test_apply_many_equals_apply_on_the_fixture_and_a_generated_log(tmp_path):
    generate(tmp_path / "engine.log", 20_000)
    source = EngineLogSource("engine-b", EngineLogOptions(path="x", instance="strata-b", lane="normal"))
    found, _, _ = source.handle_each(FIXTURE.read_bytes().splitlines() + (tmp_path / "engine.log").read_bytes()
                                     .splitlines())
    assert len(found) > 4000
    for size in (1, 7, 64, len(found)):
        batches = [found[i:i + size] for i in range(0, len(found), size)]
        assert state_of(batches, True, 2000) == state_of(batches, False, 2000)


def test_apply_many_leaves_histogram_hooks_their_order_and_small_batches_to_apply():
    state = MetricState(full_catalogue())
    signals = EngineSignals(state)
    assert signals.apply_many([Event(0.0, "s", "tool_call", "i")] * (signals.min_batch - 1)) is None
    assert signals.apply_many([Event(0.0, "s", "tool_call", "i")] * signals.min_batch) == []
    state.histogram_hooks.append(lambda *args: None)
    assert signals.apply_many([Event(0.0, "s", "tool_call", "i")] * signals.min_batch) is None
