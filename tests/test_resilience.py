"""A source that raises costs its lines or its poll, never the agent (faults injected: a bug can
not be caused on purpose in the real parsers)."""

from __future__ import annotations

import tomllib

from conftest import FIXTURES

from spyglass.agent.pipeline import Pipeline
from spyglass.collectors.clock import ManualClock
from spyglass.collectors.engine_log import EngineLogSource
from spyglass.collectors.host import HostSource
from spyglass.config import parse_config
from spyglass.exporters.statefile import StateFile


def pipeline(tmp_path) -> Pipeline:
    config = parse_config(
        tomllib.loads(
            f'[agent]\nstate_dir = "{tmp_path}"\n[exporters.store]\nenabled = false\n'
            f'[sources.engine-b]\nkind = "engine_log"\npath = "{FIXTURES / "engine_log" / "strata-iq3_xxs-b.log"}"\n'
            f'instance = "strata-b"\n[sources.host]\nkind = "host"\n[sources.host.processes.strata-b]\n'
            f'pid_file = "{tmp_path / "none.pid"}"\n'
        ),
        "t",
    )
    return Pipeline(config, ManualClock(), StateFile(tmp_path / "state.json"))


def test_a_poller_that_raises_is_counted_and_retried(tmp_path, monkeypatch):
    def broken(self, now):
        raise RuntimeError("surprise from /proc")

    monkeypatch.setattr(HostSource, "poll", broken)
    p = pipeline(tmp_path)
    p.run_until_idle()
    values = p.state.values
    assert values["spyglass_source_polls_total"][("host", "error")] == 1
    assert values["spyglass_source_up"][("host",)] == 0
    assert values["spyglass_source_lines_total"][("engine-b", "event")] == 35  # the rest went on
    p.close()


def test_a_parser_that_raises_costs_its_lines_not_the_agent(tmp_path, monkeypatch):
    def broken(self, lines):
        raise ZeroDivisionError("a parser bug")

    monkeypatch.setattr(EngineLogSource, "handle_lines", broken)
    p = pipeline(tmp_path)
    p.run_until_idle()
    assert p.state.values["spyglass_source_lines_total"][("engine-b", "invalid")] == 41
    p.close()
