"""The catalogue's types: a heuristic, its check, thresholds, alerts and probe, and the deployment
facts (`Deployment`) its numbers depend on. Every type is keyword-only: a heuristic module names
each field it fills, so no two positional strings can be swapped unnoticed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from spyglass.collectors.engine_log import EngineLogOptions
from spyglass.collectors.llama_server import LlamaServerOptions
from spyglass.collectors.serve_status import ServeStatusOptions
from spyglass.config import AlertsConfig, Config, LaneObjective, SignalsConfig
from spyglass.resources import beside

Severity = Literal["critical", "warning", "info"]

VALUE = "{{ $value | humanize }}"
PERCENT = "{{ $value | humanizePercentage }}"
SECONDS = "{{ $value | humanizeDuration }}"
BYTES = "{{ $value | humanize1024 }}B"
INSTANCE = "{{ $labels.instance }}"
LANE = "{{ $labels.lane }}"
IL = "host, instance, lane"
BURN_WINDOWS = ("5m", "30m", "1h", "6h", "3d")
DEFAULT_LANE = LaneObjective(ttft_seconds=40.0, objective=0.99)


@dataclass(frozen=True, kw_only=True)
class Check:
    """The one discriminating check: what to compare, and the exact query or command for it."""

    text: str
    promql: str = ""
    sql: str = ""
    shell: str = ""


@dataclass(frozen=True, kw_only=True)
class Threshold:
    """A number a rule or the diagnosis uses; `setting` names the [alerts] key it comes from."""

    name: str
    value: float
    unit: str
    meaning: str
    setting: str = ""


@dataclass(frozen=True, kw_only=True)
class Alert:
    """One Prometheus alerting rule; `description` holds the measured value as a template."""

    name: str
    severity: Severity
    expr: str
    for_: str
    summary: str
    description: str
    keep_firing_for: str = ""
    inhibits_latency: bool = False  # a source of the per-instance inhibition of latency/throughput alerts
    latency: bool = False  # a latency or throughput alert that such a source silences


@dataclass(frozen=True, kw_only=True)
class Recording:
    """A recording rule shared by alerts and dashboards; its expression reads raw metrics only, so a
    backtest over backfilled series can inline it."""

    record: str
    expr: str


@dataclass(frozen=True, kw_only=True)
class Probe:
    """The forensic diagnosis's check of a heuristic over a stored window (`spyglass diagnose`).

    `sql` is one SELECT over the forensic views (docs/forensics.md) returning one row per finding:
    `instance` and `lane` (either may be NULL), `start_utc` and `end_utc`, and one column per name
    in `figures` (a number, or a JSON object of named numbers), and `trace_request_id` where a request
    stands for the finding (the one `spyglass trace` should show). Its conditions are this heuristic's
    thresholds, written in with the same `_n` as the alert expressions, so a finding and an alert
    cannot disagree on a number. `alert` names the alert whose severity the finding carries;
    `summary` is a str.format template over the row's columns."""

    alert: str
    sql: str
    summary: str
    figures: tuple[str, ...]
    # the source kinds whose events it reads ("a|b": either); without them in the window it cannot be checked
    needs: tuple[str, ...] = ()


Control = Literal["control group", "other lane", "other instance", "hour before"]


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """What an alert's evidence page (spyglass.forensics.evidence) shows beside the probe's figures.

    The runbook's discriminating comparison, computed for the page's window: `this` and `other` are
    str.format templates over the probe's row (the finding against its control, both measured by the
    probe); with `control` "hour before" and no `other`, the control is the probe's own finding over the
    hour before the window (or none). `series` names the chart's series (evidence.SERIES: a store query a
    bucket) and `threshold` the line drawn on it: a number, or the name of a column of the probe's row."""

    control: Control
    text: str
    this: str
    other: str = ""
    series: str = "events"
    threshold: float | str | None = None
    threshold_factor: float = 1.0  # the line is at this times `threshold` (H1: a share of the baseline)


