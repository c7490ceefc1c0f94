"""llama.cpp's `llama-server` log, the `llama_server` preset of the engine log: every format since 2024
(collectors/llama_grammar.py), in every capture (journald, syslog, docker, router mode, runners:
collectors/llama_wrap.py), as events shaped as the Strata engine's wherever the meaning is the same.

Parsing a line is pure; this source (the I/O edge) adds time and the state a line cannot carry. Time:

- A line's own absolute time, when it has one, is its time: the wrapper's (journald, syslog, docker),
  else the 2024 formats' `timestamp`.
- llama-server's `--log-timestamps` stamp counts from its process's start (`M.SS.mmm.uuu`). A *segment*
  is what one process wrote: it begins at the file's first line, at a start-up line (`srv llama_server:
  initializing ...`, `build: N (commit) ...`, `log_info: verbosity = N`, 2024's `build info`) once the
  segment has seen more than start-up lines, or where the stamps go back by more than a second and the
  line after agrees (a restart that appends to the same file; one line out of order is no restart).
- The start instant of a segment, first choice (`anchor = "wrapper"`): a line's absolute time minus its
  stamp. Else (`"process"`): the start time (/proc/PID/stat) of the running llama-server whose command
  line names this log file, if its lines fit it. Else (`"mtime"`): the file's mtime minus the last stamp
  read, for the last segment of a read. A segment followed by another in the same read is placed to end
  where the next begins (`"next"`). Never before the previous segment's last line, nor after the file's mtime.
- A clock is evidence, not authority. A line's absolute time past the file's last write (with no mtime,
  the agent's clock) by more than a minute, more than a day past the agent's clock, or before 2000 is
  refused (`invalid:clock`) and anchors nothing. A line whose absolute time implies another start than
  its segment's (by more than a minute) is refused (`invalid:stamp`); two in a row that agree with each
  other drop the anchor and move the segment's start to theirs (the same process, placed anew), so a
  forged anchor, checkpointed or not, lasts one line. A stamp with no clock of its own that would put
  its line after the file's last write, or a lone stamp far ahead of the lines around it, is refused
  (`invalid:stamp`): one bad stamp never moves the segment. A line with no time at all takes the time
  it was read (the file's mtime). A checkpointed start outside 2000 to a day past now is dropped.
- Router mode: one timeline per process, the router's own lines and each child's by its port (its
  `[PORT] ` prefix): the rules above hold per timeline, and a child's `start` names its port and model.
- `--cache-ram`, `-np`, `-c` and the model path come from the writer's command line (/proc/PID/cmdline),
  as an `args` event after `start`; when the writer is not running, no budget is reported.

Tasks: `launch_slot_` is `queued` (prefill_depth 0: llama.cpp has no serial prefill queue); the timing
lines (with their task, or continuation lines joined to the `print_timing` header before them) and the
release line, in either order (builds of 2025 release first), make `prompt` (prompt = reused + read) and
`done` (ttft_ms = prompt eval time, decode_tps, completion); a release with no timings is `release`. Every
task ends with one `done` carrying its `outcome` (collectors/llama_outcome.py): a `send_error` for the task
(`task_error` event) or its client's cancel (`cancel` event) ends it at its release, or at once if it never
had a slot; a 2024 release without timings is a cancel; a line of a task after its end joins its request.
Other events: `start` (build_name llama.cpp; the build where the log names it), `args`, `model`, `ready`,
`evict` (bytes, reason budget, evictions = evict lines of this process so far), `error` (E lines and a
crash's raw output), and llama.cpp's own (`slot_select`, `reprocess`, `checkpoint`, `cache_state`, ...).
A task's request id is made from the instance, the segment's start and the task number.
Fixtures: tests/fixtures/llama_server/ (the real build's log), tests/fixtures/llama_users/ (users' logs).
"""

from __future__ import annotations

import os
import re
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from spyglass.collectors import LineSourceBase, register_preset
from spyglass.collectors import engine_log as _kind  # noqa: F401 - the kind this preset extends, registered first
from spyglass.collectors.clock import Clock, SystemClock
from spyglass.collectors.event import Event
from spyglass.collectors.fields import ERROR_KIND, FieldType, SourceFields, from_patterns
from spyglass.collectors.grammar import Miss
from spyglass.collectors.llama_grammar import PATTERNS, START_MARKERS, TEXT_FIELDS, Line, LlamaLineParser
from spyglass.collectors.llama_noise import SIGNAL_MARK, opens_block, shape
from spyglass.collectors.llama_outcome import error_reason, finish_of
from spyglass.collectors.llama_process import ARG_FLAGS, Writer, find_writer, parse_args, process_start, request_id
from spyglass.collectors.llama_queue import QueueWatch
from spyglass.collectors.llama_wrap import Unwrapped, unwrap
from spyglass.collectors.timebounds import EARLIEST_SECONDS, FUTURE_SLACK_SECONDS

__all__ = [
    "LLAMA_FIELDS",
    "Line",
    "LlamaLineParser",
    "LlamaLogSource",
    "Writer",
    "find_writer",
    "parse_args",
    "process_start",
    "request_id",
]

