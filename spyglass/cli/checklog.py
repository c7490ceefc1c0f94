"""`spyglass check-log FILE`: what spyglass reads in a log, without a store or a config. The first thing to run
on one's own log: the events it recognizes by kind, the build and capture it detected, how it placed the
lines in time, and the shapes of the lines it could not read. And the one line `ingest` and `run` say about
the lines a source could not read."""

from __future__ import annotations

import itertools
import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from spyglass import collectors
from spyglass.collectors.grammar import Miss
from spyglass.collectors.llama_log import MAX_SHAPES

CHUNK = 4096  # lines per batch, as a tailer hands them over
CHUNK_BYTES = 8 << 20  # ... and at most this many bytes of them
SAMPLE = 2000  # lines each preset reads when none is given
SAMPLE_BYTES = 8 << 20  # ... and at most this many bytes of them
MAX_LINE = 1 << 20  # bytes of a line kept, as the agent's default agent.max_line_bytes: the rest is skipped
ANCHORS = {
    "wrapper": "the capture's own clock (journald, syslog, docker) or the 2024 formats' own timestamp",
    "process": "the start time of the running llama-server that writes the file",
    "mtime": "the file's mtime minus the last stamp read (the stamps count from the process start)",
    "next": "placed to end where the next process's lines begin",
}
UNREADABLE = (Miss.UNMATCHED, Miss.UNPREFIXED)


@dataclass
class Reading:
    """What one read of a log found."""

    preset: str
    lines: int = 0
    events: Counter[str] = field(default_factory=Counter)
    misses: Counter[str] = field(default_factory=Counter)
    source: Any = None
    long_lines: int = 0  # lines longer than MAX_LINE, cut to it

    @property
    def unreadable(self) -> int:
        return sum(self.misses[m] for m in UNREADABLE)


def lines_of(file: IO[bytes], reading: Reading | None = None) -> Iterator[bytes]:
    """The file's lines, each cut to MAX_LINE bytes (the rest of a longer one is read past, never held: a 2 GB
    file with no newline is read in 1 MiB pieces), as the agent's tailer cuts them; counted in `reading`."""
    while line := file.readline(MAX_LINE):
        if len(line) == MAX_LINE and not line.endswith(b"\n"):
            while (rest := file.readline(MAX_LINE)) and not rest.endswith(b"\n"):
                pass
            if reading is not None:
                reading.long_lines += 1
        yield line


def batches(lines: Iterator[bytes], most: int, most_bytes: int) -> Iterator[list[bytes]]:
    """`lines` in batches of at most `most` lines and about `most_bytes` bytes."""
    batch: list[bytes] = []
    size = 0
    for line in lines:
        batch.append(line)
        size += len(line)
        if len(batch) == most or size >= most_bytes:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def reader(path: Path, preset: str, tz: str, shapes: int | None = MAX_SHAPES) -> Reading:
    """A Reading whose source is the engine log's `preset`, as the agent would build it for `path`, keeping at
    most `shapes` shapes of unread lines (None: every one)."""
    from spyglass.collectors.engine_log import EngineLogOptions

    options = EngineLogOptions(path=path, preset=preset, tz=tz, instance="check-log", columnar="never")
    source: Any = collectors.load_all()["engine_log"].build_tailed("check-log", options)
    if hasattr(source, "writer_of"):
        source.writer_of = lambda log, now: None  # a file, not a running process: placed by its own times
        source.max_shapes = shapes
    return Reading(preset, source=source)


def read_log(
    path: Path, preset: str, tz: str = "UTC", limit: int | None = None, shapes: int | None = MAX_SHAPES
) -> Reading:
    """`path` read whole (or its first `limit` lines) by the engine log's `preset`, as the agent would: in
    one pass, in bounded memory, keeping at most `shapes` shapes of unread lines (None: every one)."""
    with open(path, "rb") as file:
        return read_rest(reader(path, preset, tz, shapes), file, os.fstat(file.fileno()).st_mtime, [], limit)


def read_rest(reading: Reading, file: IO[bytes], mtime: float, head: list[bytes], limit: int | None = None) -> Reading:
    """`head` (lines already read from `file`), then the rest of `file` (up to `limit` lines in all), fed."""
    lines = lines_of(file, reading)
    if limit is not None:
        lines = itertools.islice(lines, max(0, limit - len(head)))
    for batch in batches(_chain(head, lines), CHUNK, CHUNK_BYTES):
        reading.lines += len(batch)
        _feed(reading, batch, mtime)
    return reading


def _chain(head: list[bytes], rest: Iterator[bytes]) -> Iterator[bytes]:
    yield from head
    yield from rest


