"""Engine log (sources.md §1): `YYYY-MM-DD HH:MM:SS.mmm L [component] message`, naive, UTC.

Every line kind of the Strata engine, keyed by kind name; each regex may be replaced from config
(`[sources.NAME.patterns]`). The parser is pure; `EngineLogSource` adds the one piece of state a
line cannot carry: which request a `task N` belongs to (only the `queued` line names it). A task
line of a task never queued is marked `orphan` (the signals count it apart from requests).
Fixture: tests/fixtures/engine_log/strata-iq3_xxs-b.log
"""

from __future__ import annotations

from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from pydantic import Field, field_validator

from spyglass.collectors import LineSourceBase, SourceOptions, preset_source, register, register_preset
from spyglass.collectors.clock import BEIJING_ZONE_NAME
from spyglass.collectors.dated_log import DatedLogParser
from spyglass.collectors.event import Event
from spyglass.collectors.fields import ERROR_KIND, declare, from_patterns, merge
from spyglass.collectors.grammar import MAX_NUMBER, Miss, PatternOverride, build_kinds


def line_prefix(levels: str = "DIWE") -> str:
    """The engine line's prefix regex, with its level one of `levels` (the default: any level, as
    group `level`; a subset, for the columnar path's ignored-level pass, ungrouped)."""
    level = "(?P<level>[DIWE])" if levels == "DIWE" else "(?:" + "|".join(levels) + ")"
    return (
        r"(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,](?P<ms>\d{1,6}))? "
        + level
        + r" \[(?P<component>[^\]\n]{1,40})\] "
    )


PREFIX = line_prefix()

TASK = r"task (?P<task>\d+) "
CACHE_STATE = r"parked=(?P<parked>\d+) used=(?P<used>\d+) budget=(?P<budget>\d+) evictions=(?P<evictions>\d+)"

