"""`spyglass timeline`: every source's events of a window, merged in time order, both clocks.

The SQL is built here (pure); spyglass.forensics.commands runs and prints it.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.instrument import trace_id_for
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
