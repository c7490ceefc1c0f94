"""Config documents written as TOML: every config spyglass writes (the demo, tests and bench) comes from here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomli_w


def toml_text(document: dict[str, Any]) -> str:
    """A config document as TOML: every config spyglass writes goes through here (tomli_w quotes
    paths and strings correctly; a Path is written as its string)."""
    return tomli_w.dumps(_plain(document))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return str(value) if isinstance(value, Path) else value


def engine_log_config(
    log: Path,
    state_dir: Path,
    *,
    store: bool = True,
    listen: str | None = None,
    host: str = "",
    read_budget_bytes: int | None = None,
    commit_interval_seconds: float | None = None,
) -> dict[str, Any]:
    """A whole config for one engine log (strata-b, normal lane): the demo, tests and bench use it."""
    agent: dict[str, Any] = {"state_dir": state_dir}
    if host:
        agent["host"] = host
    if read_budget_bytes:
        agent["read_budget_bytes"] = read_budget_bytes
    if commit_interval_seconds is not None:
        agent["commit_interval_seconds"] = commit_interval_seconds
    return {
        "agent": agent,
        "exporters": {"prometheus": {"listen": listen} if listen else {"enabled": False}, "store": {"enabled": store}},
        "sources": {"engine-b": {"kind": "engine_log", "path": log, "instance": "strata-b", "lane": "normal"}},
    }


def engine_log_toml(log: Path, state_dir: Path, **options: Any) -> str:
    """engine_log_config as TOML text, for a config file."""
    return toml_text(engine_log_config(log, state_dir, **options))
