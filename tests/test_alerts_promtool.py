"""Every alert, through Debian's promtool, on series shaped like its incident.

Each scenario (tests/alert_scenarios.py) is a healthy deployment with one incident laid over it;
at each check time the set of firing alerts must be exactly the expected one (plus Watchdog), so
an alert that fires on a neighbouring incident's series, or too early (before its `for:`), fails.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml
from alert_scenarios import Scenario, background, scenarios

from spyglass.alerting.heuristics import Deployment
from spyglass.alerting.rules import LABELS_QUERY, alerts
from spyglass.config import load_config

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "alerts" / "spyglass-rules.yml"
DEPLOYMENT = Deployment.of(load_config(ROOT / "examples" / "strata.toml"))
RULE = {a.name: (h, a) for h, a in alerts(DEPLOYMENT)}
SCENARIOS = scenarios()


def _labels(name: str, labels: dict[str, str]) -> dict[str, str]:
    h, a = RULE[name]
    return {**labels, "severity": a.severity, "heuristic": h.id}


def _alerts_series(firing: list[tuple[str, dict[str, str]]]) -> list[dict]:
    samples = []
    for name, labels in [("Watchdog", {}), *firing]:
        all_labels = {"alertname": name, "alertstate": "firing", **_labels(name, labels)}
        body = ", ".join(f'{k}="{v}"' for k, v in sorted(all_labels.items()))
        samples.append({"labels": f"ALERTS{{{body}}}", "value": 1})
    return samples


def _expand(template: str, labels: dict[str, str], value: str) -> str:
    query = "".join(f"{k}={quote(v, safe='')}&" for k, v in sorted(labels.items()))
    text = template.replace(LABELS_QUERY, query)
    text = re.sub(r"\{\{ \$value( \| \w+)? \}\}", value, text)
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)


def _exact(name: str, minute: int, labels: dict[str, str], value: str) -> dict:
    """The alert as Alertmanager would receive it: every label and the annotations with the measured value."""
    rule = next(r for r in yaml.safe_load(RULES.read_text())["groups"][1]["rules"] if r.get("alert") == name)
    annotations = {k: _expand(v, labels, value) for k, v in rule["annotations"].items()}
    return {
        "eval_time": f"{minute}m",
        "alertname": name,
        "exp_alerts": [{"exp_labels": _labels(name, labels), "exp_annotations": annotations}],
    }


def unit_test(s: Scenario) -> dict:
    series = background(s.minutes) | s.series
    return {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "group_eval_order": ["spyglass-recording", "spyglass-alerts"],
        "tests": [
            {
                "name": s.name,
                "interval": "1m",
                "input_series": [{"series": k, "values": v} for k, v in series.items()],
                "promql_expr_test": [
                    {
                        "expr": 'ALERTS{alertstate="firing"}',
                        "eval_time": f"{minute}m",
                        "exp_samples": _alerts_series(firing),
                    }
                    for minute, firing in s.checks.items()
                ],
                "alert_rule_test": [_exact(name, *spec) for name, spec in s.exact.items()],
            }
        ],
    }


def run_promtool(promtool: str, test: dict, folder: Path) -> subprocess.CompletedProcess:
    path = folder / "test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    return subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "scenario", SCENARIOS, ids=[s.name.split(" ")[0] + "-" + str(i) for i, s in enumerate(SCENARIOS)]
)
def test_scenario_fires_exactly_its_alerts(promtool: str, tmp_path: Path, scenario: Scenario) -> None:
    result = run_promtool(promtool, unit_test(scenario), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_fires_in_some_scenario() -> None:
    fired = {name for s in SCENARIOS for firing in s.checks.values() for name, _ in firing} | {"Watchdog"}
    assert fired == set(RULE), f"alerts without an incident scenario: {sorted(set(RULE) - fired)}"


def test_every_scenario_checks_a_quiet_moment() -> None:
    """Each incident is also checked at a time it must not (yet) page: before it, or within its for:."""
    for s in SCENARIOS:
        assert any(firing == [] for firing in s.checks.values()), s.name


def test_a_wrong_expectation_fails(promtool: str, tmp_path: Path) -> None:
    """The harness can fail: the healthy series with an eviction storm expected is a promtool failure."""
    healthy = next(s for s in SCENARIOS if s.name == "healthy")
    wrong = Scenario(
        "wrong", healthy.minutes, {}, {115: [("EngineEvictionStorm", {"instance": "strata-b", "lane": "normal"})]}
    )
    result = run_promtool(promtool, unit_test(wrong), tmp_path)
    assert result.returncode != 0 and "EngineEvictionStorm" in result.stdout + result.stderr


def _on_host(series: dict[str, str], host: str) -> dict[str, str]:
    """The same series scraped from `host` (the target label each agent's scrape adds, docs/scale.md)."""
    out = {}
    for key, values in series.items():
        name, _, rest = key.partition("{")
        out[f'{name}{{host="{host}", {rest}' if rest.strip("} ") else f'{name}{{host="{host}"}}'] = values
    return out


def _two_hosts(s: Scenario) -> Scenario:
    """Two hosts with the same instance names, healthy; the incident on h1 only. Each alert must fire
    for h1 alone, with its `host`: a rule that aggregated or joined without `host` would mix the two
    hosts' series (a many-to-many error, a value of both hosts, an alert without `host`)."""
    series = _on_host(background(s.minutes), "h2") | _on_host(background(s.minutes) | s.series, "h1")
    checks = {
        minute: [(name, {**labels, "host": "h1"}) for name, labels in firing] for minute, firing in s.checks.items()
    }
    exact = {name: (minute, {**labels, "host": "h1"}, value) for name, (minute, labels, value) in s.exact.items()}
    return Scenario(s.name + " on h1 of two hosts", s.minutes, series, checks, exact)


def unit_test_of_series(s: Scenario) -> dict:
    """unit_test, for a scenario whose series are complete (no background added)."""
    test = unit_test(Scenario(s.name, s.minutes, {}, s.checks, s.exact))
    test["tests"][0]["input_series"] = [{"series": k, "values": v} for k, v in s.series.items()]
    return test


@pytest.mark.parametrize(
    "scenario", SCENARIOS, ids=[s.name.split(" ")[0] + "-" + str(i) for i, s in enumerate(SCENARIOS)]
)
def test_scenario_on_one_of_two_hosts_fires_for_that_host_only(
    promtool: str, tmp_path: Path, scenario: Scenario
) -> None:
    result = run_promtool(promtool, unit_test_of_series(_two_hosts(scenario)), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