def _feed(reading: Reading, batch: list[bytes], mtime: float) -> None:
    reading.source.file_mtime(mtime)
    events, misses, _ = reading.source.handle_lines(batch)
    reading.events.update(e.kind for e in events if e.kind != "unread")
    reading.misses.update({k: v for k, v in misses.items() if v})


def choose_preset(path: Path, tz: str) -> tuple[str, str]:
    """The preset that reads more of the file's first lines, and why."""
    with open(path, "rb") as file:
        return _choose(head_of(file), path, os.fstat(file.fileno()).st_mtime, tz)


def head_of(file: IO[bytes], reading: Reading | None = None) -> list[bytes]:
    """The first SAMPLE lines of `file`, at most SAMPLE_BYTES of them (each cut to MAX_LINE)."""
    head: list[bytes] = []
    size = 0
    for line in lines_of(file, reading):
        head.append(line)
        size += len(line)
        if len(head) == SAMPLE or size >= SAMPLE_BYTES:
            break
    return head


def _choose(head: list[bytes], path: Path, mtime: float, tz: str) -> tuple[str, str]:
    """The preset that reads more of `head` (the file's first lines, read once), and why."""
    shares = {}
    presets = collectors.preset_names("engine_log")
    for preset in presets:
        sample = reader(path, preset, tz)
        for batch in batches(iter(head), CHUNK, CHUNK_BYTES):
            sample.lines += len(batch)
            _feed(sample, batch, mtime)
        shares[preset] = 1 - sample.unreadable / sample.lines if sample.lines else 0.0
    best = max(presets, key=lambda p: shares[p])
    return best, ", ".join(f"{p} reads {shares[p]:.0%}" for p in presets) + f" of the first {len(head):,} lines"


def read_file(path: Path, preset: str | None, tz: str) -> tuple[Reading, str]:
    """`path` read once, start to end: without a preset, its first SAMPLE lines (at most SAMPLE_BYTES) choose
    one and are then read by it with the rest. The reading, and why its preset."""
    with open(path, "rb") as file:
        mtime = os.fstat(file.fileno()).st_mtime
        if preset is not None:
            return read_rest(reader(path, preset, tz), file, mtime, []), "as given"
        long_lines = Reading("")
        head = head_of(file, long_lines)
        chosen, why = _choose(head, path, mtime, tz)
        reading = reader(path, chosen, tz)
        reading.long_lines = long_lines.long_lines
        return read_rest(reading, file, mtime, head), why


def report(
    path: Path, preset: str | None, tz: str = "UTC", top: int = 8, url: str | None = None
) -> tuple[str, Reading]:
    """The check-log report of `path`, and the reading it describes; with `url`, what the llama-server there
    answers on each endpoint the agent polls, and the fix for each one switched off."""
    reading, why = read_file(path, preset, tz)
    preset = reading.preset
    src = reading.source
    out = [f"{path}: {reading.lines:,} lines, read with preset {preset} ({why})"]
    captures: Counter[str] = Counter(getattr(src, "captures", None) or {})
    if captures:
        out.append("capture:     " + ", ".join(f"{name} ({n:,} lines)" for name, n in captures.most_common()))
    forms: Counter[str] = Counter(getattr(src, "forms", None) or {})
    if forms:
        names = {"common": "common/log.cpp's (late 2024 on)", "text": "2024 text", "json": "2024 JSON"}
        out.append("format:      " + ", ".join(f"{names.get(f, f)} ({n:,} lines)" for f, n in forms.most_common()))
    if preset == "llama_server":
        builds = sorted(set(getattr(src, "builds", [])))
        out.append(
            "build:       "
            + (", ".join(builds) if builds else "not named in the log (the poller reads it from /props)")
        )
        anchors = Counter(getattr(src, "anchors", []))
        out.append(
            "time anchor: "
            + (
                "; ".join(f"{a}: {ANCHORS.get(a, a)} ({n} process{'es' * (n > 1)})" for a, n in anchors.most_common())
                or "none: no line of llama-server's"
            )
        )
    kinds = ", ".join(f"{kind} {n:,}" for kind, n in sorted(reading.events.items(), key=lambda kv: (-kv[1], kv[0])))
    out.append(f"events:      {kinds or 'none'}")
    share = reading.unreadable / reading.lines if reading.lines else 0.0
    known = reading.misses[Miss.IGNORED] + reading.misses["joined"]
    out.append(
        f"lines:       {reading.unreadable:,} unreadable ({share:.0%}); {known:,} known (no event of their own);"
        f" {sum(v for k, v in reading.misses.items() if k.startswith('invalid')):,} invalid"
        + (f"; {reading.long_lines:,} longer than {MAX_LINE >> 20} MiB, cut to it" if reading.long_lines else "")
    )
    shapes: Counter[str] = Counter(getattr(src, "shapes", None) or {})
    if shapes:
        out.append(
            "unread shapes (as collectors/llama_shapes.py writes them; `--catalogue WHERE` prints them as a group):"
            if preset == "llama_server"
            else "unreadable shapes (digits as 9):"
        )
        out += [f"  {n:>7,}  {shape}" for shape, n in shapes.most_common(top)]
    if url:
        out.append("endpoints:   " + endpoints(url))
    out.append("next:        " + advice(preset, share, reading))
    return "\n".join(out), reading


