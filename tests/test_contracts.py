"""The contracts between the pipeline and its sources and signals: a class that does not satisfy
its protocol is refused where it registers, with a message that says what it lacks."""

from __future__ import annotations

import pytest

from spyglass import collectors
from spyglass.collectors import LineSourceBase, PolledSourceBase, PollPolicy, PollResult, SourceOptions, register
from spyglass.signals import SIGNALS, SignalsBase, check_signals_class, full_catalogue, load_all, signals_for
from spyglass.signals.engine_log import EngineSignals
from spyglass.signals.state import MetricState


def test_a_source_class_that_is_neither_kind_is_refused():
    with pytest.raises(
        ValueError,
        match=r"neither a line source \(lacks .*handle_lines.*\) nor a polled source "
        r"\(lacks .*poll, poll_policy.*\)",
    ):

        @register("test_neither", SourceOptions)
        class Neither:
            def __init__(self, name, options, host=""):
                pass

            def handle(self, line):
                return line

    assert "test_neither" not in collectors.REGISTRY


def test_a_polled_source_without_the_base_defaults_names_what_it_lacks():
    with pytest.raises(ValueError, match=r"polled source \(lacks checkpoint, close, restore\)"):

        @register("test_bare_poller", SourceOptions)
        class BarePoller:
            def __init__(self, name, options, host=""):
                pass

            def poll(self, now):
                return PollResult()

            def poll_policy(self):
                return PollPolicy(5.0)

    assert "test_bare_poller" not in collectors.REGISTRY


def test_a_source_class_that_is_both_kinds_is_refused():
    with pytest.raises(ValueError, match="both a line source and a polled source; register one class of each"):

        @register("test_both", SourceOptions)
        class Both(LineSourceBase, PolledSourceBase):
            def __init__(self, name, options, host=""):
                pass

            def handle_lines(self, lines):
                return [], {}, b""

            def poll(self, now):
                return PollResult()

            def poll_policy(self):
                return PollPolicy(5.0)

    assert "test_both" not in collectors.REGISTRY


def test_the_optional_capabilities_are_protocols_a_source_satisfies_or_not():
    """parse_note and samples_present are typed protocols, not attributes looked up by name."""
    from spyglass.collectors import NotesItsParser, SaysWhatItSamples
    from spyglass.collectors.engine_log import EngineLogOptions, EngineLogSource
    from spyglass.collectors.infer_store import InferStoreOptions, InferStoreSource
    from spyglass.collectors.switch_log import SwitchLogOptions, SwitchLogSource

    engine = EngineLogSource("e", EngineLogOptions(kind="engine_log", path="/nonexistent/e.log"))
    switch = SwitchLogSource("s", SwitchLogOptions(kind="switch_log", path="/nonexistent/s.log"))
    assert isinstance(engine, NotesItsParser) and not isinstance(switch, NotesItsParser)
    infer = InferStoreSource("i", InferStoreOptions(kind="infer_store", path="/nonexistent/infer"))
    assert isinstance(infer, SaysWhatItSamples) and infer.samples_present is False
    for source in (engine, switch, infer):
        source.close()


def test_a_registration_builds_only_the_ways_its_kind_is_read():
    switch = collectors.load_all()["switch_log"]
    with pytest.raises(ValueError, match="source kind 'switch_log' is not polled"):
        switch.build_polled("s", switch.options(kind="switch_log", path="/nonexistent/s.log"))


def test_a_source_class_with_the_wrong_constructor_is_refused():
    with pytest.raises(ValueError, match=r"must be constructible as cls\(name, options, host=\.\.\.\)"):

        @register("test_ctor", SourceOptions)
        class NoHost(LineSourceBase):
            def __init__(self, name, options):
                pass

            def handle_lines(self, lines):
                return [], {}, b""

    assert "test_ctor" not in collectors.REGISTRY


def test_a_signals_class_without_apply_is_refused():
    with pytest.raises(ValueError, match=r"signals for 'test_kind': .*NoApply has no apply\(event\) method"):

        @signals_for("test_kind", [])
        class NoApply(SignalsBase):
            def derive(self, event):
                pass

    assert "test_kind" not in SIGNALS


def test_a_signals_class_taking_positional_settings_is_refused():
    with pytest.raises(ValueError, match=r"must be constructible as cls\(state, settings=SignalsSettings"):

        @signals_for("test_kind", [])
        class Positional:
            def __init__(self, state, lanes, *_args):
                self.state = state

            def apply(self, event):
                pass

    assert "test_kind" not in SIGNALS


def test_every_registered_class_fits_its_contract():
    for kind, registration in collectors.load_all().items():
        for cls in (registration.tailed, registration.polled):
            if cls is not None:
                assert collectors.check_source_class(kind, cls) == (
                    "polled" if cls is registration.polled else "tailed"
                )
    for kind, registration in load_all().items():
        if registration.cls is not None:
            check_signals_class(kind, registration.cls)


def test_a_kind_with_both_classes_tails_only_when_given_a_path():
    registration = collectors.load_all()["serve_status"]
    options = registration.options
    assert registration.is_polled(options(url="http://127.0.0.1:1/v1/status"))
    assert not registration.is_polled(options(path="snapshots.jsonl"))
    assert not collectors.load_all()["engine_log"].is_polled(collectors.load_all()["engine_log"].options(path="x"))
    assert collectors.load_all()["infer_store"].is_polled(collectors.load_all()["infer_store"].options(path="x"))


def test_the_engine_operations_name_declared_metrics_of_their_type_and_parsed_kinds():
    from spyglass.collectors.engine_log import PATTERNS
    from spyglass.collectors.llama_grammar import PATTERNS as LLAMA_PATTERNS
    from spyglass.signals.engine_log import CLOSED, OPS, SPECS, Add, Count, Observe, Set

    types = {spec.name: spec.type for spec in SPECS}
    wanted = {Count: "counter", Add: "counter", Observe: "histogram", Set: "gauge"}
    for kind, ops in OPS.items():
        assert kind in PATTERNS or kind in LLAMA_PATTERNS or kind in ("error", "cache_inventory"), kind
        for op in ops:
            assert types.get(op.metric) == wanted[type(op)], (kind, op)
            if isinstance(op, Count) and op.by:
                assert (op.closed or op.by) in CLOSED, (kind, op)
    signals = EngineSignals(MetricState(full_catalogue()))
    custom = {name for name in vars(EngineSignals) if name.startswith("on_")}
    assert {rule.__name__ for rule in signals.rules.values()} == custom
    assert set(signals.rules) <= set(PATTERNS)
