"""llama.cpp's `llama-server` log (`--log-file F --log-prefix --log-timestamps`), the `llama_server` preset
of the engine log: events shaped as the Strata engine's wherever the meaning is the same.

A line is `M.SS.mmm.uuu L message`: the time since the process started (minutes, seconds, milliseconds,
microseconds), a level letter, then `slot FUNC: id N | task T | ...`, `srv  FUNC: ...` or `main: ...`.
Parsing a line (`LlamaLineParser.parse`) is pure; turning its relative stamp into UTC needs the start
instant of the process that wrote it, which `LlamaLogSource` (the I/O edge) finds. Rules:

- A *segment* is what one process wrote: it begins at the file's first line, at `srv llama_server:
  initializing ...` (the first line llama-server writes), or at a stamp smaller than the line before it
  (the process was restarted and appends to the same file).
- The start instant of a segment, first choice (`anchor = "process"`): the start time (/proc/PID/stat) of
  the running llama-server whose command line names this log file, if its lines fit it (start + the
  segment's last stamp is no later than the file's mtime, and the start no earlier than the previous
  segment's last line). Else (`"mtime"`): the file's mtime minus the last stamp read, for the last
  segment of a read (its last line is the file's latest write). A segment followed by another in the
  same read (its writer is gone: a crash loop read after the fact) is placed to end where the next
  begins (`"next"`). Never before the previous segment's last line.
- A line with a level but no stamp (llama-server run without --log-timestamps) takes the time it was
  read (the file's mtime). A line without even a level (a raw print, a continuation) is counted
  unprefixed, never an event.
- `--cache-ram`, `-np`, `-c` and the model path come from the writer's command line (/proc/PID/cmdline),
  as an `args` event after `start`; when the writer is not running, no budget is reported.

Events (kinds as the Strata engine log's, so signals, views and heuristics apply unchanged): `start`
(build_name llama.cpp; the build is not logged, the poller reads it from /props), `args`, `model`, `ready`
(at `listening on`, seconds since start), `queued` at
`launch_slot_` (prefill_depth 0: llama.cpp has no serial prefill queue; waiting for a slot is the
/metrics `requests_deferred`), `prompt` (prompt = reused + read, at launch + prompt eval time) and
`done` (ttft_ms = prompt eval time, decode_tps, completion) at `release`, `evict` (bytes, reason budget,
evictions = evict lines of this process so far), `error` (E lines); llama.cpp's own: `slot_select`
(LRU or LCP similarity), `reprocess` (forcing full prompt re-processing), `checkpoint`, `cache_state`,
`reasoning_budget`, and the start-up lines (`slots_config`, `model_loaded`, `verbosity`, `threadpool`,
`security`, `exiting`). A task's request id is made from the instance, the segment's start and the task
number (`YYYYMMDD-HHMMSS-hex`), so `requests` and `trace` show llama.cpp's tasks.
Fixture: tests/fixtures/llama_server/llama-server.log (a real log of the real build).
"""
from __future__ import annotations

import hashlib
import os
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spyglass.collectors import LineSourceBase
from spyglass.collectors.clock import Clock, SystemClock
from spyglass.collectors.event import Event
from spyglass.collectors.fields import ERROR_KIND, FieldType, SourceFields, from_patterns
from spyglass.collectors.grammar import LineKind, Miss, PatternOverride, build_kinds

PREFIX = re.compile(rb"(?:(?P<min>\d{1,9})\.(?P<sec>\d\d)\.(?P<ms>\d{3})\.(?P<us>\d{3}) )?(?P<level>[DIWE]) ")
SLOT = r"slot +(?P<func>\w+): id +(?P<slot>\d+) \| task (?P<task>-?\d+) \| "
SRV = r"srv +(?P<func>\w+): +"
MIB = r"(?P<mib>\d+\.\d+) MiB"

