"""A bad config stops start-up with a message naming the file, the key and what was expected."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from spyglass.config import ConfigError, load_config

ROOT = Path(__file__).parent.parent
ENGINE = '[sources.engine-b]\nkind = "engine_log"\npath = "/var/log/b.log"\ninstance = "strata-b"\n'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spyglass.toml"
    path.write_text(text)
    return path


def test_the_shipped_example_is_valid():
    config = load_config(ROOT / "examples" / "strata.toml")
    assert set(config.sources) == {
        "engine-a",
        "engine-b",
        "gateway",
        "supervisord",
        "switch",
        "serve-a",
        "serve-b",
        "infer",
        "host",
        "model-a",
        "model-b",
    }
    # both engines start with the same model path: each instance's watch resolves it (H15)
    assert {(o.instance, str(o.path)) for o in config.sources.values() if o.kind == "model_path"} == {
        ("strata-a", "/home/cloud/models/current.gguf"),
        ("strata-b", "/home/cloud/models/current.gguf"),
    }
    assert config.lanes() == {"strata-a": "fast", "strata-b": "normal"}
    assert config.exporters.prometheus.listen == "127.0.0.1:9464"


def test_a_polled_path_may_be_shared_but_a_tailed_file_is_tailed_once(tmp_path):
    model = 'kind = "model_path"\npath = "/models/current.gguf"\n'
    config = load_config(
        write(tmp_path, f'[sources.m-a]\n{model}instance = "strata-a"\n[sources.m-b]\n{model}instance = "strata-b"\n')
    )
    assert {o.instance for o in config.sources.values()} == {"strata-a", "strata-b"}
    with pytest.raises(ConfigError, match=r"sources\.e2\.path: the same file as sources\.e1\.path"):
        load_config(
            write(
                tmp_path,
                '[sources.e1]\nkind = "engine_log"\npath = "/x.log"\n'
                '[sources.e2]\nkind = "engine_log"\npath = "/x.log"\n',
            )
        )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[agent]\npoll_interval = 1\n", r"agent\.poll_interval: unknown key"),
        ("[agent]\npoll_interval_seconds = -1\n", r"agent\.poll_interval_seconds: Input should be greater than 0"),
        ('[exporters.prometheus]\nlisten = "9464"\n', r"exporters\.prometheus\.listen: expected host:port"),
        ('[sources.x]\nkind = "nginx"\n', r"sources\.x\.kind: expected one of \['engine_log'.*\(got 'nginx'\)"),
        (ENGINE + 'tz = "Mars/Olympus"\n', r"sources\.engine-b\.tz: unknown time zone 'Mars/Olympus'"),
        (ENGINE + 'colour = "blue"\n', r"sources\.engine-b\.colour: unknown key"),
        (ENGINE + 'start_at = "middle"\n', r"sources\.engine-b\.start_at: String should match"),
        (
            ENGINE + '[sources.engine-b.patterns]\npark = "park (("\n',
            r"sources\.engine-b\.patterns\.park: invalid regular expression",
        ),
        ('[sources.x]\nkind = "engine_log"\ninstance = "strata-b"\n', r"sources\.x\.path: required"),
        (
            ENGINE + ENGINE.replace("engine-b]", "engine-c]"),
            r"sources\.engine-c\.path: the same file as sources\.engine-b",
        ),
        ('[signals]\nbuckets = "fast"\n', r"signals\.buckets: Input should be a valid dictionary"),
        ("[agent\n", r"not valid TOML"),
        (
            "[signals.buckets]\nspyglass_nope_seconds = [1, 2]\n",
            r"signals\.buckets\.spyglass_nope_seconds: not a histogram",
        ),
        (
            "[signals.buckets]\nspyglass_engine_prefill_read_seconds = [5, 1]\n",
            r"signals\.buckets\.spyglass_engine_prefill_read_seconds: bounds must be strictly increasing",
        ),
        (
            "[signals.buckets]\nspyglass_engine_prefill_read_seconds = [1, nan]\n",
            r"signals\.buckets\.spyglass_engine_prefill_read_seconds: expected finite numbers",
        ),
        (
            '[sources.s]\nkind = "serve_status"\nurl = "ftp://127.0.0.1/v1/status"\ninstance = "strata-b"\n',
            r"sources\.s\.url: expected an http:// or https:// URL \(got 'ftp://127.0.0.1/v1/status'\)",
        ),
        (
            '[sources.s]\nkind = "serve_status"\nurl = "127.0.0.1:8081/v1/status"\ninstance = "strata-b"\n',
            r"sources\.s\.url: expected an http:// or https:// URL",
        ),
        (
            '[exporters.otlp]\nendpoint = "file:///tmp/spans"\n',
            r"exporters\.otlp\.endpoint: expected an http:// or https://",
        ),
    ],
)
def test_errors_name_the_file_and_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(path)
    assert str(caught.value).startswith(str(path))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "absent.toml")


def run_cli(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "spyglass.cli.app", "run", "-c", str(config)], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("place", ["state_dir", "state_dir_below_a_file", "store_path"])
def test_places_that_are_the_wrong_kind_of_thing_stop_run_with_a_message(spawns, tmp_path, place):
    """Finding 13 of issue 9: these gave raw tracebacks from `spyglass run`."""
    a_file, a_folder = tmp_path / "a-file", tmp_path / "a-folder"
    a_file.write_text("")
    a_folder.mkdir()
    agent = {
        "state_dir": f'state_dir = "{a_file}"',
        "state_dir_below_a_file": f'state_dir = "{a_file}/state"',
        "store_path": f'state_dir = "{tmp_path}/state"',
    }[place]
    store = f'[exporters.store]\npath = "{a_folder}"\n' if place == "store_path" else ""
    config = write(tmp_path, f"[agent]\n{agent}\n{store}[exporters.prometheus]\nenabled = false\n")
    done = run_cli(config)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    key = (
        "exporters.store.path: expected a DuckDB file"
        if place == "store_path"
        else "agent.state_dir: expected a folder"
    )
    assert done.stderr.startswith(f"error: {config}: {key}"), done.stderr


def test_bucket_overrides_stop_run_with_a_message_not_a_traceback(spawns, tmp_path):
    config = write(
        tmp_path,
        f'[agent]\nstate_dir = "{tmp_path}/state"\n[exporters.prometheus]\nenabled = false\n'
        "[signals.buckets]\nspyglass_engine_prefill_read_seconds = [3, 2, 1]\n",
    )
    done = run_cli(config)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "signals.buckets.spyglass_engine_prefill_read_seconds: bounds must be strictly increasing" in done.stderr
