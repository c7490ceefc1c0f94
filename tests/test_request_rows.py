"""The per-request rows maintained at ingest (exporters/request_rows.py) equal what the views computed
from the events before them: every request's events grouped at once, the restore found with an ASOF
join, whatever batches the events were committed in and in whatever order their times come."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from unittest.mock import patch

import duckdb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spyglass.collectors.event import Event
from spyglass.exporters import store as store_module
from spyglass.exporters.event_schema import quoted, source_view
from spyglass.exporters.request_rows import from_events_sql, row_tables
from spyglass.exporters.store import DuckDBStore

SOURCES = {"engine-a": "engine_log", "engine-b": "engine_log", "gateway": "gateway_log", "infer": "infer_store"}
T0 = 1_792_380_000.0


def rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple]:
    return sorted(con.execute(sql).fetchall(), key=repr)


def as_the_views_had_them(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple]]:
    """Each row table's rows computed from every stored event in one pass (the ASOF join for the origin)."""
    out = {}
    for name, table in row_tables().items():
        columns = ", ".join(quoted(c[0]) for c in con.execute(f"DESCRIBE {quoted(name)}").fetchall())
        out[name] = rows(con, f"SELECT {columns} FROM ({from_events_sql(table, source_view(table.source_kind))})")
    return out


def maintained(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple]]:
    return {name: rows(con, f"SELECT * FROM {quoted(name)}") for name in row_tables()}


def engine_task(draw: st.DrawFn, at: list[float], request_id: str | None) -> list[Event]:
    source = draw(st.sampled_from(["engine-a", "engine-b"]))
    instance = {"engine-a": "strata-a", "engine-b": "strata-b"}[source]
    task, conv = draw(st.integers(0, 3)), draw(st.sampled_from(["c1", "c2", None]))
    kinds = draw(
        st.lists(
            st.sampled_from(["queued", "restore", "prompt", "thinking", "tool_call", "done", "rejected"]),
            min_size=1,
            max_size=6,
        )
    )
    out = []
    for kind in kinds:
        fields: dict = {"task": task}
        if kind == "queued":
            fields.update(conv=conv, prefill_depth=draw(st.integers(0, 3)))
        elif kind == "restore":
            fields = {"conv": conv or "c1", "origin": draw(st.sampled_from(["parked", "checkpoint"])), "tokens": 5}
        elif kind == "prompt":
            fields.update(
                prompt=draw(st.integers(1, 9)), reused=draw(st.integers(0, 9)), read=3, ms=draw(st.integers(1, 99))
            )
        elif kind == "thinking":
            fields.update(tokens=draw(st.integers(0, 9)), max=32000, cause=draw(st.sampled_from(["stop", "budget"])))
        elif kind == "done":
            fields.update(
                finish=draw(st.sampled_from(["stop", "length"])),
                completion=draw(st.integers(1, 9)),
                ttft_ms=draw(st.integers(1, 999)),
                decode_tps=draw(st.floats(1, 99)),
            )
        elif kind == "rejected":
            fields.update(status=400, code=545, prompt=draw(st.integers(1, 9)), window=8)
        rid = None if kind == "restore" or (kind == "rejected" and draw(st.booleans())) else request_id
        out.append(Event(at.pop(), source, kind, instance, fields, rid, "h1"))
    return out