SEGMENT_TOLERANCE = 0.5  # seconds a writer's start may miss the lines' times by (stamp granularity, clock ticks)
STAMP_SLACK = 60.0  # seconds a stamp may run past the file's mtime or its wrapper's time (buffered writes, a slow read)
TRUSTED = frozenset({"process", "wrapper"})  # anchors that are the writer's true start, not a guess from the mtime
BACKSTEP = 1.0  # seconds a stamp may go back without being a restart (the logger's threads, clock reads)
SPIKE = 60.0  # seconds a lone stamp may run ahead of the lines around it before it is refused
MAX_TASKS = 4096
MAX_CHILDREN = 64  # router mode: the children's timelines kept (the least recently heard from go first)
SPAWNED = re.compile(rb"spawning server instance with name=(?P<model>\S{1,200}) on port (?P<port>\d{1,5})")
MAX_SHAPES = 64
MAX_CONTINUED = 256  # lines a multi-line message may run over (a chat template dump is under 200)
JOINED = "joined"  # a line that became part of another line's event (timing lines)
AGREE = 2.0  # seconds two lines' implied start instants may differ by and agree (1 s stamps, clock ticks)
STAMP = Miss.invalid("stamp")
WRAPPER = Miss.invalid("wrapper")  # a JSON wrapper past its depth or size bound (collectors/bounded_json.py)
# a wrapper's (or the 2024 formats') absolute time past the file's mtime or the agent's clock
CLOCK = Miss.invalid("clock")
UNUSABLE = frozenset({Miss.UNMATCHED, Miss.UNPREFIXED})

_TASKED: dict[str, FieldType] = {"task": "int", "slot": "int"}
LLAMA_FIELDS: SourceFields = {
    **{
        kind: {k: v for k, v in found.items() if k != "func"}
        for kind, found in from_patterns(
            PATTERNS,
            TEXT_FIELDS,
            {
                "decode_progress": {"tps": "float"},
                "prompt_progress": {"tps": "float"},
                "context_shift": {"n_keep": "int", "n_left": "int", "n_discard": "int"},
                "slot_select": {"t_last": "int", "keep": "float"},
                "task_error": {"slot": "int", "error_reason": "text", "status": "int", "prompt": "int"},
                "cancel": {"slot": "int"},
            },
        ).items()
        if not kind.startswith("timing_")
        and kind not in ("launch", "model", "ready", "evict", "release", "crash", "build", "arrival", "build_params")
    },
    "start": {
        "build_name": "text",
        "version": "text",
        "build": "text",
        "anchor": "float",
        "pid": "int",
        "capture": "text",
        "child": "text",  # router mode: the child's port
        "child_model": "text",  # ... and the model the router spawned it for
    },
    "args": {
        **{name: "text" if name == "model" else "int" for name in dict.fromkeys(ARG_FLAGS.values())},
        "argv": "text",
    },
    "model": {"path": "text", "real": "text", "bytes": "int", "md5": "text"},
    "model_unreadable": {"path": "text"},
    "ready": {"seconds": "float", "address": "text"},
    "cache_inventory": {"parked": "int", "used": "int", "budget": "int", "largest": "int", "limit_tokens": "int"},
    "evict": {"bytes": "int", "reason": "text", "cause": "text", "evictions": "int", "budget": "int"},
    "queued": {**_TASKED, "prefill_depth": "int", "queue_ms": "int", "queue_basis": "text"},
    "release": {**_TASKED, "n_tokens": "int", "truncated": "int"},
    "unread": {"lines": "int", "unreadable": "int", "shape": "text"},
    "prompt": {**_TASKED, "prompt": "int", "reused": "int", "read": "int", "ms": "int"},
    "done": {
        **_TASKED,
        "finish": "text",
        "prompt": "int",
        "completion": "int",
        "ttft_ms": "int",
        "decode_tps": "float",
        "truncated": "int",
        "n_tokens": "int",
        "graphs_reused": "int",
        "outcome": "text",
        "error_reason": "text",
        "status": "int",
        "message": "text",
        "queue_ms": "int",
        "queue_basis": "text",
        "client_wait_ms": "int",
    },
    **ERROR_KIND,
}


@dataclass(frozen=True)
class Item:
    """A parsed line and its absolute time (wrapper or format), if any."""

    line: Line
    wall: float | None
    child: str = ""  # router mode: the child's port; "" for the router's own lines or a plain server's


@dataclass(frozen=True)
class Start:
    """Where a new segment begins: the instant, how it was found, and its writer if running."""

    at: float
    anchor: str  # wrapper, process, mtime or next
    writer: Writer | None
    moved: bool = False  # the current segment's start moved (its anchor contradicted), not a new process


@dataclass
class Segment:
    """What one process wrote: its start instant, how it was found, the last stamp read, its state."""

    start: float
    anchor: str
    last_rel: float = 0.0
    evictions: int = 0
    budget_bytes: int | None = None
    busy: bool = False  # has seen more than start-up lines
    back: float | None = None  # an unconfirmed step back of the stamps (a restart if the next line agrees)
    timing_owner: list[int] | None = None  # [slot, task] of the last print_timing header
    tasks: OrderedDict[int, dict[str, Any]] = field(default_factory=OrderedDict)
    doubt: float | None = None  # the start instant one line's clock implied against the anchor (unconfirmed)

    def end(self) -> float:
        return self.start + self.last_rel


