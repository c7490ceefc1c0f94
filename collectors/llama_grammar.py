"""One grammar for llama.cpp's server log, every format it has had since 2024 (pure: bytes in, a Line or a
Miss out; the wrappers around a line are collectors/llama_wrap.py's, the clock and the task join the
source's, collectors/llama_log.py).

Formats, as llama.cpp's own format strings wrote them (tools/server, examples/server, common/log.cpp):
- 2024 JSON (`server_log` with `--log-format json`, the default until mid 2024): `{"tid": ..., "timestamp":
  1717067386, "level": "INFO", "function": "print_timings", "line": 321, "msg": "prompt eval time = ...",
  "id_slot": 0, "id_task": 19, ...}` (`message` for `msg` in its first months);
- 2024 text (`--log-format text`; still the ik_llama.cpp fork's): `INFO [           print_timings] prompt
  eval time     = ... | tid="..." timestamp=1723569622 id_slot=0 id_task=0 ...`;
- common/log.cpp's, from late 2024: `[M.SS.mmm.uuu ][L ]message`, the stamp with `--log-timestamps`, the
  level letter with `--log-prefix` (both by default from 2026); the message `slot FUNC: id N | task T |
  ...`, `srv  FUNC: ...`, `main: ...`. Until 2026 `print_timing` wrote its three lines as one message
  whose continuation lines carry no prefix (`slot print_timing: id  0 | task 42 | ` then `prompt eval
  time = ...`, `       eval time = ...`, `      total time = ...`): such a line is a Line with no task,
  which the source joins to the header before it;
- the wording of each period: `stop processing: n_past =` (2024-2025) or `n_tokens =`; `sim_best` or
  `f_sim_best`; `main: server is listening on` or `srv llama_server: listening on`; the first line
  `build: 4205 (c6bc7395) with cc ... for ...`, `log_info: verbosity = 3` or `srv llama_server:
  initializing ...`;
- raw stderr of a crash: `.../ggml.c:1554: GGML_ASSERT(...) failed`, before 2024 `GGML_ASSERT: file:line:
  cond`, ggml_abort's `file.cu:102: CUDA error`, `terminate called after ...`, `Assertion '...' failed.`; a
  shell's `terminated by signal SIGABRT`; Windows' `0xC0000005` (access violation), `0xC0000409`;
- forks: ik_llama.cpp's checkpoint line with `took N ms` (written without its new line, a 2024 text line
  after it: both are read); early 2024's `slot_id`/`task_id` for `id_slot`/`id_task`.

Besides events, a line is `ignored` when its whole shape is in the noise catalogue (collectors/llama_noise.py,
collectors/llama_shapes.py: what real builds print besides their signals, at every verbosity), `unmatched`
when it has the shape of a llama.cpp line but no pattern and no catalogued shape knows its message (wording
drift), and `unprefixed` when it has no shape spyglass knows (another format). A line that holds a signal
pattern's literal and does not match a pattern is `unmatched`, whatever it looks like (the guard: a reworded
signal is never noise). A level letter or word is no filter: a debug line is read like any other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from spyglass.collectors import bounded_json
from spyglass.collectors.grammar import Miss, PatternOverride, build_kinds
from spyglass.collectors.llama_noise import catalogue

STAMP = re.compile(rb"(?P<min>\d{1,9})\.(?P<sec>\d\d)\.(?P<ms>\d{3})\.(?P<us>\d{3}) ")
LEVEL = re.compile(rb"(?P<level>[DIWE]) ")
SLOT = r"slot +(?P<func>[\w()~]+): id +(?P<slot>\d+) \| task (?P<task>-?\d+) \| "
SRV = r"srv +(?P<func>[\w()~]+): +"
MIB = r"(?P<mib>\d+\.\d+) MiB"
OPT_SLOT = f"(?:{SLOT})? *"  # a timing line: with its slot prefix (2026), or a continuation line without

# kind: (component: none in this format, literal prefilter, message regex); every one overridable from `patterns`.
PATTERNS: dict[str, tuple[str, str, str]] = {
    "start": ("", "initializing ...", SRV + r"initializing \.\.\."),
    "build": (
        "",
        "build: ",
        r"(?:cmn +\w+: +)?build: (?P<number>\d+) \((?P<commit>\w+)\) with (?P<compiler>.{1,200}) for (?P<target>.{1,200})",
    ),
    # 2026's wording of the same line: a kind of its own so that each literal is exact ("build" alone is in paths)
    "build_params": (
        "",
        "print_info: build ",
        r"(?:cmn +\w+: +)?common_params_print_info: build (?P<number>\d+) \((?P<commit>\w+)\)"
        r" with (?P<compiler>.{1,200}) for (?P<target>.{1,200})",
    ),
    "model": ("", "loading model '", SRV + r"loading model '(?P<path>.+)'"),
    "slots_config": (
        "",
        "n_slots = ",
        SRV + r"initializing(?: slots)?, n_slots = (?P<slots>\d+)(?:, n_ctx_slot = (?P<ctx_slot>\d+),"
        r" kv_unified = '(?P<kv_unified>\w+)')?",
    ),
    "model_loaded": ("", "model loaded", r"(?:srv +\w+: +|main: )model loaded"),
    "ready": (
        "",
        "listening on ",
        # `main: router server is listening on` is a router's own (0.3.20)
        r"(?:srv +\w+: +|main: )(?:(?:router )?server is )?listening on (?P<address>\S+)(?: - starting the main loop)?",
    ),
    "exiting": ("", "cleaning up before exit", r"srv +[\w():, ]{0,60}cleaning up before exit\.\.\."),
    "verbosity": (
        "",
        "verbosity = ",
        r"(?:cmn +\w+: +)?(?:common_params_print_info|log_info): verbosity = (?P<verbosity>\d+).*",
    ),
    "threadpool": ("", "threadpool init", r"cmn +\w+: llama threadpool init, n_threads = (?P<threads>\d+)"),
    "security": ("", "security: ", SRV + r"security: (?P<message>.{1,200})"),
    "slot_select": (
        "",
        "selected slot by ",
        SLOT
        + r"selected slot by (?P<by>LRU|LCP similarity|id|lru|lcs similarity|lcp similarity)(?:, t_last = (?P<t_last>-?\d+)"
        r"|, (?:f_)?sim_best = (?P<similarity>\d+\.\d+) \(> (?P<threshold>\d+\.\d+) thold\), f_keep = (?P<keep>-?\d+\.\d+)"
        r"|, (?:lcs_len|max_lcp_len) = \d+, similarity = (?P<lcs_similarity>\d+\.\d+)| \((?P<id>\d+)\))",
    ),
    "launch": ("", "| processing task", SLOT + r"processing task(?:, is_child = (?P<child>\d))?"),
    "timing_header": (
        "",
        "print_timing: id",
        r"slot +(?P<func>print_timing): id +(?P<slot>\d+) \| task (?P<task>-?\d+) \| ?",
    ),
    "timing_prompt": (
        "",
        "prompt eval time =",
        OPT_SLOT + r"prompt eval time = +(?P<ms>\d+\.\d+) ms / +(?P<tokens>\d+) tokens \(.*\)",
    ),
    "timing_eval": (
        "",
        "eval time =",
        OPT_SLOT + r"eval time = +(?P<ms>\d+\.\d+) ms / +(?P<tokens>\d+) tokens"
        r" \( *(?:\d+\.\d+|inf|nan|-nan) ms per token, +(?P<tps>\d+\.\d+|inf|nan|-nan) tokens per second\)",
    ),
    "timing_graphs": ("", "graphs reused =", OPT_SLOT + r"graphs reused = +(?P<graphs_reused>\d+)"),
    "timing_draft": (
        "",
        "draft acceptance =",
        OPT_SLOT
        + r"draft acceptance = (?P<acceptance>\d+\.\d+) \( *(?P<accepted>\d+) accepted / +(?P<generated>\d+) generated\)",
    ),
    "timing_total": ("", "total time =", OPT_SLOT + r"total time = +(?P<ms>\d+\.\d+) ms / +(?P<tokens>\d+) tokens"),
    "decode_progress": (
        "",
        ", tg = ",
        SLOT
        + r"n_(?:gen|decoded) = +(?P<n_gen>\d+), tg = +(?P<tps>\d+\.\d+) t/s(?:, tg_3s = +(?P<tps_3s>\d+\.\d+) t/s)?",
    ),
    "prompt_progress": (
        "",
        "prompt processing, ",
        SLOT + r"prompt processing, n_tokens = +(?P<n_tokens>\d+), progress = (?P<progress>\d+\.\d+),"
        r" t = +(?P<seconds>\d+\.\d+) s / (?P<tps>\d+\.\d+) tokens per second",
    ),
    "context_shift": (
        "",
        "context shift",
        SLOT + r"slot context shift, n_keep = (?P<n_keep>-?\d+), n_left = (?P<n_left>-?\d+),"
        r" n_discard = (?P<n_discard>-?\d+)",
    ),
    "sleeping": ("", "sleeping state", SRV + r"server is (?P<action>entering|exiting) sleeping state"),
    "cache_load_failed": ("", "failed to load prompt from cache", SLOT + r"failed to load prompt from cache"),
    "release": (
        "",
        "stop processing:",
        SLOT + r"stop processing: n_(?:tokens|past) = (?P<n_tokens>\d+), truncated = (?P<truncated>\d)",
    ),
    "evict": (
        "",
        "removing oldest entry",
        SRV + r"- (?:(?P<room>making room for prompt cache entry)|(?P<size>cache size limit reached)"
        r"|cache token limit \((?P<limit_tokens>\d+), est: (?P<est_tokens>\d+)\) reached), removing oldest entry"
        r" \(size = " + MIB + r"\)",
    ),
    "cache_state": (
        "",
        "- cache state:",
        SRV
        + r"- cache state: (?P<prompts>\d+) prompts, "
        + MIB
        + r" \(limits: (?P<limit_mib>\d+\.\d+) MiB, (?P<limit_tokens>\d+) tokens, (?P<est_tokens>\d+) est\)",
    ),
    # Each entry of the host prompt cache, listed under `- cache state:` after each update (-lv 4 / -v).
    "cache_prompt": (
        "",
        "tokens, checkpoints:",
        SRV + r"- prompt (?P<addr>0x[0-9a-f]{1,16}): +(?P<tokens>\d+) tokens, checkpoints: +(?P<checkpoints>\d+),"
        r" +" + MIB,
    ),
    "reprocess": (
        "",
        "forcing full prompt re-processing",
        SLOT + r"forcing full prompt re-processing due to (?P<cause>.{1,200})",
    ),
    "checkpoint": (
        "",
        "context checkpoint ",
        SLOT
        + r"(?P<action>created|restored|erasing old|erased invalidated) context checkpoint.*size = "
        + MIB
        + r"(?:, took \d+\.\d+ ms)?\)",  # ik_llama.cpp says how long it took
    ),
    "reasoning_budget": ("", "reasoning budget", r"(?P<message>.{0,200}reasoning budget.{0,200})"),
    # A request's end and the KV cache's pressure (docs/llama-server.md, "Outcomes and KV pressure"), in the
    # wording of each build that prints them: `send_error` (late 2024 on; early 2024's `task N - error: ...`, mid
    # 2024's JSON `task error` in from_2024), the cancel of a task whose client went away (`cancel_tasks:` late 2024, `stop:` 2026),
    # libllama's memory-slot line (`llama_decode_internal: ... KV cache slot for ubatch` 2024-2025, `decode:
    # ... a memory slot for batch` later), the server's retry with a smaller batch (2024's `update_slots :
    # ... smaller n_batch = N`, later `... smaller batch size, off = ...`), a failed decode, and a prompt
    # restored from the host cache that did not fit (`state_read_meta: failed to find N available cells`).
    # No literal: llama-server writes it at level E, so a reworded one is still an `error` event, never noise.
    "task_error": (
        "",
        "",
        r"(?:srv +[\w()~]+: +task id = |task )(?P<task>-?\d+)(?:,| -) error: (?P<message>.{0,400})",
    ),
    "cancel": ("", "cancel task, id_task = ", SRV + r"cancel task, id_task = (?P<task>\d+)"),
    # A request's arrival: its task posted to the queue (debug verbosity, `-v`): what its wait for a slot starts at.
    "arrival": ("", "post: new task, id = ", r"que +post: new task, id = (?P<task>\d+)(?:/\d+)?, front = \d+"),
    "kv_no_slot": (
        "",
        "batch of size ",
        r"(?:\w+: +)?failed to find (?:a memory slot|KV cache slot) for u?batch of size (?P<batch>\d+)",
    ),
    "kv_retry": (
        "",
        "failed to find free space in the KV cache",
        r"(?:srv +[\w()~]+: +|\w+ ?: +)?failed to find free space in the KV cache, retrying with smaller"
        r" (?:batch size)?(?:.{0,200}?n_batch = (?P<n_batch>\d+))?.{0,300}",
    ),
    "decode_failed": (
        "",
        "",
        r"(?:srv +[\w()~]+: +|\w+ ?: +)?(?:(?:failed to decode(?: the batch, n_batch = \d+| the batch: KV cache is full"
        r" - try increasing it via the context size, i = \d+, n_batch = \d+)?"
        r"|(?P<message>Context size has been exceeded\.|Invalid input batch\.|Compute error\.) off = \d+,"
        r" n_batch = \d+),? ret = (?P<ret>-?\d+)|decode\(\) failed: (?P<cause>.{1,200}))",
    ),
    "cache_restore_failed": (
        "",
        "failed to restore ",
        r"(?:srv +[\w()~]+: +|\w+: +)?failed to restore (?:state with size (?P<state_bytes>\d+)|sequence state"
        r"|kv cache(?::.{0,120})?)",
    ),
    "restore_no_cells": (
        "",
        "available cells in kv cache",
        r"(?:\w+: +)?failed to find (?:(?P<cells>\d+) )?available cells in kv cache",
    ),
    "crash": (
        "",
        "",
        r"(?P<message>(?:.{0,300}: )?GGML_ASSERT\(.{1,400}\) failed|terminate called .{1,300}"
        r"|.{0,300}Assertion .{1,400} failed\.?|Segmentation fault.{0,100}|Aborted.{0,100}|  what\(\):  .{1,400}"
        r"|\S{0,200}\(ggml_abort\+0x[0-9a-f]{1,16}\)\[0x[0-9a-f]{1,16}\]"
        r"|GGML_ASSERT: \S{1,300}:\d{1,7}: .{1,400}"  # before 2024: GGML_ASSERT: file:line: condition
        r"|\S{0,300}\.(?:c|cc|cpp|cu|h|hpp|m|mm|metal):\d{1,7}: .{1,400}"  # ggml_abort: file.cpp:NNN: message
        r"|.{0,300} terminated by signal SIG[A-Z]{2,8}.{0,100}"  # a shell's word for it (fish)
        r"|.{0,300}\b0x[cC]0000(?:005|409)\b.{0,300})",  # Windows: access violation, fail-fast
    ),
}
TEXT_FIELDS = frozenset(
    {
        "kv_unified",
        "path",
        "address",
        "by",
        "func",
        "cause",
        "action",
        "message",
        "room",
        "size",
        "commit",
        "compiler",
        "target",
        "addr",
    }
)
ALIASES = {"build_params": "build"}  # kinds read as another kind's line
# Start-up lines: one of them begins a segment (what one process wrote) unless the segment has seen only start-up lines.
START_MARKERS = frozenset({"start", "build", "verbosity"})
# Builds of late 2024 print their errors with no level letter: a failed load is known by its words.
UNLEVELLED_ERROR = re.compile(
    rb"(?:srv +load_model|main): .{0,40}?(?:failed to load model|exiting due to model loading error)"
)

GLUED_2024 = re.compile(rb"\s{2,}(?=(?:INFO|WARN|ERR|VERB|ERROR|WARNING|DEBUG) \[ *[\w:~<>]{1,48}\] )")
# 2024's server_log: levels, the message of each kind (by `msg`, or its start), the extras' keys.
TEXT_2024 = re.compile(
    rb"\s*(?P<level>INFO|WARN|ERR|VERB|ERROR|WARNING|DEBUG) \[ *(?P<function>[\w:~<>]{1,48})\] (?P<msg>.*?)"
    rb"(?: \| (?P<extras>\w+=.*))?"
)
EXTRA = re.compile(rb'(\w+)=("(?:[^"\\]|\\.)*"|\{.*?\}|\[.*?\]|\S+)')
TIMING_2024 = re.compile(
    r"(?P<which>prompt eval|generation eval|eval|total) time +=\s+(?P<ms>\d+\.\d+) ms"
    r"(?: / +(?P<tokens>\d+) (?:tokens|runs))?"
    r"(?: +\( *[\d.naif-]+ ms per token, +(?P<tps>[\d.naif-]+) tokens per second\))?"
)
# 2024's messages that from_2024 turns into events: one of them in a message it could not read is drift.
SIGNAL_2024 = (b"slot is processing task", b"slot released", b"build info", b"model loaded", b"initializing slots")


@dataclass(frozen=True)
class Line:
    """One parsed line: its stamp in seconds since its process started (None: printed without one), its
    level ("" for a format without), its kind and fields (kind None: a llama.cpp line no pattern knows),
    its absolute time when the line (or its wrapper) has one, and its format."""

    rel: float | None
    level: str
    kind: str | None
    fields: dict[str, Any] = field(default_factory=dict)
    wall: float | None = None
    form: str = "common"  # common (common/log.cpp), text (2024 text), json (2024 JSON)


class LlamaLineParser:
    """parse(bytes) -> Line | Miss for a payload without its wrappers: no I/O, no clock."""

    def __init__(self, overrides: dict[str, str | PatternOverride] | None = None, where: str = "patterns") -> None:
        kinds = build_kinds(PATTERNS, overrides or {}, where, TEXT_FIELDS)
        self.kinds = [kind for kind in kinds if kind.kind != "crash"] + [kind for kind in kinds if kind.kind == "crash"]
        # The guard's literals: every signal pattern's prefilter, the built-in one too when config replaced it.
        self.literals = tuple(
            dict.fromkeys(
                [kind.literal for kind in self.kinds if kind.literal]
                + [literal.encode() for _, literal, _ in PATTERNS.values() if literal]
            )
        )
        self.guard = re.compile(b"|".join(re.escape(literal) for literal in self.literals))  # one C-level scan
        self.noise = catalogue()

    def parse(self, line: bytes) -> Line | str:
        line = line.rstrip(b"\r\n")
        if line.startswith(b"{"):
            return self._json(line)
        if line[:1] in b"IWEVD \t" and line[:1]:
            found = TEXT_2024.fullmatch(line)
            if found is not None:
                return self._from_2024(
                    found.group("level").strip().decode(),
                    found.group("function").decode(),
                    found.group("msg").decode("utf-8", "replace"),
                    extras(found.group("extras") or b""),
                    "text",
                )
        rel, level, at = None, "", 0
        stamp = STAMP.match(line)
        if stamp is not None:
            rel = (
                int(stamp.group("min")) * 60
                + int(stamp.group("sec"))
                + int(stamp.group("ms")) / 1e3
                + int(stamp.group("us")) / 1e6
            )
            at = stamp.end()
        head = LEVEL.match(line, at)
        if head is not None:
            level, at = head.group("level").decode(), head.end()
        return self._message(line[at:].lstrip(b"\r"), rel, level)

    def _message(self, message: bytes, rel: float | None, level: str) -> Line | str:
        for kind in self.kinds:
            if kind.literal in message:
                found = kind.pattern.match(message)
                if found is not None:
                    fields = kind.typed(found)
                    if isinstance(fields, str):
                        return fields
                    if kind.kind == "crash":
                        return Line(
                            rel,
                            level or "E",
                            "error",
                            {"component": "main", "message": fields.get("message", "")[:240]},
                        )
                    return Line(rel, level, ALIASES.get(kind.kind, kind.kind), fields)
        if level == "E":
            return Line(
                rel,
                level,
                "error",
                {"component": error_component(message), "message": message[:240].decode("utf-8", "replace")},
            )
        if not level and UNLEVELLED_ERROR.match(message) is not None:
            return Line(
                rel,
                "E",
                "error",
                {"component": error_component(message), "message": message[:240].decode("utf-8", "replace")},
            )
        if self.guarded(message):
            return Line(rel, level, None)
        if self.noise.knows(message):
            return Miss.IGNORED
        if rel is None and not level and not _llama_shaped(message):
            return Miss.UNPREFIXED
        return Line(rel, level, None)

    def glued(self, line: bytes) -> list[Line]:
        """The messages of a line that holds two, each read (ik_llama.cpp writes its checkpoint line without its
        new line, then a 2024 text line); [] for any other line."""
        found = GLUED_2024.search(line, 1)
        if found is None:
            return []
        parts = [self.parse(line[: found.start()]), self.parse(line[found.end() :])]
        return (
            [part for part in parts if isinstance(part, Line) and part.kind is not None]
            if all(isinstance(part, Line) and part.kind is not None for part in parts)
            else []
        )

    def noise_key(self, line: bytes) -> bytes | None:
        """What the catalogue knows a line by, or None for a line that holds a signal's literal: never noise."""
        key = self.message_key(line)
        return None if self.guarded(key) or any(word in key for word in SIGNAL_2024) else key

    def message_key(self, line: bytes) -> bytes:
        """A line's message without stamp and level (2024's formats: `function: msg`)."""
        line = line.rstrip(b"\r\n")
        record: Any = None
        if line.startswith(b"{"):
            try:
                record = bounded_json.loads(line, bounded_json.MAX_LINE_BYTES)
            except ValueError:  # not JSON, or past the bounds (TooLarge)
                record = None
        if isinstance(record, dict) and isinstance(record.get("function"), str):
            message = record.get("msg", record.get("message"))
            if isinstance(message, str):
                return record["function"].encode() + b": " + message.encode()
        found = TEXT_2024.fullmatch(line) if line[:1] in b"IWEVD \t" and line[:1] else None
        if found is not None:
            return found.group("function") + b": " + found.group("msg")
        stamp = STAMP.match(line)
        at = stamp.end() if stamp is not None else 0
        head = LEVEL.match(line, at)
        return line[head.end() if head is not None else at :].lstrip(b"\r")

    def _key_2024(self, function: str, msg: str) -> bytes | None:
        text = msg.encode()
        if self.guarded(text) or any(word in text for word in SIGNAL_2024):
            return None
        return function.encode() + b": " + text

    def guarded(self, message: bytes) -> bool:
        """Whether a line no pattern matched holds a signal pattern's literal: a reworded signal line, never noise."""
        return self.guard.search(message) is not None

    def _json(self, line: bytes) -> Line | str:
        try:
            record = bounded_json.loads(line, bounded_json.MAX_LINE_BYTES)
        except bounded_json.TooLarge:
            return Miss.invalid("json")  # nested or sized past the bound: one invalid line, never a lost batch
        except ValueError:
            return Miss.UNPREFIXED
        if not isinstance(record, dict) or not isinstance(record.get("level"), str):
            return Miss.UNPREFIXED
        message = record.get("msg", record.get("message"))
        function = record.get("function")
        if not isinstance(message, str) or not isinstance(function, str):
            return Miss.UNPREFIXED
        return self._from_2024(record["level"], function, message, record, "json")

    def _from_2024(self, level: str, function: str, msg: str, record: dict[str, Any], form: str) -> Line | str:
        """A 2024 record as a Line; one that is no event and no drift, by its `function: msg` shape, ignored."""
        found = from_2024(level, function, msg, record, form)
        if isinstance(found, Line) and found.kind is None:
            key = self._key_2024(function, msg)
            if key is not None and self.noise.knows(key):
                return Miss.IGNORED
        return found


