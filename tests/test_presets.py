"""An engine log's preset is an extension point (issue 40): a new engine's log (vLLM's, SGLang's, a fork's) is its
own module with `@register_preset`, and the options, `check-log`'s choices and the backfill read the registry.
Each test registers into a copy of the registry that it puts back."""

from __future__ import annotations

from pathlib import Path

import pytest

from spyglass import collectors
from spyglass.cli.checklog import choose_preset
from spyglass.collectors import LineSourceBase, preset_names, register_preset, reports_unread
from spyglass.collectors import fields as fields_module
from spyglass.collectors.engine_log import EngineLogOptions
from spyglass.collectors.event import Event


@pytest.fixture
def registry(monkeypatch):
    """The engine log's registration and fields, restored after the test."""
    collectors.load_all()
    monkeypatch.setitem(collectors.REGISTRY, "engine_log", collectors.REGISTRY["engine_log"])
    monkeypatch.setitem(fields_module._DECLARED, "engine_log", fields_module._DECLARED["engine_log"])


class StepLogSource(LineSourceBase):
    """A made-up engine whose every line `step N` is an event."""

    idle_lines = None

    def __init__(self, name, options, host=""):
        self.name = name

    def handle_lines(self, lines):
        events = [Event(0.0, self.name, "step_test", {"n": int(line.split()[1])}) for line in lines]
        return events, {}, b""


def test_the_presets_are_the_registered_ones():
    assert preset_names("engine_log") == ("llama_server", "strata")
    assert (
        EngineLogOptions(path=Path("/x")).idle_lines()
        and not EngineLogOptions(path=Path("/x"), preset="llama_server").idle_lines()
    )
    assert reports_unread(EngineLogOptions(path=Path("/x"), preset="llama_server"))
    assert not reports_unread(EngineLogOptions(path=Path("/x")))


def test_a_new_preset_is_its_own_module_and_nothing_else(registry, tmp_path):
    register_preset("engine_log", "step_test", fields={"step_test": {"n": "int"}})(StepLogSource)
    assert "step_test" in preset_names("engine_log")
    options = EngineLogOptions(path=tmp_path / "x.log", preset="step_test")
    assert isinstance(collectors.REGISTRY["engine_log"].build_tailed("e", options), StepLogSource)
    assert fields_module.fields()["engine_log"]["step_test"] == {"n": "int"}
    log = tmp_path / "step.log"
    log.write_text("".join(f"step {n}\n" for n in range(50)))
    assert choose_preset(log, "UTC")[0] == "step_test"  # check-log weighs it with the others


def test_an_unknown_preset_names_the_registered_ones():
    with pytest.raises(ValueError, match="no preset 'vllm' of engine_log; the presets are: llama_server, strata"):
        EngineLogOptions(path=Path("/x"), preset="vllm")


def test_a_preset_that_does_not_say_what_it_writes_while_idle_is_refused(registry):
    class Quiet(LineSourceBase):
        def __init__(self, name, options, host=""):
            self.name = name

        def handle_lines(self, lines):
            return [], {}, b""

    with pytest.raises(ValueError, match="must say what it writes while idle"):
        register_preset("engine_log", "quiet_test")(Quiet)
