"""spyglass as users install it (issue 36): the wheel and sdist `python -m build` makes, the wheel installed into a
fresh venv, and every command that reads the package's data run from a folder outside the checkout, with nothing of
the checkout on the path. A data file left out of pyproject.toml's package-data fails here, not on a user's host."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from conftest import FIXTURES, wait_until

from spyglass import __version__
from spyglass.config import engine_log_config, toml_text
from spyglass.ports import free_port

CHECKOUT = Path(__file__).resolve().parents[1]
# The checkout's folders that the wheel carries as spyglass.<folder> (spyglass/ links to each).
ROOMS = ("collectors", "exporters", "engine", "dashboards", "alerts", "examples")
STRATA_LOG = FIXTURES / "engine_log" / "strata-iq3_xxs-b.log"


@dataclass(frozen=True)
class Installed:
    venv: Path
    wheel: Path
    sdist: Path
    home: Path  # a folder outside the checkout, where every command runs

    def run(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.venv / "bin" / "spyglass"), *args],
            cwd=self.home,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def clean_env() -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH or venv of the checkout's."""
    return {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}}


def check(*args: str | Path, cwd: Path | None = None) -> str:
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=clean_env(), capture_output=True, text=True)
    assert result.returncode == 0, f"{args} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, spawns) -> Installed:
    root = tmp_path_factory.mktemp("as-installed")
    dist = root / "dist"
    check(sys.executable, "-m", "build", "--outdir", dist, CHECKOUT, cwd=root)  # the sdist, then the wheel from it
    [wheel], [sdist] = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    venv = root / "venv"
    check(sys.executable, "-m", "venv", venv)
    check(venv / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel)
    home = root / "home"
    home.mkdir()
    return Installed(venv, wheel, sdist, home)


def wheel_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return {n for n in z.namelist() if ".dist-info/" not in n}


def tracked_package_files() -> set[str]:
    """Every file git tracks in the package's trees, as the wheel names it (collectors/x -> spyglass/collectors/x);
    tests and generators' inputs that are not in these trees are not package data."""
    listed = subprocess.run(
        ["git", "-C", str(CHECKOUT), "ls-files", "spyglass", *ROOMS], capture_output=True, text=True, check=True
    ).stdout.split()
    named = {f if f.startswith("spyglass/") else f"spyglass/{f}" for f in listed}
    links = {f"spyglass/{room}" for room in ROOMS}
    return {f for f in named if f not in links and not f.endswith(("/README", ".gitignore"))}


def test_the_wheel_holds_every_file_of_the_package(installed):
    missing = tracked_package_files() - wheel_files(installed.wheel)
    assert not missing, f"left out of the wheel (pyproject.toml [tool.setuptools.package-data]): {sorted(missing)}"


def test_the_sdist_holds_everything_the_wheel_does(installed):
    with tarfile.open(installed.sdist) as tar:
        in_sdist = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert not wheel_files(installed.wheel) - in_sdist


def test_the_installed_package_is_the_one_that_runs(installed):
    where = check(
        installed.venv / "bin" / "python", "-c", "import spyglass; print(spyglass.__file__)", cwd=installed.home
    )
    assert Path(where.strip()).is_relative_to(installed.venv), where
    assert installed.run("--version").stdout.strip().endswith(__version__)


@pytest.fixture(scope="module")
def strata(installed) -> Path:
    """A config over the recorded Strata engine log, ingested by the installed CLI."""
    log = installed.home / "engine.log"
    log.write_bytes(STRATA_LOG.read_bytes())
    config = installed.home / "spyglass.toml"
    state = installed.home / "state"
    config.write_text(toml_text(engine_log_config(log, state, listen=f"127.0.0.1:{free_port()}")))
    result = installed.run("ingest", "-c", str(config))
    assert result.returncode == 0, result.stderr
    return config


def test_diagnose_reads_its_probes_from_the_package(installed, strata):
    result = installed.run("diagnose", "-c", str(strata))
    assert result.returncode == 1, result.stderr  # warnings found
    assert "Traceback" not in result.stderr
    assert "H5" in result.stdout and "H15" in result.stdout


def test_evidence_and_reports_read_their_sql_from_the_package(installed, strata):
    window = ["--from", "2026-10-19T04:30:00Z", "--at", "2026-10-19T05:21:00Z"]  # the recorded log's hour
    evidence = installed.run("evidence", "EngineTTFTSpike", "-c", str(strata), *window)
    assert evidence.returncode == 0, evidence.stderr
    assert "p95" in evidence.stdout and "runbook" in evidence.stdout
    report = installed.run("report", "cache", "-c", str(strata))
    assert report.returncode == 0, report.stderr


def test_rules_are_written_and_pass_promtool(installed, strata, promtool):
    out = installed.home / "rules"
    result = installed.run("rules", "-c", str(strata), "--out", str(out))
    assert result.returncode == 0, result.stderr
    check(promtool, "check", "rules", out / "spyglass-rules.yml")
    assert len(list((out / "runbooks").glob("*.md"))) >= 30


def test_dashboards_are_written_for_a_llama_deployment(installed):
    config = installed.home / "llama.toml"
    config.write_text(installed.run("example", "llama-server").stdout)
    out = installed.home / "dashboards"
    result = installed.run("dashboards", "-c", str(config), "--out", str(out))
    assert result.returncode == 0, result.stderr
    written = sorted(p.stem for p in out.glob("*.json"))
    assert "spyglass-wall" in written and "spyglass-early-stops" in written, written
    assert "Reasoning tokens" not in (out / "spyglass-early-stops.json").read_text()  # Strata's: left out


def test_check_log_reads_a_log_with_no_config(installed):
    result = installed.run("check-log", str(FIXTURES / "llama_server" / "llama-server.log"))
    assert result.returncode == 0, result.stderr
    assert "llama_server" in result.stdout


def test_the_examples_ship_with_the_package(installed):
    listed = installed.run("example")
    assert listed.stdout.split() == ["llama-server", "strata"], listed.stderr
    printed = installed.run("example", "llama-server")
    assert printed.stdout == (CHECKOUT / "examples" / "llama-server.toml").read_text()


def test_demo_serves_metrics_and_exits_cleanly(installed):
    port = free_port()
    demo = subprocess.Popen(
        [str(installed.venv / "bin" / "spyglass"), "demo", "--seconds", "20", "--listen", f"127.0.0.1:{port}"],
        cwd=installed.home,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def scraped() -> str | None:
            try:
                body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
            except httpx.HTTPError:
                return None
            return body if "spyglass_engine_" in body else None

        assert "spyglass_" in wait_until(scraped, timeout=120, what="the demo's /metrics")
        out, err = demo.communicate(timeout=120)
    finally:
        demo.kill()
    assert demo.returncode == 0, err[-3000:]
    assert "Traceback" not in err