def _llama_shaped(message: bytes) -> bool:
    """Whether a line with no stamp nor level still has a llama.cpp server line's shape."""
    return message.startswith((b"slot ", b"srv ", b"que ", b"main: ", b"cmn "))


def error_component(message: bytes) -> str:
    """The engine-log component of an error line: load (a model load), slot, or main."""
    if any(word in message[:120] for word in (b"load", b"gguf", b"model")):
        return "load"
    return "slot" if message.startswith(b"slot ") else "main"


def extras(text: bytes) -> dict[str, Any]:
    """The ` | key=value ...` tail of a 2024 text line, each value as its JSON."""
    out: dict[str, Any] = {}
    for key, raw in EXTRA.findall(text):
        try:
            out[key.decode()] = bounded_json.loads(raw, bounded_json.MAX_LINE_BYTES)
        except ValueError:  # not JSON, or past the bounds (TooLarge): kept as text
            out[key.decode()] = raw.decode("utf-8", "replace")
    return out


def _int(record: dict[str, Any], key: str) -> int | None:
    value = record.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and abs(value) <= 2**53 else None


def _num(record: dict[str, Any], key: str) -> float | None:
    value = record.get(key)
    return (
        float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= 2**53
        else None
    )


LEVELS_2024 = {"INFO": "I", "WARN": "W", "WARNING": "W", "ERR": "E", "ERROR": "E", "VERB": "D", "DEBUG": "D"}


