"""What a replay adds to the stored events so that it sees what a live agent's Prometheus would.

- Process state: the live host sampler sets `spyglass_host_process_up` from /proc, which a store
  holds only if a `host` source ran. For an instance without stored host samples, a replay derives
  it from the stored supervisord events of its program (log or RPC): 1 from a spawn until an exit,
  FATAL or stop (STARTING, RUNNING, STOPPING), else 0. The program of an instance is its `host`
  source's `program`, else the instance's own name. What cannot be derived: a process that hangs
  or dies unseen by supervisord (not managed by it), and the host facts (CPUs, RSS, throttling).
- Staleness: the series of a source whose kind polls the present (its registration says so: serve
  status, llama-server, host, model path, supervisord RPC; not the infer store, whose polls import
  history) count as current for two poll intervals after the poll that set them, as the live agent drops a serve's
  gauges when its polls fail; after that the replay stops writing them and Prometheus lets them go
  stale (its 5-minute lookback: OpenMetrics text cannot carry a staleness marker).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spyglass import collectors
from spyglass.collectors.engine_log import EngineLogOptions
from spyglass.collectors.event import Event
from spyglass.config import Config
from spyglass.signals.state import MetricState

PROCESS_UP = "spyglass_host_process_up"
ALIVE_LOG = {"spawned": 1.0, "running": 1.0, "stopping": 1.0, "exited": 0.0, "fatal": 0.0, "stopped": 0.0}
ALIVE_RPC = {"STARTING", "RUNNING", "STOPPING"}
MISSED_POLLS = 2


@dataclass
class ReplayState:
    """Derived process state and the staleness of polled series, fed every replayed event in time order."""

    kinds: dict[str, str]  # source -> kind
    intervals: dict[str, float]  # polled source -> its poll interval
    programs: dict[str, str]  # supervisord program -> instance
    sampled: set[str] = field(default_factory=set)  # instances with real host samples
    last_poll: dict[tuple[str, str], float] = field(default_factory=dict)  # (kind, instance) -> ts
    horizon: dict[tuple[str, str], float] = field(default_factory=dict)  # (kind, instance) -> current until

    @classmethod
    def of(cls, config: Config) -> ReplayState:
        kinds = {name: o.kind for name, o in config.sources.items()}
        intervals = polled_intervals(config.sources)
        programs = {o.instance: o.instance for o in config.sources_of(EngineLogOptions).values() if o.instance}
        for o in config.sources.values():
            for instance, ref in (getattr(o, "processes", None) or {}).items():
                if ref.program and ref.program != instance:
                    programs.pop(instance, None)
                programs[ref.program or instance] = instance
        return cls(kinds, intervals, programs)

    def apply(self, e: Event, state: MetricState) -> None:
        kind = self.kinds.get(e.source, "")
        if e.source in self.intervals and e.instance:
            self.horizon[(kind, e.instance)] = e.ts + MISSED_POLLS * self.intervals[e.source]
        if kind == "host" and e.kind in ("process", "process_missing"):
            self.sampled.add(e.instance)
        elif kind == "supervisord_log" and e.kind in ALIVE_LOG:
            self._process(str(e.fields.get("program", "")), ALIVE_LOG[e.kind], state)
        elif kind == "supervisord_rpc" and e.kind == "process_info":
            program = str(e.fields.get("name") or e.instance)
            self._process(program, 1.0 if str(e.fields.get("statename", "")) in ALIVE_RPC else 0.0, state)

    def _process(self, program: str, up: float, state: MetricState) -> None:
        instance = self.programs.get(program)
        if instance is not None and instance not in self.sampled:
            state.set(PROCESS_UP, (instance,), up)

    def stale(self, now: float) -> set[tuple[str, str]]:
        """(kind, instance) pairs whose last poll is too old to count at `now`."""
        return {key for key, until in self.horizon.items() if now > until}


def polled_intervals(sources: dict[str, collectors.SourceOptions]) -> dict[str, float]:
    """Source -> its poll interval, for the sources whose kind polls the present (collectors.Registration)."""
    registry = collectors.load_all()
    return {
        name: o.interval_seconds
        for name, o in sources.items()
        if registry[o.kind].polls_the_present and isinstance(o, collectors.PolledOptions)
    }
