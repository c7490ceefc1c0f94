"""Where the evidence pages are linked from: every generated rule's `evidence_url` annotation (absolute, from
alerts.evidence_base_url or the agent's listen address, with the alert's labels by Prometheus templating),
and the wall's firing-alert list. Every heuristic with a probe declares its comparison and chart."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
import yaml

from spyglass.alerting.heuristics import Deployment, catalogue
from spyglass.alerting.rules import rule_groups
from spyglass.config import Config
from spyglass.forensics.evidence import SERIES
from spyglass.forensics.evidence_page import evidence_path

ROOT = Path(__file__).resolve().parents[1]


def rules_of(config: Config) -> list[dict]:
    return rule_groups(Deployment.of(config))["groups"][1]["rules"]


def test_every_rule_links_its_evidence_on_the_agents_listen_address_by_default() -> None:
    config = Config.model_validate({"exporters": {"prometheus": {"listen": "0.0.0.0:9555", "token": "t" * 20}}})
    for rule in rules_of(config):
        url = rule["annotations"]["evidence_url"]
        assert url.startswith(
            f"http://127.0.0.1:9555/evidence/{rule['alert']}?{{{{ range $name, $value := $labels }}}}"
        )
        assert "{{ $value | urlquery }}" in url


def test_evidence_base_url_is_taken_absolute_only() -> None:
    config = Config.model_validate({"alerts": {"evidence_base_url": "https://spyglass.example/agent-b/"}})
    assert {r["annotations"]["evidence_url"].split("?")[0] for r in rules_of(config)} == {
        f"https://spyglass.example/agent-b/evidence/{r['alert']}" for r in rules_of(config)
    }
    for bad in ("/evidence", "spyglass.example", "http://host/x?y=1", "file:///tmp"):
        with pytest.raises(ValueError, match="evidence_base_url"):
            Config.model_validate({"alerts": {"evidence_base_url": bad}})


def test_the_committed_rules_carry_it() -> None:
    committed = yaml.safe_load((ROOT / "alerts" / "spyglass-rules.yml").read_text())["groups"][1]["rules"]
    assert all(
        r["annotations"]["evidence_url"].startswith(f"http://127.0.0.1:9464/evidence/{r['alert']}?") for r in committed
    )


def test_the_page_path_round_trips_its_labels() -> None:
    path = evidence_path("EngineEvictionStorm", {"instance": "strata-b", "lane": "a&b=c d"})
    parts = urlsplit(path)
    assert parts.path == "/evidence/EngineEvictionStorm"
    assert dict(parse_qsl(parts.query)) == {"instance": "strata-b", "lane": "a&b=c d"}


def test_the_walls_firing_list_links_each_alert_to_its_page() -> None:
    wall = json.loads((ROOT / "dashboards" / "generated" / "spyglass-wall.json").read_text())
    (fires,) = [p for p in wall["panels"] if p.get("title") == "What fires now"]
    links = fires["fieldConfig"]["defaults"]["links"]
    assert [link["title"] for link in links] == ["Evidence", "Runbook"]
    assert links[0]["url"] == (
        "http://127.0.0.1:9464/evidence/${__data.fields.alertname}"
        "?instance=${__data.fields.instance}&lane=${__data.fields.lane}"
    )


def test_every_probe_declares_its_comparison_and_a_chart_that_exists() -> None:
    for h in catalogue():
        assert (h.probe is None) == (h.evidence is None), h.id
        if h.evidence is not None:
            assert h.evidence.series in SERIES, h.id
            if isinstance(h.evidence.threshold, str):
                assert h.evidence.threshold in h.probe.figures, h.id  # type: ignore[union-attr]
