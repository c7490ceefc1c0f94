"""The smoke gate's result as a deploy event: `spyglass smoke --config` sends it to the running agent
(a real `spyglass run` process, its token required), and `spyglass changes` / the `smoke_gates` view /
the timeline show it against the start it gated. With no agent the store file is written directly;
with the file held by another process nothing is written and the command says so. A bad body is a
400 naming the key, and stores nothing; the exit status is always the gate's verdict."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta

import duckdb
import httpx
import pytest
from conftest import FIXTURES, wait_until
from test_upgrades_smoke import Serve
from typer.testing import CliRunner

from spyglass.cli.app import app
from spyglass.config import engine_log_config, load_config, toml_text
from spyglass.ports import free_port
from spyglass.upgrades.smoke_event import decode_result, instance_for

pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier

FIXTURE = FIXTURES / "engine_log" / "strata-iq3_xxs-b.log"  # two starts of strata-b
TOKEN = "smoke-test-token"


def write_samples(path, expect_finish=None):
    row = {
        "name": "hello",
        "max_tokens": 4000,
        "messages": [{"role": "user", "content": "Task: answer 1. " + "word " * 50}],
    }
    if expect_finish:
        row["expect_finish"] = expect_finish
    path.write_text(json.dumps(row) + "\n")
    return path


def make_config(tmp_path, port: int, token: bool = True):
    log = tmp_path / "strata-b.log"
    log.write_bytes(FIXTURE.read_bytes())
    doc = engine_log_config(log, tmp_path / "state", listen=f"127.0.0.1:{port}")
    if token:
        doc["exporters"]["prometheus"]["token"] = TOKEN
    config = tmp_path / "spyglass.toml"
    config.write_text(toml_text(doc))
    return config


def start_agent(config) -> subprocess.Popen:
    """A real `spyglass run`, serving once it says so; killed after 120 s if a test hangs."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "spyglass.cli.app", "run", "-c", str(config)], stderr=subprocess.PIPE, text=True
    )
    killer = threading.Timer(120, proc.kill)  # never let a hung agent hang the suite
    killer.daemon = True
    killer.start()
    for line in proc.stderr:  # type: ignore[union-attr]
        if "metrics at" in line:
            break
    return proc


@pytest.fixture
def agent(tmp_path):
    port = free_port()
    config = make_config(tmp_path, port)
    proc = start_agent(config)
    yield {"url": f"http://127.0.0.1:{port}", "config": config}
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


def cli(*args: str, code: int):
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, (result.stdout, result.stderr)
    return result


def json_rows(result) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def smoke_changes(config) -> list[dict]:
    result = CliRunner().invoke(app, ["changes", "-c", str(config), "--instance", "strata-b", "-f", "json"])
    return [r for r in json_rows(result) if r["change"] == "smoke gate"] if result.exit_code == 0 else []


