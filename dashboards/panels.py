"""Shared panel helpers: selectors with the dashboard variables, thresholds from the heuristics
catalogue, the panel kinds the dashboards use, variables, links and annotations.

A panel is made with one call; its id is given by `Layout`, in the order panels are added, so
ids (and uids, which are constants of each module) stay stable across regenerations.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache

from grafana_foundation_sdk.builders import common as common_builder
from grafana_foundation_sdk.builders import dashboard, heatmap, prometheus, stat, table, timeseries
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DashboardLinkType,
    DashboardSpecialValueMapOptions,
    DataSourceRef,
    DataTransformerConfig,
    DynamicConfigValue,
    MappingType,
    SpecialValueMap,
    SpecialValueMatch,
    Threshold,
    ThresholdsMode,
    ValueMap,
    ValueMappingResult,
    VariableOption,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from spyglass.alerting.heuristics import Deployment, by_id, recording_rules
from spyglass.signals import full_catalogue

TAG = "spyglass"
DATASOURCE = "datasource"  # the datasource variable's name
DS = DataSourceRef(type_val="prometheus", uid=f"${{{DATASOURCE}}}")
GREEN, ORANGE, RED, BLUE, GREY = "green", "orange", "red", "blue", "text"
PURPLE = "purple"  # build and model changes
# Prometheus's own series a dashboard may read besides the catalogue and the recording rules.
PROMETHEUS_SERIES = frozenset({"ALERTS", "ALERTS_FOR_STATE", "up"})
RATE = "$__rate_interval"


@cache
def catalogue():
    return full_catalogue()


def rule_labels(record: str) -> tuple[str, ...]:
    """The labels a recording rule keeps: its `level` (instance_lane -> instance, lane)."""
    return tuple(record.split(":")[0].split("_"))


@cache
def rule_names(d: Deployment) -> frozenset[str]:
    return frozenset(r.record for r in recording_rules(d))


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


# ---------------------------------------------------------------------------------------------
# Thresholds from the heuristics catalogue.
# ---------------------------------------------------------------------------------------------


def threshold(d: Deployment, heuristic: str, name: str) -> float:
    return by_id(d)[heuristic].threshold(name)


def steps(*pairs: tuple[float, str], base: str = GREEN) -> list[Threshold]:
    return [Threshold(color=base)] + [Threshold(value=value, color=color) for value, color in pairs]


def above(value: float, warn: float | None = None) -> list[Threshold]:
    """Green below, red from `value` (orange from `warn` when given)."""
    return steps(*([(warn, ORANGE)] if warn is not None else []), (value, RED))


def below(value: float) -> list[Threshold]:
    """Red below `value`, green from it."""
    return steps((value, GREEN), base=RED)


def runbook(d: Deployment, alert: str) -> dashboard.DashboardLink:
    from spyglass.alerting.rules import runbook_url

    return (
        dashboard.DashboardLink(f"Runbook: {alert}")
        .type(DashboardLinkType.LINK)
        .url(runbook_url(d, alert))
        .target_blank(True)
    )


# ---------------------------------------------------------------------------------------------
# Field overrides: one query's (or one column's) own colour, thresholds, line style, mappings.
# ---------------------------------------------------------------------------------------------


def fixed_color(color: str) -> DynamicConfigValue:
    return DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": color})


def own_thresholds(steps_: list[Threshold]) -> DynamicConfigValue:
    return DynamicConfigValue(
        id_val="thresholds", value={"mode": "absolute", "steps": [{"color": t.color, "value": t.value} for t in steps_]}
    )


def dashed() -> DynamicConfigValue:
    return DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]})


def value_colors(mapping: dict[str, tuple[str, str]]) -> DynamicConfigValue:
    """Text values shown as `text` on a cell of `color` (value mappings of one column)."""
    return DynamicConfigValue(
        id_val="mappings",
        value=[
            {
                "type": "value",
                "options": {
                    key: {"text": text, "color": color, "index": i}
                    for i, (key, (text, color)) in enumerate(mapping.items())
                },
            }
        ],
    )


def _overrides(
    panel, by_query: dict[str, list[DynamicConfigValue]] | None, by_name: dict[str, list[DynamicConfigValue]] | None
):
    for ref, properties in (by_query or {}).items():
        panel = panel.override_by_query(ref, properties)
    for name, properties in (by_name or {}).items():
        panel = panel.override_by_name(name, properties)
    return panel


# ---------------------------------------------------------------------------------------------
# Panels.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Q:
    """One query of a panel: the expression, its legend, and whether it is an instant query (a table's
    rows; `now`: one value at the end of the range, as a series, for a tile that must agree with a
    table's instant rows)."""

    expr: str
    legend: str = ""
    instant: bool = False
    now: bool = False
    heatmap: bool = False
    exemplar: bool = False


def _targets(panel, queries: Sequence[Q | str]):
    for i, q in enumerate(queries):
        q = Q(q) if isinstance(q, str) else q
        target = prometheus.Dataquery().expr(q.expr).legend_format(q.legend or "__auto").ref_id(chr(65 + i))
        if q.instant:
            target = target.instant().format(PromQueryFormat.TABLE)
        elif q.now:
            target = target.instant()
        elif q.heatmap:
            target = target.format(PromQueryFormat.HEATMAP)
        if q.exemplar:
            target = target.exemplar(True)
        panel = panel.with_target(target.datasource(DS))
    return panel


def _common(
    panel,
    title: str,
    unit: str,
    queries,
    width: int,
    height: int,
    description: str,
    thresholds: list[Threshold] | None,
    links: Iterable[dashboard.DashboardLink],
):
    panel = panel.title(title).datasource(DS).unit(unit).span(width).height(height)
    if description:
        panel = panel.description(description)
    if thresholds:
        panel = panel.thresholds(dashboard.ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps(thresholds))
    links = list(links)
    if links:
        panel = panel.links(links)
    return _targets(panel, queries)


def timeseries_panel(
    title: str,
    unit: str,
    *queries: Q | str,
    width: int = 12,
    height: int = 8,
    description: str = "",
    thresholds: list[Threshold] | None = None,
    stack: bool = False,
    links: Iterable[dashboard.DashboardLink] = (),
    min_: float | None = 0,
    overrides: dict[str, list[DynamicConfigValue]] | None = None,
):
    """Lines over time; `overrides` by query refId (A, B, ...): a colour, a dashed line."""
    panel = (
        timeseries.Panel()
        .line_width(2)
        .fill_opacity(10)
        .legend(
            common_builder.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
    )
    if min_ is not None:
        panel = panel.min(min_)
    if thresholds:
        panel = panel.thresholds_style(
            common_builder.GraphThresholdsStyleConfig().mode(
                common.GraphThresholdsStyleMode.LINE_AND_AREA
                if len(thresholds) > 2
                else common.GraphThresholdsStyleMode.LINE
            )
        )
    if stack:
        panel = panel.stacking(common_builder.StackingConfig().mode(common.StackingMode.NORMAL))
    panel = _overrides(panel, overrides, None)
    return _common(panel, title, unit, queries, width, height, description, thresholds, links)


def stat_panel(
    title: str,
    unit: str,
    *queries: Q | str,
    width: int = 6,
    height: int = 6,
    description: str = "",
    thresholds: list[Threshold] | None = None,
    mappings: dict[str, tuple[str, str]] | None = None,
    no_value: str = "",
    links: Iterable[dashboard.DashboardLink] = (),
    text_mode=None,
    color_mode: common.BigValueColorMode = common.BigValueColorMode.BACKGROUND,
    graph_mode: common.BigValueGraphMode = common.BigValueGraphMode.NONE,
    overrides: dict[str, list[DynamicConfigValue]] | None = None,
):
    """Big numbers, one tile per series, the background coloured by the thresholds (`color_mode`
    NONE: plain numbers, for indicators that are not alerts); `overrides` by query refId."""
    panel = (
        stat.Panel()
        .reduce_options(common_builder.ReduceDataOptions().calcs(["lastNotNull"]))
        .color_mode(color_mode)
        .graph_mode(graph_mode)
        .justify_mode(common.BigValueJustifyMode.CENTER)
        .orientation(common.VizOrientation.AUTO)
    )
    if text_mode is not None:
        panel = panel.text_mode(text_mode)
    if mappings:
        panel = panel.mappings(
            [
                ValueMap(
                    options={
                        value: ValueMappingResult(text=text, color=color, index=i)
                        for i, (value, (text, color)) in enumerate(mappings.items())
                    }
                )
            ]
        )
    if no_value:
        panel = panel.no_value(no_value)
    panel = _overrides(panel, overrides, None)
    return _common(panel, title, unit, queries, width, height, description, thresholds, links)


def heatmap_panel(
    title: str,
    unit: str,
    query: Q | str,
    width: int = 12,
    height: int = 8,
    description: str = "",
    links: Iterable[dashboard.DashboardLink] = (),
):
    """Buckets of a histogram over time (the query is `sum by (le) (rate(..._bucket[...]))`)."""
    q = Q(query) if isinstance(query, str) else query
    q = Q(q.expr, q.legend or "{{le}}", heatmap=True, exemplar=q.exemplar)
    panel = heatmap.Panel().calculate(False).show_legend().y_axis(heatmap.YAxisConfig().unit(unit))
    return _common(panel, title, unit, [q], width, height, description, None, links)


def table_panel(
    title: str,
    unit: str,
    *queries: Q | str,
    width: int = 12,
    height: int = 8,
    description: str = "",
    no_value: str = "",
    links: Iterable[dashboard.DashboardLink] = (),
    data_links: Iterable[dashboard.DashboardLink] = (),
    columns: dict[str, str] | None = None,
    columns_by_name: dict[str, list[DynamicConfigValue]] | None = None,
    sort_by: str = "",
    large: bool = False,
):
    """Instant queries as a table: one row per series, its labels as columns; `columns` (label ->
    header) keeps those columns only, in that order, renamed; `columns_by_name` overrides by column."""
    panel = table.Panel().show_header(True)
    if large:
        panel = panel.cell_height(common.TableCellHeight.LG)
    if columns:
        panel = panel.with_transformation(
            DataTransformerConfig(id_val="filterFieldsByName", options={"include": {"names": list(columns)}})
        )
        panel = panel.with_transformation(
            DataTransformerConfig(
                id_val="organize",
                options={
                    "indexByName": {name: i for i, name in enumerate(columns)},
                    "renameByName": {name: header for name, header in columns.items() if header != name},
                },
            )
        )
    if sort_by:
        panel = panel.with_transformation(
            DataTransformerConfig(
                id_val="sortBy", options={"sort": [{"field": columns.get(sort_by, sort_by) if columns else sort_by}]}
            )
        )
    panel = _overrides(panel, None, columns_by_name)
    if no_value:
        panel = panel.no_value(no_value)
    data_links = list(data_links)
    if data_links:
        panel = panel.data_links(data_links)
    instant = [
        Q(q.expr if isinstance(q, Q) else q, q.legend if isinstance(q, Q) else "", instant=True) for q in queries
    ]
    return _common(panel, title, unit, instant, width, height, description, None, links)


def special_no_data(text: str, color: str):
    """A mapping for 'no value' (an absent series), for tiles where absence is itself the news."""
    return SpecialValueMap(
        options=DashboardSpecialValueMapOptions(
            match=SpecialValueMatch.NULL_AND_NAN, result=ValueMappingResult(text=text, color=color)
        )
    )


# ---------------------------------------------------------------------------------------------
# The dashboard skeleton.
# ---------------------------------------------------------------------------------------------


def variables(board: dashboard.Dashboard) -> dashboard.Dashboard:
    """datasource, host, instance, lane: each instance-scoped query narrows by the ones before it."""

    def query_var(name: str, label: str, query: str) -> dashboard.QueryVariable:
        return (
            dashboard.QueryVariable(name)
            .label(label)
            .datasource(DS)
            .query(query)
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
            .current(VariableOption(selected=True, text="All", value="$__all"))
        )

    return (
        board.with_variable(
            dashboard.DatasourceVariable(DATASOURCE)
            .label("Prometheus")
            .type("prometheus")
            .current(VariableOption(selected=True, text="Prometheus", value="prometheus"))
        )
        .with_variable(query_var("host", "Host", "label_values(spyglass_agent_info, host)"))
        .with_variable(
            query_var("instance", "Instance", 'label_values(spyglass_engine_ready{host=~"$host"}, instance)')
        )
        .with_variable(
            query_var("lane", "Lane", 'label_values(spyglass_gateway_requests_received_total{host=~"$host"}, lane)')
        )
    )


def annotation_queries() -> list[tuple[str, str, str, str]]:
    """(name, expression, title format, colour): supervisord's process events, engine (re)starts and
    build switches, and alert notifications (ALERTS firing, the Watchdog left out)."""
    return [
        (
            "Process exits (supervisord)",
            f"sum by (host, program, cause) (increase({s('spyglass_supervisord_exits_total', expected='false')}[{RATE}])) > 0",
            "{{program}} exited: {{cause}}",
            RED,
        ),
        (
            "Process spawns (supervisord)",
            f"sum by (host, program) (increase({s('spyglass_supervisord_spawns_total')}[{RATE}])) > 0",
            "{{program}} spawned",
            BLUE,
        ),
        (
            "Engine starts and build switches",
            f"sum by (host, instance) (increase({s('spyglass_engine_starts_total')}[{RATE}])) > 0"
            f" or sum by (host, instance) (increase({s('spyglass_switch_switches_total')}[{RATE}])) > 0",
            "{{instance}} (re)started or switched build",
            ORANGE,
        ),
        (
            "Alerts firing",
            s("ALERTS", alertstate="firing", alertname=exclude("Watchdog")),
            "{{alertname}} {{instance}}",
            RED,
        ),
    ]


def changed_info(metric: str, labels: str) -> str:
    """The info series of `metric` for the instances whose `labels` took two values within
    $__rate_interval: a change, with the labels it changed to. Neither the first series an instance
    shows nor one that comes back after a scrape gap is a change (they have one value in the range).
    Per host: an instance name is unique on its host only (docs/scale.md)."""
    seen = f"count by (host, instance) (max by (host, instance, {labels}) (max_over_time({s(metric)}[{RATE}])))"
    return f"max by (host, instance, {labels}) ({s(metric)}) and on (host, instance) ({seen} > 1)"


def change_annotation_queries() -> list[tuple[str, str, str, str]]:
    """(name, expression, title format, colour) of build and model changes (the lifecycle dashboard's)."""
    return [
        (
            "Engine build changes",
            changed_info("spyglass_engine_build_info", "build_name, version, build"),
            "{{instance}} on {{host}} now runs {{build_name}} {{version}} (build {{build}})",
            PURPLE,
        ),
        (
            "Model changes",
            changed_info("spyglass_engine_model_info", "model, md5"),
            "{{instance}} on {{host}} loaded {{model}} (md5 {{md5}})",
            PURPLE,
        ),
    ]


# The SDK's AnnotationQuery has no titleFormat (what Grafana's Prometheus annotations show as the
# title); model.py adds it to the JSON from this table, by annotation name.
def title_formats() -> dict[str, str]:
    return {name: title for name, _, title, _ in [*annotation_queries(), *change_annotation_queries()]}


def with_annotations(
    board: dashboard.Dashboard, queries: Sequence[tuple[str, str, str, str]] | None = None
) -> dashboard.Dashboard:
    for name, expr, _, color in annotation_queries() if queries is None else queries:
        board = board.annotation(
            dashboard.AnnotationQuery().name(name).datasource(DS).expr(expr).enable(True).icon_color(color).hide(False)
        )
    return board


@dataclass
class Layout:
    """Adds panels in reading order and numbers them 1, 2, 3, ... (stable panel ids)."""

    board: dashboard.Dashboard
    next_id: int = 1
    titles: list[str] = field(default_factory=list)

    def row(self, title: str) -> Layout:
        self.board = self.board.with_row(dashboard.Row(title).id(self.next_id))
        self.next_id += 1
        return self

    def add(self, *panels) -> Layout:
        for panel in panels:
            self.board = self.board.with_panel(panel.id(self.next_id))
            self.next_id += 1
        return self


def board(
    uid: str,
    title: str,
    description: str,
    *,
    refresh: str = "30s",
    time_from: str = "now-6h",
    links_to: Sequence[tuple[str, str]] = (),
) -> Layout:
    """A dashboard with the spyglass tag, the variables, the annotations, a dropdown of every spyglass
    dashboard (keeping time and variables) and direct links to `links_to` ((uid, title) pairs)."""
    b = (
        dashboard.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags([TAG, "generated"])
        .editable()
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .refresh(refresh)
        .time(time_from, "now")
        .timezone("browser")
        .link(
            dashboard.DashboardLink("Spyglass dashboards")
            .type(DashboardLinkType.DASHBOARDS)
            .tags([TAG])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
    )
    for target_uid, target_title in links_to:
        b = b.link(
            dashboard.DashboardLink(target_title)
            .type(DashboardLinkType.LINK)
            .url(f"/d/{target_uid}")
            .include_vars(True)
            .keep_time(True)
            .icon("dashboard")
        )
    return Layout(with_annotations(variables(b)))


__all__ = [
    "BLUE",
    "DS",
    "GREEN",
    "GREY",
    "ORANGE",
    "PROMETHEUS_SERIES",
    "Q",
    "RATE",
    "RED",
    "Layout",
    "MappingType",
    "above",
    "base_name",
    "below",
    "board",
    "catalogue",
    "dashed",
    "exclude",
    "fixed_color",
    "match",
    "own_thresholds",
    "value_colors",
    "heatmap_panel",
    "labels_of",
    "quantile",
    "rate",
    "rule_labels",
    "rule_names",
    "runbook",
    "s",
    "special_no_data",
    "stat_panel",
    "steps",
    "table_panel",
    "threshold",
    "timeseries_panel",
]
