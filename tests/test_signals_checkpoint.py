"""Signals remember what they need between events in typed checkpoints (their `Saved` model, under
their source kind in the saved metric state), and a saved state of the format before them (one
untyped `memo` shared by every signals module) still restores.

tests/fixtures/state/memo-format.json was written by the code before typed checkpoints (commit
da7b144): the engine log fixture plus an evict line and a start banner as its last line (so a start
was pending), and the serve snapshots fixture, run to idle with the store off; `to_json()` of its
metric state."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from spyglass.agent.pipeline import Pipeline
from spyglass.collectors.clock import ManualClock
from spyglass.collectors.event import Event
from spyglass.config import parse_config
from spyglass.exporters.statefile import StateFile
from spyglass.signals import LoadedModel, SignalsLinks, SignalsSettings, attach_signals, full_catalogue
from spyglass.signals.engine_log import Banner, EngineSignals
from spyglass.signals.model_path import ModelPathSignals
from spyglass.signals.state import MetricState

FIXTURES = Path(__file__).parent / "fixtures"
LEGACY = json.loads((FIXTURES / "state" / "memo-format.json").read_text())
KEY = ("strata-b", "normal")


def pipeline_on(tmp: Path, engine: bytes, serve: list[dict], saved: dict | None) -> Pipeline:
    (tmp / "engine.log").write_bytes(engine)
    (tmp / "serve.jsonl").write_text("".join(json.dumps(s) + "\n" for s in serve))
    text = (
        f'[agent]\nstate_dir = "{tmp / "state"}"\nhost = "h"\n[exporters.prometheus]\nenabled = false\n'
        f"[exporters.store]\nenabled = false\n"
        f'[sources.engine-b]\nkind = "engine_log"\npath = "{tmp / "engine.log"}"\ninstance = "strata-b"\n'
        f'lane = "normal"\n[sources.serve-a]\nkind = "serve_status"\npath = "{tmp / "serve.jsonl"}"\n'
        f'instance = "strata-a"\n'
    )
    config = parse_config(tomllib.loads(text), "test")
    store = StateFile(config.state_dir() / "state.json")
    if saved is not None:
        store.commit([], {}, saved)
    return Pipeline(config, ManualClock(start=1_793_000_000.0), store)


def test_a_state_saved_in_the_memo_format_restores_every_signals_part(tmp_path):
    assert set(LEGACY["memo"]) == {"engine_log", "engine_start_pending", "model_loaded", "serve_status"}
    starts = dict((tuple(k), v) for k, v in LEGACY["values"]["spyglass_engine_starts_total"])[KEY]
    engine = (
        b"2026-10-19 05:20:06.000 I [stats] busy=0/20 prefill_queue=0 decode_tps=0.0 parked=0 used=0"
        b" budget=8589934592 evictions=5\n"
    )
    restarted_serve = {
        "ts": "2026-10-19T07:00:00Z",
        "url": "http://127.0.0.1:8081/v1/status",
        "body": {
            "engine": "strata-a",
            "state": "ready",
            "uptime_s": 5.0,
            "requests": {"total": 3, "by_status": {"200": 3}},
        },
    }
    pipeline = pipeline_on(tmp_path, engine, [restarted_serve], LEGACY)
    try:
        pipeline.run_until_idle()
        values = {n: dict(s) for n, s in pipeline.state.values.items()}
        # the pending banner was restored, and the stats line that followed it refuted it
        assert values["spyglass_engine_implausible_values_total"][KEY + ("start",)] == 1
        assert values["spyglass_engine_starts_total"][KEY] == starts
        # the restored count goes on: a stats line's evictions=5 is no evict event (round 4: sums of events)
        assert values["spyglass_engine_evictions_total"][KEY] == 1
        # the serve's last uptime (91234.5) was restored: an uptime of 5 s is a restart
        assert values["spyglass_serve_restarts_total"][("strata-a",)] == 1
        # the model the engine loaded reaches the model-path watch, through the links
        loaded = pipeline.signals["engine_log"].links.loaded_models["strata-b"]  # type: ignore[attr-defined]
        assert loaded.real == "/data/models/v7/qwen3.5-397b-a17b-iq3_xxs.gguf" and loaded.bytes == 163208757248
        pipeline.signals["model_path"].apply(
            Event(1.0, "mp", "model_path", "strata-b", {"resolves": True, "real": "/data/models/v8/other.gguf"})
        )
        assert pipeline.state.values["spyglass_model_path_mismatch"][("strata-b",)] == 1.0
        saved = pipeline.state.to_json()
    finally:
        pipeline.close()
    assert "memo" not in saved and {"engine_log", "serve_status"} <= set(saved["signals"])
    assert saved["signals"]["engine_log"]["pending_starts"] == {}
    assert saved["signals"]["engine_log"]["evictions"] == {}  # no longer kept: the counter is a sum of events


def test_the_engine_signals_checkpoint_round_trips_through_json():
    state, links = MetricState(full_catalogue()), SignalsLinks()
    signals = EngineSignals(state, SignalsSettings(lanes={"strata-b": "normal"}), links)
    signals.pending["strata-b"] = Banner(ts=1.5, build_name="Strata", version="0.9.3", build="7f3c2e1")
    links.loaded_models["strata-b"] = LoadedModel(real="/m/a.gguf", bytes=10, ts=2.0)
    attach_signals("engine_log", signals, state)
    saved = json.loads(json.dumps(state.to_json()))
    again = MetricState(full_catalogue())
    again.load_json(saved)
    restored = EngineSignals(again, SignalsSettings(), SignalsLinks())
    attach_signals("engine_log", restored, again)
    assert restored.checkpoint() == signals.checkpoint()


def test_a_damaged_signals_state_starts_that_signals_object_fresh(tmp_path):
    """A value of the wrong type is refused by the Saved model: that object starts as on a first
    run, the others and every series are restored."""
    saved = json.loads(json.dumps(LEGACY))
    saved.pop("memo")
    saved["signals"] = {
        "engine_log": {"evictions": {"strata-b": {"value": "lots", "evicts": 0}}},
        "serve_status": {"serves": {"strata-a": {"uptime": 91234.5, "raw": {}}}},
    }
    state = MetricState(full_catalogue())
    state.load_json(saved)
    links = SignalsLinks()
    engine = EngineSignals(state, SignalsSettings(), links)
    attach_signals("engine_log", engine, state)
    assert engine.pending == {}
    model_path = ModelPathSignals(state, SignalsSettings(), links)
    assert model_path.links is engine.links
    assert state.values["spyglass_engine_evictions_total"][KEY] == 1
