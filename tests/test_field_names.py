"""Every field a view, report, probe, evidence query or timeline names is one a collector declares.

The views name fields through views.Fields, which refuses an undeclared one when the view is built;
everything else names typed columns, so DuckDB's binder refuses an undeclared one. Here every such
query is bound (DESCRIBE) against an empty store of the typed schema, whose columns are exactly the
declared fields (collectors/fields.py). The planted-name tests show each check fails on a wrong name.
"""

from __future__ import annotations

from datetime import UTC, datetime

import duckdb
import pytest

from spyglass.alerting.heuristics import Deployment, catalogue
from spyglass.config import engine_log_config, parse_config
from spyglass.exporters.store import DuckDBStore
from spyglass.forensics import baseline, changes, finder, reports, timeline
from spyglass.forensics.diagnose import probe_query
from spyglass.forensics.run import Query, Window
from spyglass.forensics.views import ENGINE, VIEWS, Fields, UnknownField, needed
from spyglass.upgrades import crashes

WINDOW = Window(datetime(2026, 10, 19, 4, tzinfo=UTC), datetime(2026, 10, 19, 5, tzinfo=UTC))


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    folder = tmp_path_factory.mktemp("names")
    return parse_config(engine_log_config(folder / "engine.log", folder / "state"), "test")


@pytest.fixture(scope="module")
def empty(config):
    """An empty store of the typed schema: a table per declared kind, a column per declared field."""
    DuckDBStore(config.store_path(), config.source_kinds()).close()
    con = duckdb.connect(str(config.store_path()), read_only=True)
    yield con
    con.close()


def forensic_queries(config) -> dict[str, Query]:
    """Every query the forensic commands, reports and probes run, by name."""
    out: dict[str, Query] = {f"view {name}": Query(f"SELECT * FROM {name}", WINDOW.params()) for name in VIEWS}
    out.update(
        {
            f"report {name}": r.query(config, WINDOW, "20261019-124900-7aa82c" if r.takes_request else None)
            for name, r in reports.load_all().items()
        }
    )
    out.update({f"probe {h.id}": probe_query(h, config, WINDOW) for h in catalogue(Deployment.of(config)) if h.probe})
    request = timeline.Filters(request="20261019-124900-7aa82c", contains=("x",))
    out.update(
        {
            "timeline": timeline.timeline_query(WINDOW, request),
            "timeline count": timeline.count_query(WINDOW, request),
            "timeline starts": timeline.starts_query(WINDOW),
            "changes": changes.deploys_query(WINDOW),
            "requests": finder.requests_query(WINDOW, finder.Filters(limit=10)),
            "baseline": Query(
                baseline.METRICS_SQL,
                {
                    "from": WINDOW.start,
                    "to": WINDOW.end,
                    "b_from": WINDOW.start,
                    "b_to": WINDOW.end,
                    "a_from": WINDOW.start,
                    "a_to": WINDOW.end,
                    "instance": "strata-b",
                },
            ),
        }
    )
    out.update({f"crashes {name}": q for name, q in crashes.queries(WINDOW).items()})
    return out


def evidence_queries(config) -> dict[str, str]:
    """The heuristics' discriminating checks written in SQL: over the store's tables, or over the views
    (then with the views in front, as `spyglass views` runs them)."""
    checks = {h.id: h.check for h in catalogue(Deployment.of(config))}
    checks |= {  # an engine's own check (Words.check_query): llama-server's, where Strata's reads a gateway
        f"{h.id} {engine}": w.check_query
        for h in catalogue(Deployment.of(config))
        for engine, w in h.words.items()
        if w.check_query is not None
    }
    return {
        name: Query(check.sql, WINDOW.params()).text(config) if needed(check.sql) else check.sql
        for name, check in checks.items()
        if check.sql
    }


def binds(con, sql: str) -> None:
    """DESCRIBE `sql`: DuckDB's binder raises on a column no table has."""
    con.execute(f"DESCRIBE {sql}").fetchall()


def test_every_forensic_query_names_only_declared_fields(config, empty):
    queries = forensic_queries(config)
    assert len(queries) > 30 and sum(name.startswith("probe") for name in queries) >= 10
    failed = {}
    for name, q in queries.items():
        try:
            binds(empty, q.text(config))
        except duckdb.Error as exc:
            failed[name] = str(exc).splitlines()[0]
    assert failed == {}


def test_every_evidence_query_names_only_declared_fields(config, empty):
    queries = evidence_queries(config)
    assert len(queries) >= 10
    failed = {}
    for name, sql in queries.items():
        try:
            binds(empty, sql)
        except duckdb.Error as exc:
            failed[name] = str(exc).splitlines()[0]
    assert failed == {}


def test_a_view_naming_an_undeclared_field_fails_when_it_is_built():
    with pytest.raises(UnknownField, match="ttft_msec"):
        ENGINE("ttft_msec")
    with pytest.raises(UnknownField, match="kind 'evict'"):
        ENGINE("ttft_ms", "evict")  # declared, but not by that kind
    with pytest.raises(UnknownField, match="reason"):
        Fields("host")("reason")
    assert ENGINE("ttft_ms", "done") == """max("ttft_ms") FILTER (WHERE kind = 'done')"""


def test_a_probe_naming_an_undeclared_field_fails_to_bind(config, empty):
    h2 = next(h for h in catalogue(Deployment.of(config)) if h.id == "H2")
    planted = probe_query(h2, config, WINDOW)
    planted = Query(planted.sql.replace("median(decode_tps)", "median(decode_tpz)"), planted.params)
    assert planted.sql != probe_query(h2, config, WINDOW).sql
    with pytest.raises(duckdb.BinderException, match="decode_tpz"):
        binds(empty, planted.text(config))
    with pytest.raises(duckdb.BinderException, match="shape_name"):
        binds(empty, "SELECT shape_name, count(*) FROM events_engine_log WHERE kind = 'graph_rebuild' GROUP BY ALL")
