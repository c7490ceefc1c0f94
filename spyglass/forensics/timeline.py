"""`spyglass timeline`: every source's events of a window, merged in time order, both clocks.

Besides the stored events, one row for each build change (`build_changed`) and each model change
(`model_changed`) between consecutive starts of an instance, from the change list
(spyglass.forensics.changes), at the start that brought it: the timeline says what a start changed
even when the start before it is outside the window. The SQL is built here (pure), and so are the
change rows; spyglass.cli.forensics_commands runs and prints them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from spyglass.collectors.clock import display_zone, offset_note, zone_label
from spyglass.collectors.trace_ids import trace_id_for
from spyglass.forensics.run import Query, Window

COLUMNS = "ts_utc, ts_local, source, instance, kind, request_id, fields::VARCHAR AS fields"
# The cache lines of the request's conversation carry no request id; they belong on its timeline.
CONVERSATION = """(source_kind = 'engine_log' AND kind IN ('restore', 'park', 'evict')
      AND seq IN (SELECT seq FROM ev_engine_log WHERE kind IN ('restore', 'park', 'evict') AND conv IN
                  (SELECT conv FROM ev_engine_log WHERE request_id = $request AND kind = 'queued'))
      AND ts_utc BETWEEN (SELECT min(ts) FROM ev WHERE request_id = $request)
                     AND (SELECT max(ts) + INTERVAL 1 SECOND FROM ev WHERE request_id = $request))"""


# A status poll (llama-server's each second by default) mostly repeats the one before it: the timeline shows a
# poll where what it says changed from the source's previous poll (and the window's first), not a row a second.
# Source kind -> the kind of its polls, and the typed columns whose change is news.
POLLS = {
    "llama_server": ("llama_status", "health, build"),
    "serve_status": ("status", "state, build, serve_version"),
    "supervisord_rpc": ("process_info", "statename, pid"),
    "host": ("process", "pid, cpus"),
}


def repeated_polls(source_kinds: Sequence[str]) -> str:
    """The seqs of the window's polls (of these source kinds) that say what their source's previous poll said."""
    selects = [
        f"SELECT seq, row({columns}) IS NOT DISTINCT FROM lag(row({columns})) OVER"
        f" (PARTITION BY source, instance ORDER BY ts, seq) AS same\n"
        f"    FROM ev_{source_kind} WHERE kind = '{kind}' AND ts >= $from AND ts < $to"
        for source_kind, (kind, columns) in POLLS.items()
        if source_kind in source_kinds
    ]
    return "SELECT seq FROM (" + "\n    UNION ALL ".join(selects) + ") WHERE same"


@dataclass(frozen=True)
class Filters:
    """What a timeline keeps: sources, instances, kinds (empty: all), kinds left out, texts every kept event
    contains (in its source, instance, kind, request id or fields: LogQL's `|=`, case-sensitive), a request;
    and `polls`, the source kinds whose polls are kept only where they changed (POLLS), unless `kinds` names
    the poll's kind or the timeline is a request's."""

    sources: Sequence[str] = ()
    instances: Sequence[str] = ()
    kinds: Sequence[str] = ()
    exclude_kinds: Sequence[str] = ()
    contains: Sequence[str] = ()
    request: str | None = None
    polls: Sequence[str] = ()

    def thinned_polls(self) -> list[str]:
        """The source kinds whose repeated polls this timeline leaves out."""
        if self.request:
            return []
        return [sk for sk in self.polls if sk in POLLS and POLLS[sk][0] not in self.kinds]

    def keeps(self, source: str | None, instance: str | None, kind: str, text: str) -> bool:
        """Whether a row made outside SQL (a change row) passes the same filters."""
        return (
            (not self.sources or source in self.sources)
            and (not self.instances or instance in self.instances)
            and (not self.kinds or kind in self.kinds)
            and kind not in self.exclude_kinds
            and all(t in text for t in self.contains)
        )


SEARCHED = "concat_ws(' ', source, instance, kind, request_id, fields::VARCHAR)"


def where(window: Window, f: Filters) -> tuple[str, dict[str, Any]]:
    """The WHERE clause (or "") and its parameters for `f` over the timeline view."""
    params: dict[str, Any] = dict(window.params())
    conditions = []
    for column, values, negate in (
        ("source", f.sources, ""),
        ("instance", f.instances, ""),
        ("kind", f.kinds, ""),
        ("kind", f.exclude_kinds, "NOT "),
    ):
        if values:
            prefix = f"{'not_' if negate else ''}{column}"
            names = [f"${prefix}_{i}" for i in range(len(values))]
            params.update({n[1:]: v for n, v in zip(names, values)})
            conditions.append(f"{column} {negate}IN ({', '.join(names)})")
    for i, text in enumerate(f.contains):
        params[f"contains_{i}"] = text
        conditions.append(f"strpos({SEARCHED}, $contains_{i}) > 0")
    if f.request:
        params.update(request=f.request, trace=format(trace_id_for(f.request), "032x"))
        conditions.append(
            f"(request_id = $request OR seq IN (SELECT seq FROM ev_otlp WHERE trace_id = $trace)\n   OR {CONVERSATION})"
        )
    if thinned := f.thinned_polls():
        conditions.append(f"seq NOT IN ({repeated_polls(thinned)})")
    return (f"\nWHERE {' AND '.join(conditions)}" if conditions else ""), params


def timeline_query(window: Window, f: Filters = Filters(), limit: int = 1000) -> Query:
    """Events in [from, to), filtered; one row more than `limit`, so truncation can be told."""
    condition, params = where(window, f)
    return Query(
        f"SELECT {COLUMNS}\nFROM timeline{condition}\nORDER BY ts_utc, seq\nLIMIT $limit",
        {**params, "limit": limit + 1},
    )


def count_query(window: Window, f: Filters = Filters()) -> Query:
    """How many events the timeline holds for `f`: the header says "the first 1,000 of 11,894"."""
    condition, params = where(window, f)
    return Query(f"SELECT count(*) FROM timeline{condition}", params)


CHANGE_KINDS = {
    "build_changed": ("build", "version", "build_name"),
    "model_changed": ("model_md5", "model_real", "model_path", "model_bytes"),
}


def starts_query(window: Window) -> Query:
    """How many engine starts [from, to) holds. Only a start brings change rows, and the deploy records
    they come from cost a pass over every start and its context (about 1 s on 10M events), so a
    window without a start (the usual 15 minutes) skips them for this count (zonemaps on ts)."""
    return Query(
        "SELECT count(*) FROM ev WHERE source_kind = 'engine_log' AND kind = 'start' AND ts >= $from AND ts < $to",
        window.params(),
    )


def wants_changes(sources: Sequence[str], kinds: Sequence[str], request: str | None) -> bool:
    """Whether the filters can match a change row (a request's timeline has none)."""
    return not request and (not kinds or any(k in CHANGE_KINDS for k in kinds))


def change_rows(
    records: Sequence[Any],
    window: Window,
    sources: Sequence[str] = (),
    instances: Sequence[str] = (),
    kinds: Sequence[str] = (),
) -> list[tuple[Any, ...]]:
    """Rows in the timeline's columns, one per start and kind of change, for the changes in [from, to):
    fields hold the deploy number and each changed key's before and after."""
    from spyglass.forensics.changes import change_list

    source_of = {(d.instance, d.n): d.get("source") for d in records}
    grouped: dict[tuple[str, int, str], dict[str, Any]] = {}
    for c in change_list(list(records)):
        kind = next((k for k, keys in CHANGE_KINDS.items() if c.change in keys), None)
        if kind is None or (window.start and c.at < window.start) or (window.end and c.at >= window.end):
            continue
        source = source_of.get((c.instance, c.deploy))
        if (
            (instances and c.instance not in instances)
            or (kinds and kind not in kinds)
            or (sources and source not in sources)
        ):
            continue
        row = grouped.setdefault(
            (c.instance, c.deploy, kind), {"at": c.at, "source": source, "fields": {"deploy": c.deploy}}
        )
        row["fields"][c.change] = {"before": c.before, "after": c.after}
    return [
        (g["at"], g["at"], g["source"], instance, kind, None, json.dumps(g["fields"]))
        for (instance, _, kind), g in sorted(grouped.items(), key=lambda kv: kv[1]["at"])
    ]


def instant(value: Any) -> datetime:
    """A ts_utc as read from the file (datetime) or through the agent's API (ISO text)."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else value


def merged(rows: list[tuple[Any, ...]], extra: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Events and change rows in time order (a change row after the events of its instant). Cut at the
    timeline's limit, the merge stays right: every event not fetched is later than the last one fetched."""
    return sorted([*rows, *extra], key=lambda r: instant(r[0]))


# --- one line an event (the table format) ------------------------------------------------------

INSTANT_KEYS = ("start", "end")  # a span's start and end: epoch seconds, shown as times
PLAIN_VALUE = re.compile(r"^[^\s=\"]+$")


def value_text(key: str, value: Any) -> str:
    """A field's value as logfmt writes it: bare when it can be, else quoted; an epoch instant as a time."""
    if isinstance(value, bool) or value is None:
        return str(value).lower() if value is not None else "null"
    if isinstance(value, float) and key in INSTANT_KEYS and 946_684_800 <= value < 4_102_444_800:  # 2000-2100
        return datetime.fromtimestamp(value, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(value, float):
        return (
            str(int(value))
            if value.is_integer() and abs(value) < 1e15
            else f"{value:.6g}"
            if abs(value) < 1e6
            else f"{value:.0f}"
        )
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    text = str(value)
    return text if PLAIN_VALUE.match(text) else json.dumps(text, ensure_ascii=False)


def field_parts(fields: Any, request_id: str | None) -> list[str]:
    """`req=ID`, `key=value`, ...: an event's fields in their stored order (a field that only repeats the
    request id left out)."""
    parts = [f"req={request_id}"] if request_id else []
    if isinstance(fields, dict):
        parts += [
            f"{k}={value_text(k, v)}"
            for k, v in fields.items()
            if v is not None and not (request_id and v == request_id and k in ("req", "id", "request_id"))
        ]
    elif fields is not None:
        parts.append(str(fields))
    return parts


def wrapped(parts: list[str], first: int, indent: int, width: int) -> list[str]:
    """`parts` joined by spaces into lines: the first `first` cells wide, the others `width - indent`; a part
    is never split unless it alone is wider than a line (then it is folded, never cut)."""
    from rich.cells import cell_len, chop_cells

    lines, room = [""], first
    # a value too long for a line (a quoted message) breaks at its own spaces first; only a word longer
    # than a line is folded
    parts = [word for part in parts for word in (part.split(" ") if cell_len(part) > width - indent else [part])]
    for part in parts:
        if lines[-1] and cell_len(lines[-1]) + 1 + cell_len(part) > room:
            lines.append("")
            room = width - indent
        if cell_len(part) > room:
            pieces = chop_cells(part, room)
            lines[-1] += (" " if lines[-1] else "") + pieces[0]
            lines += pieces[1:]
            continue
        lines[-1] += (" " if lines[-1] else "") + part
    return lines


def event_lines(records: Sequence[dict[str, Any]], width: int | None = None) -> list[str]:
    """The header and one line an event: UTC date and time, the display zone's time of day, source, instance,
    kind padded to their widest, then the fields as key=value. Wider than `width` (None: any width, a pipe), the
    display zone's column moves to the header and the fields wrap under themselves, a key=value never cut: a request
    id stays whole to copy into `spyglass trace`. Control characters in the data are shown escaped
    (spyglass.terminal.console.shown)."""
    from rich.cells import cell_len

    rows = event_rows(records)
    head = ("utc", zone_label(display_zone()).lower(), "source", "instance", "kind", ["fields"])
    widths = [max(len(x) for x in column) for column in zip(head, *rows)][:5]
    whole = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + " ".join(row[5]) for row in [head, *rows]
    ]
    if width is None or all(cell_len(line) <= width for line in whole):
        return whole
    return folded_lines(head, rows, widths, width)


def event_rows(records: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Each event's cells: UTC date and time, the display zone's time of day, source, instance, kind, and its
    fields as key=value parts, the data's control characters escaped."""
    from spyglass.terminal.console import shown

    return [
        (
            r["ts_utc"].replace("T", " ").removesuffix("Z"),
            r["ts_local"][11:23],
            shown(r["source"] or ""),
            shown(r["instance"] or ""),
            shown(r["kind"]),
            [shown(p) for p in field_parts(r["fields"], r["request_id"])],
        )
        for r in records
    ]


def folded_lines(head: tuple[Any, ...], rows: list[tuple[Any, ...]], widths: list[int], width: int) -> list[str]:
    """The table at `width`: the display zone's column said in the header (and the date, when every event has
    the same), the fields wrapped beside the columns, or under them when a key=value would not fit beside."""
    from rich.cells import cell_len

    dates = {row[0][:10] for row in rows}
    if len(dates) == 1:  # one day: it moves to the header, the rows keep the time
        rows = [(row[0][11:], *row[1:]) for row in rows]
        head = (f"utc {next(iter(dates))}", *head[1:])
        widths[0] = max(len(head[0]), *(len(row[0]) for row in rows))
    del widths[1]
    indent = sum(widths) + 2 * len(widths)
    # a key=value (a request id) must fit whole beside the columns, else the fields go under them, indented 4
    whole_word = max((cell_len(p) for row in rows for p in row[5] if " " not in p), default=0)
    beside = width - indent >= max(24, whole_word)
    indent = indent if beside else 4
    header = "  ".join(c.ljust(w) for c, w in zip((head[0], *head[2:5]), widths)) + "  fields"
    note = f"({offset_note(display_zone())})"
    lines = [f"{header} {note}"] if cell_len(header) + 1 + len(note) <= width else [note, header]
    for row in rows:
        prefix = "  ".join(cell.ljust(w) for cell, w in zip((row[0], *row[2:5]), widths)) + "  "
        parts = wrapped(row[5], width - indent, indent, width) if row[5] else [""]
        if beside:
            lines.append(prefix + parts[0])
            parts = parts[1:]
        else:
            lines.append(prefix.rstrip())
        lines += [" " * indent + p for p in parts]
    return lines
