"""The generated alerts folder: drift, promtool and amtool checks, metric names, routes and a live
Alertmanager's inhibitions (real binaries from Debian's prometheus and prometheus-alertmanager)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import yaml
from conftest import wait_until
from typer.testing import CliRunner

from spyglass.alerting.heuristics import Deployment, catalogue, recording_rules
from spyglass.alerting.rules import alerts, generated, render_docs
from spyglass.cli.app import app
from spyglass.config import ConfigError, load_config, parse_config
from spyglass.ports import free_port
from spyglass.signals import full_catalogue

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "alerts"
CONFIG = ROOT / "examples" / "strata.toml"
DEPLOYMENT = Deployment.of(load_config(CONFIG))


@pytest.fixture(scope="module")
def amtool() -> str:
    path = shutil.which("amtool")
    assert path, "amtool not found: run scripts/setup --test (installs Debian's prometheus-alertmanager)"
    return path


def check(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_committed_alerts_folder_is_the_generators_output_for_strata_toml() -> None:
    files = generated(DEPLOYMENT)
    for relative, text in files.items():
        assert (FOLDER / relative).read_text() == text, (
            f"alerts/{relative} drifted: run python -m spyglass.alerting.rules"
        )
    on_disk = {str(p.relative_to(FOLDER)) for p in FOLDER.rglob("*") if p.is_file()}
    assert on_disk == set(files), f"stale files in alerts/: {sorted(on_disk - set(files))}"
    drifted = "docs/alerts.md drifted: run python -m spyglass.alerting.rules"
    assert (ROOT / "docs" / "alerts.md").read_text() == render_docs(DEPLOYMENT), drifted


def test_promtool_accepts_the_rules(promtool: str) -> None:
    result = check(promtool, "check", "rules", "--lint=all", "--lint-fatal", str(FOLDER / "spyglass-rules.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_rule_file_promtool_rejects_fails_the_check(promtool: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "groups:\n- name: x\n  rules:\n  - alert: Broken\n    expr: rate(spyglass_engine_evictions_total[5m]\n"
    )
    result = check(promtool, "check", "rules", str(bad))
    assert result.returncode != 0, result.stdout + result.stderr
    assert "unclosed" in (result.stdout + result.stderr).lower()


def test_amtool_accepts_the_alertmanager_config(spawns, amtool: str) -> None:
    result = check(amtool, "check-config", str(FOLDER / "alertmanager.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "labels,receiver",
    [
        (["severity=critical", "alertname=EngineEvictionStorm", "instance=strata-b"], "pager"),
        (["severity=warning", "alertname=EngineSnapshotOverBudget", "instance=strata-b"], "ticket"),
        (["severity=info", "alertname=Watchdog"], "heartbeat"),
        (["severity=info", "alertname=EnginePlannedRestart", "instance=strata-a"], "silent"),
    ],
)
def test_routes(spawns, amtool: str, labels: list[str], receiver: str) -> None:
    result = check(
        amtool,
        "config",
        "routes",
        "test",
        f"--config.file={FOLDER / 'alertmanager.yml'}",
        f"--verify.receivers={receiver}",
        *labels,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _referenced_names(expr: str) -> set[str]:
    return set(re.findall(r"\b(?:[a-z_]+:)?spyglass_[a-z0-9_]+(?::[a-z0-9_]+)?", expr))


def test_every_metric_the_rules_read_is_in_the_catalogue() -> None:
    known = set(full_catalogue().specs)
    histograms = {s.name for s in full_catalogue() if s.type == "histogram"}
    recorded = {r.record for r in recording_rules(DEPLOYMENT)}
    exprs = [r.expr for r in recording_rules(DEPLOYMENT)] + [a.expr for _, a in alerts(DEPLOYMENT)]
    for h in catalogue(DEPLOYMENT):
        exprs += [h.check.promql]
    for expr in exprs:
        for name in _referenced_names(expr):
            if ":" in name:
                assert name in recorded, f"{name} is not a recording rule"
                continue
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            assert name in known or base in histograms, f"{name} is not in the metric catalogue"


def test_every_alert_carries_severity_heuristic_and_annotations() -> None:
    rules = yaml.safe_load((FOLDER / "spyglass-rules.yml").read_text())["groups"][1]["rules"]
    without_value = {"ServeBuildSkew", "ProgramFatal", "SpyglassSourceDown", "SpyglassTargetDown", "Watchdog"}
    assert {h.id for h in catalogue(DEPLOYMENT)} == {f"H{i}" for i in range(1, 23)}
    for rule in rules:
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        assert re.fullmatch(r"H\d+", rule["labels"]["heuristic"])
        assert {"summary", "description", "runbook_url"} <= set(rule["annotations"])
        assert rule["annotations"]["runbook_url"] == f"file:///opt/spyglass/alerts/runbooks/{rule['alert']}.md"
        assert (FOLDER / "runbooks" / f"{rule['alert']}.md").is_file()
        assert ("$value" in rule["annotations"]["description"]) != (rule["alert"] in without_value), rule["alert"]
    critical = {r["alert"] for r in rules if r["labels"]["severity"] == "critical"}
    assert {
        "EngineEvictionStorm",
        "EngineTTFTBudgetFastBurn",
        "ProgramCrashLoop",
        "EngineThroughputCollapse",
        "EngineNotReady",
        "EngineHung",
    } <= critical


def test_runbook_has_symptom_wrong_guess_check_knobs_incident() -> None:
    text = (FOLDER / "runbooks" / "EngineEvictionStorm.md").read_text()
    for heading in ("## Symptom", "## What it usually is not", "## The discriminating check", "## Knobs", "## History"):
        assert heading in text
    assert "--conversation-cache-mib" in text and "--prompt-cache-every" in text and "SELECT" in text


def test_rules_command_writes_this_deployments_numbers(tmp_path: Path) -> None:
    config = tmp_path / "spyglass.toml"
    config.write_text(
        CONFIG.read_text()
        .replace("crash_loop_spawns = 3", "crash_loop_spawns = 5")
        .replace(
            'runbook_base_url = "file:///opt/spyglass/alerts/runbooks"',
            'runbook_base_url = "https://runbooks.example/"',
        )
    )
    result = CliRunner().invoke(app, ["rules", "--config", str(config), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    rules = yaml.safe_load((tmp_path / "out" / "spyglass-rules.yml").read_text())["groups"][1]["rules"]
    loop = next(r for r in rules if r["alert"] == "ProgramCrashLoop")
    assert (
        loop["expr"].endswith(">= 5")
        and loop["annotations"]["runbook_url"] == "https://runbooks.example/ProgramCrashLoop.md"
    )
    assert len(list((tmp_path / "out" / "runbooks").glob("*.md"))) == len(rules)


def test_time_scale_scales_every_window_offset_and_for(promtool: str, tmp_path: Path) -> None:
    """An emulated deployment pages on its own clock: every duration of the rules times alerts.time_scale."""
    fast = Deployment.of(
        parse_config({"alerts": {"time_scale": 0.01, "lanes": {"fast": {"ttft_seconds": 40.0}}}}, "f.toml")
    )
    groups = yaml.safe_load(generated(fast)["spyglass-rules.yml"])["groups"]
    rule = {r.get("alert") or r["record"]: r for g in groups for r in g["rules"]}
    assert rule["EngineEvictionStorm"]["for"] == "3s"  # 5m
    assert (
        rule["ProgramCrashLoop"]["keep_firing_for"] == "6s" and "[9s]" in rule["ProgramCrashLoop"]["expr"]
    )  # 10m, 15m
    assert rule["SpyglassTargetDown"]["for"] == "1200ms"  # 2m
    assert (
        "offset 36s"
        in rule["instance_lane:spyglass_engine_request_decode_tokens_per_second:baseline_mean_rate1h"]["expr"]
    )
    durations = re.findall(r"\[([^]:]+)\]|offset (\S+?)\)", yaml.safe_dump(groups))
    assert durations and all(re.fullmatch(r"\d+(ms|s)", d or o) for d, o in durations if d != "stats")
    path = tmp_path / "rules.yml"
    path.write_text(generated(fast)["spyglass-rules.yml"])
    assert check(promtool, "check", "rules", str(path)).returncode == 0


def test_a_deployment_without_lanes_gets_one_objective_for_every_series(promtool: str, tmp_path: Path) -> None:
    """No lanes configured: the engines' series carry lane="", and the per-lane alerts match them
    (they were an empty `expr` before, which promtool rejects)."""
    plain = Deployment.of(
        parse_config(
            {"sources": {"engine-a": {"kind": "engine_log", "path": "/x/a.log", "instance": "strata-a"}}}, "f.toml"
        )
    )
    groups = yaml.safe_load(generated(plain)["spyglass-rules.yml"])["groups"]
    rule = {r.get("alert") or r["record"]: r for g in groups for r in g["rules"]}
    assert all(r["expr"].strip() for r in rule.values())
    assert 'lane=""' in rule["EngineTTFTSpike"]["expr"] and 'lane=""' in rule["EngineTTFTBudgetFastBurn"]["expr"]
    path = tmp_path / "rules.yml"
    path.write_text(generated(plain)["spyglass-rules.yml"])
    assert check(promtool, "check", "rules", str(path)).returncode == 0


def test_a_bad_alerts_setting_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"alerts\.lanes\.fast\.objective"):
        parse_config({"alerts": {"lanes": {"fast": {"ttft_seconds": 10.0, "objective": 0.5}}}}, "f.toml")
    with pytest.raises(ConfigError, match=r"alerts\.crash_loop_spawns"):
        parse_config({"alerts": {"crash_loop_spawns": 1}}, "f.toml")


def _post(api: str, alerts_: list[dict]) -> None:
    httpx.post(f"{api}/api/v2/alerts", json=alerts_, timeout=5).raise_for_status()


@pytest.mark.slow
def test_live_alertmanager_inhibits_only_the_same_instance(spawns, tmp_path: Path) -> None:
    """A crash loop on strata-a silences strata-a's TTFT page and leaves strata-b's alone."""
    binary = shutil.which("prometheus-alertmanager")
    assert binary, "prometheus-alertmanager not found: run scripts/setup --test"
    port = free_port()
    config = tmp_path / "alertmanager.yml"
    config.write_text((FOLDER / "alertmanager.yml").read_text())
    log = (tmp_path / "alertmanager.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    api = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _ready(api), what="alertmanager ready")
        ends = (datetime.now(UTC) + timedelta(minutes=10)).isoformat()

        def alert(name: str, instance: str, severity: str) -> dict:
            return {"labels": {"alertname": name, "instance": instance, "severity": severity}, "endsAt": ends}

        _post(
            api,
            [
                alert("ProgramCrashLoop", "strata-a", "critical"),
                alert("EngineTTFTBudgetFastBurn", "strata-a", "critical"),
                alert("EngineTTFTBudgetFastBurn", "strata-b", "critical"),
            ],
        )

        def states() -> dict | None:
            got = {
                (a["labels"]["alertname"], a["labels"]["instance"]): a["status"]["state"]
                for a in httpx.get(f"{api}/api/v2/alerts", timeout=5).json()
            }
            return got if len(got) == 3 and got[("EngineTTFTBudgetFastBurn", "strata-a")] == "suppressed" else None

        got = wait_until(states, what="the inhibition applied")
        assert got[("EngineTTFTBudgetFastBurn", "strata-b")] == "active"
        assert got[("ProgramCrashLoop", "strata-a")] == "active"
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def _ready(api: str) -> bool:
    try:
        return httpx.get(f"{api}/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_runbook_links_are_absolute_everywhere_they_are_written(tmp_path: Path) -> None:
    """Alertmanager and Grafana open runbook_url as it is: a relative path is a dead link there. The committed
    rules and dashboards link absolutely; a relative base is refused naming its key; with no base set,
    `spyglass rules --out DIR` links the file:// URL of the runbooks it wrote, and each such file exists."""
    from urllib.parse import unquote, urlparse

    from spyglass.dashboards.model import GENERATED

    def absolute(url: str) -> bool:
        parts = urlparse(url)
        return (parts.scheme in ("http", "https") and bool(parts.netloc)) or (
            parts.scheme == "file" and parts.path.startswith("/")
        )

    committed = yaml.safe_load((FOLDER / "spyglass-rules.yml").read_text())["groups"][1]["rules"]
    links = [r["annotations"]["runbook_url"] for r in committed]
    links += [
        link["url"]
        for path in GENERATED.glob("*.json")
        for panel in json.loads(path.read_text())["panels"]
        for link in panel.get("links", [])
        if "Runbook" in link.get("title", "")
    ]
    assert links and [u for u in links if not absolute(u)] == []

    relative = tmp_path / "relative.toml"
    relative.write_text(CONFIG.read_text().replace('"file:///opt/spyglass/alerts/runbooks"', '"alerts/runbooks"'))
    result = CliRunner().invoke(app, ["rules", "--config", str(relative), "--out", str(tmp_path / "x")])
    assert result.exit_code != 0 and "alerts.runbook_base_url" in result.output and "absolute" in result.output

    unset = tmp_path / "unset.toml"
    unset.write_text(
        "\n".join(line for line in CONFIG.read_text().splitlines() if not line.startswith("runbook_base_url"))
    )
    result = CliRunner().invoke(app, ["rules", "--config", str(unset), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    rules = yaml.safe_load((tmp_path / "out" / "spyglass-rules.yml").read_text())["groups"][1]["rules"]
    for rule in rules:
        url = rule["annotations"]["runbook_url"]
        assert absolute(url) and url.startswith("file://"), url
        assert Path(unquote(urlparse(url).path)).is_file(), url


def test_descriptions_carry_the_measured_value_not_the_seeds_figures() -> None:
    """A page says what was measured now ($value); what the seeds measured then is the runbook's history,
    never the description, where it would read as current (H3's 253,214 tokens, H6's 16 of 58)."""
    figures = re.compile(r"\d[\d,]*\.\d+|\d{1,3}(?:,\d{3})+|\d{2,}")
    files = generated(DEPLOYMENT)
    rules = {r["alert"]: r for r in yaml.safe_load(files["spyglass-rules.yml"])["groups"][1]["rules"]}
    for h, a in alerts(DEPLOYMENT):
        then = {
            f.replace(",", "") for f in figures.findall(re.sub(r"\d+(?:-\d+)+", "", h.history))
        }  # not dates, CPU ranges
        description = rules[a.name]["annotations"]["description"]
        now = {f.replace(",", "") for f in figures.findall(description)}
        assert not then & now, (a.name, sorted(then & now))
        if h.history:
            runbook = files[f"runbooks/{a.name}.md"]
            assert "## History" in runbook and h.history in runbook
    assert sum(1 for h in catalogue(DEPLOYMENT) if h.history) >= 3


def test_alertmanager_stores_notifications_where_the_agent_listens() -> None:
    """A new user's agent on 127.0.0.1:19464 got an alertmanager.yml that sent its pages to :9464 (issue 37)."""
    from spyglass.alerting.rules import alertmanager_config

    def stores(settings: dict) -> set[str]:
        routes = alertmanager_config(Deployment.of(parse_config(settings, "t")))["receivers"]
        return {c["url"] for r in routes for c in r.get("webhook_configs", []) if c["url"].endswith("/api/alerts")}

    assert stores({"exporters": {"prometheus": {"listen": "127.0.0.1:19464"}}}) == {"http://127.0.0.1:19464/api/alerts"}
    given = {"exporters": {"prometheus": {"listen": "127.0.0.1:19464"}}, "alerts": {"store_webhook_url": None}}
    assert stores(given) == set()  # unset by the user: not sent