def _tasked_2024(record: dict[str, Any]) -> dict[str, Any] | None:
    """The slot and task a 2024 record names ({"slot": ..., "task": ...}), None unless it names both."""
    slot = _int(record, "id_slot") if "id_slot" in record else _int(record, "slot_id")  # slot_id, task_id: early 2024
    task = _int(record, "id_task") if "id_task" in record else _int(record, "task_id")
    return {"slot": slot, "task": task} if slot is not None and task is not None else None


def from_2024(level: str, function: str, msg: str, record: dict[str, Any], form: str) -> Line | str:
    """A 2024 server_log record (JSON, or text with its extras) as a Line of the same kinds as the later formats."""
    letter = LEVELS_2024.get(level.strip(), "")
    stamp = _num(record, "timestamp")
    wall = stamp if stamp is not None and stamp > 0 else None
    tasked = _tasked_2024(record)

    def line(kind: str | None, fields: dict[str, Any] | None = None) -> Line:
        return Line(None, letter, kind, fields or {}, wall, form)

    if msg == "slot is processing task" and tasked:
        return line("launch", tasked)
    if msg == "slot released" and tasked and _int(record, "n_past") is not None:
        return line(
            "release", {**tasked, "n_tokens": record["n_past"], "truncated": int(bool(record.get("truncated")))}
        )
    timing = TIMING_2024.match(msg.strip())
    if timing is not None and tasked:
        return _timing_2024(timing, record, tasked, line)
    if msg == "task error" and _int(record, "id_task") is not None:
        return line("task_error", {"task": record["id_task"], "message": str(record.get("error", ""))[:400]})
    if msg == "build info" and _int(record, "build") is not None:
        return line("build", {"number": record["build"], "commit": str(record.get("commit", ""))[:40]})
    if msg == "model loaded":
        return line("ready", {"address": ""})
    if msg == "initializing slots" and _int(record, "n_slots") is not None:
        return line("slots_config", {"slots": record["n_slots"]})
    if msg == "slot context shift" and tasked:
        return line(
            "context_shift",
            {**tasked, **{k: record[k] for k in ("n_keep", "n_left", "n_discard") if _int(record, k) is not None}},
        )
    if letter == "E":
        return line("error", {"component": error_component(msg.encode()), "message": msg[:240]})
    return line(None)


