"""supervisord events turned into metrics (label: program, and bounded causes).

A program that dies after `startsecs` is respawned at once and never reaches FATAL, so a crash
loop is visible here as spawns and unexpected exits, not waited for: alert on
`increase(spyglass_supervisord_spawns_total[15m]) >= 3`. States follow the log's transitions.
"""

from __future__ import annotations

import signal

from spyglass.collectors.event import Event
from spyglass.signals import SignalsBase, signals_for
from spyglass.signals.catalogue import spec_maker

PROGRAM = ("program",)
STATES = ("STARTING", "RUNNING", "BACKOFF", "EXITED", "FATAL", "STOPPING", "STOPPED")
CAUSES = frozenset([f"exit_{n}" for n in range(256)] + [s.name for s in signal.Signals])


spec = spec_maker("supervisord_log", PROGRAM)

SPECS = [
    spec("spyglass_supervisord_spawns_total", "counter", "Processes spawned by supervisord, restarts included."),
    spec(
        "spyglass_supervisord_exits_total",
        "counter",
        "Process exits, by expected or not and cause (exit_N or the signal name).",
        ("expected", "cause"),
    ),
    spec("spyglass_supervisord_core_dumps_total", "counter", "Process exits that dumped core."),
    spec("spyglass_supervisord_fatal_total", "counter", "Times a program entered FATAL (gave up restarting)."),
    spec(
        "spyglass_supervisord_stops_total",
        "counter",
        "Processes stopped on request, by the signal that ended them.",
        ("signal",),
    ),
    spec("spyglass_supervisord_stop_kills_total", "counter", "Stops escalated to SIGKILL after stopwaitsecs."),
    spec(
        "spyglass_supervisord_spawn_errors_total",
        "counter",
        "Spawns that failed before a process existed (a missing or non-executable command).",
        labels=(),
    ),
    spec(
        "spyglass_supervisord_process_state",
        "gauge",
        "1 for the program's current state, 0 for the others.",
        ("state",),
    ),
    spec(
        "spyglass_supervisord_process_start_time_seconds",
        "gauge",
        "Unix time the program was last spawned; uptime is time() minus this.",
        unit="seconds",
    ),
    spec("spyglass_supervisord_starts_total", "counter", "supervisord itself starting.", labels=()),
    spec(
        "spyglass_supervisord_event_overflows_total",
        "counter",
        "Events an event-listener pool dropped because its buffer was full.",
        labels=(),
    ),
]


@signals_for("supervisord_log", SPECS)
class SupervisordSignals(SignalsBase):
    def _enter(self, program: str, new: str) -> None:
        self.state.set_one_hot("spyglass_supervisord_process_state", (program,), STATES, new)

    def _current(self, program: str) -> str:
        states = self.state.series("spyglass_supervisord_process_state")
        return next((name for name in STATES if states.get((program, name)) == 1.0), "")

    def _cause(self, e: Event) -> str:
        """exit_N for N in 0-255, or a signal's name; anything else is "other" (counted)."""
        f = e.fields
        cause = str(f["signal"]) if f.get("signal") else f"exit_{f.get('status')}"
        return self.state.listed(e.source, "cause", cause, CAUSES)

    def apply(self, e: Event) -> None:
        s, f, kind = self.state, e.fields, e.kind
        program = str(f.get("program", ""))
        if kind == "spawned":
            s.inc("spyglass_supervisord_spawns_total", (program,))
            s.set("spyglass_supervisord_process_start_time_seconds", (program,), e.ts)
            self._enter(program, "STARTING")
        elif kind == "running":
            self._enter(program, "RUNNING")
        elif kind == "exited":
            expected = "true" if f["expected"] == "expected" else "false"
            cause = self._cause(e)
            s.inc("spyglass_supervisord_exits_total", (program, expected, cause))
            if f.get("core"):
                s.inc("spyglass_supervisord_core_dumps_total", (program,))
            # An unexpected exit before RUNNING is supervisord's BACKOFF; the log never names it.
            self._enter(
                program, "BACKOFF" if self._current(program) == "STARTING" and expected == "false" else "EXITED"
            )
        elif kind == "fatal":
            s.inc("spyglass_supervisord_fatal_total", (program,))
            self._enter(program, "FATAL")
        elif kind == "stopping":
            self._enter(program, "STOPPING")
        elif kind == "stopped":
            s.inc("spyglass_supervisord_stops_total", (program, self._cause(e)))
            self._enter(program, "STOPPED")
        elif kind == "stop_kill":
            s.inc("spyglass_supervisord_stop_kills_total", (program,))
        elif kind == "spawn_error":
            s.inc("spyglass_supervisord_spawn_errors_total", ())
        elif kind == "supervisord_started":
            s.inc("spyglass_supervisord_starts_total", ())
        elif kind == "event_overflow":
            s.inc("spyglass_supervisord_event_overflows_total", ())
