"""The agent's configuration: one TOML file, validated with pydantic.

A wrong key or value stops start-up with `ConfigError: FILE: dotted.key: what was expected`.
Each source's keys come from its collector module's options model (collectors.REGISTRY).
"""
from __future__ import annotations

import ipaddress
import socket
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

import collectors
from collectors.clock import zone


class ConfigError(Exception):
    """A configuration problem, already phrased for the person who wrote the file."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AgentConfig(Strict):
    host: str = Field(default_factory=socket.gethostname, description="Host name stamped on events.")
    state_dir: Path = Field(Path("~/.local/state/spyglass"), description="Checkpoints and the store live here.")
    poll_interval_seconds: float = Field(0.25, gt=0, le=60, description="Polling pass period; inotify only hints.")
    grace_seconds: float = Field(5.0, ge=0, description="How long a rotated file is still read after its last growth.")
    max_line_bytes: int = Field(1 << 20, ge=256, description="Longer lines are truncated to this and counted.")
    read_budget_bytes: int = Field(8 << 20, ge=1 << 16, description="Bytes read per source per poll (fairness).")


class PrometheusConfig(Strict):
    """The agent's HTTP server. Loopback only unless a bearer token is configured; every limit bounds
    what one request can cost the agent (docs/config.md says which)."""

    enabled: bool = Field(True, description="Serve /metrics, /health, /debug/sources, /api/sql and /v1/traces.")
    token: str | None = Field(None, min_length=16, description="Bearer token required on every path but "
                              "`open_paths`; needed to listen on a non-loopback address.")
    token_file: Path | None = Field(None, description="A file holding the token (first line), instead of `token`.")
    listen: str = Field("127.0.0.1:9464", description="IP:port or [IPv6]:port; a non-loopback address needs a token.")
    open_paths: list[str] = Field(["/metrics", "/health"], description="Paths served without the token.")
    workers: int = Field(32, ge=1, le=1024, description="Requests served at once; past that a connection gets 503 at once.")
    request_timeout_seconds: float = Field(10.0, gt=0, le=600,
                                           description="Headers and body must arrive within this, or the connection closes.")
    max_body_bytes: int = Field(1 << 20, ge=1024, description="A longer request body is refused with 413 (an OTLP export of 512 spans is about 0.5 MB).")
    sql_timeout_seconds: float = Field(30.0, gt=0, le=3600,
                                       description="/api/sql: the whole query, fetching and encoding included.")
    sql_memory_mb: int = Field(512, ge=64, description="/api/sql: memory of the process that runs one query.")
    sql_workers: int = Field(2, ge=1, le=64, description="/api/sql: queries run at once; others wait their turn.")
    sql_max_rows: int = Field(100_000, ge=1, description="/api/sql: rows in an answer; more is cut and said so.")
    sql_max_bytes: int = Field(16 << 20, ge=1024, description="/api/sql: bytes of an answer; more is cut and said so.")
    sql_snapshot_seconds: float = Field(5.0, ge=0, le=3600,
                                        description="/api/sql reads a copy of the store at most this much older than the query.")

    @field_validator("token_file")
    @classmethod
    def _readable(cls, value: Path | None) -> Path | None:
        if value is not None:
            try:
                token = value.expanduser().read_text().strip().splitlines()
            except OSError as exc:
                raise ValueError(f"cannot read the token file: {exc.strerror}") from None
            if not token or len(token[0]) < 16:
                raise ValueError("the token file must hold a token of at least 16 characters")
        return value

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str, info: ValidationInfo) -> str:
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("expected host:port with an IP address, e.g. 127.0.0.1:9464 or [::1]:9464")
        try:
            address = ipaddress.ip_address("127.0.0.1" if host == "localhost" else host.strip("[]"))
        except ValueError:
            raise ValueError(f"{host} is not an IP address (expected e.g. 127.0.0.1:9464 or [::1]:9464)") from None
        if (":" in host) != (address.version == 6) or (address.version == 6 and not host.startswith("[")):
            raise ValueError("write an IPv6 address in brackets, e.g. [::1]:9464")
        if not address.is_loopback and not (info.data.get("token") or info.data.get("token_file")):
            raise ValueError(f"{host} is not a loopback address: set exporters.prometheus.token or token_file"
                             " (every path but open_paths then requires it)")
        return value

    def bearer_token(self) -> str | None:
        if self.token_file is not None:
            return self.token_file.expanduser().read_text().strip().splitlines()[0]
        return self.token

    def client_url(self) -> str:
        """Where a local client reaches the server: an all-interfaces address means this host's loopback."""
        host, _, port = self.listen.rpartition(":")
        host = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]", "localhost": "127.0.0.1"}.get(host, host)
        return f"http://{host}:{port}"


