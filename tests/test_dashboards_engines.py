"""A deployment's dashboards hold the panels its sources and engines can fill (issue 37, item 5): a llama.cpp
deployment's leave out Strata's (its CPU expert pool, thinking budgets, snapshots, gateway, serve) instead of
showing them as "No data". What only Strata's engine gives is declared on the metric catalogue's rows
(MetricSpec.engines), and held against every recorded llama-server log here; the real run of
tests/test_llama_wall.py checks that every panel left has a value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spyglass import collectors
from spyglass.alerting.heuristics import Deployment
from spyglass.cli.app import app
from spyglass.collectors.engine_log import EngineLogOptions
from spyglass.config import load_config
from spyglass.dashboards.lint import series
from spyglass.dashboards.model import DASHBOARDS, build_all, deployment, panels_with_data
from spyglass.signals import SignalsSettings, full_catalogue
from spyglass.signals.engine_log import STRATA_ONLY, EngineSignals
from spyglass.signals.state import MetricState

ROOT = Path(__file__).resolve().parents[1]
LLAMA_LOGS = sorted((ROOT / "tests" / "fixtures" / "llama").rglob("*.log"))
UNWATCHED = ("spyglass_gateway_", "spyglass_serve_", "spyglass_infer_", "spyglass_supervisord_", "spyglass_host_")
LLAMA = Deployment(engines={"llama-a": "llama_server"}, source_kinds=frozenset({"engine_log", "llama_server"}))


def moved_by(log: Path) -> set[str]:
    """The metrics a recorded llama-server log gives a value (a counter at 0 is no value)."""
    source = collectors.load_all()["engine_log"].build(
        "engine-a", EngineLogOptions(path=log, instance="llama-a", preset="llama_server")
    )
    source.writer_of = lambda p, now: None
    source.file_mtime(1_796_405_700.0)
    events, _, _ = source.handle_lines(log.read_bytes().splitlines(True))
    state = MetricState(full_catalogue())
    engine = EngineSignals(state, SignalsSettings())
    for event in events:
        engine.apply(event)
    return {name for name, values in (*state.values.items(), *state.hists.items()) if values}


def test_no_llama_server_build_gives_what_is_declared_strata_only() -> None:
    assert len(LLAMA_LOGS) >= 10  # every build's every logging mode
    moved = set().union(*map(moved_by, LLAMA_LOGS))
    assert {"spyglass_engine_evictions_total", "spyglass_engine_request_outcomes_total"} <= moved  # it reads them
    assert sorted(moved & STRATA_ONLY) == []
    assert {s.name for s in full_catalogue() if s.engines} == STRATA_ONLY


def reads(panel: dict) -> set[str]:
    return {name for target in panel.get("targets", []) for name in series(target.get("expr", ""))}


def test_a_llama_deployment_has_no_panel_that_reads_only_what_it_cannot_give() -> None:
    boards = build_all(LLAMA)
    every = build_all(deployment())
    assert "spyglass-cpu" not in boards  # every panel of it reads Strata's CPU pool or a host source
    for uid, board in boards.items():
        panels = [p for p in board["panels"] if p["type"] != "row"]
        assert panels, uid
        for panel in panels:
            for target in panel.get("targets", []):  # no query of the panel reads only what it cannot give
                read = reads({"targets": [target]})
                unwatched = {n for n in read if n.startswith(UNWATCHED)}
                assert not read or read - STRATA_ONLY - unwatched, (uid, panel["title"], target["expr"])
        rows = [n for n, p in enumerate(board["panels"]) if p["type"] == "row"]
        assert all(n + 1 < len(board["panels"]) and board["panels"][n + 1]["type"] != "row" for n in rows), uid
        assert {k["url"][3:] for k in board["links"] if k.get("url", "").startswith("/d/")} <= set(boards), uid
    dropped = {p["title"] for p in every["spyglass-cache"]["panels"]} - {
        p["title"] for p in boards["spyglass-cache"]["panels"]
    }
    assert "Checkpoint interval (--prompt-cache-every)" in dropped
    assert "Evictions per minute against the hourly baseline" not in dropped
    early = boards["spyglass-early-stops"]["panels"]  # the engine's finish reasons, without the serve's query
    assert [
        t["expr"] for p in early if p["type"] != "row" for t in p["targets"] if "spyglass_infer_" in t["expr"]
    ] == []
    waiting = next(p for p in boards["spyglass-wall"]["panels"] if p["title"].startswith("Waiting requests"))
    assert waiting["targets"][0]["expr"].index("llama_requests_deferred") < waiting["targets"][0]["expr"].index(
        "prefill_queue_depth"
    )  # llama-server's log gives a prefill depth of 0, which `or` would otherwise keep


def test_the_committed_dashboards_keep_every_panel() -> None:
    d = deployment()
    assert d.source_kinds is None
    for board in DASHBOARDS:
        data = board.json(d)
        assert panels_with_data(data["panels"], d) == data["panels"]


@pytest.mark.parametrize("example", ["llama-server.toml", "strata.toml"])
def test_spyglass_dashboards_writes_the_deployments_own(example: str, tmp_path: Path) -> None:
    config = ROOT / "examples" / example
    result = CliRunner().invoke(app, ["dashboards", "--config", str(config), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    written = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    assert written == build_all(Deployment.of(load_config(config)))
    if example == "llama-server.toml":
        assert "spyglass-early-stops" not in written or all(
            "Reasoning" not in p["title"] for p in written["spyglass-early-stops"]["panels"]
        )
