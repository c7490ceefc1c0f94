"""Parquet publication on a real DuckDB store: segments hold exactly the stored events, a
concurrent reader never sees half a file, a duplicate or a gap, closed hours are compacted,
retention deletes only what is published, and the forensic commands answer the same from
`--parquet` as from the store."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from fixtures.incidents.replay import WINDOWS, write_all
from typer.testing import CliRunner

from spyglass.cli.app import app
from spyglass.collectors.clock import ManualClock
from spyglass.collectors.event import Event
from spyglass.config import ConfigError, parse_config
from spyglass.exporters.parquet import JSON_SEGMENT_SCHEMA, ParquetPublisher, is_typed
from spyglass.exporters.segment_schema import events_view_sql
from spyglass.exporters.store import DuckDBStore

pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier

HOUR = 3600.0
T0 = datetime(2026, 10, 19, 4, 0, tzinfo=UTC).timestamp()
COLUMNS = "ts, seq, source, kind, instance, host, request_id, fields::VARCHAR"


def synthetic(first: int, n: int, start: float, step: float, host: str = "h1") -> list[Event]:
    return [
        Event(
            start + i * step,
            "engine-b",
            ("queued", "done", "park")[i % 3],
            "strata-b",
            {"i": first + i, "text": "同一个会话" if i % 7 == 0 else "x"},
            f"20261019-0400{i % 60:02d}-{first + i:06x}" if i % 3 != 2 else None,
            host,
        )
        for i in range(n)
    ]


def glob(folder: Path) -> str:
    return str(folder / "host=*" / "date=*" / "hour=*" / "*.parquet")


def normal(rows: list[tuple]) -> list[tuple]:
    """Rows of COLUMNS with `fields` parsed: its keys' order is the view's, not the event's."""
    return [(*row[:-1], json.loads(row[-1]) if row[-1] is not None else None) for row in rows]


