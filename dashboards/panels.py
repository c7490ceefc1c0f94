"""The panel kinds the dashboards use (timeseries, stat, heatmap, table), their queries (`Q`) and
field overrides. Selectors are in promql, thresholds in thresholds, the dashboard skeleton
(variables, links, annotations, `Layout`) in skeleton.

A panel is made with one call; its id is given by `Layout`, in the order panels are added, so
ids (and uids, which are constants of each module) stay stable across regenerations.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from grafana_foundation_sdk.builders import common as common_builder
from grafana_foundation_sdk.builders import dashboard, heatmap, prometheus, stat, table, timeseries
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (
    DataTransformerConfig,
    DynamicConfigValue,
    Threshold,
    ThresholdsMode,
    ValueMap,
    ValueMappingResult,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from spyglass.dashboards.promql import DS

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
