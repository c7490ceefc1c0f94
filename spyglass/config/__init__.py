"""The agent's configuration: one TOML file, validated with pydantic.

A wrong key or value stops start-up with `ConfigError: FILE: dotted.key: what was expected`.
Each source's keys come from its collector module's options model (collectors.REGISTRY).

The models are in `models`, reading and checking a file in `parsing`, writing one in `writing`;
every public name is importable from here.
"""

from __future__ import annotations

from spyglass.config.models import (
    AgentConfig,
    AlertsConfig,
    Config,
    ExportersConfig,
    ForensicsConfig,
    LaneObjective,
    OtlpConfig,
    PrometheusConfig,
    SignalsConfig,
    StoreConfig,
    Strict,
    TracesConfig,
)
from spyglass.config.parsing import ConfigError, load_config, parse_config
from spyglass.config.writing import engine_log_config, engine_log_toml, toml_text

__all__ = [
    "AgentConfig",
    "AlertsConfig",
    "Config",
    "ConfigError",
    "ExportersConfig",
    "ForensicsConfig",
    "LaneObjective",
    "OtlpConfig",
    "PrometheusConfig",
    "SignalsConfig",
    "StoreConfig",
    "Strict",
    "TracesConfig",
    "engine_log_config",
    "engine_log_toml",
    "load_config",
    "parse_config",
    "toml_text",
]
