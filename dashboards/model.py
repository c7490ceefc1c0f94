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
        data["panels"] = panels_with_data(data["panels"], d)
        formats = title_formats()
        for annotation in data.get("annotations", {}).get("list", []):
            if annotation.get("name") in formats:
                annotation["titleFormat"] = formats[annotation["name"]]
        return data


def given(d: Deployment) -> set[str] | None:
    """The catalogue's metrics this deployment's sources can give (None: every one): a kind's metrics where a
    source of that kind is configured, an engine's only where that engine runs (MetricSpec.engines), and the
    agent's own always."""
    from spyglass.signals import load_all

    if d.source_kinds is None and d.engines_present() >= {"strata"}:
        return None
    kinds = d.source_kinds if d.source_kinds is not None else frozenset(load_all())
    return {
        spec.name
        for kind, registration in load_all().items()
        if kind in kinds or registration.cls is None
        for spec in registration.specs
        if not spec.engines or spec.engines & d.engines_present()
    }


def panels_with_data(panels: list[dict[str, Any]], d: Deployment) -> list[dict[str, Any]]:
    """`panels` without those that read only metrics this deployment cannot give (a Strata panel for a llama.cpp
    deployment, a gateway's where no gateway is watched), and without the rows left empty by that. A panel that
    reads no catalogue metric (ALERTS) stays."""
    from spyglass.alerting.heuristics import recording_rules
    from spyglass.dashboards.lint import series
    from spyglass.signals import full_catalogue

    can = given(d)
    if can is None:
        return panels
    known = {spec.name for spec in full_catalogue()}
    rules = {r.record: r.expr for r in recording_rules(d)}

    def metrics(panel: dict[str, Any]) -> set[str]:
        read = {name for t in panel.get("targets", []) for name in series(t.get("expr", ""))}
        read |= {name for rule in read & rules.keys() for name in series(rules[rule])}
        return {base for name in read if (base := name.removesuffix("_bucket").removesuffix("_count")) in known}

    for panel in panels:  # a query of what the deployment cannot give goes (a Strata gateway's beside the engine's)
        targets = panel.get("targets", [])
        given_targets = [t for t in targets if not metrics({"targets": [t]}) or metrics({"targets": [t]}) & can]
        if given_targets and len(given_targets) < len(targets):
            panel["targets"] = given_targets
    kept = [p for p in panels if p.get("type") == "row" or not metrics(p) or metrics(p) & can]
    return [p for n, p in enumerate(kept) if p.get("type") != "row" or next_is_panel(kept, n)]


def next_is_panel(panels: list[dict[str, Any]], n: int) -> bool:
    return n + 1 < len(panels) and panels[n + 1].get("type") != "row"


# The wall first: it is the home dashboard; each drill-down links back to it.
DASHBOARDS = tuple(Board(m) for m in ("wall", "cache", "latency", "early_stops", "tokens", "lifecycle", "cpu", "agent"))


def deployment() -> Deployment:
    """The deployment the committed JSON is for: examples/strata.toml's thresholds and lanes, as alerts/ is, with
    every panel (whatever sources a user configures; `spyglass dashboards` writes a deployment's own)."""
    from dataclasses import replace

    from spyglass.config import load_config

    with resources.as_file(resources.folder("spyglass", "examples", "strata.toml")) as example:
        return replace(Deployment.of(load_config(example)), source_kinds=None)


def build_all(d: Deployment | None = None) -> dict[str, dict[str, Any]]:
    """Every dashboard with a panel this deployment can fill, their links only to each other."""
    d = d or deployment()
    boards = {b.uid: b.json(d) for b in DASHBOARDS}
    boards = {uid: data for uid, data in boards.items() if any(p.get("type") != "row" for p in data["panels"])}
    for data in boards.values():
        data["links"] = [
            k for k in data.get("links", []) if not k.get("url", "").startswith("/d/") or k["url"][3:] in boards
        ]
    return boards


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