# kind: (component, literal prefilter, message regex)
PATTERNS: dict[str, tuple[str, str, str]] = {
    "start": (
        "main",
        "starting pid=",
        r"(?P<build_name>\S+) (?P<version>\S+) \(build (?P<build>\w+)\) starting pid=(?P<pid>\d+)",
    ),
    "args": ("main", "args: ", r"args: (?P<args>.*)"),
    "model": (
        "main",
        "model path=",
        r"model path=(?P<path>\S+) real=(?P<real>\S+) bytes=(?P<bytes>\d+) md5=(?P<md5>[0-9a-fA-F]+)",
    ),
    "cpus": ("main", "cpus allowed=", r"cpus allowed=(?P<cpus>[0-9,\-]+) pool_workers=(?P<pool_workers>\d+)"),
    "ready": ("main", "ready in ", r"ready in (?P<seconds>[\d.]+) s"),
    "experts_loaded": (
        "load",
        "experts resident=",
        r"experts resident=(?P<resident>\d+)/(?P<total>\d+) arena_mib=(?P<arena_mib>\d+)"
        r" loaded in (?P<seconds>[\d.]+) s",
    ),
    "checksum_mismatch": (
        "load",
        "checksum mismatch",
        r"checksum mismatch reading (?P<path>\S+): expected md5=(?P<expected>\w+)"
        r" got=(?P<got>\w+)",
    ),
    "queued": (
        "http",
        " queued",
        TASK + r"req=(?P<req>\S+) conv=(?P<conv>\S+) queued prefill_depth=(?P<prefill_depth>\d+)",
    ),
    "rejected": (
        "http",
        " rejected ",
        TASK + r"rejected (?P<status>\d{3})(?: #(?P<code>\d+))? (?P<reason>[^:\n]*)"
        r"(?:: (?P<prompt>\d+) > (?P<window>\d+)|: (?P<detail>[^\n]*))?",
    ),
    "prompt": (
        "slot",
        " reused + ",
        TASK + r"prompt (?P<prompt>\d+) = (?P<reused>\d+) reused \+ (?P<read>\d+) read in (?P<ms>\d+) ms",
    ),
    "thinking": (
        "slot",
        "thinking: ",
        TASK + r"thinking: (?P<tokens>\d+) of max (?P<max>\d+) (?:→|->) done \((?P<cause>\w+)\)",
    ),
    "tool_call": ("slot", "writing a tool call", TASK + r"writing a tool call"),
    "done": (
        "slot",
        " done finish=",
        TASK + r"done finish=(?P<finish>\w+) prompt=(?P<prompt>\d+) completion=(?P<completion>\d+)"
        r" ttft_ms=(?P<ttft_ms>\d+) decode_tps=(?P<decode_tps>[\d.]+)",
    ),
    "park": (
        "cache",
        "park ",
        r"park conv=(?P<conv>\S+) parked=(?P<parked>\d+) bytes=(?P<bytes>\d+) used=(?P<used>\d+)"
        r" budget=(?P<budget>\d+) evictions=(?P<evictions>\d+)",
    ),
    "evict": (
        "cache",
        "evict ",
        r"evict conv=(?P<conv>\S+) bytes=(?P<bytes>\d+) reason=(?P<reason>\w+) " + CACHE_STATE,
    ),
    "restore": ("cache", "restore ", r"restore conv=(?P<conv>\S+) from=(?P<origin>\w+) tokens=(?P<tokens>\d+)"),
    "graph_rebuild": (
        "graph",
        "rebuild ",
        r"rebuild shape=(?P<shape>\S+) reason=(?P<reason>\w+) took_ms=(?P<took_ms>\d+)",
    ),
    "stats": (
        "stats",
        "busy=",
        r"busy=(?P<busy>\d+)/(?P<slots>\d+) prefill_queue=(?P<prefill_queue>\d+)"
        r" decode_tps=(?P<decode_tps>[\d.]+) " + CACHE_STATE,
    ),
}
TEXT_FIELDS = (
    "build",
    "version",
    "build_name",
    "md5",
    "expected",
    "got",
    "conv",
    "req",
    "shape",
    "path",
    "real",
    "cpus",
    "reason",
    "origin",
    "finish",
    "cause",
    "args",
    "detail",
)
TASK_LINES = frozenset({"prompt", "thinking", "tool_call", "done"})  # written only for a queued task
# What may follow a real `start` line: the load phase, or an error of the load phase (main, load: a
# start that dies at once, a crash loop). A start line followed by anything else (a request's line, an
# error of ordinary work) was not the engine's: a banner in an echoed prompt.
START_SEQUENCE = frozenset({"args", "model", "cpus", "experts_loaded", "checksum_mismatch", "ready"})
START_ERRORS = frozenset({"main", "load"})


def follows_a_start(event: Event) -> bool:
    """Whether `event` can be the line after a real start line (see START_SEQUENCE)."""
    return event.kind in START_SEQUENCE or event.kind == "error" and event.fields.get("component") in START_ERRORS


DIGITS_TO_9 = bytes.maketrans(b"0123456789", b"9999999999")
STAMP_LAYOUT = b"9999-99-99 99:99:99.999"
COLUMNAR_MIN_LINES = 4096  # the measured crossover (bench/crossover.py, docs/benchmarks.md)
ARG_FLAGS = ("port", "slots", "ctx", "pool-workers", "conversation-cache-mib", "prompt-cache-every")

_ARGS = {"args": {**{flag.replace("-", "_"): "int" for flag in ARG_FLAGS}, "model": "text", "argv": "text"}}
_ORPHAN = {kind: {"orphan": "bool"} for kind in TASK_LINES}


def _declared() -> None:
    """The kind's fields, as the strata preset writes them; another preset adds its own (register_preset)."""
    strata = from_patterns(PATTERNS, TEXT_FIELDS)
    strata["args"] = {}  # the `args` text is parsed into its flags
    declare("engine_log", merge(strata, _ARGS, _ORPHAN, ERROR_KIND))  # type: ignore[arg-type]


_declared()


