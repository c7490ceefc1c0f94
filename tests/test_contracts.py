"""The contracts between the pipeline and its sources and signals: a class that does not satisfy
its protocol is refused where it registers, with a message that says what it lacks."""
from __future__ import annotations

import pytest

import collectors
from collectors import LineSourceBase, PolledSourceBase, PollPolicy, PollResult, SourceOptions, register
from signals import SIGNALS, SignalsBase, check_signals_class, full_catalogue, load_all, signals_for
from signals.engine import EngineSignals
from signals.state import MetricState


def test_a_source_class_that_is_neither_kind_is_refused():
    with pytest.raises(ValueError, match=r"neither a line source \(lacks .*handle_lines.*\) nor a polled source "
                                         r"\(lacks .*poll, poll_policy.*\)"):
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
                assert collectors.check_source_class(kind, cls) == ("polled" if cls is registration.polled
                                                                    else "tailed")
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
    from collectors.engine_log import PATTERNS
    from signals.engine import CLOSED, OPS, SPECS, Add, Count, Observe, Set

    types = {spec.name: spec.type for spec in SPECS}
    wanted = {Count: "counter", Add: "counter", Observe: "histogram", Set: "gauge"}
    for kind, ops in OPS.items():
        assert kind in PATTERNS or kind == "error", kind
        for op in ops:
            assert types.get(op.metric) == wanted[type(op)], (kind, op)
            if isinstance(op, Count) and op.by:
                assert (op.closed or op.by) in CLOSED, (kind, op)
    signals = EngineSignals(MetricState(full_catalogue()))
    custom = {name for name in vars(EngineSignals) if name.startswith("on_")}
    assert {rule.__name__ for rule in signals.rules.values()} == custom
    assert set(signals.rules) <= set(PATTERNS)
