"""Findings 2 and 3 of issue 9: one bad number in one line must cost that line, never the agent.

Real files, a real DuckDB store, a restart after each ingest: a value above 64 bits once failed
the commit (a crash loop), a value like 1.2.3 once put a string into the metric state (every
scrape broken, start-up refused).
"""

from __future__ import annotations

import contextlib
import json
import math
import tomllib
from pathlib import Path

import duckdb
import pytest
from hypothesis import given
from hypothesis import strategies as st
from loguru import logger

from spyglass.agent.pipeline import Pipeline
from spyglass.collectors.clock import ManualClock
from spyglass.config import parse_config
from spyglass.exporters.prometheus import render
from spyglass.exporters.statefile import StateFile
from spyglass.exporters.store import DuckDBStore
from spyglass.signals import SignalsSettings, full_catalogue
from spyglass.signals.state import MetricState

FIXTURES = Path(__file__).parent / "fixtures"
ENGINE = (FIXTURES / "engine_log" / "strata-iq3_xxs-b.log").read_bytes()
GATEWAY = (FIXTURES / "gateway_log" / "rag-proxy.log").read_bytes()
HUGE = b"99999999999999999999"  # above 2^64

BAD_ENGINE = [
    b"2026-10-19 05:30:00.000 I [cache] park conv=ab parked=1 bytes=1 used=1 budget=1 evictions=" + HUGE,
    b"2026-10-19 05:30:01.000 I [slot 0] task 1 done finish=stop prompt=1 completion=1 ttft_ms=1 decode_tps=1.2.3",
    b"2026-10-19 05:30:02.000 I [main] ready in 1.2.3 s",
    b"2026-10-19 05:30:03.000 I [main] ready in " + b"9" * 400 + b" s",  # float('9'*400) is inf
    b"2026-10-19 05:30:04.000 I [main] args: --slots " + HUGE + b" --port 8082",
]
BAD_GATEWAY = (
    b"[05:30:00] done req=20261020-133000-ab0001 status=200 engine_prompt=1 completion=1"
    b" finish=stop tool_calls=0 content_chars=1 ttft_ms=1 dur_ms=" + HUGE
)


def config(tmp: Path, store: bool) -> object:
    text = (
        f'[agent]\nstate_dir = "{tmp / "state"}"\nhost = "h"\n[exporters.prometheus]\nenabled = false\n'
        f"[exporters.store]\nenabled = {str(store).lower()}\n"
        f'[sources.engine-b]\nkind = "engine_log"\npath = "{tmp / "engine.log"}"\ninstance = "strata-b"\n'
        f'lane = "normal"\n[sources.gateway]\nkind = "gateway_log"\npath = "{tmp / "rag-proxy.log"}"\n'
    )
    return parse_config(tomllib.loads(text), "test")


def ingest(tmp: Path, store: bool = True) -> tuple[str, dict]:
    cfg = config(tmp, store)
    backend = DuckDBStore(cfg.store_path()) if store else StateFile(cfg.state_dir() / "state.json")
    pipeline = Pipeline(cfg, ManualClock(), backend)  # after the files' mtimes, which date the gateway's lines
    try:
        pipeline.run_until_idle()
        return render(pipeline.state).decode(), {n: dict(s) for n, s in pipeline.state.values.items()}
    finally:
        pipeline.close()


def write_logs(tmp: Path, engine_extra: list[bytes], gateway_extra: list[bytes]) -> None:
    (tmp / "engine.log").write_bytes(ENGINE + b"".join(line + b"\n" for line in engine_extra))
    (tmp / "rag-proxy.log").write_bytes(GATEWAY + b"".join(line + b"\n" for line in gateway_extra))


@pytest.mark.parametrize("store", [True, False], ids=["duckdb", "state-file"])
def test_bad_numbers_are_counted_invalid_by_field_and_never_stop_the_agent(tmp_path, store):
    write_logs(tmp_path, BAD_ENGINE, [BAD_GATEWAY])
    text, values = ingest(tmp_path, store)
    lines = values["spyglass_source_lines_total"]
    assert lines[("engine-b", "invalid")] == len(BAD_ENGINE)
    assert lines[("gateway", "invalid")] == 1
    assert values["spyglass_source_invalid_fields_total"] == {
        ("engine-b", "evictions"): 1,
        ("engine-b", "decode_tps"): 1,
        ("engine-b", "seconds"): 2,
        ("engine-b", "slots"): 1,
        ("gateway", "dur_ms"): 1,
    }
    # nothing of those lines reached the state: the fixture's values stand
    assert values["spyglass_engine_evictions_total"][("strata-b", "normal")] == 1.0  # the fixture's evict line
    assert values["spyglass_engine_load_duration_seconds"][("strata-b", "normal")] == 430.0
    assert values["spyglass_engine_slots"][("strata-b", "normal")] == 20.0
    assert "spyglass_engine_ready" in text  # the scrape renders
    # the restart reads the committed state and the same files: nothing new, nothing lost
    again, values_again = ingest(tmp_path, store)
    assert again == text and values_again == values


