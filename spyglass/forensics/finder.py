"""`spyglass requests`: find the request ids that `spyglass trace` and `timeline --request` take.

Filters become SQL over the `requests` view (pure); `--status 4xx` is a class, `429` one status.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from spyglass.forensics.run import Query, Window

COLUMNS = (
    "request_id, ts_utc, ts_local, lane, session, mode, instance, outcome, error_reason, status, finish, tokens,"
    " tokens_gateway_estimate, tool_calls, content_chars, ttft_ms_gateway, dur_ms_gateway, queue_ms_engine,"
    " ttft_ms_engine, client_wait_ms_engine, dur_ms_engine, seen_by"
)
OUTCOMES = ("done", "truncated", "cancelled", "error", "open")
STATUS = re.compile(r"^([1-5])(xx|\d\d)$")


@dataclass(frozen=True)
class Filters:
    session: str | None = None
    lane: str | None = None
    instance: str | None = None
    mode: str | None = None
    finish: str | None = None
    status: str | None = None  # 4xx, 429, 200
    outcome: str | None = None  # done, truncated, cancelled, error, open
    slowest: int | None = None
    limit: int = 200


def status_condition(status: str, params: dict[str, Any]) -> str:
    found = STATUS.match(status.lower())
    if not found:
        raise ValueError(f"--status: expected a status such as 429 or a class such as 4xx (got {status!r})")
    if found.group(2) == "xx":
        params["status_class"] = int(found.group(1))
        return "status // 100 = $status_class"
    params["status"] = int(status)
    return "status = $status"


def requests_query(window: Window, filters: Filters) -> Query:
    params: dict[str, Any] = window.params()
    where = []
    for column in ("session", "lane", "instance", "mode", "finish"):
        value = getattr(filters, column)
        if value:
            params[column] = value
            where.append(f"{column} = ${column}")
    if filters.status:
        where.append(status_condition(filters.status, params))
    if filters.outcome:
        if filters.outcome not in OUTCOMES:
            raise ValueError(f"--outcome: one of {', '.join(OUTCOMES)} (got {filters.outcome!r})")
        params["outcome"] = filters.outcome
        where.append("outcome = $outcome")
    order = "ts_utc, request_id"
    if filters.slowest:
        order = "coalesce(dur_ms_gateway, dur_ms_engine) DESC NULLS LAST, ts_utc"
        where.append("coalesce(dur_ms_gateway, dur_ms_engine) IS NOT NULL")
    params["limit"] = filters.slowest or filters.limit
    condition = f"\nWHERE {' AND '.join(where)}" if where else ""
    # `matched`: how many rows match before the limit, for the "N more" line (the command drops the column)
    return Query(
        f"SELECT {COLUMNS}, count(*) OVER () AS matched\nFROM requests{condition}\nORDER BY {order}\nLIMIT $limit",
        params,
    )


def with_values(records: list[dict[str, Any]], keep: tuple[str, ...] = ("request_id",)) -> list[dict[str, Any]]:
    """The records without the columns that have no value in any of them (a llama instance has no gateway,
    no session, no mode): a table shows what the instances in view have."""
    shown = [c for c in (records[0] if records else {}) if c in keep or any(r.get(c) is not None for r in records)]
    return [{c: r.get(c) for c in shown} for r in records]


def clock_note(records: list[dict[str, Any]]) -> str | None:
    """A note when the rows mix two clocks: a request whose engine-logged TTFT is longer than its engine
    duration, which is measured between the log's timestamps. The logged durations (ttft_ms_gateway,
    dur_ms_gateway, ttft_ms_engine) then run on another clock than the timestamps (the demo's emulated
    engines log model time, 200x the wall clock), and the table says so instead of showing the contradiction
    unlabelled. The same test as `spyglass trace`'s; None when the clocks agree."""
    for r in records:
        ttft, dur = r.get("ttft_ms_engine"), r.get("dur_ms_engine")
        if isinstance(ttft, (int, float)) and isinstance(dur, (int, float)) and ttft > 1.5 * dur + 50:
            return (
                f"clock: ttft_ms_* and dur_ms_gateway are durations as logged, dur_ms_engine is measured between"
                f" the engine log's timestamps, and they disagree ({r.get('request_id')}: ttft_ms_engine {ttft:,}"
                f" > dur_ms_engine {dur:,}): the logged durations run on another clock than the timestamps"
                " (the demo's emulated engines log model time)"
            )
    return None
