"""The configuration's models: one pydantic model per TOML table, validated with pydantic.

Each source's keys come from its collector module's options model (collectors.REGISTRY); spyglass.config.parsing
checks what spans tables and phrases every error.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from spyglass import collectors, serving
from spyglass.collectors.clock import host_zone, zone

if TYPE_CHECKING:  # spyglass.query.bounded imports httpx: not for every config load
    from spyglass.query.bounded import Limits


Options = TypeVar("Options", bound=collectors.SourceOptions)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AgentConfig(Strict):
    host: str = Field(default_factory=socket.gethostname, description="Host name stamped on events.")
    state_dir: Path = Field(Path("~/.local/state/spyglass"), description="Checkpoints and the store live here.")
    display_tz: str = Field(
        default_factory=host_zone,
        description="IANA zone of the second clock every table, page and chart shows beside UTC (the `_local`"
        " columns of the forensic views); default: the host's zone ($TZ, /etc/localtime).",
    )
    poll_interval_seconds: float = Field(0.25, gt=0, le=60, description="Polling pass period; inotify only hints.")
    grace_seconds: float = Field(5.0, ge=0, description="How long a rotated file is still read after its last growth.")
    max_line_bytes: int = Field(1 << 20, ge=256, description="Longer lines are truncated to this and counted.")
    read_budget_bytes: int = Field(8 << 20, ge=1 << 16, description="Bytes read per source per poll (fairness).")
    commit_interval_seconds: float = Field(
        1.0,
        ge=0,
        le=60,
        description="Events, checkpoints and metric state are committed at most this often;"
        " /metrics shows what is committed, and a crash re-reads at most this much.",
    )
    quiet_commit_seconds: float = Field(
        10.0,
        ge=0,
        le=600,
        description="A poll that says what the source's last poll said (an idle llama-server)"
        " is stored, but alone waits up to this long for a commit instead of commit_interval_seconds: an idle"
        " agent does not write its store every second. Anything new commits them at the next interval.",
    )
    request_rows_seconds: float = Field(
        30.0,
        ge=0,
        le=3600,
        description="The per-request rows (requests_engine, ...) are caught up with the stored events at"
        " most this often, and at a clean stop: each catch-up costs about as much as a commit whatever"
        " it holds. Meanwhile a query of a stopped agent's store computes them from the events.",
    )
    commit_max_events: int = Field(
        20_000,
        ge=1,
        description="A commit comes sooner once this many events wait; while the store"
        " cannot commit, reading pauses at this many (memory stays bounded, nothing is lost).",
    )
    coalesce_seconds: float = Field(
        0.1,
        ge=0,
        le=5,
        description="A step never follows the last one sooner than this: a burst of"
        " appends (many inotify wakes) is read in one step. Nor does a step come before the next commit"
        " may (commit_interval_seconds): what it reads waits for that commit anyway.",
    )
    rotated_generations: int = Field(
        8,
        ge=1,
        le=1000,
        description="How many numbered generations a '{n}' in a source's `rotated`"
        " patterns stands for ('{path}.{n}': .1 to .8).",
    )
    cpus: str | None = Field(
        None,
        description='CPUs the agent and all its threads may run on, a Linux cpu list such as "62-63"'
        " (sched_setaffinity at start): the host's housekeeping CPUs, never an engine's (docs/deploy.md)."
        " Each CPU must be one this machine has (/sys/devices/system/cpu/possible)."
        " Unset: the CPUs it was started on.",
    )
    nice: int = Field(
        0,
        ge=0,
        le=19,
        description="Niceness the agent adds to its own at start (0: none);"
        " with `cpus`, how little it weighs against whatever else shares them.",
    )

    @field_validator("display_tz")
    @classmethod
    def _display_zone(cls, value: str) -> str:
        zone(value)  # ValueError names the zone
        return value

    @field_validator("cpus")
    @classmethod
    def _cpu_list(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not re.fullmatch(r"\s*\d+(-\d+)?(\s*,\s*\d+(-\d+)?)*\s*", value):
            raise ValueError(f'not a cpu list such as "62-63" or "0,2,4-7": {value!r}')
        from spyglass.collectors.host import machine_cpus

        highest = max(machine_cpus())
        for part in value.split(","):
            low, _, high = part.strip().partition("-")
            if high and int(high) < int(low):
                raise ValueError(f"the range {part.strip()!r} runs backwards")
            if int(high or low) > highest:  # checked before any set is built: "0-999999999" is a billion CPUs
                raise ValueError(
                    f"CPU {int(high or low)} is not on this machine (its CPUs: 0-{highest},"
                    " /sys/devices/system/cpu/possible)"
                )
        return value


TOKEN_PATTERN = r"^[A-Za-z0-9._~+/-]+=*$"  # RFC 6750's b64token: no spaces, no control characters


class PrometheusConfig(Strict):
    """The agent's HTTP server. Loopback only unless a bearer token is configured; every limit bounds
    what one request can cost the agent (docs/config.md says which)."""

    enabled: bool = Field(True, description="Serve /metrics, /health, /debug/sources, /api/sql and /v1/traces.")
    token: str | None = Field(
        None,
        description="Bearer token required on every path but `open_paths`; needed to listen"
        " on a non-loopback address. 16 or more of A-Z a-z 0-9 - . _ ~ + / (RFC 6750).",
    )
    token_file: Path | None = Field(None, description="A file holding the token (first line), instead of `token`.")
    listen: str = Field(serving.LISTEN, description="IP:port or [IPv6]:port; a non-loopback address needs a token.")
    open_paths: list[str] = Field(["/metrics", "/health"], description="Paths served without the token.")
    metrics_listen: str | None = Field(
        None,
        description="A second IP:port serving only /metrics and /health, with"
        " workers no other path can take: point Prometheus here so that no flood of"
        " other requests can starve its scrapes.",
    )
    workers: int = Field(
        32, ge=1, le=1024, description="Requests served at once; past that a connection gets 503 at once."
    )
    request_timeout_seconds: float = Field(
        10.0, gt=0, le=600, description="Headers and body must arrive within this, or the connection closes."
    )
    max_body_bytes: int = Field(
        1 << 20,
        ge=1024,
        description="A longer request body is refused with 413 (an OTLP export of 512 spans is about 0.5 MB).",
    )
    sql_timeout_seconds: float = Field(
        30.0, gt=0, le=3600, description="/api/sql: the whole query, fetching and encoding included."
    )
    sql_memory_mb: int = Field(512, ge=64, description="/api/sql: memory of the process that runs one query.")
    sql_workers: int = Field(2, ge=1, le=64, description="/api/sql: queries run at once; others wait their turn.")
    sql_max_rows: int = Field(100_000, ge=1, description="/api/sql: rows in an answer; more is cut and said so.")
    sql_max_bytes: int = Field(16 << 20, ge=1024, description="/api/sql: bytes of an answer; more is cut and said so.")
    sql_snapshot_seconds: float = Field(
        5.0, ge=0, le=3600, description="/api/sql reads a copy of the store at most this much older than the query."
    )

    @field_validator("token")
    @classmethod
    def _token(cls, value: str | None) -> str | None:
        if value is not None and (len(value) < 16 or not re.fullmatch(TOKEN_PATTERN, value)):
            raise ValueError("must be 16 or more of A-Z a-z 0-9 - . _ ~ + / (RFC 6750: no spaces)")
        return value

    @field_validator("token_file")
    @classmethod
    def _readable(cls, value: Path | None) -> Path | None:
        if value is not None:
            try:
                token = value.expanduser().read_text().strip().splitlines()
            except OSError as exc:
                raise ValueError(f"cannot read the token file: {exc.strerror}") from None
            if not token or len(token[0]) < 16 or not re.fullmatch(TOKEN_PATTERN, token[0]):
                raise ValueError("the token file's first line must be a token of 16 or more of A-Z a-z 0-9 - . _ ~ + /")
        return value

    @field_validator("listen", "metrics_listen")
    @classmethod
    def _host_port(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
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
            raise ValueError(
                f"{host} is not a loopback address: set exporters.prometheus.token or token_file"
                " (every path but open_paths then requires it)"
            )
        return value

    def bearer_token(self) -> str | None:
        if self.token_file is not None:
            return self.token_file.expanduser().read_text().strip().splitlines()[0]
        return self.token

    def client_url(self) -> str:
        """Where a local client reaches the server: an all-interfaces address means this host's loopback."""
        host, port = serving.client_address(self.listen)
        return f"http://{host}:{port}"


