"""Which crash it is: the upgrade seed's four appearances of "it crashed", told apart from the store.

"Crash" is four faults with four different first checks (seed §1.2):
- `process_exit`: the process dies by itself: abort, segfault, or a load error (a checksum or
  state-dict mismatch, a missing file) in its last lines before the exit;
- `restart_loop`: it is restarted again and again without dying of its own error, each start ending
  before ready (a probe killing a slow load);
- `latency_avalanche`: TTFT p99 climbs many times over and requests queue, and nothing dies;
- `resource_growth`: memory climbs until the kernel's OOM killer takes it (SIGKILL).
`classify(config, window)` gathers the facts (supervisord's causes, the engine's lines before each
exit, the serve's status state, the memory trend, latency per 5 minutes) with one query each through
spyglass.forensics.run.query; `classify_facts` decides, purely. Each finding names its class, the
evidence, and the first check the seed gives for it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from spyglass.config import Config
from spyglass.forensics.run import Query, Window

EXITS_SQL = """SELECT ts_utc, program, event, exit_status, signal, core_dumped, expected, cause, detail
FROM process_events
WHERE program IS NOT NULL AND event IN ('spawned', 'exited', 'fatal', 'spawn_error', 'stop_kill', 'stopping')
ORDER BY ts_utc"""
ENGINE_SQL = """SELECT ts_utc, instance, kind, fields::VARCHAR AS fields FROM timeline
WHERE source_kind = 'engine_log' AND kind IN ('start', 'model', 'ready', 'checksum_mismatch', 'error', 'experts_loaded')
ORDER BY ts_utc, seq"""
MEMORY_SQL = """SELECT instance, time_bucket(INTERVAL 1 MINUTE, ts_utc) AS minute_utc,
  max(rss_bytes) AS rss, max(oom_kills) AS oom_kills
FROM host_samples WHERE event = 'process' GROUP BY ALL ORDER BY instance, minute_utc"""
STATE_SQL = """SELECT ts_utc, instance, state FROM status_snapshots WHERE state IS NOT NULL
QUALIFY state IS DISTINCT FROM lag(state) OVER (PARTITION BY instance ORDER BY ts_utc) ORDER BY ts_utc"""
LATENCY_SQL = """WITH r AS (
  SELECT instance, time_bucket(INTERVAL 5 MINUTE, ts_utc) AS bucket_utc, count(*) AS requests,
    min(ts_utc) AS first_utc, max(ts_utc) AS last_utc,
    quantile_cont(ttft_ms, 0.5) AS p50_ms, quantile_cont(ttft_ms, 0.99) AS p99_ms
  FROM engine_requests WHERE ttft_ms IS NOT NULL GROUP BY ALL),
g AS (SELECT instance, time_bucket(INTERVAL 5 MINUTE, ts_utc) AS bucket_utc, count(*) AS rebuilds
  FROM timeline WHERE source_kind = 'engine_log' AND kind = 'graph_rebuild' GROUP BY ALL),
q AS (SELECT instance, time_bucket(INTERVAL 5 MINUTE, ts_utc) AS bucket_utc, max(prefill_queue) AS queue
  FROM cache_events WHERE event = 'stats' GROUP BY ALL)