@dataclass
class Cut:
    """A batch being cut into runs of one process each (LlamaLogSource._segments): the runs so far, and what
    the lines so far say of the process writing the last one."""

    last: float | None  # the highest stamp read of the process
    busy: bool  # the process has written more than start-up lines
    back: float | None  # an unconfirmed step back of the stamps (a restart if the next line agrees)
    anchor: float | None  # the start instant the lines so far were placed by
    doubt: float | None  # the start instant one line's clock implied against the anchor (unconfirmed)
    runs: list[list[Item]] = field(default_factory=lambda: [[]])
    new: list[bool] = field(default_factory=list)  # per run: whether it begins a new segment
    moves: list[float | None] = field(default_factory=lambda: [None])  # per run: where it moves the segment's start

    @classmethod
    def after(cls, seg: Segment | None) -> Cut:
        """The cut of a batch that goes on from `seg` (None: the log's first lines)."""
        if seg is None:
            return cls(None, False, None, None, None, new=[True])
        return cls(seg.last_rel, seg.busy, seg.back, seg.start, seg.doubt, new=[False])

    def restarts(self, rel: float, went_back: bool, following: float | None) -> bool:
        """Whether the line's step back of the stamps is a new process: two lines agree (this one and the
        next, or the one held back and this one); a step back alone waits for the next line."""
        assert self.last is not None
        if not went_back:
            self.back = None  # the old sequence goes on: a step back before this was a line out of order
            return False
        if self.back is not None or (following is not None and following < self.last - BACKSTEP):
            return True
        if following is None:
            self.back = rel  # unconfirmed until the next line
        return False

    def restart(self) -> None:
        """A new process begins with the next line taken."""
        if self.runs[-1] or not self.new[-1]:
            self._run(new=True, move=None)
        else:
            self.new[-1] = True
        self.busy, self.back, self.last, self.anchor, self.doubt = False, None, None, None, None

    def agrees(self, item: Item) -> bool:
        """A clock is evidence, not authority: False for a line whose clock contradicts the anchor (refused);
        two lines whose clocks agree with each other and not with the anchor move it (a run of its own)."""
        rel = item.line.rel
        if rel is None or item.wall is None or self.anchor is None:
            return True
        implied = item.wall - rel
        if abs(implied - self.anchor) <= STAMP_SLACK:
            self.doubt = None
        elif self.doubt is not None and abs(implied - self.doubt) <= AGREE:
            self._run(new=False, move=implied)
            self.anchor, self.doubt = implied, None
        else:
            self.doubt = implied
            return False
        return True

    def take(self, item: Item, went_back: bool) -> None:
        """The line joins the last run."""
        self.runs[-1].append(item)
        rel, kind = item.line.rel, item.line.kind
        if self.anchor is None and item.wall is not None:
            self.anchor = item.wall - (rel or 0.0)  # the run's start, as _placed will find it
        if kind is not None and kind not in START_MARKERS:
            self.busy = True
        if rel is not None and (self.last is None or not went_back):  # a restart left last None
            self.last = rel if self.last is None else max(self.last, rel)

    def _run(self, new: bool, move: float | None) -> None:
        self.runs.append([])
        self.new.append(new)
        self.moves.append(move)


KindHandler = Callable[["LlamaLogSource", Segment, Line, float], list[Event]]
TaskHandler = Callable[["LlamaLogSource", Segment, int, Line, float], list[Event]]