def _timing_2024(found: re.Match[str], record: dict[str, Any], tasked: dict[str, Any], line: Any) -> Line:
    """A 2024 print_timings record: the extras' exact numbers where present, the message's otherwise."""
    which = found.group("which")
    ms = float(found.group("ms"))
    tokens = int(found.group("tokens")) if found.group("tokens") else None
    if which == "prompt eval":
        ms = _num(record, "t_prompt_processing") or ms
        tokens = (
            _int(record, "n_prompt_tokens_processed")
            if _int(record, "n_prompt_tokens_processed") is not None
            else tokens
        )
        return line("timing_prompt", {**tasked, "ms": ms, "tokens": tokens or 0})
    if which == "total":
        return line("timing_total", {**tasked, "ms": _num(record, "t_total") or ms, "tokens": tokens or 0})
    tps = _num(record, "n_tokens_second")
    if tps is None and found.group("tps") and found.group("tps")[0].isdigit():
        tps = float(found.group("tps"))
    tokens = _int(record, "n_decoded") if _int(record, "n_decoded") is not None else tokens
    return line(
        "timing_eval",
        {
            **tasked,
            "ms": _num(record, "t_token_generation") or ms,
            "tokens": tokens or 0,
            "tps": tps if tps is not None else 0.0,
        },
    )
