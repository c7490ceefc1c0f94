"""The wall's alert-driven panels, as shipped in dashboards/generated/, evaluated by Debian's promtool on
ALERTS and ALERTS_FOR_STATE series shaped as Prometheus writes them: the list of what fires holds the
firing alerts only (not pending ones, not the Watchdog), each with when its condition became true and
the rule's own summary with its labels filled in (none, one or two of them); the count tile counts the
same by severity; a source is SILENT or DOWN only while its alert fires (a quiet source is OK)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from test_dashboards_changes import run

from spyglass.alerting.rules import alerts
from spyglass.dashboards.lint import substitute
from spyglass.dashboards.model import deployment

ROOT = Path(__file__).resolve().parent.parent
BOARD = json.loads((ROOT / "dashboards" / "generated" / "spyglass-wall.json").read_text())
SCRAPE = 15
ACTIVE = 1_790_000_000  # ALERTS_FOR_STATE's value: the unix second the condition became true


def panel(title: str) -> list[str]:
    (found,) = [p for p in BOARD["panels"] if p["title"] == title]
    return [
        substitute(t["expr"], step_seconds=SCRAPE, scrape_seconds=SCRAPE, range_seconds=3600) for t in found["targets"]
    ]


def alert(name: str, severity: str, state: str, **labels: str) -> dict[str, str]:
    """The ALERTS and ALERTS_FOR_STATE series of one alert (the latter has no alertstate)."""
    common = ", ".join(f'{k}="{v}"' for k, v in {"alertname": name, "severity": severity, **labels}.items())
    return {f'ALERTS{{{common}, alertstate="{state}"}}': "1x10", f"ALERTS_FOR_STATE{{{common}}}": f"{ACTIVE}x10"}


SERIES = {
    **alert("EngineTTFTBudgetFastBurn", "critical", "firing", host="h1", instance="strata-b", lane="normal"),
    **alert("SpyglassTargetDown", "critical", "firing", job="spyglass"),  # no host: absent(up) has none
    **alert("EngineEvictionStorm", "critical", "firing", host="h1", instance="strata-b", lane="normal"),
    **alert("GatewayConcurrencyFull", "warning", "pending", host="h1", lane="fast"),
    **alert("Watchdog", "info", "firing"),
    **alert("SpyglassSourceSilent", "warning", "firing", host="h1", instance="strata-b", source="engine-b"),
    **alert("SpyglassSourceDown", "warning", "firing", host="h1", source="serve-a"),
    **{f'spyglass_source_up{{host="h1", source="{s}"}}': "1x10" for s in ("engine-a", "engine-b", "supervisord")},
    'spyglass_source_up{host="h1", source="serve-a"}': "0x10",
}


def summary(name: str, labels: dict[str, str]) -> str:
    """The rule's summary as Alertmanager would render it for these labels (from the catalogue)."""
    (rule,) = [a for _, a in alerts(deployment()) if a.name == name]
    return re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), rule.summary)


def row(name: str, severity: str, **labels: str) -> dict:
    text = ", ".join(f'{k}="{v}"' for k, v in {"alertname": name, "severity": severity, **labels}.items())
    rendered = summary(name, labels).replace('"', '\\"')
    return {"labels": f'{{{text}, summary="{rendered}"}}', "value": ACTIVE * 1000}


LISTED = [
    row("EngineTTFTBudgetFastBurn", "critical", host="h1", instance="strata-b", lane="normal"),
    row("SpyglassTargetDown", "critical", job="spyglass"),
    row("EngineEvictionStorm", "critical", host="h1", instance="strata-b", lane="normal"),
    row("SpyglassSourceSilent", "warning", host="h1", instance="strata-b", source="engine-b"),
    row("SpyglassSourceDown", "warning", host="h1", source="serve-a"),
]


def test_a_summary_is_the_rules_with_its_labels():
    assert (
        summary("EngineTTFTBudgetFastBurn", {"instance": "strata-b", "lane": "normal"})
        == "strata-b (normal) burns its TTFT error budget fast."
    )
    assert (
        summary("EngineEvictionStorm", {"instance": "strata-b"})
        == "strata-b is evicting conversation snapshots every minute."
    )


def test_the_list_the_count_and_the_sources_say_what_fires(promtool, tmp_path):
    (listed,), (critical, warning) = panel("What fires now"), panel("Alerts firing")
    (sources,) = panel("Sources")
    checks = [
        (listed, "1m", LISTED),
        (critical, "1m", [{"labels": "{}", "value": 3}]),
        (warning, "1m", [{"labels": "{}", "value": 2}]),  # the pending GatewayConcurrencyFull is not counted
        (
            sources,
            "1m",
            [
                {"labels": '{host="h1", source="engine-a"}', "value": 0},
                {"labels": '{host="h1", source="engine-b"}', "value": 1},  # strata-b's log: SILENT
                {"labels": '{host="h1", source="supervisord"}', "value": 0},  # quiet, no alert: OK
                {"labels": '{host="h1", source="serve-a"}', "value": 2},
            ],
        ),  # DOWN
    ]
    result = run(promtool, tmp_path, SERIES, checks)
    assert result.returncode == 0, result.stdout + result.stderr


def test_nothing_firing_is_an_empty_list_and_zero_counts(promtool, tmp_path):
    (listed,), (critical, warning) = panel("What fires now"), panel("Alerts firing")
    quiet = {k: v for k, v in SERIES.items() if "Watchdog" in k or "spyglass_source_up" in k}
    checks = [
        (listed, "1m", []),
        (critical, "1m", [{"labels": "{}", "value": 0}]),
        (warning, "1m", [{"labels": "{}", "value": 0}]),
    ]
    result = run(promtool, tmp_path, quiet, checks)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_harness_can_fail(promtool, tmp_path):
    (listed,) = panel("What fires now")
    result = run(promtool, tmp_path, SERIES, [(listed, "1m", LISTED[:-1])])
    assert result.returncode != 0 and "SpyglassSourceDown" in result.stdout + result.stderr


def test_the_preview_ticks_on_round_values_and_says_since_when():
    from spyglass.dashboards.preview_format import fmt
    from spyglass.dashboards.preview_panels import _nice_step

    assert _nice_step(64 * 2**30, "bytes") == 16 * 2**30  # 0, 16, 32, 48, 64 GiB: not 18.6, 37.3
    assert _nice_step(8 * 2**30, "bytes") == 2 * 2**30
    assert _nice_step(800, "s") == 300 and _nice_step(20, "s") == 5  # whole minutes, else 1-2-2.5-5 steps
    assert _nice_step(0.9, "percentunit") == 0.25
    now = 1_790_000_000.0
    assert fmt((now - 42) * 1000, "dateTimeFromNow", now) == "42 s ago"
    assert fmt((now - 600) * 1000, "dateTimeFromNow", now) == "10 min ago"
