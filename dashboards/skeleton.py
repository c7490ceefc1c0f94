"""The dashboard skeleton: the spyglass tag, the variables, the annotations, the links between
dashboards, and `Layout`, which numbers the panels in the order they are added (stable ids)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DashboardLinkType,
    VariableOption,
    VariableRefresh,
    VariableSort,
)

from spyglass.dashboards.promql import DATASOURCE, DS, RATE, exclude, s
from spyglass.dashboards.thresholds import BLUE, ORANGE, PURPLE, RED

TAG = "spyglass"


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
