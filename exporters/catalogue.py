"""The metric catalogue: one table (name, type, unit, help, labels) for every exported metric.

It declares the OpenTelemetry instruments, the Prometheus families and docs/metrics.md. Each
signals module contributes its rows with `declare`; nothing else names a metric.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

MetricType = Literal["counter", "gauge", "histogram", "info"]

# OpenTelemetry's advisory TTFT head (1 ms .. 10 s) with vLLM's tail out to 30 minutes: CPU-expert
# engines with 250k-token prompts take minutes, and a capped bucket list hides exactly that tail.
LATENCY_SECONDS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                   7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0, 1200.0, 1800.0)
TOKENS_PER_SECOND = (0.5, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0,
                     80.0, 90.0, 100.0, 120.0, 150.0, 200.0)
SNAPSHOT_BYTES = tuple(float(1 << k) for k in range(24, 36))  # 16 MiB .. 32 GiB
PROMPT_TOKENS = (1024.0, 4096.0, 16384.0, 32768.0, 65536.0, 131072.0, 200000.0, 262144.0, 524288.0,
                 1048576.0)

OTEL_UNITS = {"seconds": "s", "bytes": "By", "tokens": "{token}", "tokens_per_second": "{token}/s",
              "ratio": "1", "": "1"}


@dataclass(frozen=True)
class MetricSpec:
    name: str  # the Prometheus name, with its unit and _total/_info suffix
    type: MetricType
    help: str  # one sentence, ending in a period
    labels: tuple[str, ...] = ()
    unit: str = ""  # the Prometheus base unit word: seconds, bytes, tokens, ...
    buckets: tuple[float, ...] = ()
    source: str = ""  # which signals module declares it (for docs)

    @property
    def otel_name(self) -> str:
        """Dotted OpenTelemetry name: no `_total`, and no unit word where a name remains without it."""
        subsystem, _, rest = self.name.removeprefix("spyglass_").removesuffix("_total").partition("_")
        if self.unit and rest.endswith("_" + self.unit):
            rest = rest.removesuffix("_" + self.unit)
        return f"spyglass.{subsystem}.{rest}"

    @property
    def otel_unit(self) -> str:
        return OTEL_UNITS.get(self.unit, "{" + self.unit + "}")


def spec_maker(source: str, base_labels: tuple[str, ...] = ()):
    """A short constructor for one signals module's rows: its source and base labels preset."""

    def make(name: str, type_: MetricType, help_: str, extra: tuple[str, ...] = (), unit: str = "",
             buckets: tuple[float, ...] = (), labels: tuple[str, ...] | None = None) -> MetricSpec:
        return MetricSpec(name, type_, help_, base_labels + extra if labels is None else labels, unit, buckets, source)

    return make


@dataclass
class Catalogue:
    specs: dict[str, MetricSpec] = field(default_factory=dict)

    def declare(self, *specs: MetricSpec) -> None:
        for spec in specs:
            _check_name(spec)
            if spec.name in self.specs and self.specs[spec.name] != spec:
                raise ValueError(f"metric {spec.name} declared twice, differently")
            clash = [s.name for s in self.specs.values() if s.otel_name == spec.otel_name and s.name != spec.name]
            if clash:
                raise ValueError(f"metric {spec.name}: OpenTelemetry name {spec.otel_name} is {clash[0]}'s")
            self.specs[spec.name] = spec

    def __getitem__(self, name: str) -> MetricSpec:
        return self.specs[name]

    def __iter__(self):
        return iter(sorted(self.specs.values(), key=lambda s: s.name))

    def with_buckets(self, overrides: dict[str, list[float]]) -> Catalogue:
        """A copy with histogram buckets replaced; an unknown or non-histogram name is an error."""
        specs = dict(self.specs)
        for name, bounds in overrides.items():
            spec = specs.get(name)
            if spec is None or spec.type != "histogram":
                raise ValueError(f"signals.buckets.{name}: not a histogram of this catalogue")
            if not bounds or sorted(bounds) != list(bounds) or len(set(bounds)) != len(bounds):
                raise ValueError(f"signals.buckets.{name}: bounds must be strictly increasing")
            specs[name] = MetricSpec(spec.name, spec.type, spec.help, spec.labels, spec.unit,
                                     tuple(float(b) for b in bounds), spec.source)
        return Catalogue(specs)


def _check_name(spec: MetricSpec) -> None:
    """Prometheus naming conventions, enforced where metrics are declared."""
    problems = []
    if not spec.name.startswith("spyglass_"):
        problems.append("must start with spyglass_")
    if (spec.type == "counter") != spec.name.endswith("_total"):
        problems.append("counters, and only counters, end in _total")
    if (spec.type == "info") != spec.name.endswith("_info"):
        problems.append("info metrics, and only they, end in _info")
    if spec.unit and spec.unit not in spec.name:
        problems.append(f"the unit {spec.unit!r} must appear in the name")
    if spec.type == "histogram" and not spec.buckets:
        problems.append("a histogram needs buckets")
    if not spec.help.endswith("."):
        problems.append("help is a sentence ending in a period")
    if problems:
        raise ValueError(f"metric {spec.name}: " + "; ".join(problems))
