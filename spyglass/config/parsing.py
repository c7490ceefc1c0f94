"""Reading and validating a config file: parse_config, load_config and the checks that span tables.

A wrong key or value stops start-up with `ConfigError: FILE: dotted.key: what was expected`.
"""

from __future__ import annotations

import math
import os
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from spyglass import collectors
from spyglass.collectors.clock import set_display_zone, zone
from spyglass.config.models import Config


class ConfigError(Exception):
    """A configuration problem, already phrased for the person who wrote the file."""


def _where(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def _describe(error: Any) -> str:  # pydantic's ErrorDetails
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown key"
    elif error["type"] == "missing":
        message = "required key is missing"
    got = error.get("input")
    secret = error.get("loc", ())[-1:] == ("token",)  # a token is never echoed, not even a bad one
    return (
        message
        if isinstance(got, dict) or got is None or secret or error["type"] == "missing"
        else f"{message} (got {got!r})"
    )


def _validate_source(name: str, raw: Any, file: str) -> collectors.SourceOptions:
    kinds = collectors.load_all()
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: sources.{name}: expected a table")
    kind = raw.get("kind")
    if kind not in kinds:
        raise ConfigError(f"{file}: sources.{name}.kind: expected one of {sorted(kinds)} (got {kind!r})")
    try:
        options = kinds[kind].options.model_validate(raw)
        zone(options.tz)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(f"{file}: sources.{name}.{_where(first['loc'])}: {_describe(first)}") from None
    except ValueError as exc:
        raise ConfigError(f"{file}: sources.{name}.tz: {exc} (expected an IANA zone such as Asia/Shanghai)") from None
    if not kinds[kind].is_polled(options) and options.path is None:
        raise ConfigError(f"{file}: sources.{name}.path: required for kind {kind}")
    try:
        kinds[kind].build(name, options)  # compiles the grammar: a bad pattern fails here, by name
    except ValueError as exc:
        raise ConfigError(f"{file}: {exc}") from None
    return options


def parse_config(data: dict[str, Any], file: str = "<config>") -> Config:
    """Validate an already-parsed TOML document."""
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(f"{file}: {_where(first['loc'])}: {_describe(first)}") from None
    config.sources = {name: _validate_source(name, raw, file) for name, raw in config.sources.items()}
    _check_unique_paths(config, file)
    _check_buckets(config, file)
    _check_places(config, file)
    _check_urls(config, file)
    _check_parquet(config, file)
    for name, options in config.sources.items():  # what a source takes from the others (its kind's options say)
        options.complete([o for other, o in config.sources.items() if other != name])
    _agent_unpinned(config)
    return config


def _agent_unpinned(config: Config) -> None:
    """An agent without `agent.cpus` runs wherever the scheduler puts it, so its CPU set holds every engine's:
    the host source compares it with the engines (H2) only once it is pinned, unless `agent_name` says."""
    from spyglass.collectors.host import HostOptions

    if config.agent.cpus is not None:
        return
    for options in config.sources_of(HostOptions).values():
        if "agent_name" not in options.model_fields_set:
            options.agent_name = ""


def _check_parquet(config: Config, file: str) -> None:
    store = config.exporters.store
    if store.parquet_dir is not None and not store.enabled:
        raise ConfigError(
            f"{file}: exporters.store.parquet_dir: publishes the store's events; needs exporters.store.enabled = true"
        )
    if store.retain_hours is not None and store.parquet_dir is None:
        raise ConfigError(
            f"{file}: exporters.store.retain_hours: deletes only events already in Parquet;"
            " needs exporters.store.parquet_dir"
        )
    blocker = _file_on_the_way(store.parquet_dir.expanduser()) if store.parquet_dir is not None else None
    if blocker is not None:
        raise ConfigError(f"{file}: exporters.store.parquet_dir: expected a folder, but {blocker} is a file")


def _check_buckets(config: Config, file: str) -> None:
    from spyglass import signals  # the catalogue knows which metrics are histograms

    for name, bounds in config.signals.buckets.items():
        if not all(math.isfinite(b) for b in bounds):
            raise ConfigError(f"{file}: signals.buckets.{name}: expected finite numbers (got {bounds!r})")
    try:
        signals.full_catalogue().with_buckets(config.signals.buckets)
    except ValueError as exc:  # names the key already: signals.buckets.NAME: what is wrong
        raise ConfigError(f"{file}: {exc}") from None


def _check_places(config: Config, file: str) -> None:
    """state_dir must be (or be creatable as) a folder, the store path a file."""
    state_dir = config.state_dir()
    blocker = _file_on_the_way(state_dir)
    if blocker is not None:
        raise ConfigError(f"{file}: agent.state_dir: expected a folder, but {blocker} is a file")
    if config.exporters.store.enabled:
        path = config.store_path()
        if path.is_dir():
            raise ConfigError(f"{file}: exporters.store.path: expected a DuckDB file, but {path} is a folder")
        blocker = _file_on_the_way(path.parent)
        if blocker is not None:
            raise ConfigError(f"{file}: exporters.store.path: expected a file in a folder, but {blocker} is a file")


def _file_on_the_way(folder: Path) -> Path | None:
    """The first existing ancestor of `folder` (itself included) that is not a folder, if any."""
    for place in (folder, *folder.parents):
        if place.exists():
            return None if place.is_dir() else place
    return None


def _check_urls(config: Config, file: str) -> None:
    urls = [("exporters.otlp.endpoint", config.exporters.otlp.endpoint)]
    urls += [(f"sources.{name}.url", getattr(o, "url", None)) for name, o in config.sources.items()]
    for key, url in urls:
        if url is None:
            continue
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"{file}: {key}: expected an http:// or https:// URL (got {url!r})")


def _check_unique_paths(config: Config, file: str) -> None:
    """A tailed file once; a polled source's path (a model path two instances start with) is not tailed."""
    seen: dict[str, str] = {}
    kinds = collectors.load_all()
    for name, options in config.sources.items():
        if options.path is None or kinds[options.kind].is_polled(options):
            continue
        real = os.path.realpath(options.path.expanduser())  # a symlink loop is the source's problem, at run time
        if real in seen:
            raise ConfigError(
                f"{file}: sources.{name}.path: the same file as sources.{seen[real]}.path; a file is tailed once"
            )
        seen[real] = name


def load_config(path: Path) -> Config:
    """Read and validate a TOML config file; ConfigError names the file and the key."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    config = parse_config(data, str(path))
    set_display_zone(config.agent.display_tz)  # the process's second clock, for every table and page it shows
    return config