@dataclass(frozen=True, kw_only=True)
class Heuristic:
    id: str
    title: str
    incident: str
    symptom: str
    wrong_guess: str
    check: Check
    knobs: tuple[str, ...]
    thresholds: tuple[Threshold, ...] = ()
    alerts: tuple[Alert, ...] = ()
    diagnosis: str = ""  # what this heuristic needs beyond metrics (bodies, history): the diagnosis does it
    history: str = ""  # what the seeds measured then: the runbook's history, never an alert's description
    probe: Probe | None = None  # the diagnosis's SQL check over the store; None: metrics only
    evidence: Evidence | None = None  # the evidence page's comparison and chart; None: metrics only

    def threshold(self, name: str) -> float:
        return next(t.value for t in self.thresholds if t.name == name)


@dataclass(frozen=True, kw_only=True)
class Deployment:
    """The deployment facts the rules depend on: [alerts] settings, lanes, which engine-log source
    belongs to which instance (for silence and hung-engine rules), and which status endpoint (a serve's,
    llama-server's) is polled for which instance, with the time within which its next poll is due."""

    settings: AlertsConfig = field(default_factory=AlertsConfig)
    signals: SignalsConfig = field(default_factory=SignalsConfig)  # what the metrics count (a long prompt's size)
    lanes: dict[str, LaneObjective] = field(default_factory=lambda: {"fast": DEFAULT_LANE, "normal": DEFAULT_LANE})
    engine_sources: dict[str, str] = field(default_factory=lambda: {"engine-a": "strata-a", "engine-b": "strata-b"})
    # the engine logs that write while idle (Strata's [stats] line): their silence is a sign (H19); not llama-server's
    heartbeat_sources: dict[str, str] = field(default_factory=lambda: {"engine-a": "strata-a", "engine-b": "strata-b"})
    # where the runbooks lie when alerts.runbook_base_url is unset: the file:// URL of the folder written
    runbooks_url: str = ""
    # where the agent's evidence pages are: alerts.evidence_base_url, else the agent's listen address
    evidence_base_url: str = "http://127.0.0.1:9464"
    # status endpoints: source -> (instance, seconds within which a poll is due even while it fails)
    status_sources: dict[str, tuple[str, float]] = field(
        default_factory=lambda: {"serve-a": ("strata-a", 67.0), "serve-b": ("strata-b", 67.0)}
    )

    @classmethod
    def of(cls, config: Config) -> Deployment:
        lanes = {lane: config.alerts.lanes.get(lane, DEFAULT_LANE) for lane in config.lanes().values()}
        lanes.update(config.alerts.lanes)
        lanes = lanes or {"": DEFAULT_LANE}  # no lanes: one objective for every series, whose lane label is ""
        logs = {name: o for name, o in config.sources_of(EngineLogOptions).items() if o.instance}
        engines = {name: o.instance for name, o in logs.items()}
        status = {
            name: (o.instance or name, o.next_poll_within())
            for name, o in config.sources_of(ServeStatusOptions).items()
            if o.url
        }
        status |= {
            name: (o.instance or name, o.next_poll_within())
            for name, o in config.sources_of(LlamaServerOptions).items()
        }
        evidence = config.alerts.evidence_base_url or config.exporters.prometheus.client_url()
        return cls(
            settings=config.alerts,
            signals=config.signals,
            lanes=dict(sorted(lanes.items())),
            engine_sources=engines,
            heartbeat_sources={name: i for name, i in engines.items() if logs[name].idle_lines()},
            status_sources=status,
            evidence_base_url=evidence,
        )


def probe_sql(module: str, **values: object) -> str:
    """The probe SQL beside a heuristic's module (`hNN_name.sql` for the module `__name__` names), with
    each `{name}` filled from `values` (str.format: a literal brace is doubled). Package data, so an
    installed spyglass reads it as a checkout does."""
    return beside(module, ".sql").strip().format(**values)
