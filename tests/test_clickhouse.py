"""The many-host path on a real distributed engine: two hosts' agents (`spyglass ingest`, two state
dirs, two host names) publish Parquet segments into one folder, and every query the docs give for
them (spyglass/forensics/segment_queries.py, the one source docs/forensics.md is generated from)
gives the same rows from ClickHouse's own engine, embedded (chdb), as from DuckDB."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from test_kill_loop import write_log

from spyglass.config import engine_log_toml
from spyglass.forensics.segment_queries import QUERIES, ROOT, clickhouse_rows, duckdb_rows, on

pytestmark = pytest.mark.usefixtures("spawns")  # starts the agent: the e2e tier

DOCS = Path(__file__).parent.parent / "docs"
HOSTS = {"h1": 3, "h2.lab": 11}  # host name -> the engine model's seed: two hosts, two different logs


def ingest(folder: Path, host: str, seed: int, segments: Path) -> None:
    """One host's agent: its own engine log and state dir, publishing into the shared folder."""
    log = folder / "engine.log"
    write_log(log, turns=400, seed=seed)  # 2026-10-19 03:20 to 05:33: hours 03-05, two of them closed
    config = folder / "spyglass.toml"
    text = engine_log_toml(log, folder / "state", host=host, commit_interval_seconds=0, read_budget_bytes=65536)
    config.write_text(
        text.replace(
            "[exporters.store]\nenabled = true",
            f'[exporters.store]\nenabled = true\nparquet_dir = "{segments}"\npublish_interval_seconds = 0',
        )
    )
    subprocess.run(
        [sys.executable, "-m", "spyglass.cli.app", "ingest", "-c", str(config)],
        check=True,
        capture_output=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def segments(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hosts")
    folder = root / "pq"
    for host, seed in HOSTS.items():
        (root / host).mkdir()
        ingest(root / host, host, seed, folder)
    return folder


def test_both_hosts_published_into_one_folder(segments):
    published = duckdb_rows(
        f"SELECT host, count(*), count(DISTINCT seq) FROM read_parquet('{segments}/host=*/date=*/hour=*/"
        "*.parquet') GROUP BY ALL ORDER BY ALL"
    )
    assert [host for host, _, _ in published] == sorted(HOSTS)
    assert all(n == distinct > 2000 for _, n, distinct in published)
    assert (
        clickhouse_rows(
            f"SELECT host, count(), uniqExact(seq) FROM file('{segments}/host=*/date=*/hour=*/*.parquet',"
            " Parquet) GROUP BY host ORDER BY host"
        )
        == published
    )


@pytest.mark.parametrize("q", QUERIES, ids=[q.question for q in QUERIES])
def test_clickhouse_gives_duckdbs_answer_over_two_hosts(segments, q):
    expected = duckdb_rows(on(q.duckdb, str(segments)))
    assert {row[0] for row in expected} == set(HOSTS), "every query answers for both hosts"
    per_host = [[row[1:] for row in expected if row[0] == host] for host in HOSTS]
    assert per_host[0] != per_host[1], "two different logs: a query blind to the host would pass"
    assert clickhouse_rows(on(q.clickhouse, str(segments))) == expected


def sql_blocks(text: str) -> list[str]:
    return re.findall(r"```sql\n(.*?)```", text, flags=re.S)


def statements(block: str) -> list[str]:
    """The block's statements, each without its leading comment lines."""
    out = []
    for part in block.split(";"):
        lines = [line for line in part.strip().splitlines() if not line.startswith("--")]
        if lines:
            out.append("\n".join(lines).strip() + ";")
    return out


def test_every_segment_query_in_the_docs_is_one_this_test_runs():
    """A query over the segments written by hand into a doc would escape the comparison above."""
    known = {sql for q in QUERIES for sql in (q.duckdb, q.clickhouse)} | {"SET TimeZone = 'UTC';"}
    found = [
        s
        for doc in sorted(DOCS.glob("*.md"))
        for block in sql_blocks(doc.read_text())
        for s in statements(block)
        if ROOT in s or "Parquet)" in s
    ]
    assert set(found) <= known, [s for s in found if s not in known]
    assert known - {"SET TimeZone = 'UTC';"} <= set(found), "every query is shown in the docs"


def test_segments_hold_the_stores_typed_columns(segments):
    """A field is a typed column in Parquet, as in the store: the same values, with no JSON to parse."""
    con = duckdb.connect()
    try:
        files = f"read_parquet('{segments}/host=h1/date=*/hour=*/*.parquet')"
        types = dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM {files})").fetchall())
        assert (types["evictions"], types["ttft_ms"], types["decode_tps"], types["origin"]) == (
            "BIGINT",
            "BIGINT",
            "DOUBLE",
            "VARCHAR",
        )
        assert "fields" not in types
        published = con.execute(
            f"SELECT seq, evictions, used, budget FROM {files} WHERE kind = 'stats' ORDER BY seq"
        ).fetchall()
        con.execute(f"ATTACH '{segments.parent / 'h1' / 'state' / 'spyglass.duckdb'}' AS s (READ_ONLY)")
        stored = con.execute("SELECT seq, evictions, used, budget FROM s.ev_engine_log__stats ORDER BY seq").fetchall()
    finally:
        con.close()
    assert published == stored and len(stored) > 50