class EngineLogOptions(SourceOptions):
    kind: Literal["engine_log"] = "engine_log"
    preset: str = Field(
        "strata",
        description="Which engine writes the log, one of the presets registered for engine_log: strata (dated"
        " lines, this module's patterns) or llama_server (llama.cpp's llama-server, any build since 2024, plain"
        " or through journald, syslog, docker or router mode; its stamps count from the process start, see"
        " collectors/llama_log.py and docs/llama-server.md; `spyglass check-log FILE` shows what it reads).",
    )
    tz: str = "UTC"
    lane: str = Field("", description="Lane label of this instance (fast, normal); empty = unknown.")
    prefix: str = Field(PREFIX, description="Regex of the line prefix; groups ts, ms, level, component.")
    patterns: dict[str, str | PatternOverride] = Field(
        default_factory=dict, description="Per-kind message regex overrides (see docs/config.md)."
    )
    ignore_levels: list[str] = Field(["D"], description="Levels whose lines are skipped, not counted unparsed.")
    columnar: Literal["auto", "never", "always"] = Field(
        "auto",
        description="The columnar (RE2, pyarrow) path for blocks of lines: auto = blocks of at least"
        " columnar_min_lines lines; never = every line on its own; always = every block. A"
        " pattern RE2 cannot run as Python does keeps the source per line (see /debug/sources).",
    )
    columnar_threads: int = Field(
        1,
        ge=1,
        le=8,
        description="Threads a columnar block is split across (RE2 runs"
        " without the GIL; the events are still built and joined in order on one).",
    )
    columnar_min_lines: int = Field(
        COLUMNAR_MIN_LINES,
        ge=1,
        description="Smallest block the auto mode parses"
        " column-wise (below it, the per-line path costs less; docs/benchmarks.md).",
    )

    @field_validator("preset")
    @classmethod
    def _registered(cls, preset: str) -> str:
        preset_source("engine_log", preset)  # ValueError naming the presets
        return preset

    def request_id_zone(self) -> str | None:
        """llama-server's task ids are its tasks' UTC times (collectors/llama_process.request_id); Strata's log
        carries the Strata stack's ids (engine/instrument.py), in Beijing time."""
        return "UTC" if self.preset == "llama_server" else BEIJING_ZONE_NAME

    def idle_lines(self) -> str | None:
        """What the engine writes while idle and up, if anything (its preset's `idle_lines`): its log's silence
        is then a sign; llama-server writes nothing while idle, so its liveness is its /health poll."""
        return getattr(preset_source("engine_log", self.preset), "idle_lines", None)


def parse_args(text: str) -> dict[str, int | str]:
    """The engine flags that matter downstream, from the `args:` line."""
    words = text.split()
    found: dict[str, int | str] = {}
    for flag, value in zip(words, words[1:]):
        name = flag.removeprefix("--")
        if flag.startswith("--") and name in ARG_FLAGS + ("model",):
            found[name.replace("-", "_")] = int(value) if value.isascii() and value.isdigit() else value
    return found


