"""The metric catalogue: one table (name, type, unit, help, labels) for every exported metric.

It declares the OpenTelemetry instruments, the Prometheus families and docs/metrics.md. Each
signals module contributes its rows with `declare`; nothing else names a metric.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

MetricType = Literal["counter", "gauge", "histogram", "info"]

OTEL_UNITS = {
    "seconds": "s",
    "bytes": "By",
    "tokens": "{token}",
    "tokens_per_second": "{token}/s",
    "ratio": "1",
    "": "1",
}


@dataclass(frozen=True)
class MetricSpec:
    name: str  # the Prometheus name, with its unit and _total/_info suffix
    type: MetricType
    help: str  # one sentence, ending in a period
    labels: tuple[str, ...] = ()
    unit: str = ""  # the Prometheus base unit word: seconds, bytes, tokens, ...
    buckets: tuple[float, ...] = ()
    source: str = ""  # which signals module declares it (for docs)
    exemplars: bool = False  # a histogram whose buckets carry the latest observation's request (its trace)
    engines: frozenset[str] = frozenset()  # the engines whose logs can give it (empty: any engine, or not an engine's)

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


class SpecMaker(Protocol):
    """Makes one catalogue row of a signals module: its source and base labels preset."""

    def __call__(
        self,
        name: str,
        type_: MetricType,
        help_: str,
        extra: tuple[str, ...] = (),
        unit: str = "",
        buckets: tuple[float, ...] = (),
        labels: tuple[str, ...] | None = None,
        exemplars: bool = False,
    ) -> MetricSpec: ...


def spec_maker(source: str, base_labels: tuple[str, ...] = ()) -> SpecMaker:
    """A short constructor for one signals module's rows: `labels` replaces the base labels, `extra`
    follows them."""

    def make(
        name: str,
        type_: MetricType,
        help_: str,
        extra: tuple[str, ...] = (),
        unit: str = "",
        buckets: tuple[float, ...] = (),
        labels: tuple[str, ...] | None = None,
        exemplars: bool = False,
    ) -> MetricSpec:
        return MetricSpec(
            name, type_, help_, base_labels + extra if labels is None else labels, unit, buckets, source, exemplars
        )

    return make


@dataclass
class Catalogue:
    """The one table of exported metrics. Guarantees: every row follows the Prometheus naming rules
    (checked at `declare`); a name is declared once, or again only identically; no two metrics
    share an OpenTelemetry name; iteration is in name order, so every output it drives is stable."""

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
            specs[name] = MetricSpec(
                spec.name,
                spec.type,
                spec.help,
                spec.labels,
                spec.unit,
                tuple(float(b) for b in bounds),
                spec.source,
                spec.exemplars,
            )
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
    if spec.exemplars and spec.type != "histogram":
        problems.append("only a histogram carries exemplars")
    if not spec.help.endswith("."):
        problems.append("help is a sentence ending in a period")
    if problems:
        raise ValueError(f"metric {spec.name}: " + "; ".join(problems))
