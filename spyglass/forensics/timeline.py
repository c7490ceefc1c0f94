"""`spyglass timeline`: every source's events of a window, merged in time order, both clocks.

Besides the stored events, one row for each build change (`build_changed`) and each model change
(`model_changed`) between consecutive starts of an instance, from the change list
(spyglass.forensics.changes), at the start that brought it: the timeline says what a start changed
even when the start before it is outside the window. The SQL is built here (pure), and so are the
change rows; spyglass.forensics.commands runs and prints them.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from collectors.trace_ids import trace_id_for
from spyglass.forensics.run import Query, Window

COLUMNS = "ts_utc, ts_beijing, source, instance, kind, request_id, fields::VARCHAR AS fields"
# The cache lines of the request's conversation carry no request id; they belong on its timeline.
CONVERSATION = """(source_kind = 'engine_log' AND kind IN ('restore', 'park', 'evict')
      AND fields->>'conv' IN (SELECT fields->>'conv' FROM ev WHERE request_id = $request AND kind = 'queued')
      AND ts_utc BETWEEN (SELECT min(ts) FROM ev WHERE request_id = $request)
                     AND (SELECT max(ts) + INTERVAL 1 SECOND FROM ev WHERE request_id = $request))"""


def timeline_query(window: Window, sources: Sequence[str] = (), instances: Sequence[str] = (), kinds: Sequence[str] = (),
                   request: str | None = None, limit: int = 1000) -> Query:
    """Events in [from, to), filtered; one row more than `limit`, so truncation can be told."""
    params: dict[str, Any] = {**window.params(), "limit": limit + 1}
    where = []
    for column, values in (("source", sources), ("instance", instances), ("kind", kinds)):
        if values:
            names = [f"${column}_{i}" for i in range(len(values))]
            params.update({n[1:]: v for n, v in zip(names, values)})
            where.append(f"{column} IN ({', '.join(names)})")
    if request:
        params.update(request=request, trace=format(trace_id_for(request), "032x"))
        where.append(f"(request_id = $request OR (kind = 'span' AND fields->>'trace_id' = $trace)\n   OR {CONVERSATION})")
    condition = f"\nWHERE {' AND '.join(where)}" if where else ""
    return Query(f"SELECT {COLUMNS}\nFROM timeline{condition}\nORDER BY ts_utc, seq\nLIMIT $limit", params)


CHANGE_KINDS = {"build_changed": ("build", "version", "build_name"),
                "model_changed": ("model_md5", "model_real", "model_path", "model_bytes")}


def starts_query(window: Window) -> Query:
    """How many engine starts [from, to) holds. Only a start brings change rows, and the deploy records
    they come from cost a pass over every start and its context (about 1 s on 10M events), so a
    window without a start (the usual 15 minutes) skips them for this count (zonemaps on ts)."""
    return Query("SELECT count(*) FROM ev WHERE source_kind = 'engine_log' AND kind = 'start'"
                 " AND ts >= $from AND ts < $to", window.params())


def wants_changes(sources: Sequence[str], kinds: Sequence[str], request: str | None) -> bool:
    """Whether the filters can match a change row (a request's timeline has none)."""
    return not request and (not kinds or any(k in CHANGE_KINDS for k in kinds))


def change_rows(records: Sequence[Any], window: Window, sources: Sequence[str] = (), instances: Sequence[str] = (),
                kinds: Sequence[str] = ()) -> list[tuple[Any, ...]]:
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
        if (instances and c.instance not in instances) or (kinds and kind not in kinds) \
                or (sources and source not in sources):
            continue
        row = grouped.setdefault((c.instance, c.deploy, kind), {"at": c.at, "source": source, "fields": {
            "deploy": c.deploy}})
        row["fields"][c.change] = {"before": c.before, "after": c.after}
    return [(g["at"], g["at"], g["source"], instance, kind, None, json.dumps(g["fields"]))
            for (instance, _, kind), g in sorted(grouped.items(), key=lambda kv: kv[1]["at"])]


def instant(value: Any) -> datetime:
    """A ts_utc as read from the file (datetime) or through the agent's API (ISO text)."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else value


def merged(rows: list[tuple[Any, ...]], extra: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Events and change rows in time order (a change row after the events of its instant). Cut at the
    timeline's limit, the merge stays right: every event not fetched is later than the last one fetched."""
    return sorted([*rows, *extra], key=lambda r: instant(r[0]))