@register_preset("engine_log", "llama_server", fields=LLAMA_FIELDS)
class LlamaLogSource(LineSourceBase):
    """llama-server log lines in, Strata-shaped events out (see the module's rules for time)."""

    idle_lines = None  # llama-server writes nothing while idle: its liveness is the poller's /health
    reports_unread = True  # its `unread` events replay the drift alarm (spyglass/alerting/backfill.py)

    parse_note = "per line (llama_server preset)"

    def __init__(
        self,
        name: str,
        options: Any,
        host: str = "",
        clock: Clock | None = None,
        writer_of: Callable[[Path, Callable[[], float]], Writer | None] = find_writer,
    ) -> None:
        self.name, self.options, self.host = name, options, host
        self.instance = options.instance or name
        self.parser = LlamaLineParser(options.patterns, f"sources.{name}.patterns")
        self.clock = clock or SystemClock()
        self.writer_of = writer_of
        self.mtime: float | None = None
        self.segment: Segment | None = None
        self.captures: Counter[str] = Counter()  # lines per capture (check-log)
        self.forms: Counter[str] = Counter()  # lines per llama.cpp format (check-log)
        self.shapes: Counter[str] = Counter()  # unreadable lines by shape (check-log, /debug/sources)
        self.max_shapes: int | None = MAX_SHAPES  # None: every shape (check-log --catalogue)
        self.builds: list[str] = []  # the builds the log named
        self.anchors: list[str] = []  # how each segment was placed in time
        self.lines_read = self.lines_unread = 0  # since the source's first line (checkpointed): the `unread` event
        self.queue = QueueWatch()  # the current process's slots: each task's wait for one (llama_queue.py)
        self.inventory: dict[str, Any] | None = None  # the prompt cache's listing being read (`- cache state:`)
        self.doubt: float | None = None  # the segment's doubt at the end of the last batch (see _segments)
        # One timeline per process writing to the log: "" the server (or a router), each router child by its port.
        self.timelines: OrderedDict[str, Segment] = OrderedDict()
        self.child = ""  # the timeline being read
        self.main: Segment | None = None  # the server's (or router's) segment while a child's is read
        self.child_models: OrderedDict[str, str] = OrderedDict()  # router mode: port -> the model it serves
        self.continuing = 0  # lines since one that may go on over lines of no shape (1: that line), 0: none
        self.dated: float | None = None  # the time a runner's header line gave the lines after it (LM Studio)

    # -- the LineSource protocol ------------------------------------------------------------------
    def file_mtime(self, mtime: float) -> None:
        self.mtime = mtime

    def checkpoint(self) -> dict[str, Any] | None:
        saved: dict[str, Any] = {"lines": [self.lines_read, self.lines_unread]}
        if self.segment is not None:
            saved.update(saved_segment(self.segment))
        if self.timelines:
            saved["children"] = {child: saved_segment(s) for child, s in self.timelines.items()}
        if self.child_models:
            saved["child_models"] = dict(self.child_models)
        if self.segment is not None:
            saved["queue"] = self.queue.saved()
        return saved if self.lines_read or self.segment is not None else None

    def restore(self, saved: dict[str, Any]) -> None:
        self.queue = QueueWatch.restored(saved.get("queue", {}))
        counts = saved.get("lines")
        if isinstance(counts, list) and len(counts) == 2 and all(isinstance(n, int) and n >= 0 for n in counts):
            self.lines_read, self.lines_unread = counts
        latest = self.clock.now() + FUTURE_SLACK_SECONDS
        self.segment = restored_segment(saved, latest)
        children, models = saved.get("children"), saved.get("child_models")
        if isinstance(children, dict):
            for child, part in list(children.items())[-MAX_CHILDREN:]:
                segment = restored_segment(part, latest) if isinstance(part, dict) else None
                if segment is not None:
                    self.timelines[str(child)] = segment
        if isinstance(models, dict):
            self.child_models.update((str(k), str(v)[:200]) for k, v in list(models.items())[-MAX_CHILDREN:])

    def close(self) -> None:
        pass

    def handle_lines(self, lines: list[bytes]) -> tuple[list[Event], dict[str, int], bytes]:
        """Events of a batch, misses by outcome, the last unreadable line."""
        misses = {Miss.IGNORED: 0, Miss.UNMATCHED: 0, Miss.UNPREFIXED: 0, JOINED: 0}
        unread = b""
        items: list[Item] = []
        ref = self.mtime if self.mtime is not None else self.clock.now()
        latest = self._latest_wall()
        for raw in lines:
            wrapped = unwrap(raw.rstrip(b"\r\n"), ref, self.options.tz)
            self.captures[wrapped.capture] += 1
            if self._read(wrapped, latest, items, misses):
                unread = raw
        events: list[Event] = []
        for child, group in by_child(items):
            self._enter(child)
            for begins, run in self._segments(group, misses):
                events += self._segment_events(begins, run, misses)
            self._leave()
        # Unusable: of no shape or pattern known, or refused (a stamp, a wrapper's clock or body): the drift alarm's
        # count. The running count is stored with each batch that has an unreadable line, or a refused one among
        # lines that made events (a lone refused line adds no event of its own: one bad stamp changes nothing but
        # its count).
        unusable = sum(n for miss, n in misses.items() if miss in UNUSABLE or miss.startswith(Miss.INVALID))
        self.lines_read += len(lines)
        self.lines_unread += unusable
        if unread or (unusable and events):
            events.append(self._unread(events, items, unread))
        return events, misses, unread[:512]

    def _read(self, wrapped: Unwrapped, latest: float, items: list[Item], misses: dict[str, int]) -> bool:
        """The line's items (none; one; two messages glued on one line) added to `items`, its miss counted:
        whether it is unreadable (of no shape or pattern known)."""
        if wrapped.refused is not None:
            misses[WRAPPER] = misses.get(WRAPPER, 0) + 1  # one line, whatever it holds
            return False
        if wrapped.foreign:
            if wrapped.dating:
                self.dated = wrapped.wall  # LM Studio's header: the time of the lines after it
            misses[Miss.IGNORED] += 1
            return False
        payload = wrapped.payload
        if not wrapped.child and b"spawning server instance with name=" in payload:
            self._spawned(payload)
        glued = self.parser.glued(payload)
        if glued:  # two messages on one line, each read (ik_llama.cpp's checkpoint line, then a 2024 one)
            self.forms.update(line.form for line in glued)
            for line in glued:
                if not self._add(line, wrapped, latest, items, misses):
                    break
            return False
        result = self.parser.parse(payload)
        if self._continues(payload, result):
            misses[Miss.IGNORED] += 1
            return False
        if isinstance(result, str):
            misses[result] = misses.get(result, 0) + 1
            unreadable = result in UNUSABLE
        else:
            self.forms[result.form] += 1
            unreadable = result.kind is None  # a llama.cpp line no pattern knows: still placed in time
            if unreadable:
                misses[Miss.UNMATCHED] += 1
            self._add(result, wrapped, latest, items, misses)
        if unreadable:
            self._shape(payload)
        return unreadable

    def _continues(self, payload: bytes, result: Line | str) -> bool:
        """Whether the line goes on a multi-line message (a chat template, a quoted value) begun before it."""
        if result == Miss.UNPREFIXED and 0 < self.continuing <= MAX_CONTINUED:
            self.continuing += 1
            return True
        if opens_block(payload):
            self.continuing = 1
        elif not (result == Miss.IGNORED and self.continuing and not payload[:1].isdigit()):
            self.continuing = 0  # a known line of no stamp within a multi-line message does not end it
        return False

    def _add(self, line: Line, wrapped: Unwrapped, latest: float, items: list[Item], misses: dict[str, int]) -> bool:
        """The line added to `items` at its absolute time (its wrapper's, else its own, else a runner header's),
        unless that time is refused: whether it was added."""
        wall = wrapped.wall if wrapped.wall is not None else line.wall
        if wall is not None and not EARLIEST_SECONDS <= wall <= latest:
            misses[CLOCK] = misses.get(CLOCK, 0) + 1  # evidence against the file and the agent: no anchor
            return False
        items.append(Item(line, wall if wall is not None else self.dated, wrapped.child))
        return True

    def _spawned(self, payload: bytes) -> None:
        found = SPAWNED.search(payload)
        if found is not None:
            self.child_models[found.group("port").decode()] = found.group("model").decode("utf-8", "replace")
            while len(self.child_models) > MAX_CHILDREN:
                self.child_models.popitem(last=False)

    def _enter(self, child: str) -> None:
        """Read `child`'s timeline: its segment is the current one (`self.segment` is the server's, or the
        router's, between batches)."""
        self.child, self.main = child, self.segment
        if child:
            self.segment = self.timelines.get(child)

    def _leave(self) -> None:
        if self.segment is not None:
            self.segment.doubt = self.doubt
        if self.child:
            if self.segment is not None:
                self.timelines[self.child] = self.segment
                self.timelines.move_to_end(self.child)
                while len(self.timelines) > MAX_CHILDREN:
                    self.timelines.popitem(last=False)
            self.segment = self.main
        self.child = ""

    def _latest_wall(self) -> float:
        """The latest absolute time a line's wrapper may claim: the file's last write (a line is written before
        it) or, with no mtime, the agent's clock, plus STAMP_SLACK; never past a day ahead of the agent's clock."""
        now = self.clock.now()
        return min(self._seen() + STAMP_SLACK, now + FUTURE_SLACK_SECONDS)

    def _unread(self, events: list[Event], items: list[Item], line: bytes) -> Event:
        """The source's running count of lines read and of those it could not read, stamped with the batch's
        latest known time: what a backtest replays as spyglass_source_lines_total (the drift alarm)."""
        known = [e.ts for e in events] + [item.wall for item in items if item.wall is not None]
        shape = line.rstrip(b"\r\n")[:60].translate(DIGITS).decode("utf-8", "replace")
        return self._event(
            max(known, default=self._seen()),
            "unread",
            {"lines": self.lines_read, "unreadable": self.lines_unread, "shape": shape},
        )

    def _shape(self, payload: bytes) -> None:
        """The unreadable line's shape, as the noise catalogue writes one (bounded: check-log's and /debug/sources'
        list); a line that holds a signal pattern's words is marked so: a reworded signal, not noise to add."""
        key = self.parser.noise_key(payload)
        found = shape(key) if key is not None else SIGNAL_MARK + shape(self.parser.message_key(payload))
        if found in self.shapes or self.max_shapes is None or len(self.shapes) < self.max_shapes:
            self.shapes[found] += 1

    # -- segments and their start instants --------------------------------------------------------
    def _segments(self, items: list[Item], misses: dict[str, int]) -> list[tuple[Start | None, list[Item]]]:
        """The batch cut into runs of one process each: (how a new segment starts, or None for the run
        continuing the current one; its lines). Refused stamps are counted and their lines dropped."""
        seg = self.segment
        cut = Cut.after(seg)
        following = next_stamps(items)
        seen = self._seen()
        for i, item in enumerate(items):
            line, rel, last = item.line, item.line.rel, cut.last
            went_back = rel is not None and last is not None and rel < last - BACKSTEP
            reset = line.kind in START_MARKERS and (cut.busy or went_back)
            if rel is not None and last is not None and not reset:
                placed = None if cut.new[-1] else seg
                if item.wall is None and self._refused(rel, last, following.get(i), placed, seen):
                    misses[STAMP] = misses.get(STAMP, 0) + 1
                    continue
                reset = cut.restarts(rel, went_back, following.get(i))
            if reset:
                cut.restart()
            elif not cut.agrees(item):
                misses[STAMP] = misses.get(STAMP, 0) + 1
                continue
            cut.take(item, went_back)
        if seg is not None and not cut.new[0]:
            seg.back = cut.back
        self.doubt = cut.doubt
        return self._placed(cut.runs, cut.new, cut.moves)

    @staticmethod
    def _refused(rel: float, last: float, following: float | None, seg: Segment | None, seen: float) -> bool:
        """Whether the stamp of a line with no clock of its own is impossible: for a placed segment, past the
        file's last write (when the segment's start is a guess, only as a lone jump: a read cut short by the
        read budget goes on past the mtime it was placed by); or a spike ahead of the lines on both sides."""
        jump = rel > last + SPIKE and (following is None or following < rel - BACKSTEP)
        if seg is not None and seg.start + rel > seen + STAMP_SLACK:
            return seg.anchor in TRUSTED or jump
        return jump and following is not None and following >= last - BACKSTEP

    def _placed(
        self, runs: list[list[Item]], new: list[bool], moves: list[float | None]
    ) -> list[tuple[Start | None, list[Item]]]:
        """Each run with the start instant of its new segment, or of the current one moved (see the module's rules)."""
        starts: list[Start | None] = [None] * len(runs)
        after: float | None = None  # the next segment's start, for the ones before it
        for i in range(len(runs) - 1, -1, -1):
            moved = moves[i]
            if moved is not None:
                starts[i] = Start(moved, "wrapper", None, moved=True)
                continue
            if not new[i] or not runs[i]:
                continue
            last_rel = max((item.line.rel for item in runs[i] if item.line.rel is not None), default=0.0)
            walled = next((item for item in runs[i] if item.wall is not None), None)
            if walled is not None:
                starts[i] = Start(walled.wall - (walled.line.rel or 0.0), "wrapper", None)  # type: ignore[operator]
            elif after is None:
                starts[i] = self._anchor_last(last_rel)
            else:
                starts[i] = Start(after - last_rel, "next", None)
            after = starts[i].at  # type: ignore[union-attr]
        return [(starts[i], runs[i]) for i in range(len(runs)) if runs[i]]

    def _anchor_last(self, last_rel: float) -> Start:
        """The start of the last new segment of a read: its running writer's start, or the file's mtime
        minus its last stamp."""
        seen = self._seen()
        named = self.options.path is not None and not self.child  # the writer naming the file is the router
        writer = self.writer_of(Path(self.options.path), self.clock.now) if named else None
        if (
            writer is not None
            and writer.start + last_rel <= seen + SEGMENT_TOLERANCE
            and (self.segment is None or writer.start >= self.segment.end() - SEGMENT_TOLERANCE)
        ):
            return Start(writer.start, "process", writer)
        return Start(seen - last_rel, "mtime", None)

    def _seen(self) -> float:
        return self.mtime if self.mtime is not None else self.clock.now()

    def _begin(self, begins: Start, last_rel: float) -> Segment:
        previous, start = self.segment, begins.at
        if previous is not None and begins.anchor != "wrapper":
            # Never before the previous process's last line, nor so late that this one's lines pass the mtime.
            start = max(start, min(previous.end(), self._seen() - last_rel))
        segment = Segment(start, begins.anchor)
        if begins.writer is not None:
            ram = parse_args(begins.writer.argv).get("cache_ram_mib")
            if isinstance(ram, int) and ram > 0:
                segment.budget_bytes = ram << 20
        self.segment = segment
        self.queue = QueueWatch()  # a new process: its own slots
        self.anchors.append(begins.anchor)
        return segment

    def _segment_events(self, begins: Start | None, run: list[Item], misses: dict[str, int]) -> list[Event]:
        events: list[Event] = []
        if begins is not None and begins.moved and self.segment is not None:
            self.segment.start, self.segment.anchor = begins.at, begins.anchor  # the same process, placed anew
            self.anchors.append("moved")
        elif begins is not None:
            last_rel = max((item.line.rel for item in run if item.line.rel is not None), default=0.0)
            events += self._start_events(self._begin(begins, last_rel), run, begins.writer)
        segment = self.segment
        assert segment is not None
        seen = self._seen()
        for n, item in enumerate(run):
            line = item.line
            if line.rel is not None:
                ts = segment.start + line.rel
                segment.last_rel = max(segment.last_rel, line.rel)
            else:
                ts = item.wall if item.wall is not None else seen
            if line.kind is None or (n == 0 and begins is not None and line.kind in ("start", "build")):
                continue  # the start line is the segment's `start` event
            if line.kind not in START_MARKERS:
                segment.busy = True
            made = self._events(segment, line, ts)
            if not made:
                misses[JOINED] += 1
            events += made
        return events

    def _start_events(self, segment: Segment, run: list[Item], writer: Writer | None) -> list[Event]:
        """The process's start, with the build its start-up lines name, and, when its writer runs, its
        command line's flags."""
        ts = segment.start
        fields: dict[str, Any] = {"build_name": "llama.cpp", "version": "", "build": "", "anchor": segment.anchor}
        if self.child:
            fields["child"], fields["child_model"] = self.child, self.child_models.get(self.child, "")
        build = next((item.line.fields for item in run[:64] if item.line.kind == "build"), None)
        if build is not None:
            fields["version"] = str(build.get("number", ""))
            fields["build"] = f"b{build.get('number', '')}-{build.get('commit', '')}"
            self.builds.append(fields["build"])
        events = []
        if writer is not None:
            fields["pid"] = writer.pid
            args = parse_args(writer.argv)
            args["argv"] = " ".join(writer.argv)[:4096]
            events.append(Event(ts, self.name, "args", self.instance, args, None, self.host))
        return [Event(ts, self.name, "start", self.instance, fields, None, self.host), *events]

    def _events(self, segment: Segment, line: Line, ts: float) -> list[Event]:
        """The line's events: those of a timing line (_timing), of a line of a task (ON_TASK) or of a kind
        that means more than its fields (ON_KIND); else the line as read."""
        kind = line.kind or "unknown"
        if kind.startswith("timing_"):
            return self._timing(segment, line, ts)
        task = line.fields.get("task")
        if isinstance(task, int) and kind in self.ON_TASK:
            return self.ON_TASK[kind](self, segment, task, line, ts)
        handler = self.ON_KIND.get(kind)
        return handler(self, segment, line, ts) if handler is not None else self._as_read(segment, line, ts)

    def _as_read(self, segment: Segment, line: Line, ts: float) -> list[Event]:
        """The line as an event of its kind, its fields as read, joined to its task's request if it names one."""
        task = line.fields.get("task")
        owner = segment.tasks.get(task, {}).get("req") if isinstance(task, int) else None
        fields = {key: value for key, value in line.fields.items() if key != "func"}
        return [self._event(ts, line.kind or "unknown", fields, owner)]

    def _startup(self, segment: Segment, line: Line, ts: float) -> list[Event]:
        return []  # a start-up line within a segment that has seen only start-up lines: part of its `start`

    def _loaded(self, segment: Segment, line: Line, ts: float) -> list[Event]:
        return [self._model(ts, str(line.fields["path"]))]

    def _ready(self, segment: Segment, line: Line, ts: float) -> list[Event]:
        seconds = round(max(ts - segment.start, 0.0), 3)
        return [self._event(ts, "ready", {"seconds": seconds, "address": line.fields.get("address", "")})]

    def _evicted(self, segment: Segment, line: Line, ts: float) -> list[Event]:
        """A prompt cache entry evicted: its size, why, this process's count so far, and the budget if known."""
        f = line.fields
        segment.evictions += 1
        cause = "room" if f.get("room") else "size" if f.get("size") else "tokens"
        fields = {
            "bytes": round(f["mib"] * (1 << 20)),
            "reason": "budget",
            "cause": cause,
            "evictions": segment.evictions,
        }
        if segment.budget_bytes is not None:
            fields["budget"] = segment.budget_bytes
        return [self._event(ts, "evict", fields)]

    def _slots(self, segment: Segment, line: Line, ts: float) -> list[Event]:
        """The server's slot count, for the queue watch; the line as read."""
        if isinstance(line.fields.get("slots"), int):
            self.queue.slots = line.fields["slots"]
        return self._as_read(segment, line, ts)

    def _cache_state(self, segment: Segment, line: Line, ts: float) -> list[Event]:
        """The head of the prompt cache's listing: its entries follow (none: the inventory is complete)."""
        f = line.fields
        self.inventory = {"ts": ts, "state": f, "entries": []}
        made = [self._event(ts, "cache_state", {key: value for key, value in f.items() if key != "func"})]
        return made + (self._inventory() if f["prompts"] == 0 else [])

    def _launched(self, segment: Segment, task: int, line: Line, ts: float) -> list[Event]:
        """The task got a slot: `queued`, with its wait for one where the queue watch saw it arrive."""
        slot = line.fields["slot"]
        req = request_id(self.instance, segment.start, task, ts)
        state = self._task(segment, task)
        state.update(ts=ts, slot=slot, req=req)
        fields = {"task": task, "slot": slot, "prefill_depth": 0}
        waited = self.queue.launched(task, slot, ts)
        if waited is not None:
            state["queue_ms"], state["queue_basis"] = waited
            fields.update(queue_ms=waited[0], queue_basis=waited[1])
        return [self._event(ts, "queued", fields, req)]

    def _arrived(self, segment: Segment, task: int, line: Line, ts: float) -> list[Event]:
        self.queue.arrived(task, ts)
        return []

    @staticmethod
    def _task(segment: Segment, task: int) -> dict[str, Any]:
        state = segment.tasks.setdefault(task, {})
        if len(segment.tasks) > MAX_TASKS:
            segment.tasks.popitem(last=False)
        return state

    def _timing(self, segment: Segment, line: Line, ts: float) -> list[Event]:
        """A timing line, its task named or (a continuation line) the last header's: kept until the task is
        released; after its release (builds of 2025 release first), the total line completes it."""
        kind, f = line.kind or "", line.fields
        if kind == "timing_header":
            segment.timing_owner = [f["slot"], f["task"]]
            return []
        task, slot = f.get("task"), f.get("slot")
        if not isinstance(task, int) and segment.timing_owner is not None:
            slot, task = segment.timing_owner
        if not isinstance(task, int):
            return []
        state = self._task(segment, task)
        state.setdefault("slot", slot)
        state[kind] = {key: value for key, value in f.items() if key in ("ms", "tokens", "tps", "graphs_reused")}
        released = state.get("released")
        if kind == "timing_total" and released is not None and "timing_prompt" in state and "timing_eval" in state:
            self._end(segment, task, state)
            return self._finished(state, task, released, ts)
        return []

    @staticmethod
    def _end(segment: Segment, task: int, state: dict[str, Any]) -> None:
        """The task has its outcome: what is left of it is its request id (a later line of it, a cancel that
        came after its end, joins that request and starts no other)."""
        segment.tasks[task] = {"ended": True, "req": state.get("req")}

    def _released(self, segment: Segment, task: int, line: Line, ts: float) -> list[Event]:
        f = line.fields
        self.queue.released(f["slot"], ts)
        state = self._task(segment, task)
        released = {"slot": f["slot"], "n_tokens": f["n_tokens"], "truncated": f["truncated"], "ts": ts}
        timed = "timing_prompt" in state and "timing_eval" in state
        if state.get("ended"):
            return [self._event(ts, "release", {"task": task, **{k: released[k] for k in RELEASE}}, state.get("req"))]
        if line.form != "common" and not any(key.startswith("timing_") for key in state):
            state["cancelled"] = ts  # a 2024 build prints a task's timings before its release, and no cancel line
        if "error" in state or "cancelled" in state:
            self._end(segment, task, state)
            return self._ended(state, task, released, ts)
        if timed:
            self._end(segment, task, state)
            return self._finished(state, task, released, ts)
        state["released"] = released
        return [
            self._event(
                ts,
                "release",
                {"task": task, "slot": f["slot"], "n_tokens": f["n_tokens"], "truncated": f["truncated"]},
                state.get("req"),
            )
        ]

    def _cancelled(self, segment: Segment, task: int, line: Line, ts: float) -> list[Event]:
        """The client went away: a launched task ends at its release; one still waiting for a slot ends here."""
        state = self._task(segment, task)
        req = self._req(segment, task, state, ts)
        events = [self._event(ts, "cancel", {"task": task}, req)]
        if state.get("ended"):
            return events
        state["cancelled"] = ts
        if "ts" not in state:
            self._end(segment, task, state)
            events += self._ended(state, task, {}, ts)
        return events

    def _errored(self, segment: Segment, task: int, line: Line, ts: float) -> list[Event]:
        """llama-server answered the task with an error: a launched task ends at its release (which follows
        the error), one refused before it had a slot ends here."""
        message = str(line.fields.get("message", ""))
        state = self._task(segment, task)
        req = self._req(segment, task, state, ts)
        reason, status = error_reason(message)
        error = {"error_reason": reason, "message": message[:240], **({"status": status} if status else {})}
        if (asked := PROMPT_ASKED.search(message)) is not None:  # `request (1833 tokens) exceeds ...`: its prompt
            error["prompt"] = int(asked.group(1))
        events = [self._event(ts, "task_error", {"task": task, **error}, req)]
        if state.get("ended") or "error" in state:
            return events
        state["error"] = error
        if "ts" not in state:
            self._end(segment, task, state)
            events += self._ended(state, task, {}, ts)
        return events

    def _req(self, segment: Segment, task: int, state: dict[str, Any], ts: float) -> str:
        """The task's request id: the one made when it got a slot, else one made now (it never got one)."""
        if state.get("req") is None:
            state["req"] = request_id(self.instance, segment.start, task, ts)
        return str(state["req"])

    def _ended(self, state: dict[str, Any], task: int, released: dict[str, Any], ts: float) -> list[Event]:
        """The `done` of a task that was cancelled or failed: its outcome, and its timings where it has them."""
        outcome = "error" if "error" in state else "cancelled"
        if "timing_prompt" in state and "timing_eval" in state and released:
            return self._finished(state, task, released, ts, outcome)
        fields: dict[str, Any] = {"task": task, "finish": finish_of(outcome), "outcome": outcome}
        if state.get("slot") is not None or released:
            fields["slot"] = released.get("slot", state.get("slot"))
        # a failed task's release counts what the slot holds from before (its prompt was never read): not its own
        fields.update({k: released[k] for k in ("n_tokens", "truncated") if k in released and outcome != "error"})
        fields.update(state.get("error", {}))
        fields.update({k: state[k] for k in ("queue_ms", "queue_basis") if k in state})
        return [self._event(ts, "done", fields, state.get("req"))]

    def _finished(
        self, state: dict[str, Any], task: int, released: dict[str, Any], ts: float, outcome: str = ""
    ) -> list[Event]:
        """The task's prompt and done events, from its timing lines and its release line."""
        prompt_timing, eval_timing = state["timing_prompt"], state["timing_eval"]
        req = state.get("req")
        read, generated, n_tokens = prompt_timing["tokens"], eval_timing["tokens"], released["n_tokens"]
        # The slot holds the prompt and every generated token but the last (sampled, never decoded).
        prompt = max(n_tokens - generated + 1, read) if generated > 0 else max(n_tokens, read)
        ms = round(prompt_timing["ms"])
        launched = state.get("ts", ts)
        tps = eval_timing.get("tps")
        common = {"task": task, "slot": released["slot"]}
        outcome = outcome or ("truncated" if released["truncated"] else "done")
        return [
            self._event(
                min(launched + prompt_timing["ms"] / 1000, ts),
                "prompt",
                {**common, "prompt": prompt, "reused": prompt - read, "read": read, "ms": ms},
                req,
            ),
            self._event(
                ts,
                "done",
                {
                    **common,
                    "finish": finish_of(outcome),
                    "outcome": outcome,
                    **state.get("error", {}),
                    **self._waited(state, ms),
                    "prompt": prompt,
                    "completion": generated,
                    "ttft_ms": ms,
                    "decode_tps": tps if isinstance(tps, float) else 0.0,
                    "truncated": released["truncated"],
                    "n_tokens": n_tokens,
                    **state.get("timing_graphs", {}),
                },
                req,
            ),
        ]

    def _cache_entry(self, segment: Segment, line: Line, ts: float) -> list[Event]:
        """One entry of the listing under `- cache state:`, stamped with its update's time; the listing's
        last entry completes the inventory. An entry with no listing open (a read begun mid-list) is dropped."""
        f, listing = line.fields, self.inventory
        if listing is None or len(listing["entries"]) >= listing["state"]["prompts"]:
            return []
        entry = {key: f[key] for key in ("addr", "tokens", "checkpoints", "mib")}
        listing["entries"].append(entry)
        made = [self._event(listing["ts"], "cache_prompt", entry)]
        return made + (self._inventory() if len(listing["entries"]) == listing["state"]["prompts"] else [])

    def _inventory(self) -> list[Event]:
        """What the host prompt cache held after an update, as the Strata engine's cache gauges read it."""
        listing, self.inventory = self.inventory, None
        assert listing is not None
        state = listing["state"]
        fields = {
            "parked": state["prompts"],
            "used": round(state["mib"] * (1 << 20)),
            "budget": round(state["limit_mib"] * (1 << 20)),
            "largest": round(max((e["mib"] for e in listing["entries"]), default=0.0) * (1 << 20)),
            "limit_tokens": state["limit_tokens"],
        }
        return [self._event(listing["ts"], "cache_inventory", fields)]

    # What a line of each kind makes, where it is more than the line as read (_events). A line of a task: one
    # that names its task by number.
    ON_KIND: ClassVar[dict[str, KindHandler]] = {
        "start": _startup,
        "build": _startup,
        "model": _loaded,
        "ready": _ready,
        "evict": _evicted,
        "slots_config": _slots,
        "cache_prompt": _cache_entry,
        "cache_state": _cache_state,
    }
    ON_TASK: ClassVar[dict[str, TaskHandler]] = {
        "launch": _launched,
        "arrival": _arrived,
        "release": _released,
        "cancel": _cancelled,
        "task_error": _errored,
    }

    @staticmethod
    def _waited(state: dict[str, Any], prefill_ms: int) -> dict[str, Any]:
        """The task's wait for a slot and the client's wait for its first token (that wait plus the engine's
        prefill), where the wait is known."""
        if "queue_ms" not in state:
            return {}
        queue = state["queue_ms"]
        return {"queue_ms": queue, "queue_basis": state["queue_basis"], "client_wait_ms": queue + prefill_ms}

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


