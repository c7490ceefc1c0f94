"""The dashboards registry and their JSON: which modules make which dashboard, and writing
dashboards/generated/ for the deployment of examples/strata.toml."""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.cog.encoder import JSONEncoder

from spyglass import resources
from spyglass.alerting.heuristics import Deployment
from spyglass.dashboards.skeleton import title_formats

GENERATED = Path(str(resources.folder("spyglass.dashboards", "generated")))


@dataclass(frozen=True)
class Board:
    """One dashboard: its module (which has `UID`, `TITLE` and `build(d)`), uid and title."""

    module: str

    @property
    def _mod(self):
        return importlib.import_module(f"spyglass.dashboards.{self.module}")

    @property
    def uid(self) -> str:
        return self._mod.UID

    @property
    def title(self) -> str:
        return self._mod.TITLE

    def json(self, d: Deployment) -> dict[str, Any]:
        data = json.loads(JSONEncoder(sort_keys=True).encode(self._mod.build(d).build()))
        formats = title_formats()
        for annotation in data.get("annotations", {}).get("list", []):
            if annotation.get("name") in formats:
                annotation["titleFormat"] = formats[annotation["name"]]
        return data


# The wall first: it is the home dashboard; each drill-down links back to it.
DASHBOARDS = tuple(Board(m) for m in ("wall", "cache", "latency", "early_stops", "tokens", "lifecycle", "cpu", "agent"))


def deployment() -> Deployment:
    """The deployment the committed JSON is for: examples/strata.toml, as alerts/ is."""
    from spyglass.config import load_config

    with resources.as_file(resources.folder("spyglass", "examples", "strata.toml")) as example:
        return Deployment.of(load_config(example))


def build_all(d: Deployment | None = None) -> dict[str, dict[str, Any]]:
    d = d or deployment()
    return {b.uid: b.json(d) for b in DASHBOARDS}


def generated(d: Deployment | None = None) -> dict[str, str]:
    """File name -> content of every file of dashboards/generated/."""
    return {
        f"{uid}.json": json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        for uid, data in build_all(d).items()
    }


def write(out: Path = GENERATED, d: Deployment | None = None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = generated(d)
    for stale in out.glob("*.json"):
        if stale.name not in files:
            stale.unlink()
    written = []
    for name, text in files.items():
        (out / name).write_text(text)
        written.append(out / name)
    return written


# Catalogue metrics no dashboard shows, with why. A metric is shown when a panel, an annotation or
# a variable reads it, or reads a recording rule computed from it.
LLAMA_OWN = (
    "llama-server's own /metrics family (llama_server source): its slots and decode rate are on the"
    " wall through the shared engine metrics; the rest waits for a llama.cpp dashboard"
)
UNSHOWN: dict[str, str] = {
    "spyglass_agent_allowed_cpus_info": (
        "where the agent may run, for a look at deploy time; H2 alerts on the host source's shared_cpus pair instead"
    ),
    "spyglass_engine_last_progress_timestamp_seconds": (
        "an instant, read by EngineHung through instance:spyglass_engine_progress_silence:seconds"
    ),
    "spyglass_llama_build_info": LLAMA_OWN,
    "spyglass_llama_busy_slots_per_decode": LLAMA_OWN,
    "spyglass_llama_draft_tokens_total": LLAMA_OWN,
    "spyglass_llama_draft_verifications_total": LLAMA_OWN,
    "spyglass_llama_kv_cache_tokens": LLAMA_OWN,
    "spyglass_llama_kv_cache_usage_ratio": LLAMA_OWN,
    "spyglass_source_refused_files_total": (
        "a file at a source's path that could block the agent (a fifo, a device), counted once; /health names the"
        " source while its path holds one"
    ),
    "spyglass_llama_decode_calls_total": LLAMA_OWN,
    "spyglass_llama_generated_tokens_total": LLAMA_OWN,
    "spyglass_llama_generation_seconds_total": LLAMA_OWN,
    "spyglass_llama_poll_errors_total": LLAMA_OWN,
    "spyglass_llama_prompt_processing_seconds_total": LLAMA_OWN,
    "spyglass_llama_prompt_tokens_total": LLAMA_OWN,
    "spyglass_llama_restarts_total": LLAMA_OWN,
}


def links(*modules: str) -> list[tuple[str, str]]:
    """(uid, title) of the named dashboard modules, for `board(links_to=...)`."""
    return [(Board(m).uid, Board(m).title) for m in modules]