# kind: (literal prefilter, message regex); every one overridable from `patterns`.
PATTERNS: dict[str, tuple[str, str, str]] = {
    "start": ("", "initializing ...", SRV + r"initializing \.\.\."),
    "model": ("", "loading model '", SRV + r"loading model '(?P<path>.+)'"),
    "slots_config": ("", "n_slots = ", SRV + r"initializing, n_slots = (?P<slots>\d+), n_ctx_slot = (?P<ctx_slot>\d+),"
                     r" kv_unified = '(?P<kv_unified>\w+)'"),
    "model_loaded": ("", "model loaded", SRV + r"model loaded"),
    "ready": ("", "listening on ", SRV + r"listening on (?P<address>\S+)"),
    "exiting": ("", "cleaning up before exit", r"srv +[\w():, ]{0,60}cleaning up before exit\.\.\."),
    "verbosity": ("", "verbosity = ", r"cmn +\w+: common_params_print_info: verbosity = (?P<verbosity>\d+) .*"),
    "threadpool": ("", "threadpool init", r"cmn +\w+: llama threadpool init, n_threads = (?P<threads>\d+)"),
    "security": ("", "security: ", SRV + r"security: (?P<message>.{1,200})"),
    "slot_select": ("", "selected slot by ",
                    SLOT + r"selected slot by (?P<by>LRU|LCP similarity|id)(?:, t_last = (?P<t_last>-?\d+)"
                    r"|, f_sim_best = (?P<similarity>\d+\.\d+) \(> (?P<threshold>\d+\.\d+) thold\), f_keep = (?P<keep>-?\d+\.\d+)"
                    r"| \((?P<id>\d+)\))"),
    "launch": ("", "processing task", SLOT + r"processing task, is_child = (?P<child>\d)"),
    "timing_prompt": ("", "prompt eval time =",
                      SLOT + r"prompt eval time = +(?P<ms>\d+\.\d+) ms / +(?P<tokens>\d+) tokens \(.*\)"),
    "timing_eval": ("", " eval time =", SLOT + r" +eval time = +(?P<ms>\d+\.\d+) ms / +(?P<tokens>\d+) tokens"
                    r" \( *(?:\d+\.\d+|inf|nan) ms per token, +(?P<tps>\d+\.\d+|inf|nan) tokens per second\)"),
    "timing_graphs": ("", "graphs reused =", SLOT + r" +graphs reused = +(?P<graphs_reused>\d+)"),
    "timing_total": ("", "total time =", SLOT + r" +total time = +(?P<ms>\d+\.\d+) ms / +(?P<tokens>\d+) tokens"),
    "decode_progress": ("", "n_gen = ",
                        SLOT + r"n_gen = +(?P<n_gen>\d+), tg = +(?P<tps>\d+\.\d+) t/s, tg_3s = +(?P<tps_3s>\d+\.\d+) t/s"),
    "prompt_progress": ("", "prompt processing, ",
                        SLOT + r"prompt processing, n_tokens = +(?P<n_tokens>\d+), progress = (?P<progress>\d+\.\d+),"
                        r" t = +(?P<seconds>\d+\.\d+) s / (?P<tps>\d+\.\d+) tokens per second"),
    "context_shift": ("", "context shift", SLOT + r"slot context shift, n_keep = (?P<n_keep>-?\d+), n_left = (?P<n_left>-?\d+),"
                      r" n_discard = (?P<n_discard>-?\d+)"),
    "sleeping": ("", "sleeping state", SRV + r"server is (?P<action>entering|exiting) sleeping state"),
    "cache_load_failed": ("", "failed to load prompt from cache", SLOT + r"failed to load prompt from cache"),
    "release": ("", "stop processing:", SLOT + r"stop processing: n_tokens = (?P<n_tokens>\d+), truncated = (?P<truncated>\d)"),
    "evict": ("", "removing oldest entry",
              SRV + r"- (?:(?P<room>making room for prompt cache entry)|(?P<size>cache size limit reached)"
              r"|cache token limit \((?P<limit_tokens>\d+), est: (?P<est_tokens>\d+)\) reached), removing oldest entry"
              r" \(size = " + MIB + r"\)"),
    "cache_state": ("", "- cache state:", SRV + r"- cache state: (?P<prompts>\d+) prompts, " + MIB
                    + r" \(limits: (?P<limit_mib>\d+\.\d+) MiB, (?P<limit_tokens>\d+) tokens, (?P<est_tokens>\d+) est\)"),
    "reprocess": ("", "forcing full prompt re-processing", SLOT + r"forcing full prompt re-processing due to (?P<cause>.{1,200})"),
    "checkpoint": ("", "context checkpoint",
                   SLOT + r"(?P<action>created|restored|erasing old|erased invalidated) context checkpoint.*size = " + MIB + r"\)"),
    "reasoning_budget": ("", "reasoning budget", r"(?P<message>.{0,200}reasoning budget.{0,200})"),
}
TEXT_FIELDS = frozenset({"kv_unified", "path", "address", "by", "func", "cause", "action",
                         "message", "room", "size"})
