"""A bad config stops start-up with a message naming the file, the key and what was expected."""
from __future__ import annotations

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
    assert set(config.sources) == {"engine-a", "engine-b", "gateway", "supervisord", "switch", "serve-a", "serve-b",
                                   "infer", "host"}
    assert config.lanes() == {"strata-a": "fast", "strata-b": "normal"}
    assert config.exporters.prometheus.listen == "127.0.0.1:9464"


@pytest.mark.parametrize(("text", "message"), [
    ("[agent]\npoll_interval = 1\n", r"agent\.poll_interval: unknown key"),
    ("[agent]\npoll_interval_seconds = -1\n", r"agent\.poll_interval_seconds: Input should be greater than 0"),
    ("[exporters.prometheus]\nlisten = \"9464\"\n", r"exporters\.prometheus\.listen: expected host:port"),
    ('[sources.x]\nkind = "nginx"\n', r"sources\.x\.kind: expected one of \['engine_log'.*\(got 'nginx'\)"),
    (ENGINE + 'tz = "Mars/Olympus"\n', r"sources\.engine-b\.tz: unknown time zone 'Mars/Olympus'"),
    (ENGINE + 'colour = "blue"\n', r"sources\.engine-b\.colour: unknown key"),
    (ENGINE + 'start_at = "middle"\n', r"sources\.engine-b\.start_at: String should match"),
    (ENGINE + '[sources.engine-b.patterns]\npark = "park (("\n',
     r"sources\.engine-b\.patterns\.park: invalid regular expression"),
    ('[sources.x]\nkind = "engine_log"\ninstance = "strata-b"\n', r"sources\.x\.path: required"),
    (ENGINE + ENGINE.replace("engine-b]", "engine-c]"), r"sources\.engine-c\.path: the same file as sources\.engine-b"),
    ('[signals]\nbuckets = "fast"\n', r"signals\.buckets: Input should be a valid dictionary"),
    ("[agent\n", r"not valid TOML"),
])
def test_errors_name_the_file_and_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(path)
    assert str(caught.value).startswith(str(path))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "absent.toml")