def endpoints(url: str) -> str:
    """One poll of the llama-server at `url`, as the agent's llama_server source makes it: each endpoint's
    answer, and the fix for one switched off (`/metrics` answers 501 without --metrics)."""
    from spyglass.collectors.llama_server import ENDPOINTS, LlamaServerOptions, LlamaServerSource, fix_for

    source = LlamaServerSource("check-log", LlamaServerOptions(url=url))
    try:
        event = source.poll(time.time()).events[0]
    finally:
        source.close()
    if event.kind == "poll_error":
        return f"{url}/health: no answer ({event.fields.get('error')}): is llama-server running there?"
    health = event.fields.get("health")
    if health != "ok":
        return f"{url}/health answers {health}: the others are read once it is ok"
    off = event.fields.get("unavailable") or {}
    said = [
        f"/{e} {'ok' if e not in off else off[e].replace('_', ' ').upper() + ': ' + fix_for(e, off[e])}"
        for e in ENDPOINTS
    ]
    return "; ".join(["/health ok", *said])


def advice(preset: str, share: float, reading: Reading) -> str:
    if reading.lines == 0:
        return "the file is empty: point llama-server's --log-file (or the capture) at it and run again"
    if share > 0.5:
        return (
            "most lines have no shape spyglass knows: try the other --preset, check the capture, or add"
            " [sources.NAME.patterns] for them (docs/config.md); the drift alarm SpyglassSourceUnreadable"
            " would fire on this log. check-log reads engine logs (llama-server, Strata's engine): a gateway,"
            " supervisord or switch log is a source of its own kind (docs/config.md)"
        )
    if not reading.events:
        return "no event: is this the server's log (not its stdout of another program)?"
    guide = "docs/llama-server.md" if preset == "llama_server" else "docs/config.md"
    return (
        f'configure it as [sources.NAME] kind = "engine_log", preset = "{preset}", path = ... and run'
        f" `spyglass ingest --config FILE` ({guide})"
    )


def unread_summary(pipeline: Any, before: dict[str, tuple[dict[str, int], int]] | None = None) -> str | None:
    """One line naming the sources with lines they could not read (since `before`: each source's outcomes
    and lines read then; else as restored from the state file), the most first, and what to run next; None
    when every line was read."""
    found: list[tuple[int, int | None, Any]] = []
    for rt in pipeline.tailed_sources():
        then, lines = (before or {}).get(rt.name, ({}, 0))
        unread = sum(rt.outcomes.get(m, 0) - then.get(m, 0) for m in UNREADABLE)
        total = rt.tailer.stats.lines - lines if before is not None else None  # restored: events, not lines
        if unread > 0:
            found.append((unread, total, rt))
    if not found:
        return None
    found.sort(key=lambda item: -item[0])
    parts = [
        f"{unread:,} {'' if total is None else f'of {total:,} '}lines of sources.{rt.name}"
        for unread, total, rt in found
    ]
    options = pipeline.config.sources[found[0][2].name]
    preset = getattr(options, "preset", None)
    hint = f"spyglass check-log {options.path}" + (f" --preset {preset}" if preset else "")
    return f"could not read {'; '.join(parts)}: run `{hint}` to see their shapes"


def catalogue_group(path: Path, where: str, tz: str = "UTC") -> str:
    """The shapes of `path`'s lines that are neither read nor known, as a group of collectors/llama_shapes.py
    named `where` (a recorded build and mode, or a public log's URL), for review before it is pasted in. A
    line that holds a signal pattern's literal, or a wording that is to become a signal, is left out: a
    reworded signal is drift, never noise."""
    from spyglass.collectors.llama_noise import RESERVED, SIGNAL_MARK

    reading = read_log(path, "llama_server", tz, shapes=None)
    found = sorted(
        entry
        for entry in reading.source.shapes
        if entry.strip() and not entry.startswith(SIGNAL_MARK) and not any(word in entry for word in RESERVED)
    )
    body = "".join(f"        {entry!r},\n" for entry in found)
    return f"    {where!r}: (\n{body}    ),"