class StoreConfig(Strict):
    enabled: bool = Field(True, description="Off: metrics only; checkpoints go to state_dir/state.json.")
    path: Path | None = Field(None, description="DuckDB file; default state_dir/spyglass.duckdb.")


class OtlpConfig(Strict):
    endpoint: str | None = Field(None, description="OTLP/HTTP base URL, e.g. http://127.0.0.1:4318; off if unset.")
    interval_seconds: float = Field(15.0, gt=0, description="Seconds between OTLP pushes.")


class TracesConfig(Strict):
    accept: bool = Field(True, description="Store OTLP/HTTP spans posted to /v1/traces on the agent's server.")
    keep_content: bool = Field(False, description="Keep prompt and completion attributes and status messages "
                               "(gen_ai.prompt, gen_ai.input.messages, ...); off: dropped on receipt.")
    max_spans_per_export: int = Field(5000, ge=1, description="A larger export is refused (400).")
    max_attributes: int = Field(64, ge=1, description="Attributes kept per span; the rest are dropped and counted.")
    max_value_chars: int = Field(1024, ge=16, description="A longer attribute value or span name is truncated.")


class ExportersConfig(Strict):
    prometheus: PrometheusConfig = PrometheusConfig()
    traces: TracesConfig = TracesConfig()
    store: StoreConfig = StoreConfig()
    otlp: OtlpConfig = OtlpConfig()


class SignalsConfig(Strict):
    long_prompt_tokens: int = Field(200_000, gt=0, description="A prompt this long counts as long (H4).")
    default_prompt_cache_every: int = Field(16384, gt=0,
                                            description="Used until the engine's args line tells its own.")
    buckets: dict[str, list[float]] = Field(default_factory=dict, description="Histogram bucket overrides.")


class Config(Strict):
    agent: AgentConfig = AgentConfig()
    exporters: ExportersConfig = ExportersConfig()
    signals: SignalsConfig = SignalsConfig()
    sources: dict[str, Any] = Field(default_factory=dict)

    def state_dir(self) -> Path:
        return self.agent.state_dir.expanduser()

    def store_path(self) -> Path:
        return (self.exporters.store.path or self.state_dir() / "spyglass.duckdb").expanduser()

    def lanes(self) -> dict[str, str]:
        """Instance -> lane, from the sources that declare one (engine logs)."""
        return {o.instance: o.lane for o in self.sources.values() if o.instance and getattr(o, "lane", "")}


def _where(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def _describe(error: dict[str, Any]) -> str:
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown key"
    elif error["type"] == "missing":
        message = "required key is missing"
    got = error.get("input")
    return message if isinstance(got, dict) or got is None or error["type"] == "missing" else f"{message} (got {got!r})"


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
    polled = getattr(kinds[kind].cls, "polled", False)
    if not polled and options.path is None and not getattr(options, "url", None):
        raise ConfigError(f"{file}: sources.{name}.path: required for kind {kind}")
    try:
        kinds[kind].cls(name, options)  # compiles the grammar: a bad pattern fails here, by name
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
    return config


def _check_unique_paths(config: Config, file: str) -> None:
    seen: dict[str, str] = {}
    for name, options in config.sources.items():
        if options.path is None:
            continue
        real = str(options.path.expanduser().resolve())
        if real in seen:
            raise ConfigError(f"{file}: sources.{name}.path: the same file as sources.{seen[real]}.path;"
                              " a file is tailed once")
        seen[real] = name


def engine_log_toml(log: Path, state_dir: Path, *, store: bool = True, listen: str | None = None,
                    host: str = "", read_budget_bytes: int | None = None) -> str:
    """A whole config for one engine log (strata-b, normal lane): the demo, tests and bench use it."""
    agent = [f'state_dir = "{state_dir}"'] + ([f'host = "{host}"'] if host else []) + \
        ([f"read_budget_bytes = {read_budget_bytes}"] if read_budget_bytes else [])
    prometheus = f'listen = "{listen}"' if listen else "enabled = false"
    return "\n".join(["[agent]", *agent, "[exporters.prometheus]", prometheus,
                      "[exporters.store]", f"enabled = {str(store).lower()}",
                      "[sources.engine-b]", 'kind = "engine_log"', f'path = "{log}"',
                      'instance = "strata-b"', 'lane = "normal"', ""])


def load_config(path: Path) -> Config:
    """Read and validate a TOML config file; ConfigError names the file and the key."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return parse_config(data, str(path))
