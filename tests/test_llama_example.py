"""examples/llama-server.toml, the config docs/llama-server.md's quickstart copies, is valid and watches what the
quickstart's llama-server unit writes: the same log file, port and model path; its alert rules are written."""

from __future__ import annotations

import re
from pathlib import Path

from spyglass.config import load_config

ROOT = Path(__file__).parent.parent


def test_the_llama_example_is_valid_and_matches_the_quickstarts_units(tmp_path: Path) -> None:
    config = load_config(ROOT / "examples" / "llama-server.toml")
    kinds = {name: o.kind for name, o in config.sources.items()}
    assert kinds == {
        "engine-llama-a": "engine_log",
        "metrics-llama-a": "llama_server",
        "model-llama-a": "model_path",
        "host": "host",
    }
    log, poll, model = (config.sources[n] for n in ("engine-llama-a", "metrics-llama-a", "model-llama-a"))
    assert getattr(log, "preset", None) == "llama_server" and config.lanes() == {"llama-a": "normal"}
    doc = (ROOT / "docs" / "llama-server.md").read_text()
    unit = re.search(r"ExecStart=/usr/local/bin/llama-server (.+?)\n   Restart", doc, re.S)
    assert unit is not None
    argv = unit.group(1).replace("\\\n", " ").split()
    assert argv[argv.index("--log-file") + 1] == str(log.path)
    assert f"http://127.0.0.1:{argv[argv.index('--port') + 1]}" == getattr(poll, "url", None)
    assert argv[argv.index("-m") + 1] == str(model.path) and "--metrics" in argv