SEGMENT_TOLERANCE = 0.5  # seconds a writer's start may miss the lines' times by (stamp granularity, clock ticks)
MAX_TASKS = 4096
ARG_FLAGS = {"-np": "slots", "--parallel": "slots", "-c": "ctx", "--ctx-size": "ctx", "--port": "port",
             "--cache-ram": "cache_ram_mib", "-cram": "cache_ram_mib", "-m": "model", "--model": "model",
             "-t": "threads", "--threads": "threads", "--ctx-checkpoints": "ctx_checkpoints",
             "--reasoning-budget": "reasoning_budget", "--n-cpu-moe": "n_cpu_moe", "-ncmoe": "n_cpu_moe"}


@dataclass(frozen=True)
class Line:
    """One parsed line: its stamp in seconds since its process started (None: printed without one), its
    level, and the kind and fields of its message (kind None: a level line no pattern knows)."""

    rel: float | None
    level: str
    kind: str | None
    fields: dict[str, Any] = field(default_factory=dict)


class LlamaLineParser:
    """parse(bytes) -> Line | Miss: no I/O, no clock."""

    def __init__(self, overrides: dict[str, str | PatternOverride] | None = None, where: str = "patterns") -> None:
        self.kinds: list[LineKind] = build_kinds(PATTERNS, overrides or {}, where, TEXT_FIELDS)

    def parse(self, line: bytes) -> Line | str:
        head = PREFIX.match(line)
        if head is None:
            return Miss.UNPREFIXED
        rel = None
        if head.group("min") is not None:
            rel = int(head.group("min")) * 60 + int(head.group("sec")) + int(head.group("ms")) / 1e3 + int(head.group("us")) / 1e6
        level = head.group("level").decode()
        message = line[head.end():].rstrip(b"\r\n")
        for kind in self.kinds:
            if kind.literal in message:
                found = kind.pattern.match(message)
                if found is not None:
                    fields = kind.typed(found)
                    if isinstance(fields, str):
                        return fields
                    return Line(rel, level, kind.kind, fields)
        if level == "E":
            return Line(rel, level, "error", {"component": error_component(message),
                                              "message": message[:240].decode("utf-8", "replace")})
        return Line(rel, level, None)


def error_component(message: bytes) -> str:
    """The engine-log component of an error line: load (a model load), slot, or main."""
    if any(word in message[:120] for word in (b"load", b"gguf", b"model")):
        return "load"
    return "slot" if message.startswith(b"slot ") else "main"


# The events the llama_server preset emits, as the engine_log source kind declares them with the
# strata kinds (collectors/engine_log.py): its pattern kinds less `func` (timing lines make no event
# of their own), and the strata-shaped kinds it builds from them.
_TASKED: dict[str, FieldType] = {"task": "int", "slot": "int"}
LLAMA_FIELDS: SourceFields = {
    **{kind: {k: v for k, v in found.items() if k != "func"} for kind, found in from_patterns(
        PATTERNS, TEXT_FIELDS, {"decode_progress": {"tps": "float"}, "prompt_progress": {"tps": "float"},
                                "context_shift": {"n_keep": "int", "n_left": "int", "n_discard": "int"},
                                "slot_select": {"t_last": "int", "keep": "float"}}).items()
       if not kind.startswith("timing_") and kind not in ("launch", "model", "ready", "evict", "release")},
    "start": {"build_name": "text", "version": "text", "build": "text", "anchor": "float", "pid": "int"},
    "args": {**{name: "text" if name == "model" else "int" for name in dict.fromkeys(ARG_FLAGS.values())},
             "argv": "text"},
    "model": {"path": "text", "real": "text", "bytes": "int", "md5": "text"},
    "model_unreadable": {"path": "text"},
    "ready": {"seconds": "float", "address": "text"},
    "evict": {"bytes": "int", "reason": "text", "cause": "text", "evictions": "int", "budget": "int"},
    "queued": {**_TASKED, "prefill_depth": "int"},
    "release": {**_TASKED, "n_tokens": "int", "truncated": "int"},
    "prompt": {**_TASKED, "prompt": "int", "reused": "int", "read": "int", "ms": "int"},
    "done": {**_TASKED, "finish": "text", "prompt": "int", "completion": "int", "ttft_ms": "int", "decode_tps": "float",
             "truncated": "int", "n_tokens": "int", "graphs_reused": "int"},
    **ERROR_KIND,
}


