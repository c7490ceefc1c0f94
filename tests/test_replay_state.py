"""The replay's view of polled sources comes from the source registry: a source of every registered kind
whose polls describe the present goes stale when its polls stop; one whose polls import history does not."""

from __future__ import annotations

import pytest

from spyglass import collectors
from spyglass.alerting.replay_state import MISSED_POLLS, ReplayState
from spyglass.collectors import PolledOptions
from spyglass.collectors.event import Event
from spyglass.config import Config
from spyglass.signals import full_catalogue
from spyglass.signals.state import MetricState

INTERVAL = 7.0


def one_source_of_every_kind() -> dict[str, collectors.SourceOptions]:
    """A source of each registered kind, its options built without validation (no URL or path is needed here)."""
    sources: dict[str, collectors.SourceOptions] = {}
    for kind, registration in sorted(collectors.load_all().items()):
        extra = {"interval_seconds": INTERVAL} if issubclass(registration.options, PolledOptions) else {}
        sources[f"{kind}-source"] = registration.options.model_construct(kind=kind, instance=f"{kind}-i", **extra)
    return sources


def stale_kinds_after_one_poll_each() -> tuple[set[str], set[str]]:
    """The kinds stale just before, and just after, MISSED_POLLS intervals from a poll of every source."""
    sources = one_source_of_every_kind()
    replay, state = ReplayState.of(Config(sources=sources)), MetricState(full_catalogue())
    for name, options in sources.items():
        replay.apply(Event(100.0, name, "status", options.instance), state)
    horizon = 100.0 + MISSED_POLLS * INTERVAL
    return {kind for kind, _ in replay.stale(horizon - 0.5)}, {kind for kind, _ in replay.stale(horizon + 0.5)}


def test_every_registered_kind_that_polls_the_present_goes_stale_in_a_replay():
    registry = collectors.load_all()
    polled = {kind for kind, r in registry.items() if r.polled is not None}
    imports_history = {kind for kind in polled if not getattr(registry[kind].polled, "samples_present", True)}
    before, after = stale_kinds_after_one_poll_each()
    assert before == set()
    assert after == polled - imports_history
    assert "llama_server" in after and "infer_store" in imports_history  # the drift a hand-kept list had


def test_a_polled_kind_must_have_polled_options():
    class Options(collectors.SourceOptions):
        pass

    with pytest.raises(
        ValueError,
        match=r"'test_unpolled_options': the options of a polled source subclass"
        r" PolledOptions \(interval_seconds\); .*Options does not",
    ):

        @collectors.register("test_unpolled_options", Options)
        class Poller(collectors.PolledSourceBase):
            def __init__(self, name, options, host=""):
                pass

            def poll(self, now):
                return collectors.PollResult()

            def poll_policy(self):
                return collectors.PollPolicy(5.0)

    assert "test_unpolled_options" not in collectors.REGISTRY
