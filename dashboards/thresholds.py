"""The dashboards' colours and thresholds, from the heuristics catalogue, and runbook links."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.models.dashboard import DashboardLinkType, Threshold

from spyglass.alerting.heuristics import Deployment, by_id

GREEN, ORANGE, RED, BLUE, GREY = "green", "orange", "red", "blue", "text"
PURPLE = "purple"  # build and model changes


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