def parse_args(argv: list[str]) -> dict[str, Any]:
    """The llama-server flags that matter downstream, from its command line (numbers as ints)."""
    found: dict[str, Any] = {}
    for flag, value in zip(argv, argv[1:]):
        name = ARG_FLAGS.get(flag)
        if name is not None and name not in found:
            found[name] = int(value) if value.isascii() and value.lstrip("-").isdigit() else value
    return found


def request_id(instance: str, start: float, task: int, ts: float) -> str:
    """The request id of a llama.cpp task: its launch time (UTC) and a hash of instance, process start and task."""
    digest = hashlib.sha1(f"{instance}:{start:.3f}:{task}".encode()).hexdigest()[:16]
    return f"{datetime.fromtimestamp(ts, tz=UTC):%Y%m%d-%H%M%S}-{digest}"


@dataclass(frozen=True)
class Writer:
    """The running process that writes a log file: pid, start (epoch seconds), command line."""

    pid: int
    start: float
    argv: list[str]


def process_start(pid: int, now: Callable[[], float]) -> float:
    """Epoch seconds at which process `pid` started: /proc/PID/stat's starttime (clock ticks since boot)
    on a boot instant of `now()` minus /proc/uptime, read together (10 ms; /proc/stat's btime is cut to
    the second)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    with open("/proc/uptime") as uptime:
        since_boot = float(uptime.read().split()[0])
    return now() - since_boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def find_writer(log: Path, now: Callable[[], float]) -> Writer | None:
    """The running process whose command line has `--log-file` naming `log` (the same file), if any;
    `now` gives the wall clock's epoch seconds."""
    try:
        target = os.stat(log)
    except OSError:
        return None
    with os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit():
                writer = _writer(entry.path, target, now)
                if writer is not None:
                    return writer
    return None


def _writer(proc: str, target: os.stat_result, now: Callable[[], float]) -> Writer | None:
    """The process at `proc` (/proc/PID) if its `--log-file` is the file `target`."""
    try:
        argv = Path(proc, "cmdline").read_bytes().decode("utf-8", "replace").split("\0")
        if "--log-file" not in argv:
            return None
        other = os.stat(os.path.join(os.readlink(f"{proc}/cwd"), argv[argv.index("--log-file") + 1]))
        if (other.st_dev, other.st_ino) != (target.st_dev, target.st_ino):
            return None
        pid = int(os.path.basename(proc))
        return Writer(pid, process_start(pid, now), [a for a in argv if a])
    except (OSError, IndexError, ValueError):
        return None


@dataclass(frozen=True)
class Start:
    """Where a new segment begins: the instant, how it was found, and its writer if running."""

    at: float
    anchor: str  # process, mtime or next
    writer: Writer | None


@dataclass
class Segment:
    """What one process wrote: its start instant, how it was found, the last stamp read, its state."""

    start: float
    anchor: str
    last_rel: float = 0.0
    evictions: int = 0
    budget_bytes: int | None = None
    tasks: OrderedDict[int, dict[str, Any]] = field(default_factory=OrderedDict)

    def end(self) -> float:
        return self.start + self.last_rel