def layer_events(draw: st.DrawFn, at: list[float], request_id: str) -> list[Event]:
    """Gateway and infer-store events of one request."""
    out = []
    for kind in draw(
        st.lists(
            st.sampled_from(["request", "precheck", "clamp", "done", "overfit", "retry_on_overfit", "reject"]),
            max_size=4,
        )
    ):
        fields = {
            "lane": draw(st.sampled_from(["fast", "normal"])),
            "mode": "assembled",
            "est_tokens": draw(st.integers(1, 9)),
            "client_msgs": 3,
            "sent_msgs": draw(st.integers(1, 3)),
        }
        fields.update(
            {
                "request": {"session": "s1", "chars": 40, "cjk": 0.1, "max_tokens": 100},
                "precheck": {"count_tokens": 7, "window": 8, "room": 1},
                "clamp": {"max_to": 50, "thinking_budget": 9},
                "done": {
                    "status": 200,
                    "engine_prompt": 7,
                    "completion": 3,
                    "finish": "stop",
                    "tool_calls": 0,
                    "content_chars": 9,
                    "ttft_ms": 40,
                    "dur_ms": 90,
                },
                "overfit": {"status": 400, "prompt": 9, "max": 8, "upstream": "#545: 9 > 8"},
                "retry_on_overfit": {"max_from": 100, "max_to": 50},
                "reject": {"status": 429, "reason": "full"},
            }[kind]
        )
        out.append(Event(at.pop(), "gateway", kind, "rag-proxy", fields, request_id, "h1"))
    for kind in draw(st.lists(st.sampled_from(["request", "request_body"]), max_size=2)):
        fields = (
            {
                "session": "s1",
                "lane": "fast",
                "upstream": "strata-a",
                "prompt_tokens": draw(st.integers(1, 9)),
                "status": 200,
                "finish": "stop",
                "seg": "seg-1",
            }
            if kind == "request"
            else {
                "special_literals": draw(st.integers(0, 2)),
                "thinking_only": draw(st.booleans()),
                "anchor_survived": draw(st.booleans()),
                "plan_then_stop": draw(st.booleans()),
                "lane": "fast",
                "segment": "seg-1",
                "finish": "stop",
            }
        )
        out.append(Event(at.pop(), "infer", kind, "infer", fields, request_id, "h1"))
    return out


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[Event], list[int]]:
    """Events of a few requests (retries share a request id; convs are shared), their times distinct but
    not in order (requests overlap; a layer's lines come late), cut into commits."""
    at = [T0 + i * 0.5 for i in draw(st.permutations(range(120)))]
    events: list[Event] = []
    for _request in range(draw(st.integers(1, 6))):
        request_id = f"r{draw(st.integers(0, 3))}"
        for _ in range(draw(st.integers(1, 2))):
            events += engine_task(draw, at, request_id)
        events += layer_events(draw, at, request_id)
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(events) - 1)), max_size=6))))
    folds = draw(st.lists(st.booleans(), min_size=len(cuts) + 1, max_size=len(cuts) + 1))
    return events, cuts, folds


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(streams(), st.integers(1, 40))
def test_rows_maintained_commit_by_commit_equal_the_rows_of_every_event_at_once(tmp_path_factory, stream, step):
    """Whichever commits fold (the agent folds every `request_rows_seconds`), in whatever steps a fold goes
    (FOLD_MAX_EVENTS), once one has, or the store reopens (a kill between folds), the rows are those of
    every event at once."""
    events, cuts, folds = stream
    db = tmp_path_factory.mktemp("rows") / "spyglass.duckdb"
    store = DuckDBStore(db, SOURCES)
    try:
        with patch.object(store_module, "FOLD_MAX_EVENTS", step):
            for first, last, fold in zip([0, *cuts], [*cuts, len(events)], folds, strict=True):
                store.commit(events[first:last], {}, {}, fold=fold)
        if folds[-1]:
            assert not store.rows_behind
            assert maintained(store.con) == as_the_views_had_them(store.con)
    finally:
        store.close()
    again = DuckDBStore(db, SOURCES)  # as an agent starting after a kill: it folds what waits
    try:
        assert not again.rows_behind
        assert maintained(again.con) == as_the_views_had_them(again.con)
    finally:
        again.close()


def test_a_store_without_rows_gets_them_rebuilt_from_its_events(tmp_path):
    """A store of schema 2 (today's release: the kind tables, no rows) is migrated: its rows built from its events."""
    at = [T0 + i for i in range(20)]
    events = [
        Event(at.pop(0), "engine-a", "queued", "strata-a", {"task": 1, "conv": "c1"}, "r1", "h1"),
        Event(at.pop(0), "engine-a", "restore", "strata-a", {"conv": "c1", "origin": "parked"}, None, "h1"),
        Event(at.pop(0), "engine-a", "prompt", "strata-a", {"task": 1, "prompt": 9}, "r1", "h1"),
        Event(at.pop(0), "gateway", "request", "rag-proxy", {"session": "s"}, "r1", "h1"),
        Event(at.pop(0), "infer", "request_body", "infer", {"thinking_only": True}, "r1", "h1"),
    ]
    db = tmp_path / "spyglass.duckdb"
    store = DuckDBStore(db, SOURCES)
    store.commit(events, {}, {})
    expected = maintained(store.con)
    assert [r[-1] for r in expected["requests_engine"]] == ["parked"]
    for name in row_tables():
        store.con.execute(f"DROP TABLE {name}")
    store.con.execute("DELETE FROM store_schema")
    store.con.execute("INSERT INTO store_schema VALUES (2, now())")
    store.close()
    again = DuckDBStore(db, SOURCES)
    try:
        assert again.schema_version() == 3
        assert maintained(again.con) == expected
    finally:
        again.close()


