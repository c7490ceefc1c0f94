"""The staged commit (event_schema.stage: one narrow table a commit, moved into the kind tables at the fold)
holds what the direct one (event_schema.split: each kind's rows into its table) holds: through the views
while staged, in the kind tables once moved, in Parquet's rows and in a read-only copy, to the microsecond."""

from __future__ import annotations

import functools
import json
import math
import shutil
from pathlib import Path
from unittest.mock import patch

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spyglass.collectors.event import Event
from spyglass.exporters import event_schema
from spyglass.exporters import store as store_module
from spyglass.exporters.segment_schema import rows_sql
from spyglass.exporters.store import DuckDBStore

SOURCES = {"engine-a": "engine_log", "infer": "infer_store", "gw": "gateway_log"}
T0 = 1_792_380_000.0
KINDS = sorted({(sk, kind) for sk, kind in event_schema.kind_tables() if sk in SOURCES.values()})

# Values of every class a parser or a configured pattern hands over, the awkward ones included.
values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(2**63, 2**70),  # no table takes it: the event is refused, the same way on both paths
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([3.0, 3.5, -0.0, 1e300, 5e-324]),
    st.text(max_size=8),
    st.sampled_from(["12", "-7", "1.5", "nan", "true", ""]),
    st.lists(st.integers(0, 9), max_size=3),
    st.dictionaries(st.sampled_from(["a", "b"]), st.one_of(st.none(), st.integers(0, 9), st.text(max_size=3))),
)


@st.composite
def events(draw: st.DrawFn) -> list[Event]:
    out = []
    for i in range(draw(st.integers(1, 30))):
        source_kind, kind = draw(st.sampled_from(KINDS))
        source = next(name for name, sk in SOURCES.items() if sk == source_kind)
        declared = [f for f, _ in event_schema.kind_tables()[(source_kind, kind)].fields]
        names = draw(st.lists(st.sampled_from([*declared, "undeclared", "other"]), max_size=6, unique=True))
        fields = {name: draw(values) for name in names}
        ts = T0 + i * 0.000_001 * draw(st.integers(0, 10**6))
        out.append(
            Event(ts, source, draw(st.sampled_from([kind, "not_a_kind"])), "strata-a", fields, f"r{i % 3}", "h1")
        )
    return out


def normal(value):
    """A JSON column's text compared as its value (the staged path re-serialises it); NaN equal to NaN."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def everything(store: DuckDBStore) -> dict[str, list]:
    con = store.con
    out = {
        view: [tuple(map(normal, r)) for r in con.execute(f"SELECT * FROM {view} ORDER BY seq").fetchall()]
        for view in map(event_schema.source_view, sorted(set(SOURCES.values())))
    }
    out["events"] = [
        (seq, json.loads(fields))
        for seq, fields in con.execute("SELECT seq, fields FROM events ORDER BY seq").fetchall()
    ]
    out["other"] = con.execute(f"SELECT * FROM {event_schema.OTHER} ORDER BY seq").fetchall()
    ours = [t for t in event_schema.kind_tables().values() if t.source_kind in SOURCES.values()]
    parquet = con.execute(rows_sql(ours), [0, 10**9]).fetchall()
    out["parquet"] = [tuple(map(normal, r)) for r in parquet]
    return out


@functools.cache
def empty_store(folder: Path) -> Path:
    """A new store's file, made once: copied for each example (making 90 tables costs a second)."""
    path = folder / "empty.duckdb"
    DuckDBStore(path, SOURCES).close()
    return path


def store_of(path, batch: list[Event], staged: bool) -> tuple[DuckDBStore, list[Event]]:
    shutil.copyfile(empty_store(path.parent.parent), path)
    store = DuckDBStore(path, SOURCES)
    with patch.object(store_module, "STAGE_MAX_EVENTS", 10**6 if staged else -1):
        refused = store.commit(batch, {}, {}, fold=False)
    return store, refused


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(events())
def test_a_staged_commit_reads_and_moves_as_the_direct_one_wrote(tmp_path_factory, batch):
    folder = tmp_path_factory.mktemp("staging")  # its parent holds the empty store
    direct, refused_direct = store_of(folder / "direct.duckdb", batch, staged=False)
    staged, refused_staged = store_of(folder / "staged.duckdb", batch, staged=True)
    try:
        assert refused_staged == refused_direct
        wanted = everything(direct)
        assert staged.staged == sum(1 for e in batch if e not in refused_staged and e.kind != "not_a_kind")
        assert everything(staged) == wanted  # read through the views while staged
        staged.commit([], {}, {}, fold=True)
        assert staged.staged == 0
        assert staged.con.execute(f"SELECT count(*) FROM {event_schema.STAGED}").fetchall() == [(0,)]
        assert everything(staged) == wanted  # and once moved into the kind tables
    finally:
        direct.close()
        staged.close()


def test_a_killed_agents_staged_rows_are_moved_by_the_next_writer(tmp_path):
    """Staged rows are committed rows: a kill before the fold leaves them staged, readable through the views,
    and the next agent to open the store moves them (and folds their requests) before anything else."""
    path = tmp_path / "spyglass.duckdb"
    batch = [
        Event(T0, "engine-a", "queued", "strata-a", {"task": 1, "conv": "c1", "prefill_depth": 0}, "r1", "h1"),
        Event(T0 + 1, "engine-a", "done", "strata-a", {"task": 1, "tokens": 12}, "r1", "h1"),
    ]
    store = DuckDBStore(path, SOURCES)
    store.commit(batch, {"engine-a": {"offset": 2}}, {}, fold=False)
    store.con.close()  # as a kill: no clean stop, no fold
    again = DuckDBStore(path, SOURCES)
    try:
        assert again.staged == 0 and not again.rows_behind
        assert again.con.execute(f"SELECT count(*) FROM {event_schema.STAGED}").fetchall() == [(0,)]
        moved = again.con.execute("SELECT seq, kind FROM events_engine_log ORDER BY seq").fetchall()
        assert moved == [(0, "queued"), (1, "done")]
        assert again.con.execute("SELECT request_id FROM requests_engine").fetchall() == [("r1",)]
        assert again.next_seq == 2
    finally:
        again.close()