class LlamaLogSource(LineSourceBase):
    """llama-server log lines in, Strata-shaped events out (see the module's rules for time)."""

    def __init__(self, name: str, options: Any, host: str = "", clock: Clock | None = None,
                 writer_of: Callable[[Path, Callable[[], float]], Writer | None] = find_writer) -> None:
        self.name, self.options, self.host = name, options, host
        self.instance = options.instance or name
        self.parser = LlamaLineParser(options.patterns, f"sources.{name}.patterns")
        self.clock = clock or SystemClock()
        self.writer_of = writer_of
        self.mtime: float | None = None
        self.segment: Segment | None = None
        self.parse_note = "per line (llama_server preset)"

    # -- the LineSource protocol ------------------------------------------------------------------
    def file_mtime(self, mtime: float) -> None:
        self.mtime = mtime

    def checkpoint(self) -> dict[str, Any] | None:
        s = self.segment
        if s is None:
            return None
        return {"start": s.start, "anchor": s.anchor, "last_rel": s.last_rel, "evictions": s.evictions,
                "budget_bytes": s.budget_bytes, "tasks": {str(k): v for k, v in s.tasks.items()}}

    def restore(self, saved: dict[str, Any]) -> None:
        try:
            self.segment = Segment(float(saved["start"]), str(saved["anchor"]), float(saved["last_rel"]),
                                   int(saved["evictions"]), saved.get("budget_bytes"),
                                   OrderedDict((int(k), dict(v)) for k, v in saved.get("tasks", {}).items()))
        except (KeyError, TypeError, ValueError):
            self.segment = None  # an unreadable checkpoint: the next lines start a segment afresh

    def close(self) -> None:
        pass

    def handle_lines(self, lines: list[bytes]) -> tuple[list[Event], dict[str, int], bytes]:
        """Events of a batch, misses by outcome, the last unmatched line."""
        misses = {Miss.IGNORED: 0, Miss.UNMATCHED: 0, Miss.UNPREFIXED: 0}
        unmatched = b""
        parsed: list[Line] = []
        for line in lines:
            result = self.parser.parse(line)
            if isinstance(result, str):
                misses[result] = misses.get(result, 0) + 1
                continue
            if result.level == "D":
                misses[Miss.IGNORED] += 1
                continue
            if result.kind is None:
                misses[Miss.UNMATCHED] += 1
                unmatched = line
            parsed.append(result)
        events: list[Event] = []
        for begins, run in self._segments(parsed):
            events += self._segment_events(begins, run)
        return events, misses, unmatched[:512]

    # -- segments and their start instants --------------------------------------------------------
    def _segments(self, parsed: list[Line]) -> list[tuple[Start | None, list[Line]]]:
        """The batch cut into runs of one process each: (how a new segment starts, or None for the run
        continuing the current one; its lines). Start instants follow the module's rules."""
        runs: list[list[Line]] = [[]]
        last = self.segment.last_rel if self.segment is not None else None
        new = [self.segment is None]
        for line in parsed:
            reset = line.kind == "start" or (line.rel is not None and last is not None and line.rel < last - 1e-3)
            if reset and (runs[-1] or not new[-1]):
                runs.append([])
                new.append(True)
            elif reset:
                new[-1] = True
            runs[-1].append(line)
            if line.rel is not None:
                last = line.rel
        starts: list[Start | None] = [None] * len(runs)
        after: float | None = None  # the next segment's start, for the ones before it
        for i in range(len(runs) - 1, -1, -1):
            if not new[i] or not runs[i]:
                continue
            last_rel = max((line.rel for line in runs[i] if line.rel is not None), default=0.0)
            starts[i] = self._anchor_last(last_rel) if after is None else Start(after - last_rel, "next", None)
            after = starts[i].at  # type: ignore[union-attr]
        return [(starts[i], runs[i]) for i in range(len(runs)) if runs[i]]

    def _anchor_last(self, last_rel: float) -> Start:
        """The start of the last new segment of a read: its running writer's start, or the file's mtime
        minus its last stamp."""
        seen = self.mtime if self.mtime is not None else self.clock.now()
        writer = self.writer_of(Path(self.options.path), self.clock.now) if self.options.path is not None else None
        if writer is not None and writer.start + last_rel <= seen + SEGMENT_TOLERANCE \
                and (self.segment is None or writer.start >= self.segment.end() - SEGMENT_TOLERANCE):
            return Start(writer.start, "process", writer)
        return Start(seen - last_rel, "mtime", None)

    def _begin(self, begins: Start) -> Segment:
        previous, start = self.segment, begins.at
        if previous is not None and start < previous.end():
            start = previous.end()  # never before the previous process's last line
        segment = Segment(start, begins.anchor)
        if begins.writer is not None:
            ram = parse_args(begins.writer.argv).get("cache_ram_mib")
            if isinstance(ram, int) and ram > 0:
                segment.budget_bytes = ram << 20
        self.segment = segment
        return segment

    def _segment_events(self, begins: Start | None, run: list[Line]) -> list[Event]:
        events: list[Event] = []
        if begins is not None:
            events += self._start_events(self._begin(begins), run[0], begins.writer)
        segment = self.segment
        assert segment is not None
        for n, line in enumerate(run):
            ts = segment.start + line.rel if line.rel is not None else (self.mtime or self.clock.now())
            if line.rel is not None:
                segment.last_rel = max(segment.last_rel, line.rel)
            if line.kind is None or (n == 0 and begins is not None and line.kind == "start"):
                continue
            events += self._events(segment, line, ts)
        return events

    def _start_events(self, segment: Segment, first: Line, writer: Writer | None) -> list[Event]:
        """The process's start (its build is not in the log: the poller reads it from /props) and, when its
        writer runs, its command line's flags."""
        ts = segment.start
        fields: dict[str, Any] = {"build_name": "llama.cpp", "version": "", "build": "", "anchor": segment.anchor}
        events = []
        if writer is not None:
            fields["pid"] = writer.pid
            args = parse_args(writer.argv)
            args["argv"] = " ".join(writer.argv)[:4096]
            events.append(Event(ts, self.name, "args", self.instance, args, None, self.host))
        return [Event(ts, self.name, "start", self.instance, fields, None, self.host), *events]

    def _events(self, segment: Segment, line: Line, ts: float) -> list[Event]:
        kind, f = line.kind, line.fields
        make = self._event
        if kind == "model":
            return [self._model(ts, str(f["path"]))]
        if kind == "ready":
            return [make(ts, "ready", {"seconds": round(line.rel or 0.0, 3), "address": f["address"]})]
        if kind == "evict":
            segment.evictions += 1
            cause = "room" if f.get("room") else "size" if f.get("size") else "tokens"
            fields = {"bytes": round(f["mib"] * (1 << 20)), "reason": "budget", "cause": cause, "evictions": segment.evictions}
            if segment.budget_bytes is not None:
                fields["budget"] = segment.budget_bytes
            return [make(ts, "evict", fields)]
        task = f.get("task")
        if kind == "launch" and isinstance(task, int):
            req = request_id(self.instance, segment.start, task, ts)
            segment.tasks[task] = {"ts": ts, "slot": f["slot"], "req": req}
            if len(segment.tasks) > MAX_TASKS:
                segment.tasks.popitem(last=False)
            return [make(ts, "queued", {"task": task, "slot": f["slot"], "prefill_depth": 0}, req)]
        if kind in ("timing_prompt", "timing_eval", "timing_total", "timing_graphs") and isinstance(task, int):
            state = segment.tasks.setdefault(task, {"slot": f["slot"]})
            state[kind] = {key: value for key, value in f.items() if key in ("ms", "tokens", "tps", "graphs_reused")}
            return []
        if kind == "release" and isinstance(task, int):
            return self._finished(segment, task, f, ts)
        fields = {key: value for key, value in f.items() if key != "func"}
        owner = segment.tasks.get(task, {}).get("req") if isinstance(task, int) else None
        return [make(ts, kind or "unknown", fields, owner)]

    def _finished(self, segment: Segment, task: int, f: dict[str, Any], ts: float) -> list[Event]:
        """The task's prompt and done events, from its timing lines and its release line."""
        state = segment.tasks.pop(task, {})
        prompt_timing, eval_timing = state.get("timing_prompt"), state.get("timing_eval")
        req = state.get("req")
        if prompt_timing is None or eval_timing is None:
            return [self._event(ts, "release", {"task": task, "slot": f["slot"], "n_tokens": f["n_tokens"],
                                                "truncated": f["truncated"]}, req)]
        read, generated = prompt_timing["tokens"], eval_timing["tokens"]
        # The slot holds the prompt and every generated token but the last (sampled, never decoded).
        prompt = max(f["n_tokens"] - generated + 1, read) if generated > 0 else max(f["n_tokens"], read)
        ms = round(prompt_timing["ms"])
        launched = state.get("ts", ts)
        tps = eval_timing.get("tps")
        common = {"task": task, "slot": f["slot"]}
        return [
            self._event(min(launched + prompt_timing["ms"] / 1000, ts), "prompt",
                        {**common, "prompt": prompt, "reused": prompt - read, "read": read, "ms": ms}, req),
            self._event(ts, "done", {**common, "finish": "unknown", "prompt": prompt, "completion": generated,
                                     "ttft_ms": ms, "decode_tps": tps if isinstance(tps, float) else 0.0,
                                     "truncated": f["truncated"], "n_tokens": f["n_tokens"],
                                     **state.get("timing_graphs", {})}, req),
        ]

    def _model(self, ts: float, path: str) -> Event:
        """The model file the process loads: its resolved path and size where it can be read (I/O at the edge)."""
        try:
            real = os.path.realpath(path)
            size = os.stat(real).st_size
        except OSError:
            return self._event(ts, "model_unreadable", {"path": path})
        return self._event(ts, "model", {"path": path, "real": real, "bytes": size, "md5": ""})

    def _event(self, ts: float, kind: str, fields: dict[str, Any], req: str | None = None) -> Event:
        return Event(ts, self.name, kind, self.instance, fields, req, self.host)