class StoreConfig(Strict):
    enabled: bool = Field(True, description="Off: metrics only; checkpoints go to state_dir/state.json.")
    path: Path | None = Field(None, description="DuckDB file; default state_dir/spyglass.duckdb.")
    parquet_dir: Path | None = Field(
        None,
        description="Publish stored events as Parquet under host=/date=/hour= here (off if unset);"
        " docs/forensics.md shows how to query it.",
    )
    publish_interval_seconds: float = Field(
        60.0, ge=0, le=3600, description="New events are published to parquet_dir at most this often."
    )
    retain_hours: float | None = Field(
        None,
        gt=0,
        description="Keep this many hours of events in the DuckDB file; older ones are deleted"
        " once they are in parquet_dir (needs it). Unset: keep everything.",
    )
    memory_limit_mib: int = Field(
        96,
        ge=64,
        description="DuckDB's memory_limit for the agent's store connection (its buffers; the"
        " libraries and Arrow batches are outside it). A 4M-line catch-up peaks at 275 MiB with it, 355 MiB"
        " without (docs/benchmarks.md). At least 64: a fold of the per-request rows (up to 100k events) needs"
        " about 40 MiB, and at 32 MiB one of 20k events runs out.",
    )
    threads: int = Field(
        1,
        ge=1,
        le=64,
        description="DuckDB threads of the agent's store connection: an insert"
        " gains nothing from more, and each keeps its own buffers.",
    )


