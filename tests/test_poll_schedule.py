"""The pipeline keeps the poll schedule, on an injected clock: the interval after a poll that
answered, doubling backoff up to the cap after failures, and nothing polled before it is due.
Real endpoints: an HTTP server on 127.0.0.1 that fails on command, a missing unix socket, a
real SQLite infer store."""

from __future__ import annotations

import sqlite3
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from spyglass.agent.pipeline import Pipeline
from spyglass.collectors.clock import ManualClock
from spyglass.collectors.host import HostSource
from spyglass.config import parse_config
from spyglass.exporters.statefile import StateFile


class Status(BaseHTTPRequestHandler):
    failing = True
    hits: list[float] = []
    clock: ManualClock | None = None

    def do_GET(self):  # noqa: N802
        Status.hits.append(Status.clock.now() if Status.clock else 0.0)
        body = b"down" if Status.failing else b'{"engine": "strata-a", "state": "ready"}'
        self.send_response(500 if Status.failing else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def status_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Status)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Status.hits, Status.failing = [], True
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/status"
    server.shutdown()
    server.server_close()


def pipeline(tmp_path, sources: str, clock: ManualClock) -> Pipeline:
    config = parse_config(
        tomllib.loads(f'[agent]\nstate_dir = "{tmp_path}"\n[exporters.store]\nenabled = false\n' + sources), "t"
    )
    return Pipeline(config, clock, StateFile(tmp_path / "state.json"))


def run(p: Pipeline, clock: ManualClock, seconds: int) -> list[float]:
    """Poll every source once a second of clock time, as the poller threads would; the waits returned."""
    waits = []
    for _ in range(seconds):
        waits += [p.poll(rt) for rt in p.polled_sources()]
        clock.advance(1.0)
    return waits


def test_failures_back_off_to_the_cap_and_an_answer_restores_the_interval(tmp_path, status_server):
    clock = ManualClock(start=0.0)
    Status.clock = clock
    p = pipeline(
        tmp_path,
        f'[sources.serve-a]\nkind = "serve_status"\nurl = "{status_server}"\n'
        'instance = "strata-a"\ninterval_seconds = 5\nmax_backoff_seconds = 40\n',
        clock,
    )
    run(p, clock, 150)
    assert Status.hits == [0, 10, 30, 70, 110]  # waits of 10, 20, 40, 40: doubling, capped at 40
    p.step()
    assert p.state.values["spyglass_source_polls_total"][("serve-a", "error")] == 5
    assert p.state.values["spyglass_source_up"][("serve-a",)] == 0.0

    Status.failing, Status.hits = False, []
    run(p, clock, 40)  # the next due poll (at 150) answers: from then on every 5 s
    assert Status.hits == [150, 155, 160, 165, 170, 175, 180, 185]
    p.step()
    assert p.state.values["spyglass_source_polls_total"][("serve-a", "ok")] == 8
    assert p.state.values["spyglass_source_up"][("serve-a",)] == 1.0

    Status.failing, Status.hits = True, []
    run(p, clock, 60)  # a failure after answers backs off from the start again: 10, 20, 40
    assert Status.hits == [190, 200, 220]
    p.close()


def test_poll_returns_the_wait_and_never_polls_early(tmp_path, status_server):
    clock = ManualClock(start=1000.0)
    Status.clock, Status.failing = clock, False
    p = pipeline(
        tmp_path, f'[sources.serve-a]\nkind = "serve_status"\nurl = "{status_server}"\ninterval_seconds = 7\n', clock
    )
    (rt,) = p.polled_sources()
    assert p.poll(rt) == 7.0
    clock.advance(3.0)
    assert p.poll(rt) == 4.0 and p.poll(rt) == 4.0  # not due: no request
    assert Status.hits == [1000.0]
    clock.advance(4.0)
    assert p.poll(rt) == 7.0 and Status.hits == [1000.0, 1007.0]
    p.close()