def test_real_engine_and_gateway_logs_give_the_same_rows_in_any_commits(tmp_path):
    """The recorded fixtures and the engine model's log, parsed by their collectors, in commits of 7 events."""
    from spyglass.agent.pipeline import Pipeline
    from spyglass.collectors.clock import ManualClock
    from spyglass.config import parse_config
    from spyglass.engine.emulator.logsynth import EngineModel

    fixtures = Path(__file__).resolve().parent / "fixtures"
    model, ts = EngineModel(seed=3, conversations=4), T0
    lines = model.start_lines(ts)
    for _ in range(150):
        ts += 3  # requests overlap
        lines += model.turn(ts)
    (tmp_path / "model.log").write_bytes(b"\n".join(sorted(lines, key=lambda line: line[:23])) + b"\n")
    config = parse_config(
        {
            "agent": {
                "host": "h1",
                "state_dir": str(tmp_path / "state"),
                "commit_max_events": 7,
                "commit_interval_seconds": 0,
            },
            "exporters": {"prometheus": {"enabled": False}},
            "sources": {
                "engine-b": {"kind": "engine_log", "path": str(fixtures / "engine_log/strata-iq3_xxs-b.log")},
                "gateway": {"kind": "gateway_log", "path": str(fixtures / "gateway_log/rag-proxy.log")},
                "engine-a": {"kind": "engine_log", "path": str(tmp_path / "model.log"), "instance": "strata-a"},
            },
        },
        "test",
    )
    pipeline = Pipeline(config, ManualClock(), DuckDBStore(config.store_path(), config.source_kinds()))
    try:
        pipeline.run_until_idle()
    finally:
        pipeline.close()
    con = duckdb.connect(str(config.store_path()), read_only=True)
    try:
        found = maintained(con)
        assert len(found["requests_engine"]) > 150 and len(found["requests_gateway"]) >= 5
        assert found == as_the_views_had_them(con)
    finally:
        con.close()


def test_rows_behind_are_said_and_read_from_the_events_until_the_next_start_folds_them(tmp_path, spawns):
    """A commit that does not fold records that the rows are behind; a read-only query of the request
    views then computes them from the events (the same answer); the next writer folds them."""
    from spyglass.config import parse_config
    from spyglass.forensics.run import Query, query

    db = tmp_path / "state" / "spyglass.duckdb"
    config = parse_config(
        {
            "agent": {"host": "h1", "state_dir": str(tmp_path / "state")},
            "exporters": {"prometheus": {"enabled": False}},
            "sources": {name: {"kind": kind, "path": str(tmp_path / f"{name}.log")} for name, kind in SOURCES.items()},
        },
        "test",
    )
    first = [
        Event(T0, "engine-a", "queued", "strata-a", {"task": 1, "conv": "c1"}, "r1", "h1"),
        Event(T0 + 1, "engine-a", "prompt", "strata-a", {"task": 1, "prompt": 9}, "r1", "h1"),
    ]
    later = [
        Event(T0 + 2, "engine-a", "done", "strata-a", {"task": 1, "completion": 4, "ttft_ms": 900.0}, "r1", "h1"),
        Event(T0 + 3, "engine-a", "queued", "strata-a", {"task": 2, "conv": "c2"}, "r2", "h1"),
    ]
    store = DuckDBStore(db, SOURCES)
    store.commit(first, {}, {})
    store.commit(later, {}, {}, fold=False)
    assert store.rows_behind
    assert len(maintained(store.con)["requests_engine"]) == 1  # r2 and r1's done wait for the fold
    store.close()

    window = {"from": datetime.fromtimestamp(T0 - 60, UTC), "to": datetime.fromtimestamp(T0 + 60, UTC)}
    asked = Query("SELECT request_id, completion_tokens FROM engine_requests ORDER BY request_id", window)
    _, answered = query(config, asked)
    assert answered == [("r1", 4), ("r2", None)]

    again = DuckDBStore(db, SOURCES)
    try:
        assert not again.rows_behind
        assert maintained(again.con) == as_the_views_had_them(again.con)
        assert len(maintained(again.con)["requests_engine"]) == 2
    finally:
        again.close()
    assert query(config, asked)[1] == answered