class OtlpConfig(Strict):
    endpoint: str | None = Field(None, description="OTLP/HTTP base URL, e.g. http://127.0.0.1:4318; off if unset.")
    interval_seconds: float = Field(15.0, gt=0, description="Seconds between OTLP pushes.")


class TracesConfig(Strict):
    accept: bool = Field(True, description="Store OTLP/HTTP spans posted to /v1/traces on the agent's server.")
    keep_content: bool = Field(
        False,
        description="Keep prompt and completion attributes and status messages "
        "(gen_ai.prompt, gen_ai.input.messages, ...); off: dropped on receipt.",
    )
    max_spans_per_export: int = Field(5000, ge=1, description="A larger export is refused (400).")
    max_attributes: int = Field(64, ge=1, description="Attributes kept per span; the rest are dropped and counted.")
    max_value_chars: int = Field(1024, ge=16, description="A longer attribute value or span name is truncated.")
    max_spans_per_second: float = Field(
        1000.0,
        gt=0,
        description="Spans taken per second past the burst; an"
        " export past it is refused whole with 429 and Retry-After.",
    )
    burst_spans: int = Field(20_000, ge=1, description="Spans taken at once before the rate applies.")
    max_bytes_per_second: int = Field(
        1 << 20, ge=1024, description="Export bytes taken per second past the burst (429 and Retry-After past it)."
    )
    burst_bytes: int = Field(16 << 20, ge=1024, description="Export bytes taken at once before the rate applies.")


class ExportersConfig(Strict):
    prometheus: PrometheusConfig = PrometheusConfig()
    traces: TracesConfig = TracesConfig()
    store: StoreConfig = StoreConfig()
    otlp: OtlpConfig = OtlpConfig()


class SignalsConfig(Strict):
    long_prompt_tokens: int = Field(200_000, gt=0, description="A prompt this long counts as long (H4).")
    default_prompt_cache_every: int = Field(16384, gt=0, description="Used until the engine's args line tells its own.")
    buckets: dict[str, list[float]] = Field(default_factory=dict, description="Histogram bucket overrides.")


class LaneObjective(Strict):
    """One lane's TTFT objective: a first token later than ttft_seconds is an error of the SLO."""

    ttft_seconds: float = Field(gt=0, description="TTFT objective; a bucket bound of spyglass_engine_ttft_seconds.")
    # 14.4x the budget must stay below 100% errors, or the fast-burn page could never fire.
    objective: float = Field(
        0.99, gt=1 - 1 / 14.4, lt=1, description="Share of requests whose first token comes within ttft_seconds."
    )


class ForensicsConfig(Strict):
    """Bounds of a query the commands (`sql`, `timeline`, `report`, `diagnose`, ...) run on the store
    file themselves, when no agent holds it: the analyst's own query, so wider than /api/sql's, but
    still a process of its own that cannot take the machine (through a running agent, its limits
    apply)."""

    memory_mb: int = Field(
        2048,
        ge=64,
        description="Memory of the process that runs one query on the"
        " store file (a one-day report on 10M events needs about 1 GiB).",
    )
    timeout_seconds: float = Field(300, gt=0, le=3600, description="Wall time of one query on the store file.")

    def limits(self) -> Limits:
        from spyglass.query.bounded import Limits

        return Limits(self.timeout_seconds, self.memory_mb, settings="[forensics] memory_mb, timeout_seconds")