def test_nothing_of_an_invalid_line_is_stored(tmp_path):
    write_logs(tmp_path, BAD_ENGINE, [BAD_GATEWAY])
    ingest(tmp_path)
    con = duckdb.connect(str(tmp_path / "state" / "spyglass.duckdb"), read_only=True)
    assert con.execute(
        "SELECT count(*) FROM events WHERE ts >= TIMESTAMPTZ '2026-10-19 05:30:00+00' AND source = 'engine-b'"
    ).fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM events WHERE request_id = '20261020-133000-ab0001'").fetchone() == (0,)


def damaged_metrics() -> dict:
    """A saved metric state as an older agent could write it: a string, a NaN, wrong arity, junk."""
    return {
        "values": {
            "spyglass_engine_load_duration_seconds": [[["strata-b", "normal"], "1.2.3"], [["strata-a", "fast"], 7.0]],
            "spyglass_engine_ready": [[["strata-b", "normal"], float("nan")], [["strata-b"], 1.0], "junk"],
            "spyglass_engine_slots": [[["strata-b", "normal"], 20]],
            "spyglass_engine_evictions_total": "not a list",
            "spyglass_no_such_metric": [[["x"], 1.0]],
        },
        "hists": {
            "spyglass_engine_ttft_seconds": [[["strata-b", "normal"], [1] * 25, "x"]],
            "spyglass_engine_request_prompt_tokens": [[["strata-b", "normal"], [0] * 10 + [2], 8192.0]],
        },
    }


@pytest.mark.parametrize("store", [True, False], ids=["duckdb", "state-file"])
def test_a_damaged_saved_state_is_rebuilt_from_what_is_valid(tmp_path, store):
    write_logs(tmp_path, [], [])
    (tmp_path / "engine.log").write_bytes(b"")
    (tmp_path / "rag-proxy.log").write_bytes(b"")
    ingest(tmp_path, store)
    if store:
        con = duckdb.connect(str(tmp_path / "state" / "spyglass.duckdb"))
        con.execute("UPDATE agent_state SET state = ? WHERE name = 'metrics'", [json.dumps(damaged_metrics())])
        con.close()
    else:
        path = tmp_path / "state" / "state.json"
        saved = json.loads(path.read_text())
        path.write_text(json.dumps(dict(saved, metrics=damaged_metrics())))
    messages: list[str] = []
    sink = logger.add(messages.append, level="ERROR")
    try:
        text, values = ingest(tmp_path, store)
    finally:
        logger.remove(sink)
    assert values["spyglass_engine_load_duration_seconds"] == {("strata-a", "fast"): 7.0}
    assert values["spyglass_engine_slots"] == {("strata-b", "normal"): 20.0}
    assert values["spyglass_engine_ready"] == {}
    assert "spyglass_engine_request_prompt_tokens_count" in text
    # the damaged TTFT series is not restored: it starts at 0 as every known histogram does, not at its 25
    assert 'spyglass_engine_ttft_seconds_count{instance="strata-b",lane="normal"} 0.0' in text
    assert any("damaged" in m and "6 series" in m for m in messages), messages


def test_the_metric_state_refuses_what_is_not_a_finite_number():
    state = MetricState(full_catalogue())
    key = ("strata-b", "normal")
    for bad in ("1.2.3", float("nan"), float("inf"), -float("inf"), 10**30, None, b"1"):
        with pytest.raises((TypeError, ValueError), match="spyglass_engine_slots"):
            state.set("spyglass_engine_slots", key, bad)
        with pytest.raises((TypeError, ValueError), match="spyglass_engine_starts_total"):
            state.inc("spyglass_engine_starts_total", key, bad)
        with pytest.raises((TypeError, ValueError), match="spyglass_engine_ttft_seconds"):
            state.observe("spyglass_engine_ttft_seconds", key, bad)
    assert state.values["spyglass_engine_slots"] == {} and state.values["spyglass_engine_starts_total"] == {}
    assert state.hists["spyglass_engine_ttft_seconds"] == {}
    render(state)


