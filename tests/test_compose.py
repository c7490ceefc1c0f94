"""compose.yaml without Docker: it parses, references only files that exist, binds every port to
127.0.0.1, pins every image, has a healthcheck per service; its Prometheus and Alertmanager configs
pass promtool and amtool; the Grafana provisioning matches the dashboards and the services."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from spyglass.config import load_config

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "compose.yaml").read_text())
SERVICES = COMPOSE["services"]
PINNED = re.compile(r"^[\w./-]+:v?\d+\.\d+(\.\d+)?[\w.-]*$")


def _source(volume: str) -> str:
    """The host side of a short-syntax volume; ${VAR:-default} resolves to its default."""
    host = volume.split(":")[0] if not volume.startswith("${") else re.match(r"\$\{\w+:-([^}]*)\}", volume).group(1)
    return host


def test_the_services_are_all_there():
    assert {"prometheus", "alertmanager", "grafana", "otel-collector", "tempo", "spyglass", "emulated"} <= set(SERVICES)
    assert SERVICES["emulated"]["profiles"] == ["emulated"]
    assert all("healthcheck" in s for s in SERVICES.values())


def test_every_image_is_pinned():
    for name, service in SERVICES.items():
        assert PINNED.match(service["image"]), f"{name}: {service['image']} is not pinned to a version"
        assert not service["image"].endswith(":latest")
    dockerfile = ROOT / SERVICES["spyglass"]["build"]["dockerfile"]
    froms = [line.split()[1] for line in dockerfile.read_text().splitlines() if line.startswith("FROM ")]
    assert froms and all(PINNED.match(f) for f in froms)


def test_every_port_is_bound_to_loopback():
    ports = [(name, p) for name, s in SERVICES.items() for p in s.get("ports", [])]
    assert ports and [(n, p) for n, p in ports if not str(p).startswith("127.0.0.1:")] == []


def test_every_referenced_file_exists():
    named = set(COMPOSE.get("volumes", {}))
    for name, service in SERVICES.items():
        for volume in service.get("volumes", []):
            source = _source(volume)
            if source in named:
                continue
            assert (ROOT / source).exists(), f"{name}: {source} does not exist"
        for env in service.get("env_file", []):
            if isinstance(env, dict) and env.get("required") is False:
                continue
            path = env["path"] if isinstance(env, dict) else env
            assert (ROOT / path).exists(), f"{name}: env file {path} does not exist"
        if "build" in service:
            assert (ROOT / service["build"]["context"] / service["build"]["dockerfile"]).exists()
    dockerfile = (ROOT / SERVICES["spyglass"]["build"]["dockerfile"]).read_text()
    for line in dockerfile.splitlines():
        if line.startswith("COPY ") and not line.startswith("COPY --from="):  # --from: an earlier stage
            assert all((ROOT / src).exists() for src in line.split()[1:-1]), line


def test_the_agent_token_is_a_secret_kept_out_of_the_repository():
    (secret,) = COMPOSE["secrets"].values()
    assert SERVICES["spyglass"]["secrets"] == ["spyglass_token"]
    assert secret["file"].removeprefix("./") in (ROOT / ".gitignore").read_text()
    assert (ROOT / (secret["file"] + ".example")).exists()


def test_the_admin_password_comes_from_an_env_file():
    grafana = SERVICES["grafana"]
    assert "GF_SECURITY_ADMIN_PASSWORD" not in grafana.get("environment", {})
    files = [e["path"] for e in grafana["env_file"]]
    assert "deploy/grafana.env" in files and "deploy/grafana.env" in (ROOT / ".gitignore").read_text()
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"


@pytest.fixture
def mounted(tmp_path: Path) -> Path:
    """The Prometheus config folder as the container sees it: prometheus.yml with alerts/ beside it."""
    mounts = dict(v.split(":")[:2] for v in SERVICES["prometheus"]["volumes"] if v.startswith("./"))
    for source, target in mounts.items():
        dest = tmp_path / Path(target).relative_to("/etc/prometheus")
        (shutil.copytree if (ROOT / source).is_dir() else shutil.copy)(ROOT / source, dest)
    return tmp_path / "prometheus.yml"


def test_prometheus_config_passes_promtool(promtool, mounted):
    run = subprocess.run([promtool, "check", "config", str(mounted)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout and "rule" in run.stdout  # it checked spyglass's rule file too


def test_alertmanager_config_passes_amtool(spawns):
    amtool = shutil.which("amtool")
    assert amtool, "amtool not found: run scripts/setup --test"
    source = next(v.split(":")[0] for v in SERVICES["alertmanager"]["volumes"] if v.endswith("alertmanager.yml:ro"))
    run = subprocess.run([amtool, "check-config", str(ROOT / source)], capture_output=True, text=True)
    assert run.returncode == 0 and "SUCCESS" in run.stdout, run.stdout + run.stderr


def deployed_config(tmp_path: Path) -> Path:
    """The compose config with its token file where this machine has one (compose mounts a secret)."""
    token = tmp_path / "spyglass.token"
    token.write_text((ROOT / "deploy/spyglass.token.example").read_text())
    text = (ROOT / "deploy/spyglass/spyglass.toml").read_text()
    assert '"/run/secrets/spyglass_token"' in text  # off loopback, the agent needs its token
    config = tmp_path / "spyglass.toml"
    config.write_text(text.replace("/run/secrets/spyglass_token", str(token)))
    return config


def test_prometheus_scrapes_spyglass_as_the_rules_expect(tmp_path):
    config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    spyglass = load_config(deployed_config(tmp_path))
    job = next(j for j in config["scrape_configs"] if j["job_name"] == spyglass.alerts.job)
    assert job["honor_labels"] is True  # else spyglass's `instance` label becomes exported_instance
    targets = [t for c in job["static_configs"] for t in c["targets"]]
    assert f"spyglass:{spyglass.exporters.prometheus.listen.rsplit(':', 1)[1]}" in targets
    assert all("host" in c["labels"] for c in job["static_configs"])  # the dashboards' host variable
    otel = yaml.safe_load((ROOT / "deploy/otelcol/config.yaml").read_text())
    port = otel["exporters"]["prometheus"]["endpoint"].rsplit(":", 1)[1]
    assert any(
        t == f"otel-collector:{port}"
        for j in config["scrape_configs"]
        for c in j["static_configs"]
        for t in c["targets"]
    )
    assert otel["service"]["pipelines"]["traces"]["exporters"] == ["otlp/tempo"]
    assert spyglass.exporters.otlp.endpoint == "http://otel-collector:4318"


def test_grafana_provisioning_matches_the_dashboards():
    sources = yaml.safe_load((ROOT / "dashboards/provisioning/datasources/spyglass.yaml").read_text())["datasources"]
    uids = {d["type"]: d["uid"] for d in sources}
    assert set(uids) == {"prometheus", "tempo", "alertmanager"}
    prometheus = next(d for d in sources if d["type"] == "prometheus")
    assert prometheus["jsonData"]["exemplarTraceIdDestinations"][0]["datasourceUid"] == uids["tempo"]
    import json

    wall = json.loads((ROOT / "dashboards/generated/spyglass-wall.json").read_text())
    variable = next(v for v in wall["templating"]["list"] if v["name"] == "datasource")
    assert variable["current"]["value"] == uids["prometheus"]
    provider = yaml.safe_load((ROOT / "dashboards/provisioning/dashboards/spyglass.yaml").read_text())["providers"][0]
    mounts = dict(v.split(":")[:2] for v in SERVICES["grafana"]["volumes"] if v.startswith("./"))
    assert mounts["./dashboards/generated"] == provider["options"]["path"]
    assert (
        SERVICES["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
        == f"{provider['options']['path']}/spyglass-wall.json"
    )