def test_a_source_without_backoff_is_retried_at_its_interval(tmp_path):
    clock = ManualClock(start=0.0)
    p = pipeline(
        tmp_path,
        f'[sources.rpc]\nkind = "supervisord_rpc"\nendpoint = "unix://{tmp_path}/none.sock"\ninterval_seconds = 3\n',
        clock,
    )
    assert run(p, clock, 10) == [3.0, 2.0, 1.0] * 3 + [3.0]  # polled at 0, 3, 6, 9: each failure waits 3 s
    p.step()
    assert p.state.values["spyglass_source_polls_total"][("rpc", "error")] == 4
    p.close()


def test_a_source_that_raises_backs_off_like_a_failure(tmp_path, monkeypatch):
    calls = []

    def broken(self, now):
        calls.append(now)
        raise RuntimeError("surprise from /proc")

    monkeypatch.setattr(HostSource, "poll", broken)
    clock = ManualClock(start=0.0)
    p = pipeline(tmp_path, '[sources.host]\nkind = "host"\ninterval_seconds = 2\n', clock)
    run(p, clock, 9)
    assert calls == [0, 2, 4, 6, 8]  # host has no backoff: the interval, and the poller lives on
    p.step()
    assert p.state.values["spyglass_source_polls_total"][("host", "error")] == 5
    p.close()


def test_a_polled_source_keeps_its_state_across_restarts_without_a_poll(tmp_path):
    db = tmp_path / "infer.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE requests (id TEXT PRIMARY KEY, ts TEXT, lane TEXT, status INT, finish TEXT)")
        con.executemany(
            "INSERT INTO requests VALUES (?, ?, 'fast', 200, 'stop')",
            [(f"20261017-2200{i:02d}-{i:06x}", f"2026-10-17 22:00:{i:02d}.000") for i in range(3)],
        )
    sources = f'[sources.infer]\nkind = "infer_store"\npath = "{db}"\n'
    clock = ManualClock()  # after the rows' dates: the pipeline refuses a timestamp a day past its clock
    first = pipeline(tmp_path, sources, clock)
    assert first.run_until_idle() == 3
    first.close()
    for _ in range(2):  # restarted twice, committing before any poll: the saved rowid must survive
        again = pipeline(tmp_path, sources, clock)
        again.step()  # the agent's first step can run before its poller threads have polled
        again.close()
    last = pipeline(tmp_path, sources, clock)
    assert last.run_until_idle() == 0  # nothing imported twice
    last.close()


def test_polls_that_repeat_the_last_one_are_committed_at_the_quiet_interval(tmp_path, status_server):
    """An idle endpoint says the same thing every poll: stored, but the store is not written every second."""
    clock = ManualClock(start=1_793_000_000.0)
    Status.failing, Status.clock = False, clock
    config = parse_config(
        tomllib.loads(
            f'[agent]\nstate_dir = "{tmp_path}"\nquiet_commit_seconds = 5\n[exporters.prometheus]\nenabled = false\n'
            f'[sources.serve]\nkind = "serve_status"\nurl = "{status_server}"\ninterval_seconds = 1\n'
        ),
        "t",
    )
    from spyglass.exporters.store import DuckDBStore

    p = Pipeline(config, clock, DuckDBStore(config.store_path(), config.source_kinds()))
    commits = []
    for second in range(12):
        p.poll_all()
        p.step()
        before = p.store.next_seq
        p.commit_if_due()
        if p.store.next_seq > before:
            commits.append(second)
        if second == 8:
            Status.failing = True  # news: a failed poll commits at the next interval
        clock.advance(1.0)
    p.committer.flush()
    stored = p.store.next_seq
    p.close()
    # the first poll, one after 5 quiet seconds, the news; a failed poll (backed off to 11) is never quiet;
    # every poll stored: 0-9 and 11
    assert (commits, stored) == ([0, 5, 9, 11], 11)
