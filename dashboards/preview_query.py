"""The preview's data: every panel's queries of a dashboard (variables substituted as Grafana would)
run through Prometheus's HTTP API (`run_queries`), and the time range the command line gives (`parse_time`)."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from spyglass.dashboards.lint import panels, substitute


@dataclass
class Series:
    labels: dict[str, str]
    times: list[float]
    values: list[float]


@dataclass
class Result:
    """What one query of a panel returned: its series, or the error Prometheus gave."""

    ref: str
    expr: str
    legend: str
    series: list[Series] = field(default_factory=list)
    error: str = ""


def parse_time(text: str, now: float | None = None) -> float:
    """Unix seconds, ISO 8601, `now` or `now-30m` / `now-6h` / `now-2d`."""
    now = time.time() if now is None else now
    m = re.fullmatch(r"now(?:-(\d+)([smhd]))?", text.strip())
    if m:
        return now - (int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)] if m.group(1) else 0)
    try:
        return float(text)
    except ValueError:
        return datetime.fromisoformat(text).timestamp()


def _query(client: httpx.Client, expr: str, start: float, end: float, step: float, instant: bool) -> list[Series]:
    if instant:
        response = client.post("/api/v1/query", data={"query": expr, "time": end})
    else:
        response = client.post("/api/v1/query_range", data={"query": expr, "start": start, "end": end, "step": step})
    body = response.json()
    if body.get("status") != "success":
        raise ValueError(body.get("error") or f"HTTP {response.status_code}")
    out = []
    for item in body["data"]["result"]:
        points = item.get("values") or ([item["value"]] if "value" in item else [])
        out.append(Series(item["metric"], [float(t) for t, _ in points], [float(v) for _, v in points]))
    return out


def run_queries(
    dashboard: dict[str, Any],
    prometheus: str,
    start: float,
    end: float,
    *,
    scrape_seconds: float = 15.0,
    points: int = 240,
    values: dict[str, str] | None = None,
) -> dict[int, list[Result]]:
    """Panel id -> each of its queries' results, the variables substituted as Grafana would."""
    step = max(1.0, math.ceil((end - start) / points))
    results: dict[int, list[Result]] = {}
    with httpx.Client(base_url=prometheus, timeout=30) as client:
        for panel in panels(dashboard):
            for target in panel.get("targets", []):
                expr = substitute(
                    target["expr"],
                    step_seconds=step,
                    scrape_seconds=scrape_seconds,
                    range_seconds=end - start,
                    values=values,
                )
                result = Result(target.get("refId", ""), expr, target.get("legendFormat", ""))
                try:
                    result.series = _query(client, expr, start, end, step, bool(target.get("instant")))
                except (ValueError, httpx.HTTPError) as exc:
                    result.error = str(exc)
                results.setdefault(panel["id"], []).append(result)
    return results