def test_the_agent_stores_the_verdict_beside_the_start_it_gated(agent, tmp_path):
    good = write_samples(tmp_path / "good.jsonl")
    bad = write_samples(tmp_path / "bad.jsonl", expect_finish=["length"])  # the serve ends its turn: fails
    config = str(agent["config"])
    with Serve(tmp_path, "warm", load_seconds=10.0) as serve:
        ok = cli(
            "smoke",
            "--url",
            serve.url,
            "--samples",
            str(good),
            "-c",
            config,
            "--instance",
            "strata-b",
            "--budget",
            "20",
            code=0,
        )
        assert f"smoke result for strata-b recorded by the agent at {agent['url']}" in ok.stderr
        failed = cli(
            "smoke",
            "--url",
            serve.url,
            "--samples",
            str(bad),
            "-c",
            config,
            "--instance",
            "strata-b",
            "--budget",
            "20",
            code=1,
        )
        assert "recorded by the agent" in failed.stderr and "smoke failed: sample hello: finish reason" in failed.stderr
    # the change list: one row on strata-b's last start, naming the last run and how many there were
    (row,) = wait_until(
        lambda: [r for r in smoke_changes(config) if "2 runs" in str(r["after"])],
        timeout=30,
        what="the smoke runs in the change list",
    )
    assert row["deploy"] == 2 and row["after"].startswith("FAILED: sample hello: finish reason 'end_turn'")
    deploys = json_rows(cli("changes", "-c", config, "--instance", "strata-b", "--deploys", "-f", "json", code=0))
    assert [d["smoke"] for d in deploys][0] is None and deploys[1]["smoke"] == row["after"]
    # the view: both runs, with the samples file's hash and the latencies of the passing one
    now = datetime.now(UTC)
    window = [
        "--from",
        f"{now - timedelta(hours=1):%Y-%m-%d %H:%M:%S}",
        "--to",
        f"{now + timedelta(hours=1):%Y-%m-%d %H:%M:%S}",
    ]
    runs = json_rows(
        cli(
            "views",
            "SELECT passed, instance, samples_sha256, samples, ttft_ms_max, reason FROM smoke_gates ORDER BY ts_utc",
            "-c",
            config,
            *window,
            "-f",
            "json",
            code=0,
        )
    )
    assert [(r["passed"], r["instance"]) for r in runs] == [(True, "strata-b"), (False, "strata-b")]
    assert runs[0]["samples_sha256"] == hashlib.sha256(good.read_bytes()).hexdigest()
    assert runs[1]["samples_sha256"] == hashlib.sha256(bad.read_bytes()).hexdigest()
    assert runs[0]["samples"] == 1 and runs[0]["ttft_ms_max"] > 0 and runs[0]["reason"] == "1 samples passed"
    # the timeline: the runs as events of their own kind
    events = json_rows(cli("timeline", "-c", config, *window, "--instance", "strata-b", "-f", "json", code=0))
    assert [e["kind"] for e in events if e["source"] == "smoke"] == ["smoke_passed", "smoke_failed"]


def smoke_body(reason: str = "1 samples passed") -> dict:
    return {
        "instance": "strata-b",
        "url": "http://127.0.0.1:8082",
        "passed": True,
        "reason": reason,
        "at": datetime.now(UTC).timestamp(),
        "waited_seconds": 0.5,
        "samples_file": "s.jsonl",
        "samples_sha256": "0" * 64,
        "samples": [{"name": "a", "status": 200, "ttft_ms": 12.5, "finish": "end_turn"}],
    }


def test_the_api_wants_the_token_and_refuses_a_bad_body_storing_nothing(agent):
    url, auth = f"{agent['url']}/api/smoke", {"Authorization": f"Bearer {TOKEN}"}
    body = smoke_body()
    assert httpx.post(url, json=body).status_code == 401  # without the token
    bad = [
        (b"not json", "not JSON"),
        (b"[1]", "expected a JSON object"),
        (json.dumps({**body, "samples_sha256": "xyz"}).encode(), "samples_sha256: String should match pattern"),
        (json.dumps({k: v for k, v in body.items() if k != "instance"}).encode(), "instance: Field required"),
        (json.dumps({**body, "extra": 1}).encode(), "extra: Extra inputs are not permitted"),
        (json.dumps({**body, "samples": [{"name": "a", "status": "ok"}]}).encode(), "samples.0.status"),
    ]
    for content, message in bad:
        answer = httpx.post(url, content=content, headers={**auth, "Content-Type": "application/json"})
        assert answer.status_code == 400 and message in answer.text, (content, answer.text)
    assert httpx.post(url, json=body, headers=auth).status_code == 200

    def stored():
        answer = httpx.post(
            f"{agent['url']}/api/sql",
            headers=auth,
            timeout=30,
            json={"query": "SELECT kind, instance FROM events WHERE source = 'smoke'"},
        )
        return answer.json()["rows"]

    assert wait_until(lambda: stored(), timeout=30, what="the stored result") == [["smoke_passed", "strata-b"]]