RELEASE = ("slot", "n_tokens", "truncated")
PROMPT_ASKED = re.compile(r"^request \((\d{1,12}) tokens\)")  # a number the store's BIGINT holds, whatever a line says
DIGITS = bytes.maketrans(b"0123456789", b"9999999999")


def by_child(items: list[Item]) -> list[tuple[str, list[Item]]]:
    """The items of each timeline, in the order each first appears (one group for a plain server's log)."""
    groups: dict[str, list[Item]] = {}
    for item in items:
        groups.setdefault(item.child, []).append(item)
    return list(groups.items())


def next_stamps(items: list[Item]) -> dict[int, float | None]:
    """For each stamped line but the last, by index: the stamp of the next stamped line."""
    stamped = [i for i, item in enumerate(items) if item.line.rel is not None]
    return {i: items[j].line.rel for i, j in zip(stamped, stamped[1:])}


def saved_segment(s: Segment) -> dict[str, Any]:
    return {
        "start": s.start,
        "anchor": s.anchor,
        "last_rel": s.last_rel,
        "evictions": s.evictions,
        "budget_bytes": s.budget_bytes,
        "busy": s.busy,
        "back": s.back,
        "timing_owner": s.timing_owner,
        "tasks": {str(k): v for k, v in s.tasks.items()},
    }


def restored_segment(saved: dict[str, Any], latest: float) -> Segment | None:
    """The segment a checkpoint saved; None for one unreadable (the next lines start a segment afresh), or
    whose start no clock can have (saved before clocks were bounded: placed afresh)."""
    try:
        owner = saved.get("timing_owner")
        segment = Segment(
            float(saved["start"]),
            str(saved["anchor"]),
            float(saved["last_rel"]),
            int(saved["evictions"]),
            saved.get("budget_bytes"),
            bool(saved.get("busy", True)),
            None if saved.get("back") is None else float(saved["back"]),
            [int(owner[0]), int(owner[1])] if isinstance(owner, list) and len(owner) == 2 else None,
            OrderedDict((int(k), dict(v)) for k, v in saved.get("tasks", {}).items()),
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return segment if EARLIEST_SECONDS <= segment.start <= latest else None
