"""The signals a config makes: one object per source kind on a metric state of the full catalogue, with
the config's settings and bucket bounds. The agent's pipeline and the alerting backfill's replay build them
alike, so a replay derives what the running agent would have."""

from __future__ import annotations

from spyglass import signals
from spyglass.config.models import Config
from spyglass.signals import Signals, SignalsLinks, SignalsSettings
from spyglass.signals.state import MetricState


def build_signals(config: Config, state: MetricState) -> dict[str, Signals]:
    """One signals object per source kind, on `state`, with the config's settings and one set of links
    between them (also for a replay); each restored from `state`'s saved signals and saved with it."""
    settings = SignalsSettings(
        lanes=config.lanes(),
        long_prompt_tokens=config.signals.long_prompt_tokens,
        default_prompt_cache_every=config.signals.default_prompt_cache_every,
    )
    links, built = SignalsLinks(), {}
    for kind, registration in signals.load_all().items():
        if registration.cls is not None:
            built[kind] = registration.cls(state, settings=settings, links=links)
            signals.attach_signals(kind, built[kind], state)
    return built


def metric_state(config: Config) -> MetricState:
    """A fresh metric state of the full catalogue with the config's bucket bounds."""
    return MetricState(signals.full_catalogue().with_buckets(config.signals.buckets))
