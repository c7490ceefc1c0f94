"""The catalogue's types: a heuristic, its check, thresholds, alerts and probe, and the deployment
facts (`Deployment`) its numbers depend on. Every type is keyword-only: a heuristic module names
each field it fills, so no two positional strings can be swapped unnoticed."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
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
    engines: tuple[str, ...] = ()  # the engines whose metrics it reads (ENGINES); empty: every engine's

    def watches(self, engine: str) -> bool:
        return not self.engines or engine in self.engines


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
    cannot disagree on a number. `alert` names the alert whose severity the finding carries; a row may
    name one of `also` in an `alert` column instead (H13's engine that no supervisord watches);
    `summary` is a str.format template over the row's columns."""

    alert: str
    sql: str
    summary: str
    figures: tuple[str, ...]
    also: tuple[str, ...] = ()
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


Engine = Literal["strata", "llama_server"]  # the engine_log presets: which engine an instance runs
ENGINES: tuple[Engine, ...] = ("strata", "llama_server")
ENGINE_NAMES: dict[str, str] = {"strata": "Strata's engine", "llama_server": "llama.cpp's llama-server"}


@dataclass(frozen=True, kw_only=True)
class Words:
    """How a heuristic speaks of one engine's instances, in that engine's words: what it overrides of the
    heuristic (the probe's summary, the evidence's templates, the check, the knobs as that engine's flags),
    `unknown` (a figure the engine cannot give -> why: said once on a finding that lacks it),
    `metrics_only` (why its probe has nothing of that engine to read, while its alerts apply), or
    `not_applicable` (why the heuristic does not apply to that engine at all)."""

    summary: str | None = None
    knobs: tuple[str, ...] | None = None
    check: str | None = None
    check_query: Check | None = None  # the whole check, where the other engines' query reads what this one lacks
    title: str | None = None
    symptom: str | None = None
    wrong_guess: str | None = None
    evidence_text: str | None = None
    this: str | None = None
    other: str | None = None
    unknown: dict[str, str] = field(default_factory=dict)
    not_applicable: str = ""
    metrics_only: str = ""  # why its probe reads nothing this engine writes (its alerts still apply)


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
    # per engine (ENGINES), what it says differently of that engine's instances; an engine not named: as above
    words: dict[str, Words] = field(default_factory=dict)

    def threshold(self, name: str) -> float:
        return next(t.value for t in self.thresholds if t.name == name)

    def applies_to(self, engine: str) -> bool:
        return not self.words.get(engine, Words()).not_applicable

    def why_not(self, engine: str) -> str:
        """Why it does not apply to `engine` ("" when it does)."""
        return self.words.get(engine, Words()).not_applicable

    def metrics_only(self, engine: str) -> str:
        """Why its probe has nothing of `engine` to read ("" when it has, or when it has no probe)."""
        return self.words.get(engine, Words()).metrics_only if self.probe is not None else ""

    def unknown(self, engine: str) -> dict[str, str]:
        """The figures `engine` cannot give, and why."""
        return self.words.get(engine, Words()).unknown

    def speaking(self, engine: str) -> Heuristic:
        """This heuristic in `engine`'s words: its summary, evidence, check and knobs for that engine's instances."""
        w = self.words.get(engine)
        if w is None:
            return self
        probe = self.probe if self.probe is None or w.summary is None else replace(self.probe, summary=w.summary)
        evidence = self.evidence
        if evidence is not None:
            evidence = replace(
                evidence,
                text=w.evidence_text or evidence.text,
                this=w.this or evidence.this,
                other=evidence.other if w.other is None else w.other,
            )
        return replace(
            self,
            probe=probe,
            evidence=evidence,
            check=w.check_query or (self.check if w.check is None else replace(self.check, text=w.check)),
            knobs=self.knobs if w.knobs is None else w.knobs,
            wrong_guess=self.wrong_guess if w.wrong_guess is None else w.wrong_guess,
            title=w.title or self.title,
            symptom=w.symptom or self.symptom,
        )


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
    # the engine each instance runs (its engine log's preset; a llama_server poller's instance: llama_server)
    engines: dict[str, str] = field(default_factory=lambda: {"strata-a": "strata", "strata-b": "strata"})
    # the collector kinds configured (None: every kind, as for the committed dashboards); a dashboard leaves out
    # the panels that read only what none of them gives
    source_kinds: frozenset[str] | None = None

    def engine_of(self, instance: str | None) -> str:
        """The engine of `instance`; for a row of no known instance (a lane's), the deployment's one engine
        when it has one, else strata."""
        if instance in self.engines:
            return self.engines[instance]
        present = set(self.engines.values())
        return present.pop() if len(present) == 1 else "strata"

    def engines_present(self) -> set[str]:
        return set(self.engines.values()) or {"strata"}

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
        settings = config.alerts
        if "store_webhook_url" not in settings.model_fields_set:  # the agent's own, where it listens
            stored = f"{config.exporters.prometheus.client_url()}/api/alerts"
            settings = settings.model_copy(update={"store_webhook_url": stored})
        return cls(
            settings=settings,
            signals=config.signals,
            lanes=dict(sorted(lanes.items())),
            engine_sources=engines,
            heartbeat_sources={name: i for name, i in engines.items() if logs[name].idle_lines()},
            status_sources=status,
            engines=engines_of(config),
            evidence_base_url=evidence,
            source_kinds=frozenset(config.source_kinds().values()),
        )


def engines_of(config: Config) -> dict[str, str]:
    """Each configured instance's engine: its engine log's preset, or llama_server for a llama-server poller's."""
    found = {o.instance: "llama_server" for o in config.sources_of(LlamaServerOptions).values() if o.instance}
    found |= {o.instance: o.preset for o in config.sources_of(EngineLogOptions).values() if o.instance}
    return found


def probe_sql(module: str, **values: object) -> str:
    """The probe SQL beside a heuristic's module (`hNN_name.sql` for the module `__name__` names), with
    each `{name}` filled from `values` (str.format: a literal brace is doubled). Package data, so an
    installed spyglass reads it as a checkout does."""
    return beside(module, ".sql").strip().format(**values)