class AlertsConfig(Strict):
    """Deployment-dependent thresholds of the alert rules (`spyglass rules`); the rest live in
    the heuristic modules of spyglass/alerting/heuristics/."""

    job: str = Field("spyglass", description="Prometheus job label of the scrape of this agent's /metrics.")
    runbook_base_url: str | None = Field(
        None,
        description="runbook_url is this, a slash and <AlertName>.md: an absolute URL (https://... where the"
        " runbooks are published, or file:///... where they lie), so the link works from Alertmanager"
        " and Grafana. Unset: the file:// URL of the runbooks `spyglass rules --out` writes.",
    )
    evidence_base_url: str | None = Field(
        None,
        description="evidence_url is this, /evidence/<AlertName>? and the alert's labels: an absolute http(s) URL"
        " where the agent's evidence pages are reached (a proxy in front of it, say). Unset: the"
        " agent's own address (exporters.prometheus.listen; all interfaces as this host's loopback).",
    )
    evaluation_interval_seconds: int = Field(30, gt=0, le=300, description="Rule group evaluation interval.")
    time_scale: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Every range window, offset, for: and keep_firing_for: of the generated rules is"
        " this times the catalogue's: 1 for a real deployment; an emulated one whose"
        " engines run model time faster (the emulator's time_scale) pages on its own"
        " clock with less. Thresholds in seconds or minutes (probe budget, hung and"
        " silent minutes, crash-loop window) are settings of their own, and rate"
        " thresholds (evictions or rebuilds a minute) are not scaled.",
    )
    lanes: dict[str, LaneObjective] = Field(
        default_factory=dict, description="TTFT objective per lane; a lane without one gets 40 s at 99%."
    )
    cache_snapshot_budget_share: float = Field(
        1 / 3,
        gt=0,
        le=1,
        description="H3: a parked snapshot above this share of the cache budget (per slot"
        " the budget is budget/slots) leaves room for two or three conversations.",
    )
    probe_budget_seconds: float = Field(
        600, gt=0, description="H14: how long a start may load before its probe gives up."
    )
    crash_loop_spawns: int = Field(
        3, ge=2, description="H13: this many spawns of a program within the window is a loop."
    )
    crash_loop_window_minutes: int = Field(15, gt=0, description="H13: the crash-loop window.")
    hung_minutes: int = Field(5, gt=0, description="H20: minutes with work but no finished request and no log line.")
    source_silent_minutes: int = Field(
        3, gt=0, description="H19: minutes an engine log (stats every 10 s) may be silent."
    )
    memory_limit_bytes: float = Field(256 * 2**30, gt=0, description="H17: resident memory an engine may reach.")
    pager_webhook_url: str = Field("http://127.0.0.1:9095/pager", description="Alertmanager: critical alerts go here.")
    ticket_webhook_url: str = Field(
        "http://127.0.0.1:9095/ticket", description="Alertmanager: warning and info alerts."
    )
    heartbeat_webhook_url: str = Field(
        "http://127.0.0.1:9095/heartbeat", description="Alertmanager: Watchdog, every minute (a dead man's switch)."
    )
    store_webhook_url: str | None = Field(
        "http://127.0.0.1:9464/api/alerts",
        description="Alertmanager also sends pages and tickets here (spyglass stores them as events); unset to not."
        " Not given: the agent's own /api/alerts, where exporters.prometheus.listen says.",
    )

    @field_validator("evidence_base_url")
    @classmethod
    def _http(cls, value: str | None) -> str | None:
        """The link is opened from Alertmanager's notification: only an absolute http(s) URL is taken."""
        if value is not None and not re.fullmatch(r"https?://[^/\s?#]+(/[^\s?#]*)?", value):
            raise ValueError(f"must be an absolute http(s) URL without a query (http://host:port/...), got {value!r}")
        return value

    @field_validator("runbook_base_url")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        """A relative link is dead in Alertmanager and Grafana: only an absolute URL is taken."""
        if value is not None and not re.fullmatch(r"(https?://[^/\s]+|file:///)\S*", value):
            raise ValueError(f"must be an absolute URL (https://host/... or file:///path), got {value!r}")
        return value


class Config(Strict):
    agent: AgentConfig = AgentConfig()
    exporters: ExportersConfig = ExportersConfig()
    signals: SignalsConfig = SignalsConfig()
    alerts: AlertsConfig = AlertsConfig()
    forensics: ForensicsConfig = ForensicsConfig()
    sources: dict[str, Any] = Field(default_factory=dict)

    def state_dir(self) -> Path:
        return self.agent.state_dir.expanduser()

    def store_path(self) -> Path:
        return (self.exporters.store.path or self.state_dir() / "spyglass.duckdb").expanduser()

    def source_kinds(self) -> dict[str, str]:
        """Source name -> its collector kind: the store files each event under its source's kind."""
        return {name: options.kind for name, options in self.sources.items()}

    def sources_of(self, options: type[Options]) -> dict[str, Options]:
        """The sources of one kind, by its options class (typed, where a kind's name would be a string)."""
        return {name: o for name, o in self.sources.items() if isinstance(o, options)}

    def lanes(self) -> dict[str, str]:
        """Instance -> lane, from the sources that declare one (engine logs)."""
        return {o.instance: o.lane for o in self.sources.values() if o.instance and getattr(o, "lane", "")}
