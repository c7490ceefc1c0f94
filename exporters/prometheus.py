"""Prometheus exposition of the metric state.

Families come from the catalogue in name order and series in label order, so the output is
deterministic for a given state (tests/golden/metrics.prom relies on it).
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from exporters.state import MetricState


def _le(bound: float) -> str:
    return repr(float(bound))


class StateCollector:
    """A prometheus_client collector that reads MetricState."""

    def __init__(self, state: MetricState) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        with self.state.lock:
            families = [self._family(spec) for spec in self.state.catalogue]
        yield from families

    def _family(self, spec: Any) -> Metric:
        labels = list(spec.labels)
        if spec.type == "histogram":
            histogram = HistogramMetricFamily(spec.name, spec.help, labels=labels)
            bounds = self.state.bounds[spec.name]
            for key, (counts, total) in sorted(self.state.hists[spec.name].items()):
                cumulative, running = [], 0
                for bound, count in zip(list(bounds) + [float("inf")], counts):
                    running += count
                    cumulative.append(("+Inf" if bound == float("inf") else _le(bound), running))
                histogram.add_metric(list(key), cumulative, total)
            return histogram
        cls = CounterMetricFamily if spec.type == "counter" else GaugeMetricFamily
        family = cls(spec.name, spec.help, labels=labels)
        for key, value in sorted(self.state.values[spec.name].items()):
            family.add_metric(list(key), value)
        return family


def registry_for(state: MetricState) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(state))
    return registry


def render(state: MetricState) -> bytes:
    """The /metrics body for `state`."""
    return generate_latest(registry_for(state))