SELECT r.*, coalesce(g.rebuilds, 0) AS rebuilds, q.queue
FROM r LEFT JOIN g USING (instance, bucket_utc) LEFT JOIN q USING (instance, bucket_utc)
ORDER BY instance, bucket_utc"""

LOAD_ERRORS = (
    ("state_dict", re.compile(r"state_dict|missing key|unexpected key|size mismatch", re.I)),
    ("checksum", re.compile(r"checksum|md5|truncat|corrupt", re.I)),
    ("missing_file", re.compile(r"no such file|not found|cannot open|dangling", re.I)),
)
FIRST_CHECK = {
    ("process_exit", "abort"): "Read the last 200 lines before the exit: weight checks at load, resource allocation"
    " failures, a framework crash; then the 2x2 of old/new model x old/new environment.",
    ("process_exit", "segfault"): "Read the last lines before the exit and the core: a framework crash or a failed"
    " allocation; then the 2x2 of old/new model x old/new environment.",
    ("process_exit", "state_dict"): "Runtime drift: compare the serving image's framework and library versions with"
    " the model's export environment (the seed's transformers 4.18 against 4.22).",
    ("process_exit", "checksum"): "Print the path actually read (readlink -f) and check the real file still exists:"
    " a dangling link from a blue/green cleanup; equal md5s of source and copy prove"
    " nothing about the file read.",
    ("process_exit", "missing_file"): "Print the path actually read (readlink -f) and list its folder: a dangling link"
    " or a cleanup that raced the switch.",
    ("process_exit", "load_error"): "The load-phase error in the last lines: the 2x2 of old/new model x old/new"
    " environment.",
    ("process_exit", "exit"): "Read the last lines before the exit and the exit status.",
    ("process_exit", "killed"): "Who sent the signal: the OOM killer (dmesg, memory.events oom_kill), a probe, or an"
    " operator (supervisord's stop lines, the switch log).",
    ("restart_loop", "killed_while_loading"): "Probe timeout against model load time: a 40 s load under a 10 s probe"
    " restarts forever; give the start its own startup budget.",
    ("restart_loop", "restarts"): "What restarts it (probe, operator, supervisor) and the load time of each start.",
    ("latency_avalanche", "graph_rebuilds"): "Dynamic shapes: graph rebuilds per new shape, CPU busy and the"
    " accelerator idle; bound the shapes and warm them up at start.",
    ("latency_avalanche", "queueing"): "Requests queue and nothing dies: the prefill queue against the slots and the"
    " arrival rate; if the last start changed the model or build (`spyglass"
    " changes`), its dynamic shapes, thread counts and pre/post-processing time.",
    ("resource_growth", "oom"): "Preprocessing caches, framework memory fragmentation, log accumulation; confirm the"
    " OOM kill (dmesg, memory.events oom_kill).",
}
HEURISTIC = {"process_exit": "H13", "restart_loop": "H14", "latency_avalanche": "H16", "resource_growth": "H17"}
ABORT, SEGV = ("SIGABRT", 134), ("SIGSEGV", 139)
AVALANCHE_FACTOR, REBUILDS_PER_5MIN, MIN_REQUESTS = 5.0, 10, 5
# A fresh start is slow at first: every new shape builds its graph once, every conversation reads its
# prompt cold. Requests this soon after an instance's start (its ready line, else its start) are its
# warm-up, never an avalanche.
WARM_UP = timedelta(minutes=10)


@dataclass
class CrashFinding:
    """One appearance of "it crashed" on one instance: its class and cause, when, how often, why we think so."""

    instance: str
    klass: str  # process_exit, restart_loop, latency_avalanche, resource_growth
    cause: str  # abort, segfault, state_dict, checksum, missing_file, killed_while_loading, graph_rebuilds, oom, ...
    first: datetime
    last: datetime
    count: int
    evidence: list[str] = field(default_factory=list)

    @property
    def first_check(self) -> str:
        return FIRST_CHECK.get((self.klass, self.cause), FIRST_CHECK.get((self.klass, "restarts"), ""))

    @property
    def heuristic(self) -> str:
        return "H15" if self.cause in ("checksum", "missing_file") else HEURISTIC[self.klass]


@dataclass
class Facts:
    exits: list[dict[str, Any]]
    engine: list[dict[str, Any]]
    memory: list[dict[str, Any]]
    states: list[dict[str, Any]]
    latency: list[dict[str, Any]]
    loop_spawns: int = 3
    loop_window: timedelta = timedelta(minutes=15)


def queries(window: Window) -> dict[str, Query]:
    p = window.params()
    return {
        name: Query(sql, p)
        for name, sql in (
            ("exits", EXITS_SQL),
            ("engine", ENGINE_SQL),
            ("memory", MEMORY_SQL),
            ("states", STATE_SQL),
            ("latency", LATENCY_SQL),
        )
    }


def classify(config: Config, window: Window) -> list[CrashFinding]:
    """Every finding of the window, in time order (QueryError when the store cannot be read)."""
    from spyglass.forensics.changes import as_rows
    from spyglass.forensics.run import query

    got = {name: as_rows(*query(config, q)) for name, q in queries(window).items()}
    for row in got["engine"]:
        row["fields"] = json.loads(row["fields"]) if isinstance(row["fields"], str) else row["fields"] or {}
    return classify_facts(
        Facts(
            got["exits"],
            got["engine"],
            got["memory"],
            got["states"],
            got["latency"],
            config.alerts.crash_loop_spawns,
            timedelta(minutes=config.alerts.crash_loop_window_minutes),
        )
    )


# --- pure from here ---------------------------------------------------------------------------


def exit_cause(e: dict[str, Any]) -> str:
    signal, status = e.get("signal"), e.get("exit_status")
    if signal == ABORT[0] or status == ABORT[1]:
        return "abort"
    if signal == SEGV[0] or status == SEGV[1]:
        return "segfault"
    return "killed" if signal in ("SIGKILL", "SIGTERM") else "exit"


def run_lines(engine: list[dict], instance: str, at: datetime) -> list[dict]:
    """The engine lines of `instance` from its last start up to `at` (the run that ended there)."""
    lines = [r for r in engine if r["instance"] == instance and r["ts_utc"] <= at]
    starts = [i for i, r in enumerate(lines) if r["kind"] == "start"]
    return lines[starts[-1] :] if starts else lines[-20:]


def load_error(lines: list[dict]) -> tuple[str, str] | None:
    """(cause, the line's text) of a load-phase error among a run's lines, if any."""
    for r in lines:
        f = r["fields"]
        if r["kind"] == "checksum_mismatch":
            return (
                "checksum",
                f"checksum mismatch reading {f.get('path')}: expected md5={f.get('expected')} got={f.get('got')}",
            )
    for r in lines:
        if r["kind"] == "error":
            text = f"[{r['fields'].get('component')}] {r['fields'].get('message')}"
            for cause, pattern in LOAD_ERRORS:
                if pattern.search(text):
                    return cause, text
    if lines and not any(r["kind"] == "ready" for r in lines):
        errors = [r for r in lines if r["kind"] == "error"]
        if errors:
            f = errors[-1]["fields"]
            return "load_error", f"[{f.get('component')}] {f.get('message')}"
    return None


def memory_rising(memory: list[dict], instance: str, at: datetime) -> str | None:
    """Evidence of growth to OOM before `at`: an oom_kill count that rose, or RSS up by a fifth over the hour."""
    hour = [m for m in memory if m["instance"] == instance and at - timedelta(hours=1) <= m["minute_utc"] <= at]
    kills = [m["oom_kills"] for m in hour if m.get("oom_kills") is not None]
    if kills and max(kills) > min(kills):
        return f"cgroup oom_kill rose {min(kills)} -> {max(kills)}"
    rss = [m["rss"] for m in hour if m.get("rss")]
    if len(rss) >= 3 and rss[-1] >= 1.2 * rss[0] and rss == sorted(rss):
        return f"resident memory rose {rss[0] / 2**30:.1f} -> {rss[-1] / 2**30:.1f} GiB over {len(rss)} min"
    return None


def state_at(states: list[dict], instance: str, at: datetime) -> str | None:
    before = [s for s in states if s["instance"] == instance and s["ts_utc"] <= at]
    return before[-1]["state"] if before else None


def one_exit(f: Facts, e: dict) -> CrashFinding:
    instance, at = e["program"], e["ts_utc"]
    lines = run_lines(f.engine, instance, at)
    ready = any(r["kind"] == "ready" for r in lines)
    evidence = [
        f"{at:%H:%M:%S}Z supervisord: {e.get('cause') or e['event']}"
        + ("" if e.get("expected") is not False else " (not expected)")
    ]
    cause, klass = exit_cause(e), "process_exit"
    found = load_error(lines)
    if found and not ready:
        cause = found[0]
        evidence.append(f"last engine line before it: {found[1]}")
    elif cause == "killed":
        grew = memory_rising(f.memory, instance, at)
        if grew:
            klass, cause = "resource_growth", "oom"
            evidence.append(grew)
        elif not ready:
            klass, cause = "restart_loop", "killed_while_loading"
    if not ready and lines and lines[0]["kind"] == "start":
        evidence.append(f"ended {(at - lines[0]['ts_utc']).total_seconds():g} s after its start, never ready")
    state = state_at(f.states, instance, at)
    if state:
        evidence.append(f"serve state before it: {state}")
    return CrashFinding(instance, klass, cause, at, at, 1, evidence)


def merge(findings: list[CrashFinding], f: Facts, fatal: dict[str, list[datetime]]) -> list[CrashFinding]:
    """Consecutive exits of one instance with the same class and cause, each within the crash-loop window
    of the last, are one finding; a run of loop_spawns or more is said to be a restart loop."""
    out: list[CrashFinding] = []
    for c in findings:
        last = next((o for o in reversed(out) if o.instance == c.instance), None)
        if last and (last.klass, last.cause) == (c.klass, c.cause) and c.first - last.last <= f.loop_window:
            last.last, last.count = c.first, last.count + 1
            last.evidence += [x for x in c.evidence[1:2] if x not in last.evidence]
        else:
            out.append(c)
    for c in out:
        gave_up = next((t for t in fatal.get(c.instance, ()) if c.last <= t <= c.last + f.loop_window), None)
        if c.count >= f.loop_spawns or gave_up:
            span = (c.last - c.first).total_seconds() / 60
            c.evidence.insert(
                0,
                f"{c.count} exits in {span:.0f} min: a restart loop"
                + (f", FATAL at {gave_up:%H:%M:%S}Z" if gave_up else ""),
            )
    return out


def warming_up(engine: list[dict], instance: str, at: datetime) -> bool:
    """Whether `at` lies within WARM_UP of the instance's last start before it (its ready line if it has one)."""
    runs = [r for r in engine if r["instance"] == instance and r["kind"] in ("start", "ready") and r["ts_utc"] <= at]
    return bool(runs) and at - runs[-1]["ts_utc"] < WARM_UP


def avalanches(f: Facts, died: set[tuple[str, datetime]]) -> list[CrashFinding]:
    """5-minute buckets whose TTFT p99 is AVALANCHE_FACTOR times the instance's steady p50 or more, with no
    exit of the instance in them and not in a start's warm-up; consecutive ones are one finding, from its
    first request to its last. The steady p50 is the lower quartile of the buckets' p50s: an avalanche
    that fills most of the window does not become its own baseline."""
    out: list[CrashFinding] = []
    for instance in sorted({r["instance"] for r in f.latency}):
        rows = [
            r
            for r in f.latency
            if r["instance"] == instance
            and r["requests"] >= MIN_REQUESTS
            and not warming_up(f.engine, instance, r.get("first_utc") or r["bucket_utc"])
        ]
        if len(rows) < 2:
            continue
        p50s = sorted(r["p50_ms"] for r in rows)
        base = p50s[len(p50s) // 4]
        current: CrashFinding | None = None
        for r in rows:
            bad = base > 0 and r["p99_ms"] >= AVALANCHE_FACTOR * base
            bucket_end = r["bucket_utc"] + timedelta(minutes=5)
            dead = any(i == instance and r["bucket_utc"] <= t < bucket_end for i, t in died)
            if not bad or dead:
                current = None
                continue
            text = (
                f"{r['bucket_utc']:%H:%M}Z TTFT p99 {r['p99_ms']:.0f} ms against a steady p50 of {base:.0f} ms,"
                f" {r['rebuilds']} graph rebuilds, prefill queue {r.get('queue') if r.get('queue') is not None else '?'}"
            )
            storm = r["rebuilds"] >= REBUILDS_PER_5MIN
            first, last = r.get("first_utc") or r["bucket_utc"], r.get("last_utc") or bucket_end
            if current is None:
                current = CrashFinding(
                    instance, "latency_avalanche", "graph_rebuilds" if storm else "queueing", first, last, 1, [text]
                )
                out.append(current)
            else:
                current.last, current.count = last, current.count + 1
                current.evidence.append(text)
                if storm:
                    current.cause = "graph_rebuilds"
    return out


def classify_facts(f: Facts) -> list[CrashFinding]:
    exits = [e for e in f.exits if e["event"] in ("exited", "spawn_error") and e.get("expected") is not True]
    fatal: dict[str, list[datetime]] = {}
    for e in f.exits:
        if e["event"] == "fatal":
            fatal.setdefault(e["program"], []).append(e["ts_utc"])
    found = merge([one_exit(f, e) for e in exits], f, fatal)
    died = {(e["program"], e["ts_utc"]) for e in exits}
    return sorted(found + avalanches(f, died), key=lambda c: (c.first, c.instance))


def as_dict(c: CrashFinding) -> dict[str, Any]:
    return {
        "instance": c.instance,
        "class": c.klass,
        "cause": c.cause,
        "first_utc": c.first,
        "last_utc": c.last,
        "count": c.count,
        "heuristic": c.heuristic,
        "evidence": c.evidence,
        "first_check": c.first_check,
    }
