"""The smoke gate against the emulated serve under uvicorn on 127.0.0.1: it passes a healthy (warmed)
instance, waits out a loading one within the budget, and fails a load past the budget (the slow-load
scenario) and a fresh instance whose samples each meet a new graph shape (the recompile storm: the
rebuild, and the prompt not yet cached, against a baseline recorded warm), naming the reason."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import uvicorn
from conftest import wait_until
from typer.testing import CliRunner

from spyglass.cli.app import app
from spyglass.engine.emulator.serve import EngineSettings, create_app
from spyglass.ports import free_port
from spyglass.upgrades.smoke import SamplesError, load_samples

SIZES = (700, 1500, 3100, 6300, 12700)  # one graph shape each


class Serve:
    def __init__(self, tmp_path, name: str, **settings) -> None:
        port = free_port()
        s = EngineSettings(instance="strata-a", port=port, log=tmp_path / f"{name}.log", cache_mib=65_536, **settings)
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(
            uvicorn.Config(create_app(s), host="127.0.0.1", port=port, log_level="warning", timeout_keep_alive=120)
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Serve:
        self.thread.start()
        wait_until(lambda: self.server.started, what="uvicorn to start")
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def samples(tmp_path):
    path = tmp_path / "samples.jsonl"
    rows = [
        {
            "name": f"s{n}",
            "max_tokens": 4000,
            "messages": [{"role": "user", "content": f"Task: answer {n}. " + "word " * size}],
        }
        for n, size in enumerate(SIZES)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def gate(url: str, samples, *extra: str, code: int):
    result = CliRunner().invoke(app, ["smoke", "--url", url, "--samples", str(samples), *extra])
    assert result.exit_code == code, result.output
    return result


def test_healthy_passes_and_a_fresh_instance_fails_on_graph_rebuilds(tmp_path, samples):
    baseline = tmp_path / "baseline.json"
    with Serve(tmp_path, "warm", load_seconds=50.0) as warm:  # 0.5 s of real loading: the gate waits
        gate(warm.url, samples, "--budget", "20", code=0)  # the warm-up the seed's fix runs at start
        out = gate(warm.url, samples, "--budget", "20", "--record", str(baseline), code=0)
        assert "smoke passed: 5 samples passed" in out.stdout
        gate(warm.url, samples, "--budget", "20", "--baseline", str(baseline), code=0)
    recorded = json.loads(baseline.read_text())["samples"]
    assert set(recorded) == {f"s{n}" for n in range(5)}
    with Serve(tmp_path, "fresh", load_seconds=10.0) as fresh:  # no warm-up: every shape is new
        out = gate(fresh.url, samples, "--budget", "20", "--baseline", str(baseline), code=1)
    assert "smoke failed: sample s" in out.stderr and "TTFT" in out.stderr and "more than 2x" in out.stderr
    # what the fresh instance paid for: a graph rebuild per new shape (and the prompts not yet cached)
    assert (tmp_path / "fresh.log").read_text().count("rebuild shape=") >= 1


def test_a_load_past_the_budget_fails_naming_the_state(tmp_path, samples):
    with Serve(tmp_path, "slow", load_seconds=6000.0) as slow:  # the slow-load scenario: 60 s real
        out = gate(slow.url, samples, "--budget", "1.5", code=1)
    assert "is not ready after 2 s (probe budget 1.5 s): loading" in out.stderr


def test_nothing_listening_fails(tmp_path, samples):
    out = gate(f"http://127.0.0.1:{free_port()}", samples, "--budget", "0.5", code=1)
    assert "no answer (ConnectError)" in out.stderr


@pytest.mark.parametrize(
    "text, message",
    [
        (
            '{"name": "a", "messages": [{"role": "user", "content": "hi"}]}\nnot json\n',
            "samples.jsonl:2: not a JSON object",
        ),
        ('{"name": "a"}\n', "samples.jsonl:1: messages: Field required"),
        ('\n{"name": "a", "messages": [{}], "bogus": 1}\n', "samples.jsonl:2: bogus: Extra inputs are not permitted"),
        (
            '{"name": "a", "messages": [{}]}\n{"name": "a", "messages": [{}]}\n',
            "samples.jsonl:2: name: 'a' is used twice",
        ),
        ("", "holds no sample"),
    ],
)
def test_a_bad_samples_file_names_the_line(tmp_path, text, message):
    path = tmp_path / "samples.jsonl"
    path.write_text(text)
    with pytest.raises(SamplesError, match=message.replace("'", ".").replace("(", ".")):
        load_samples(path)
    result = CliRunner().invoke(app, ["smoke", "--url", "http://127.0.0.1:9", "--samples", str(path)])
    assert result.exit_code == 2 and message in result.stderr


def test_the_documented_samples_file_passes_on_a_healthy_serve(tmp_path):
    """docs/upgrades.md runs the gate with examples/smoke-samples.jsonl: each sample must leave room for the
    answer after the thinking (a 256-token budget ends in thinking only, and the gate fails it)."""
    examples = Path(__file__).resolve().parents[1] / "examples" / "smoke-samples.jsonl"
    with Serve(tmp_path, "warm", load_seconds=10.0) as warm:
        out = gate(warm.url, examples, "--budget", "20", code=0)
    assert f"smoke passed: {len(load_samples(examples))} samples passed" in out.stdout


def test_each_run_sends_its_own_request_ids_that_trace_takes(tmp_path, samples):
    """`smoke-short-answer` was every run's id: runs merged in `spyglass requests` and `trace` refused it."""
    from spyglass.forensics.trace import REQUEST_ID
    from spyglass.upgrades.smoke import load_samples, smoke

    loaded = load_samples(samples)
    with Serve(tmp_path, "ids", load_seconds=1.0) as serve:
        runs = [smoke(serve.url, loaded, budget=20) for _ in range(2)]
    ids = [o.request_id for run in runs for o in run.outcomes]
    assert len(ids) == 2 * len(SIZES) and len(set(ids)) == len(ids)
    assert all(REQUEST_ID.match(i) for i in ids), ids
    log = (tmp_path / "ids.log").read_text()
    assert all(i in log for i in ids)  # the serve logged each under the id it was sent with