@pytest.mark.parametrize(
    ("metric", "key"),
    [
        ("spyglass_engine_slots", ("strata-b",)),  # gauge of (instance, lane): one value
        ("spyglass_engine_evicted_snapshots_total", ("strata-b", "normal", "budget", "extra")),  # 3 labels, 4 values
        ("spyglass_engine_ttft_seconds", ("strata-b",)),
        ("spyglass_engine_cpus_info", ("strata-b", "normal")),
    ],
)
def test_a_series_of_the_wrong_label_count_is_refused_naming_its_metric(metric, key):
    """A short key would render a partial label set and a long one be cut: like client_python's labels(), it raises."""
    state = MetricState(full_catalogue())
    labels = state.catalogue[metric].labels
    arity = rf"{metric}: {len(key)} label values .* for its {len(labels)} labels {', '.join(labels)}"
    spec = state.catalogue[metric]
    with pytest.raises(ValueError, match=arity):
        if spec.type == "histogram":
            state.observe(metric, key, 1.0)
        elif spec.type == "info":
            state.set_info(metric, key, 2)
        else:
            state.inc(metric, key) if spec.type == "counter" else state.set(metric, key, 1.0)
    assert not (state.values.get(metric) or state.hists.get(metric))
    right = key[: len(labels)] + ("x",) * (len(labels) - len(key))
    state.observe(metric, right, 1.0) if spec.type == "histogram" else state.set(metric, right, 1.0)
    render(state)


def _kinds_of(source) -> dict:
    kinds = (
        source.kinds
        if hasattr(source, "kinds")
        else [k for ks in source.parser.grammar.by_component.values() for k in ks]
    )
    return {k.kind: k for k in kinds}


def _templates() -> list[tuple[str, bytes, list[tuple[int, int]]]]:
    """(source kind, a real line, spans of its named groups) for every line kind of the fixtures."""
    from spyglass.collectors.engine_log import EngineLogOptions, EngineLogSource
    from spyglass.collectors.gateway_log import GatewayLogOptions, GatewayLogSource
    from spyglass.collectors.supervisord_log import SupervisordLogOptions, SupervisordLogSource

    found, seen = [], set()
    for name, source, path in (
        (
            "engine_log",
            EngineLogSource("e", EngineLogOptions(path="x", instance="strata-b")),
            "engine_log/strata-iq3_xxs-b.log",
        ),
        ("gateway_log", GatewayLogSource("g", GatewayLogOptions(path="x")), "gateway_log/rag-proxy.log"),
        (
            "supervisord_log",
            SupervisordLogSource("s", SupervisordLogOptions(path="x")),
            "supervisord_log/supervisord.log",
        ),
    ):
        source.file_mtime(1_792_454_399.0) if hasattr(source, "file_mtime") else None
        kinds = _kinds_of(source)
        for line in (FIXTURES / path).read_bytes().splitlines():
            event = source.handle(line)
            if isinstance(event, str) or event.kind not in kinds or (name, event.kind) in seen:
                continue
            pattern = kinds[event.kind].pattern
            start = next(i for i in range(len(line)) if pattern.match(line, i))
            found.append((name, line, [m for m in pattern.match(line, start).regs[1:] if m[0] >= 0]))
            seen.add((name, event.kind))
    return found


TEMPLATES = _templates()
VALUES = st.one_of(
    st.integers(0, 10**30).map(str),
    st.floats().map(repr),
    st.text(alphabet="0123456789.-+eE", min_size=1, max_size=30),
    st.sampled_from(["1.2.3", ".", "9" * 400, "nan", "inf", "١٢٣", "00000000000000000001"]),
)


@given(st.sampled_from(TEMPLATES), st.data())
def test_random_field_values_in_every_line_kind_never_reach_the_state_as_non_numbers(template, data):
    from spyglass.collectors import load_all
    from spyglass.exporters.event_schema import split
    from spyglass.signals import load_all as signals

    kind, line, spans = template
    pieces, last = [], 0
    for start, end in spans:  # replace every group's text with a random value
        pieces += [line[last:start], data.draw(VALUES).encode()]
        last = end
    forged = b"".join(pieces) + line[last:]
    registration = load_all()[kind]
    source = registration.cls("src", registration.options(kind=kind, path="x", instance="strata-b"))
    if hasattr(source, "file_mtime"):
        source.file_mtime(1_792_454_399.0)
    state = MetricState(full_catalogue())
    apply = signals()[kind].cls(state, settings=SignalsSettings(lanes={"strata-b": "normal"})).apply
    events, misses, _ = source.handle_lines([line, forged])  # the real line first: context for the forged one
    for event in events:
        with contextlib.suppress(Exception):  # the pipeline counts these invalid; the state must still be clean
            apply(event)
    split(events, 0, {"src": kind})  # what the store would commit: never "Integer exceeds 64-bit range"
    for series in state.values.values():
        assert all(v.__class__ is float or v.__class__ is int for v in series.values())
        assert all(math.isfinite(v) for v in series.values())
    for series in state.hists.values():
        assert all(
            math.isfinite(total) and all(c.__class__ is int for c in counts) for counts, total in series.values()
        )
    render(state)