class EngineLogParser(DatedLogParser):
    """The engine's parser: the generic one, plus a fast path for the default line layout."""

    def __init__(self, options: EngineLogOptions, source: str, host: str = "", fast_layout: bool = True) -> None:
        kinds = build_kinds(PATTERNS, options.patterns, f"sources.{source}.patterns", frozenset(TEXT_FIELDS))
        super().__init__(
            options.prefix, kinds, options.tz, source, options.instance, host, options.ignore_levels, error_level="E"
        )
        # With the default prefix, a line in its common layout (milliseconds, one-letter level)
        # has its level and component at fixed offsets: it is parsed with one regex call, the
        # kind's, instead of two. Any other line takes the grammar's path; both agree exactly.
        self.fast = fast_layout and options.prefix == PREFIX
        self.skip = {b" %s [" % level.encode() for level in options.ignore_levels} if self.fast else set()
        self._options = options
        self._block: tuple[Any, str] | None = None

    @property
    def block(self) -> Any:
        """The columnar grammar (collectors/columnar.py), or None: built at first use, so a source
        whose blocks never reach it (live, metrics only) never imports pyarrow."""
        return self._built()[0]

    @property
    def block_note(self) -> str:
        return self._built()[1]

    def _built(self) -> tuple[Any, str]:
        if self._block is None:
            never = self._options.columnar == "never"
            self._block = (None, "columnar: never (configured)") if never else self._block_grammar(self._options)
        return self._block

    def _block_grammar(self, options: EngineLogOptions) -> tuple[Any, str]:
        """The columnar form of this grammar, or None and why RE2 cannot run it as Python does."""
        from spyglass.collectors.columnar import BlockGrammar, NotRe2  # pyarrow only for sources that use it

        ignored = None
        levels = [level for level in options.ignore_levels if level in ("D", "I", "W", "E")]
        if self.fast and levels:  # the default prefix: its level is one byte between fixed fields
            ignored = "^" + line_prefix("".join(levels))
        try:
            block = BlockGrammar(
                self.grammar,
                self.event,
                self.parse_line,
                source=self.source,
                instance=self.instance,
                host=self.host,
                utc=options.tz == "UTC",
                special=frozenset({"args"}),
                ignored_prefix=ignored,
            )
        except NotRe2 as exc:
            return None, f"per line only: {exc}"
        return block, f"columnar: {options.columnar}" + (
            f" (blocks of {options.columnar_min_lines}+ lines)" if options.columnar == "auto" else ""
        )

    def parse_line(self, line: bytes) -> Event | str:
        if not self.fast or line[:23].translate(DIGITS_TO_9) != STAMP_LAYOUT:
            return super().parse_line(line)
        head = line[23:27]
        close = line.find(b"]", 27, 68)  # the component is 1 to 40 bytes, and never empty
        if (
            head[0:1] != b" "
            or head[2:4] != b" ["
            or not head[1:2]
            or head[1:2] not in b"DIWE"
            or close <= 27
            or line[close + 1 : close + 2] != b" "
            or b"\n" in line[27:close]
        ):
            return super().parse_line(line)
        if head in self.skip:
            return Miss.IGNORED
        start, component = close + 2, line[27:close]
        for kind in self.grammar.by_component.get(component.split(b" ", 1)[0], ()):
            if line.find(kind.literal, start) >= 0:
                found = kind.pattern.match(line, start)
                if found is not None:
                    fields = kind.typed(found)
                    if isinstance(fields, str):
                        return fields
                    return self.event(line[:19], kind.kind, fields, int(line[20:23]) * 1000)
        if head[1:2] == self.grammar.error_level:
            return self.event(
                line[:19], "error", self.grammar.error_fields(component, line[start:]), int(line[20:23]) * 1000
            )
        return Miss.UNMATCHED

    def event(self, stamp: bytes, kind: str, fields: dict, micros: int) -> Event | str:
        if kind == "args":
            text = fields.get("args", "")
            fields = parse_args(text)
            refused = next(
                (name for name, value in fields.items() if value.__class__ is int and value > MAX_NUMBER), None
            )
            if refused:
                return Miss.invalid(refused)
            fields["argv"] = text  # verbatim: a flag this parser does not know still shows in a change list
        return super().event(stamp, kind, fields, micros)


