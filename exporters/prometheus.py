"""Prometheus exposition of the metric state: the classic text format, or OpenMetrics with exemplars.

Families come from the catalogue in name order and series in label order, so the output is
deterministic for a given state (tests/golden/metrics.prom and metrics.om rely on it).

A scraper whose Accept header prefers `application/openmetrics-text` (Prometheus does when it
stores exemplars) gets OpenMetrics 1.0.0: counters as families without `_total` and samples with
it, no `_created`, `# EOF` last, and on the histograms fed one (the TTFT and request-duration
histograms) the latest observation of each bucket as an exemplar `# {trace_id="<32 hex>"} value
timestamp`. The trace id is `trace_id_for(request id)`, the id the gateway and serve spans carry
and `spyglass trace` resolves. Anyone else gets the classic text format, unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, Exemplar, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.openmetrics import exposition as openmetrics

from spyglass.collectors.trace_ids import trace_id_for
from spyglass.signals.buckets import le_label
from spyglass.signals.state import MetricState

CONTENT_TYPE_TEXT = CONTENT_TYPE_LATEST  # prometheus_client's, as /metrics always said
CONTENT_TYPE_OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
OPENMETRICS_VERSIONS = ("", "1.0.0", "0.0.1")  # what Prometheus 2.x asks for; 0.0.1 parses as 1.0.0


@lru_cache(maxsize=4096)
def trace_hex(request_id: str) -> str:
    """The 32-hex trace id of a request (cached: a busy bucket shows the same exemplar every scrape)."""
    return format(trace_id_for(request_id), "032x")


class StateCollector:
    """A prometheus_client collector that reads MetricState (with its exemplars, if `exemplars`)."""

    def __init__(self, state: MetricState, exemplars: bool = False) -> None:
        self.state, self.exemplars = state, exemplars

    def collect(self) -> Iterator[Metric]:
        with self.state.lock:
            families = [self._family(spec) for spec in self.state.catalogue]
        yield from families

    def _family(self, spec: Any) -> Metric:
        labels = list(spec.labels)
        if spec.type == "histogram":
            histogram = HistogramMetricFamily(spec.name, spec.help, labels=labels)
            bounds = self.state.bounds[spec.name]
            exemplars = self.state.exemplars.get(spec.name, {}) if self.exemplars else {}
            for key, (counts, total) in sorted(self.state.hists[spec.name].items()):
                cumulative: list[Any] = []
                running = 0
                for index, (bound, count) in enumerate(zip(list(bounds) + [float("inf")], counts)):
                    running += count
                    le = le_label(bound)
                    exemplar = exemplars.get((key, index))
                    if exemplar is None:
                        cumulative.append((le, running))
                    else:
                        request_id, value, ts = exemplar
                        cumulative.append((le, running, Exemplar({"trace_id": trace_hex(request_id)}, value, ts)))
                histogram.add_metric(list(key), cumulative, total)
            return histogram
        cls = CounterMetricFamily if spec.type == "counter" else GaugeMetricFamily
        family = cls(spec.name, spec.help, labels=labels)
        for key, value in sorted(self.state.values[spec.name].items()):
            family.add_metric(list(key), value)
        return family


def registry_for(state: MetricState, exemplars: bool = False) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(state, exemplars))
    return registry


def render(state: MetricState) -> bytes:
    """The classic text /metrics body for `state` (no exemplars: the format has none)."""
    return generate_latest(registry_for(state))


def render_openmetrics(state: MetricState) -> bytes:
    """The OpenMetrics 1.0.0 /metrics body for `state`, with exemplars, ending in `# EOF`."""
    return openmetrics.generate_latest(registry_for(state, exemplars=True))


def wants_openmetrics(accept: str | None) -> bool:
    """Whether an Accept header ranks OpenMetrics 1.0.0 (or 0.0.1) at least as high as the classic text."""
    best = {"openmetrics": 0.0, "text": 0.0}
    for entry in (accept or "").split(","):
        media, *params = (part.strip() for part in entry.split(";"))
        options = dict(p.partition("=")[::2] for p in params)
        try:
            q = float(options.get("q", "1"))
        except ValueError:
            continue
        media = media.lower()
        if media == "application/openmetrics-text" and options.get("version", "") in OPENMETRICS_VERSIONS:
            best["openmetrics"] = max(best["openmetrics"], q)
        elif media in ("text/plain", "*/*", "text/*"):
            best["text"] = max(best["text"], q)
    return best["openmetrics"] > 0 and best["openmetrics"] >= best["text"]