def segments(folder: Path) -> list[tuple]:
    """Every event in the segments, as the forensic commands' `events` over them gives it."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    files = f"(SELECT * FROM read_parquet('{glob(folder)}', hive_partitioning = true))"
    return normal(
        con.execute(f"WITH events AS ({events_view_sql(files)}) SELECT {COLUMNS} FROM events ORDER BY seq").fetchall()
    )


def stored(store: DuckDBStore) -> list[tuple]:
    return normal(store.con.execute(f"SELECT {COLUMNS} FROM events ORDER BY seq").fetchall())


def files(folder: Path) -> list[Path]:
    return sorted(folder.glob("host=*/date=*/hour=*/*.parquet"))


@pytest.fixture
def store(tmp_path):
    s = DuckDBStore(tmp_path / "state" / "spyglass.duckdb")
    yield s
    s.close()


def test_publication_holds_exactly_the_stored_events_under_host_date_hour(tmp_path, store):
    clock = ManualClock(T0 + 30 * 60)  # 04:30: hour 04 is open
    folder = tmp_path / "pq"
    publisher = ParquetPublisher(store, clock, folder, host="h1", interval=60)
    store.commit(synthetic(0, 500, T0 - HOUR, 6.0), {}, {})  # 03:00 to 03:50
    store.commit(synthetic(500, 300, T0, 5.0) + synthetic(800, 40, T0, 60.0, host="h2.lab"), {}, {})
    assert publisher.run_once() == 840
    assert segments(folder) == stored(store) and len(stored(store)) == 840
    assert [f.relative_to(folder).parent.as_posix() for f in files(folder)] == [
        "host=h1/date=2026-10-19/hour=03",
        "host=h1/date=2026-10-19/hour=04",
        "host=h2.lab/date=2026-10-19/hour=04",
    ]
    for f in files(folder):  # each file sorted by (ts, seq), named by the publication's range
        table = pq.ParquetFile(f).read()
        keys = list(zip(table["ts"].to_pylist(), table["seq"].to_pylist()))
        assert keys == sorted(keys) and f.name == "part-000000000000-000000000839.parquet"

    assert publisher.run_once() == 0  # nothing new, nothing written twice
    store.commit(synthetic(840, 10, T0 + 25 * 60, 1.0), {}, {})
    assert publisher.run_once() == 10
    assert segments(folder) == stored(store) and len(files(folder)) == 4
    assert store.publication().published == 849 and store.publication().pending is None


def test_an_interrupted_publication_is_redone_into_the_same_files(tmp_path):
    """A kill between writing parts and recording them: the next start writes the same range to
    the same names (no second copy), even though more events were committed meanwhile."""
    db, folder, clock = tmp_path / "s.duckdb", tmp_path / "pq", ManualClock(T0 + 1800)
    store = DuckDBStore(db)
    store.commit(synthetic(0, 200, T0 - HOUR, 30.0), {}, {})  # 03:00 .. 04:40
    publisher = ParquetPublisher(store, clock, folder, host="h1", interval=60)
    record = store.record_publication
    calls = []

    def killed_before_done(publication):
        calls.append(publication)
        if publication.pending is None:
            raise KeyboardInterrupt  # stands for the kill: the parts are on disk, not recorded
        record(publication)

    store.record_publication = killed_before_done
    with pytest.raises(KeyboardInterrupt):
        publisher.publish()
    before = {f.name for f in files(folder)}
    assert before == {"part-000000000000-000000000199.parquet"} and len(files(folder)) == 2
    store.close()

    store = DuckDBStore(db)
    assert store.publication().pending == (0, 199)
    store.commit(synthetic(200, 50, T0, 10.0), {}, {})  # more arrived before the restart published
    ParquetPublisher(store, clock, folder, host="h1", interval=60).run_once(everything=True)
    assert segments(folder) == stored(store) and len(stored(store)) == 250
    store.close()


def test_a_concurrent_reader_never_sees_a_partial_file_a_duplicate_or_a_gap(tmp_path, store):
    """Many small publications and compactions of closed hours while another thread queries
    the glob in a loop: every answer holds each published seq once, and all of those the
    watermark said were published before the query began."""
    clock, folder = ManualClock(T0), tmp_path / "pq"
    publisher = ParquetPublisher(store, clock, folder, host="h1", interval=0, max_rows=500)
    published = [-1]
    done, failures, answers = threading.Event(), [], []

    def reader() -> None:
        con = duckdb.connect()
        query = f"SELECT count(*), count(DISTINCT seq), count(*) FILTER (WHERE seq <= $w) FROM read_parquet('{glob(folder)}')"
        while not done.is_set():
            floor = published[0]
            if floor < 0:
                continue
            try:
                answers.append((floor, *con.execute(query.replace("$w", str(floor))).fetchone()))
            except duckdb.Error as exc:
                failures.append(str(exc).splitlines()[0])

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        seq = 0
        for _ in range(12):  # 04:00 to 09:00, 25 minutes at a time: 5 hours close and are compacted
            store.commit(synthetic(seq, 3000, clock.now(), 0.5), {}, {})
            seq += 3000
            clock.advance(1500)
            publisher.run_once(everything=True)
            published[0] = store.publication().published
    finally:
        done.set()
        thread.join()
    assert sum(f.name.startswith("hour-") for f in files(folder)) == 5
    # A query whose glob listed an hour's parts just before the swap may find one gone (DuckDB
    # lists, then opens): it fails loudly, never reads a mix (exporters/parquet.py).
    torn = [f for f in failures if "No such file" not in f]
    assert not torn, torn[:3]
    assert len(answers) > 50
    for floor, rows, distinct, below in answers:
        assert rows == distinct, "a seq was read twice"
        assert below == floor + 1, "a published seq was missing"
    assert segments(folder) == stored(store)


def test_a_closed_hour_is_compacted_into_one_sorted_file_and_reopened_by_a_late_event(tmp_path, store):
    clock, folder = ManualClock(T0 + 10 * 60), tmp_path / "pq"  # 04:10
    publisher = ParquetPublisher(store, clock, folder, host="h1", interval=60)
    for minute in range(10):  # ten publications into hour 04, one into hour 03 (late-ish)
        store.commit(synthetic(minute * 100, 100, T0 + minute * 60, 0.5), {}, {})
        publisher.run_once()
    store.commit(synthetic(1000, 5, T0 - 120, 1.0), {}, {})
    publisher.run_once()
    hour4 = folder / "host=h1" / "date=2026-10-19" / "hour=04"
    assert len(list(hour4.glob("*.parquet"))) == 10  # open hour: its parts stay

    clock.advance(HOUR)  # 05:10: hour 04 is closed
    publisher.run_once()
    [merged] = hour4.glob("*.parquet")
    assert merged.name == "hour-000000000000-000000000999.parquet"
    table = pq.ParquetFile(merged).read()
    keys = list(zip(table["ts"].to_pylist(), table["seq"].to_pylist()))
    assert keys == sorted(keys) and len(keys) == 1000
    assert not list((folder / ".staging").rglob("*.parquet"))  # the old parts are gone

    store.commit(synthetic(1005, 3, T0 + 3000, 1.0), {}, {})  # a late event for the closed hour 04
    publisher.run_once()
    assert [f.name for f in sorted(hour4.glob("*.parquet"))] == ["hour-000000000000-000000001007.parquet"]
    assert segments(folder) == stored(store)


def test_retention_deletes_only_published_events_past_the_horizon(tmp_path, store):
    clock, folder = ManualClock(T0 + 5 * HOUR), tmp_path / "pq"  # 09:00
    publisher = ParquetPublisher(store, clock, folder, host="h1", interval=60, retain_hours=2)
    store.commit(synthetic(0, 600, T0, 30.0), {}, {})  # 04:00 .. 08:59:30, one every 30 s
    publisher.run_once()
    everything = segments(folder)
    assert len(everything) == 600
    kept = store.con.execute("SELECT min(ts), count(*) FROM events").fetchone()
    assert kept[0].timestamp() >= clock.now() - 2 * HOUR and kept[1] == 240  # 07:00 .. 08:59:30

    store.commit(synthetic(600, 10, T0, 1.0), {}, {})  # old, but not yet published: kept
    assert publisher.retain() == 0
    assert store.con.execute("SELECT count(*) FROM events WHERE seq >= 600").fetchone() == (10,)
    publisher.run_once()
    assert store.con.execute("SELECT count(*) FROM events WHERE seq >= 600").fetchone() == (0,)
    assert len(segments(folder)) == 610

    store.close()  # every row published and deleted: seqs still never repeat
    again = DuckDBStore(store.path)
    assert again.next_seq == 610
    again.close()


def test_config_names_the_parquet_keys(tmp_path):
    base = {"agent": {"state_dir": str(tmp_path)}}
    with pytest.raises(ConfigError, match=r"^f: exporters\.store\.retain_hours: .*needs exporters\.store\.parquet_dir"):
        parse_config({**base, "exporters": {"store": {"retain_hours": 24}}}, "f")
    with pytest.raises(ConfigError, match=r"^f: exporters\.store\.parquet_dir: .*enabled = true"):
        parse_config({**base, "exporters": {"store": {"enabled": False, "parquet_dir": str(tmp_path)}}}, "f")
    with pytest.raises(ConfigError, match=r"^f: exporters\.store\.publish_interval_seconds: "):
        parse_config({**base, "exporters": {"store": {"publish_interval_seconds": -1}}}, "f")
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match=r"^f: exporters\.store\.parquet_dir: expected a folder"):
        parse_config({**base, "exporters": {"store": {"parquet_dir": str(tmp_path / "file" / "pq")}}}, "f")


@pytest.fixture(scope="module")
def replay(tmp_path_factory) -> tuple[str, str]:
    folder = tmp_path_factory.mktemp("incidents")
    config = write_all(folder)
    config.write_text(config.read_text() + f'[exporters.store]\nparquet_dir = "{folder / "pq"}"\n')
    result = CliRunner().invoke(app, ["ingest", "--config", str(config)])
    assert result.exit_code == 0, result.output
    return str(config), glob(folder / "pq")


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("window", sorted(WINDOWS))
def test_timeline_and_reports_answer_the_same_from_parquet(replay, window):
    config, segments_glob = replay
    start, end = (f"{t:%Y-%m-%d %H:%M}" for t in WINDOWS[window])
    commands = [["timeline", "--limit", "100000"], ["requests"]] + [
        ["report", name] for name in ("cache", "special-tokens", "four-counts", "assembly", "plan-then-eos", "restarts")
    ]
    answered = 0
    for command in commands:
        args = [*command, "--config", config, "--from", start, "--to", end, "--format", "json"]
        from_store = CliRunner().invoke(app, args)
        from_parquet = CliRunner().invoke(app, [*args, "--parquet", segments_glob])
        assert (from_parquet.exit_code, from_parquet.stdout) == (from_store.exit_code, from_store.stdout), command
        answered += from_store.exit_code == 0 and bool(from_store.stdout)
    assert answered >= 2  # each window has a timeline and its requests at least


def test_parquet_queries_read_nothing_outside_the_segments(replay, tmp_path):
    config, segments_glob = replay
    result = CliRunner().invoke(
        app, ["views", "SELECT * FROM read_csv('/etc/passwd')", "--config", config, "--parquet", segments_glob]
    )
    assert result.exit_code == 1 and "/etc/passwd" in result.stderr
    result = CliRunner().invoke(
        app,
        [
            "timeline",
            "--config",
            config,
            "--from",
            "2026-10-19",
            "--to",
            "2026-10-20",
            "--parquet",
            str(tmp_path / "none" / "*.parquet"),
        ],
    )
    assert result.exit_code == 1 and "No files found" in result.stderr


@pytest.mark.parametrize("window", sorted(WINDOWS))
def test_diagnose_finds_the_same_from_parquet(replay, window):
    """Over Parquet the probes read rows computed once for the window (run.share_rows): the same findings."""
    config, segments_glob = replay
    start, end = (f"{t:%Y-%m-%d %H:%M}" for t in WINDOWS[window])
    args = ["diagnose", "--config", config, "--from", start, "--to", end, "--json"]
    from_store = CliRunner().invoke(app, args)
    from_parquet = CliRunner().invoke(app, [*args, "--parquet", segments_glob])
    assert from_parquet.exit_code == from_store.exit_code, from_parquet.output

    def findings(stdout: str) -> list[dict]:
        return [{k: v for k, v in f.items() if k != "evidence"} for f in json.loads(stdout)["findings"]]

    assert findings(from_parquet.stdout) == findings(from_store.stdout)


def test_segments_written_before_a_field_was_declared_answer_as_the_store(replay, tmp_path):
    """Segments of an older release lack the columns of fields declared since: they read as NULLs."""
    config, segments_glob = replay
    root = Path(segments_glob.split("/host=")[0])
    tables = {path: pq.read_table(path, partitioning=None) for path in root.rglob("*.parquet")}
    empty = set.intersection(
        *(
            {c for c in t.column_names if c not in ("ts", "seq") and t.column(c).null_count == len(t)}
            for t in tables.values()
        )
    )
    assert len(empty) > 10
    for path, table in tables.items():
        copy = tmp_path / "old" / path.relative_to(root)
        copy.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.drop_columns(sorted(empty)), copy)
    start, end = (f"{t:%Y-%m-%d %H:%M}" for t in WINDOWS[sorted(WINDOWS)[0]])
    for command in (["timeline", "--limit", "100000"], ["requests"], ["report", "cache"]):
        args = [*command, "--config", config, "--from", start, "--to", end, "--format", "json"]
        assert cli(*args, "--parquet", glob(tmp_path / "old")) == cli(*args), command


@pytest.mark.parametrize(
    "start, end",
    [
        ("2026-10-19 03:59:59.999", "2026-10-19 04:00:00.001"),
        ("2026-10-19 04:10", "2026-10-19 05:59:59.9999"),
        ("2026-10-07 08:59:59.5", "2026-10-07 09:00:00.5"),
        ("2026-10-17 14:30", "2026-10-18 16:02"),
    ],
)
def test_parquet_reads_the_same_padded_window_as_the_store(replay, start, end):
    """--parquet opens only the hour folders the views read; at odd edges they still read the
    same events as the store (the window widened by views.PAD)."""
    config, segments_glob = replay
    args = [
        "views",
        "SELECT count(*) AS n, min(ts) AS first, max(ts) AS last, sum(seq) AS seqs FROM ev",
        "--config",
        config,
        "--from",
        start,
        "--to",
        end,
        "--format",
        "json",
    ]
    from_store = cli(*args)
    assert from_store == cli(*args, "--parquet", segments_glob)
    assert '"n": 0' not in from_store


def test_one_row_no_partition_can_name_is_set_aside_and_counted_and_the_rest_published(tmp_path, store):
    """A store from before the edges bounded timestamps holds a smoke event in the year 33658: the
    publication sets that row aside (outside the glob), counts it, and publishes the rest, at once
    and after a restart; it no longer fails every interval."""
    from spyglass.config import engine_log_config
    from spyglass.config.signals import metric_state

    state = metric_state(parse_config(engine_log_config(tmp_path / "a.log", tmp_path), "test"))
    clock, folder = ManualClock(T0 + 30 * 60), tmp_path / "pq"
    store.commit(synthetic(0, 3, T0, 60.0), {}, {})
    store.con.execute(
        "INSERT INTO ev_other VALUES (3, to_timestamp(1e12), 'smoke', 'smoke_passed', 'strata-a', 'h1', NULL, '{}')"
    )  # what DuckDB took before the edges refused it
    store.next_seq = 4
    store.commit(synthetic(4, 2, T0 + 300, 60.0), {}, {})
    publisher = ParquetPublisher(store, clock, folder, host="h1", interval=60, state=state)
    publisher.tick()
    assert [row[1] for row in segments(folder)] == [0, 1, 2, 4, 5]
    assert store.publication().published == 5 and store.publication().pending is None
    assert state.values["spyglass_parquet_rows_set_aside_total"][()] == 1
    assert state.values.get("spyglass_parquet_publish_failures_total", {}) == {}
    [aside] = (folder / ".set-aside" / "h1").glob("*.parquet")
    assert aside.name == "part-000000000000-000000000005.parquet"
    assert pq.ParquetFile(aside).read()["seq"].to_pylist() == [3]
    store.commit(synthetic(6, 1, T0 + 600, 60.0), {}, {})  # and publication goes on
    clock.advance(60)
    publisher.tick()
    assert [row[1] for row in segments(folder)] == [0, 1, 2, 4, 5, 6]


def test_a_failed_publication_is_counted_on_metrics_and_retried(tmp_path, store):
    from spyglass.config import engine_log_config
    from spyglass.config.signals import metric_state

    state = metric_state(parse_config(engine_log_config(tmp_path / "a.log", tmp_path), "test"))
    clock, folder = ManualClock(T0 + 30 * 60), tmp_path / "pq"
    publisher = ParquetPublisher(store, clock, folder, host="h1", interval=60, state=state)
    store.commit(synthetic(0, 3, T0, 60.0), {}, {})
    (folder / "host=h1").write_text("not a folder")  # the partition folder cannot be made
    publisher.tick()
    assert state.values["spyglass_parquet_publish_failures_total"][()] == 1 and segments_or_none(folder) is None
    (folder / "host=h1").unlink()
    clock.advance(60)
    publisher.tick()
    assert [row[1] for row in segments(folder)] == [0, 1, 2]
    assert state.values["spyglass_parquet_publish_failures_total"][()] == 1


def segments_or_none(folder: Path) -> list[tuple] | None:
    return segments(folder) if files(folder) else None


def test_an_hour_written_with_json_fields_is_rewritten_typed_at_the_next_start(tmp_path):
    """Segments an agent of the JSON schema wrote (`fields` JSON) become typed, the same events."""
    store = DuckDBStore(tmp_path / "state" / "spyglass.duckdb", {"engine-b": "engine_log"})
    try:
        clock, folder = ManualClock(T0 + 30 * 60), tmp_path / "pq"
        parks = [
            Event(
                T0 - HOUR + i * 60,
                "engine-b",
                "park",
                "strata-b",
                {
                    "conv": f"c{i}",
                    "parked": i,
                    "bytes": 1000 * i,
                    "used": 10,
                    "budget": 8 << 30,
                    "evictions": 0,
                    **({"note": "同一个会话"} if i % 5 == 0 else {}),
                },
                None,
                "h1",
            )
            for i in range(50)
        ]
        store.commit(parks + synthetic(50, 30, T0, 10.0), {}, {})
        ParquetPublisher(store, clock, folder, host="h1", interval=60).run_once()
        expected = segments(folder)
        for f in files(folder):  # as the previous release wrote them
            seqs = pq.read_table(f, columns=["seq"])["seq"].to_pylist()
            old = store.con.sql(
                "SELECT ts, seq, source, kind, instance, host, request_id, fields::VARCHAR AS fields"
                " FROM events WHERE list_contains(?, seq) ORDER BY ts, seq",
                params=[seqs],
            ).to_arrow_table()
            pq.write_table(old.cast(JSON_SEGMENT_SCHEMA), f)
        assert not any(is_typed(f) for f in files(folder))

        ParquetPublisher(store, clock, folder, host="h1", interval=60).run_once()
        assert all(is_typed(f) for f in files(folder)) and len(files(folder)) == 2
        assert segments(folder) == expected == stored(store)
        con = duckdb.connect()
        assert con.execute(
            f"SELECT sum(bytes), count(extra) FROM read_parquet('{glob(folder)}') WHERE kind = 'park'"
        ).fetchall() == [(sum(1000 * i for i in range(50)), 10 + 10)]  # 10 notes, 10 synthetic parks
    finally:
        store.close()
