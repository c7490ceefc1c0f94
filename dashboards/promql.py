"""The dashboards' PromQL: selectors filtered by the dashboard variables their labels allow (`s`), rates
and quantiles, from the catalogue's labels and the recording rules'."""

from __future__ import annotations

from functools import cache

from grafana_foundation_sdk.models.dashboard import DataSourceRef

from spyglass.signals import full_catalogue

DATASOURCE = "datasource"  # the datasource variable's name
DS = DataSourceRef(type_val="prometheus", uid=f"${{{DATASOURCE}}}")
# Prometheus's own series a dashboard may read besides the catalogue and the recording rules.
PROMETHEUS_SERIES = frozenset({"ALERTS", "ALERTS_FOR_STATE", "up"})
RATE = "$__rate_interval"


@cache
def catalogue():
    return full_catalogue()


def rule_labels(record: str) -> tuple[str, ...]:
    """The labels a recording rule keeps: its `level` (instance_lane -> instance, lane)."""
    return tuple(record.split(":")[0].split("_"))


def base_name(series: str) -> str:
    """The catalogue name of a series: a histogram's _bucket/_sum/_count map to the histogram."""
    specs = catalogue().specs
    for suffix in ("_bucket", "_sum", "_count"):
        if series.endswith(suffix) and series.removesuffix(suffix) in specs:
            return series.removesuffix(suffix)
    return series


def labels_of(series: str) -> tuple[str, ...]:
    if ":" in series:
        return rule_labels(series)
    return catalogue()[base_name(series)].labels


def s(series: str, **matchers: str) -> str:
    """`series{...}` filtered by the dashboard variables its labels allow, plus `matchers`
    (`lane="fast"`; `state='~"A|B"'` for =~, `alertname='!~"X"'` for a negation). Recording rules keep
    the `host` target label (every `by` of spyglass.alerting.heuristics names it), so they are filtered like raw
    series. `ALERTS` also accepts no host: `Watchdog` and `SpyglassTargetDown` (vector(1), absent())
    can carry none on a single Prometheus (see docs/scale.md)."""
    labels = labels_of(series) if series not in PROMETHEUS_SERIES else ()
    parts = ['host=~"$host|"' if series.startswith("ALERTS") else 'host=~"$host"']
    parts += [f'{name}=~"${name}"' for name in ("instance", "lane") if name in labels and name not in matchers]
    for name, value in matchers.items():
        if value.startswith("~"):
            parts.append(f"{name}=~{value[1:]}")
        elif value.startswith("!"):
            parts.append(f"{name}{value}")
        else:
            parts.append(f'{name}="{value}"')
    return f"{series}{{{', '.join(parts)}}}"


def match(pattern: str) -> str:
    """A regex matcher value for `s()`: `state=match("A|B")` is `state=~"A|B"`."""
    return f'~"{pattern}"'


def exclude(pattern: str) -> str:
    """A negative regex matcher value for `s()`: `alertname=exclude("X")` is `alertname!~"X"`."""
    return f'!~"{pattern}"'


def rate(series: str, by: str = "", fn: str = "rate", window: str = RATE, agg: str = "sum", **matchers: str) -> str:
    """`agg by (host, <by>) (fn(series[window]))`: per host too, as an instance or lane name is unique
    on its host only; with no `by`, the total over everything selected."""
    inner = f"{fn}({s(series, **matchers)}[{window}])"
    return f"{agg} by (host, {by}) ({inner})" if by else f"{agg}({inner})"


def quantile(q: float, histogram: str, by: str, **matchers: str) -> str:
    return f"histogram_quantile({q}, sum by (host, {by}, le) (rate({s(histogram + '_bucket', **matchers)}[{RATE}])))"
