"""The evidence page of every alert of the incident corpus (tests/incidents/): each window built and
ingested with the real `spyglass ingest`, diagnosed with the real `diagnose`, and for each finding the page
of its alert (with the finding's instance or lane as labels) over the same window: it must show the very
figures diagnose quotes, the comparison, a chart, and a trace link where a request stands for the finding.
A window with nothing stored says so. The HTML is checked as text; tests/test_evidence_e2e.py opens it in
Chromium."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape
from pathlib import Path

import pytest
from incidents.windows import BY_NAME, WINDOWS
from typer.testing import CliRunner

from spyglass.alerting.heuristics import Deployment
from spyglass.cli.app import app
from spyglass.config import load_config
from spyglass.forensics.diagnose import diagnose
from spyglass.forensics.evidence import SERIES, build, lookback, rule_of
from spyglass.forensics.evidence_page import html, text
from spyglass.forensics.run import Window

pytestmark = pytest.mark.usefixtures("spawns")  # ingest and queries run processes
NAMES = [w.name for w in WINDOWS if w.must or w.diagnose]


def visible(page: str) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    built: dict[str, Path] = {}

    def store(name: str) -> Path:
        if name not in built:
            config = BY_NAME[name].build(tmp_path_factory.mktemp(name))
            result = CliRunner().invoke(app, ["ingest", "--config", str(config)])
            assert result.exit_code == 0, result.output[-500:]
            built[name] = config
        return built[name]

    return store


def number(v: float | int) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{v:g}"


@pytest.mark.parametrize("name", NAMES)
def test_every_findings_page_shows_the_figures_diagnose_quotes(stores, name: str) -> None:
    window = BY_NAME[name]
    config = load_config(stores(name))
    w = Window(window.start, window.end)
    findings = diagnose(config, w).findings
    assert findings, f"{name}: diagnose found nothing to page about"
    for f in findings:
        labels = {k: v for k, v in (("instance", f.instance), ("lane", f.lane)) if v}
        page = build(config, f.alert, labels, window=w)
        mine = [g for g in page.findings if g.heuristic == f.heuristic and (g.instance, g.lane) == (f.instance, f.lane)]
        assert [g.figures for g in mine] == [f.figures], f"{name} {f.alert} {labels}: not diagnose's figures"
        shown = visible(html(page))
        for figure, value in f.figures.items():
            assert f"{figure} {number(value)}" in shown, f"{name} {f.alert}: {figure} {value} not on the page"
        assert f.summary in shown and f"The comparison: {page.heuristic.evidence.control}" in shown
        assert page.comparison and page.comparison[0][1] in shown, f"{name} {f.alert}: no comparison"
        assert "<svg" in html(page) and page.chart and any(s.points for s in page.chart.series), (
            f"{name} {f.alert}: no chart"
        )
        if f.trace_request_id:
            assert f'href="/trace/{f.trace_request_id}"' in html(page), f"{name} {f.alert}: no trace link"
        if SERIES[page.heuristic.evidence.series].view:  # requests are involved: at least one behind the figures
            assert re.search(r'href="/trace/\d{8}-\d{6}-[0-9a-f]+"', html(page)), f"{name} {f.alert}: no trace link"
        assert page.runbook.endswith(f"/{f.alert}.md") and page.runbook in shown
        assert f"{figure}: {number(value)}" in "\n".join(text(page))


def test_the_thinking_only_page_compares_with_literals_against_without(stores) -> None:
    """Incident 3's reversal, on the page: 16 of 58 with special-token literals against 0 of 295 without."""
    window = BY_NAME["incident3"]
    config = load_config(stores("incident3"))
    page = build(config, "ThinkingOnlyResponses", {"lane": "fast"}, window=Window(window.start, window.end))
    assert page.comparison == [
        ("this window", "16 of 58 with literals thinking-only"),
        ("control group", "0 of 295 without literals"),
    ]
    assert page.request_ids and all(re.match(r"^\d{8}-\d{6}-[0-9a-f]+$", r) for r in page.request_ids)


def test_a_window_with_nothing_in_it_says_so(stores) -> None:
    window = BY_NAME["incident2"]
    config = load_config(stores("incident2"))
    empty = Window(window.start - timedelta(days=30), window.start - timedelta(days=29))
    page = build(config, "EngineEvictionStorm", {"instance": "strata-b"}, window=empty)
    assert page.events == 0 and not page.findings and not page.request_ids
    shown = visible(html(page))
    assert "Nothing is stored in this window" in shown and "no figure, comparison or chart can be computed" in shown


def test_a_hostile_label_is_escaped_and_a_bad_one_refused(stores) -> None:
    from spyglass.query.bounded import QueryError

    window = BY_NAME["incident2"]
    config = load_config(stores("incident2"))
    w = Window(window.start, window.end)
    page = build(config, "EngineEvictionStorm", {"instance": "<script>alert(1)</script>"}, window=w)
    assert "<script>" not in html(page) and "&lt;script&gt;" in html(page)
    for name, labels in (
        ("Not An Alert", {}),
        ("EngineEvictionStorm", {"bad-name": "x"}),
        ("EngineEvictionStorm", {"instance": "x" * 300}),
    ):
        with pytest.raises(QueryError):
            build(config, name, labels, window=w)


def test_the_lookback_is_the_rules_longest_range_and_its_for() -> None:
    d = Deployment()
    _, storm = rule_of(d, "EngineEvictionStorm")  # rate(...[10m]) against the hour before, for 5m: offsets not counted
    assert lookback(d, storm) == timedelta(minutes=65)