@register_preset("engine_log", "strata")
@register("engine_log", EngineLogOptions)
class EngineLogSource(LineSourceBase):
    """Engine log lines in, events out; joins `task N` to the request id its `queued` line named."""

    idle_lines = "a [stats] line every 10 s"  # Strata's engine while idle and up

    def __init__(self, name: str, options: EngineLogOptions, host: str = "", max_tasks: int = 4096) -> None:
        self.name, self.options = name, options
        self.parser = EngineLogParser(options, name, host)
        self._requests: OrderedDict[int, str] = OrderedDict()
        self._max_tasks = max_tasks
        self._start_pending = False  # a start line was read; the next event says whether it was real
        self._pool: ThreadPoolExecutor | None = None
        never, always = options.columnar == "never", options.columnar == "always"
        self._block_from = None if never else 1 if always else options.columnar_min_lines

    @property
    def parse_note(self) -> str:
        """Which path parses this source's blocks, and why (for /debug/sources)."""
        return self.parser.block_note

    def checkpoint(self) -> dict[str, str]:
        """The open tasks' request ids: committed with the tailer offsets, so a restart between a
        request's queued line and its later lines still joins them."""
        return {str(task): req for task, req in self._requests.items()}

    def restore(self, saved: dict[str, str]) -> None:
        self._requests = OrderedDict((int(task), req) for task, req in saved.items())

    def handle_lines(self, lines: list[bytes]) -> tuple[list[Event], dict[str, int], bytes]:
        """Per line, or column-wise for a block large enough to pay for its fixed cost: the same
        events, misses and last unmatched line either way (tests/test_columnar.py)."""
        if self._block_from is not None and len(lines) >= self._block_from and self.parser.block is not None:
            return self.handle_block(lines)
        return self.handle_each(lines)

    def handle_block(self, lines: list[bytes]) -> tuple[list[Event], dict[str, int], bytes]:
        """The columnar path (collectors/columnar.py); the task join runs over its events in order."""
        block = self.parser.block
        assert block is not None
        threads = self.options.columnar_threads
        if threads == 1 or len(lines) < 2 * (self._block_from or 1):
            found, misses, last = block.outcomes(lines)
        else:
            found, misses, last = self._in_threads(block, lines, threads)
        join = self._join
        return [join(event) for _, event in found], misses, lines[last][:512] if last >= 0 else b""

    def _in_threads(self, block: Any, lines: list[bytes], threads: int) -> tuple[list, dict[str, int], int]:
        """outcomes() of consecutive slices in parallel, put back in line order."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(threads, thread_name_prefix=f"{self.name}-columnar")
        size = -(-len(lines) // threads)
        parts = list(self._pool.map(block.outcomes, [lines[i : i + size] for i in range(0, len(lines), size)]))
        found: list[Any] = []
        misses: dict[str, int] = {}
        last = -1
        for n, (events, counts, unmatched) in enumerate(parts):
            start = n * size
            found += [(start + i, event) for i, event in events]
            for key, count in counts.items():
                misses[key] = misses.get(key, 0) + count
            if unmatched >= 0:
                last = start + unmatched
        return found, misses, last

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    def handle_each(self, lines: list[bytes]) -> tuple[list[Event], dict[str, int], bytes]:
        """dated_log.handle_lines with the debug-line skip inlined: three lines in four take it,
        and a function call per line would cost more than the rest of the check."""
        events: list[Event] = []
        misses = {Miss.IGNORED: 0, Miss.UNMATCHED: 0, Miss.UNPREFIXED: 0}
        unmatched = b""
        skip = self.parser.skip
        handle = self.handle
        for line in lines:
            # Exactly what the default prefix regex accepts, for the layout with milliseconds.
            if skip and line[23:27] in skip and line[:23].translate(DIGITS_TO_9) == STAMP_LAYOUT:
                close = line.find(b"]", 27, 68)
                if close > 27 and line[close + 1 : close + 2] == b" " and b"\n" not in line[27:close]:
                    misses[Miss.IGNORED] += 1
                    continue
            result = handle(line)
            if isinstance(result, str):
                try:
                    misses[result] += 1
                except KeyError:  # Miss.invalid(field): one key per field name
                    misses[result] = 1
                if result == Miss.UNMATCHED:
                    unmatched = line
            else:
                events.append(result)
        return events, misses, unmatched[:512]

    def handle(self, line: bytes) -> Event | str:
        event = self.parser.parse_line(line)
        if isinstance(event, str):
            return event
        return self._join(event)

    def _join(self, event: Event) -> Event:
        if self._start_pending:
            self._start_pending = False
            if follows_a_start(event):
                self._requests.clear()  # task numbers restart with the engine process
        if event.kind == "start":  # not yet: a banner echoed in a prompt must not orphan the open tasks
            self._start_pending = True
        task = event.fields.get("task")
        if task is None:
            return event
        if event.kind == "queued":
            self._requests[task] = event.request_id or ""
            if len(self._requests) > self._max_tasks:
                self._requests.popitem(last=False)
        else:
            req = self._requests.get(task)
            event.request_id = req or None
            if req is None and event.kind in TASK_LINES:
                event.fields["orphan"] = True  # never queued: a forged line, or queued before we read
            if event.kind in ("done", "rejected"):
                self._requests.pop(task, None)
        return event