def test_a_200_means_committed_so_a_kill_right_after_it_loses_nothing(tmp_path):
    """Three rounds of: start the agent, POST a result, SIGKILL the agent the moment it answers 200.
    Each answered result is in the store file (the answer waits for the commit)."""
    port = free_port()
    config = make_config(tmp_path, port)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for run in range(3):
        proc = start_agent(config)
        try:
            answer = httpx.post(
                f"http://127.0.0.1:{port}/api/smoke", json=smoke_body(f"run {run}"), headers=auth, timeout=30
            )
        finally:
            proc.kill()
            proc.communicate()
        assert answer.status_code == 200, answer.text
    con = duckdb.connect(str(load_config(config).store_path()), read_only=True)
    try:
        reasons = con.execute("SELECT fields->>'reason' FROM events WHERE source = 'smoke' ORDER BY seq").fetchall()
    finally:
        con.close()
    assert reasons == [("run 0",), ("run 1",), ("run 2",)]


def test_without_an_agent_the_store_file_is_written_unless_another_process_holds_it(tmp_path):
    config = make_config(tmp_path, free_port(), token=False)
    samples = write_samples(tmp_path / "s.jsonl")
    dead = f"http://127.0.0.1:{free_port()}"
    cli("ingest", "-c", str(config), code=0)  # the deploys, as an agent would have stored them
    out = cli(
        "smoke",
        "--url",
        dead,
        "--samples",
        str(samples),
        "-c",
        str(config),
        "--instance",
        "strata-b",
        "--budget",
        "0.3",
        code=1,
    )
    store = tmp_path / "state" / "spyglass.duckdb"
    assert "no agent answers at http://127.0.0.1:" in out.stderr and f"written to {store}" in out.stderr
    (row,) = smoke_changes(config)
    assert row["deploy"] == 2 and row["after"].startswith("FAILED: http://127.0.0.1:") and "not ready" in row["after"]
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('held', flush=True); sys.stdin.read()",
            str(store),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"  # type: ignore[union-attr]
        out = cli(
            "smoke",
            "--url",
            dead,
            "--samples",
            str(samples),
            "-c",
            str(config),
            "--instance",
            "strata-b",
            "--budget",
            "0.3",
            code=1,
        )  # the gate's verdict, recorded or not
        assert "warning: smoke result NOT recorded" in out.stderr and "held by another process" in out.stderr
    finally:
        holder.communicate("")
    (row,) = smoke_changes(config)  # still the one run: nothing half-written
    assert "last of" not in row["after"]


def test_the_instance_comes_from_the_serve_status_source_or_must_be_given(tmp_path):
    config = make_config(tmp_path, free_port(), token=False)
    doc = engine_log_config(tmp_path / "x.log", tmp_path / "state", listen=f"127.0.0.1:{free_port()}")
    doc["sources"]["serve-b"] = {
        "kind": "serve_status",
        "url": "http://127.0.0.1:8082/v1/status",
        "instance": "strata-b",
    }
    with_serve = tmp_path / "with-serve.toml"
    with_serve.write_text(toml_text(doc))
    assert instance_for(load_config(with_serve), "http://127.0.0.1:8082/") == "strata-b"
    assert instance_for(load_config(with_serve), "http://127.0.0.1:8083") is None
    samples = write_samples(tmp_path / "s.jsonl")
    out = cli("smoke", "--url", "http://127.0.0.1:8083", "--samples", str(samples), "-c", str(config), code=2)
    assert "--instance: no serve_status source" in out.stderr and "smoke" not in out.stdout


def test_decoding_keeps_the_verdict_and_the_latencies():
    body = {
        "instance": "strata-a",
        "url": "http://127.0.0.1:8081",
        "passed": False,
        "reason": "sample b: HTTP 500",
        "at": 1_790_000_000.25,
        "waited_seconds": 3.0,
        "samples_file": "s.jsonl",
        "samples_sha256": "a" * 64,
        "samples": [
            {"name": "a", "status": 200, "ttft_ms": 10.0},
            {"name": "b", "status": 500, "ttft_ms": 30.0, "problem": "HTTP 500"},
        ],
    }
    event = decode_result(json.dumps(body).encode(), host="h1", now=1_790_000_000.0)
    assert (event.source, event.kind, event.instance, event.host, event.ts) == (
        "smoke",
        "smoke_failed",
        "strata-a",
        "h1",
        1_790_000_000.25,
    )
    assert event.fields["ttft_ms_median"] == 20.0 and event.fields["ttft_ms_max"] == 30.0
    assert event.fields["outcomes"][1]["problem"] == "HTTP 500" and event.fields["samples"] == 2
