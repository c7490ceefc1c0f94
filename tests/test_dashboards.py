"""The dashboards as code: generated JSON matches the code, the linter's rules hold, every metric
referenced exists, and every catalogue metric is shown somewhere (or listed as unshown, with why)."""

from __future__ import annotations

import json
import re

import pytest

from spyglass.alerting.heuristics import recording_rules
from spyglass.dashboards.lint import Expr, expr_problems, expressions, problems, series, substitute
from spyglass.dashboards.model import DASHBOARDS, GENERATED, UNSHOWN, build_all, deployment, generated
from spyglass.signals import full_catalogue

D = deployment()
TYPES = {spec.name: spec.type for spec in full_catalogue()}
RULES = {r.record: r.expr for r in recording_rules(D)}
BOARDS = build_all(D)


def test_generated_json_is_what_the_code_makes():
    """`python -m spyglass.dashboards` was run after the last change (and wrote nothing else)."""
    files = generated(D)
    on_disk = {p.name: p.read_text() for p in GENERATED.glob("*.json")}
    assert sorted(on_disk) == sorted(files), "run: .venv/bin/python -m spyglass.dashboards"
    assert [name for name in files if on_disk[name] != files[name]] == [], (
        "run: .venv/bin/python -m spyglass.dashboards"
    )


def test_the_lint_rules_hold():
    assert problems(BOARDS, TYPES, set(RULES)) == []


def test_uids_are_stable_and_unique():
    assert [b.uid for b in DASHBOARDS] == list(BOARDS)
    assert len(set(BOARDS)) == len(BOARDS) and all(re.fullmatch(r"spyglass-[a-z-]+", uid) for uid in BOARDS)
    assert len({d["title"] for d in BOARDS.values()}) == len(BOARDS)
    assert build_all(D) == BOARDS  # built twice, identical: ids and uids do not depend on anything but code


@pytest.mark.parametrize(
    "expr, problem",
    [
        ("spyglass_engine_evictions_total", "counter spyglass_engine_evictions_total outside rate/increase"),
        ("sum(spyglass_engine_ttft_seconds_bucket)", "counter spyglass_engine_ttft_seconds_bucket outside"),
        ("rate(spyglass_engine_evictions_total[5m])", "not [$__rate_interval]"),
        ("max(spyglass_engine_cache_used_bytez)", "spyglass_engine_cache_used_bytez is neither"),
        ("rate(instance_lane:made_up:rate5m[$__rate_interval])", "instance_lane:made_up:rate5m is neither"),
        ("max by (instance) (spyglass_engine_cache_used_bytes)", "by (instance) leaves out host"),
        (
            "max by (host, instance) (spyglass_engine_ready) and on (instance) spyglass_engine_slots",
            "on (instance) leaves out host",
        ),
    ],
)
def test_the_linter_catches(expr, problem):
    """The linter is not a rubber stamp: each rule fails on an expression that breaks it."""
    found = expr_problems(Expr("x", "p", expr), TYPES, set(RULES))
    assert any(problem in p for p in found), found


def test_the_linter_passes_the_right_forms():
    good = [
        'sum by (host, lane) (rate(spyglass_engine_evictions_total{lane=~"$lane"}[$__rate_interval]))',
        "histogram_quantile(0.95, sum by (le) (rate(spyglass_engine_ttft_seconds_bucket[$__rate_interval])))",
        "increase(spyglass_supervisord_spawns_total[15m])",
        "max by (host, instance) (spyglass_engine_cache_used_bytes)",
        "instance_lane:spyglass_engine_evictions:rate10m * 60",
        'count(ALERTS{alertstate="firing"})',
    ]
    assert [p for e in good for p in expr_problems(Expr("x", "p", e), TYPES, set(RULES))] == []


def test_a_panel_without_unit_title_or_variable_datasource_is_caught():
    board = json.loads(json.dumps(BOARDS["spyglass-wall"]))
    panel = board["panels"][0]
    panel["fieldConfig"]["defaults"].pop("unit")
    panel["title"] = ""
    panel["targets"][0]["datasource"] = {"type": "prometheus", "uid": "prometheus"}
    found = problems({"spyglass-wall": board}, TYPES, set(RULES))
    assert {"no unit", "no title", "datasource is not a variable"} <= {p.rsplit(": ", 1)[-1] for p in found}


def _shown() -> set[str]:
    read: set[str] = set()
    for board in BOARDS.values():
        for e in expressions(board):
            read |= series(e.expr)
    for rule in [name for name in read if name in RULES]:
        read |= series(RULES[rule])
    histograms = {n for n, t in TYPES.items() if t == "histogram"}
    return {next((h for h in histograms if name in (h + "_bucket", h + "_sum", h + "_count")), name) for name in read}


def test_every_catalogue_metric_is_shown_or_listed_unshown():
    shown = _shown()
    assert sorted(set(TYPES) - shown - set(UNSHOWN)) == [], "show it on a dashboard or list it in UNSHOWN with why"
    assert sorted(set(UNSHOWN) & shown) == [], "listed as unshown but shown"
    assert sorted(set(UNSHOWN) - set(TYPES)) == [], "UNSHOWN names a metric the catalogue does not have"


def test_thresholds_come_from_the_heuristics_catalogue():
    """Every threshold step of every panel is a number of the catalogue (or 0/1 boundaries of a state)."""
    from spyglass.alerting.heuristics import catalogue

    known = {t.value for h in catalogue(D) for t in h.thresholds}
    known |= {t.value / 2 for h in catalogue(D) for t in h.thresholds if t.unit == "s"}  # the warn step of TTFT
    known |= {0.0, 1.0, 2.0}
    steps = [
        (uid, p["title"], s["value"])
        for uid, b in BOARDS.items()
        for p in b["panels"]
        for s in p.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {}).get("steps", [])
        if s.get("value") is not None
    ]
    assert steps and [x for x in steps if x[2] not in known] == []


def test_variables_substitute_as_grafana_does():
    expr = 'rate(x{host=~"$host", lane=~"${lane}"}[$__rate_interval]) / $__range'
    assert (
        substitute(expr, step_seconds=15, scrape_seconds=15, range_seconds=3600, values={"lane": "fast"})
        == 'rate(x{host=~".*", lane=~"fast"}[60s]) / 3600s'
    )
    assert substitute("[$__rate_interval]", step_seconds=120, scrape_seconds=15, range_seconds=1) == "[135s]"


def test_the_wall_fits_a_1080p_screen_and_links_everywhere():
    wall = BOARDS["spyglass-wall"]
    assert max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in wall["panels"]) <= 30  # ~30 px a unit in kiosk
    linked = {link["url"].removeprefix("/d/") for link in wall["links"] if link.get("url")}
    assert linked == set(BOARDS) - {"spyglass-wall"}
    for uid, board in BOARDS.items():
        if uid != "spyglass-wall":
            assert any(link.get("url") == "/d/spyglass-wall" for link in board["links"]), uid
    runbooks = {link["url"] for b in BOARDS.values() for p in b["panels"] for link in p.get("links", [])}
    from spyglass.alerting.rules import alerts, runbook_url

    assert sorted(a.name for _, a in alerts(D) if runbook_url(D, a.name) not in runbooks) == [], (
        "every alert's runbook is linked from a panel"
    )
