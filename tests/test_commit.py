"""Commits by time and size: lines reach the live state at once, the store and /metrics at most
once an interval, and a crash before a commit never shows a scraped counter lower afterwards."""

from __future__ import annotations

import tomllib
from pathlib import Path

from spyglass.agent.pipeline import Pipeline
from spyglass.collectors.clock import ManualClock
from spyglass.config import engine_log_toml, parse_config
from spyglass.exporters.prometheus import render
from spyglass.exporters.statefile import StateFile
from spyglass.exporters.store import DuckDBStore

FIXTURE = Path(__file__).parent / "fixtures" / "engine_log" / "strata-iq3_xxs-b.log"
LINES = FIXTURE.read_bytes().splitlines(keepends=True)


def open_pipeline(tmp: Path, log: Path, clock: ManualClock, store: bool = True, **agent: object) -> Pipeline:
    text = engine_log_toml(log, tmp / "state", store=store, host="h1")
    data = tomllib.loads(text)
    data["agent"].update(agent)
    cfg = parse_config(data, "test")
    backend = DuckDBStore(cfg.store_path()) if store else StateFile(cfg.state_dir() / "state.json")
    return Pipeline(cfg, clock, backend)


def stored(p: Pipeline) -> int:
    return p.store.con.execute("SELECT count(*) FROM events").fetchone()[0]


def lines_on(state) -> float:
    return state.total("spyglass_source_lines_total")


def test_many_steps_in_one_interval_make_one_commit_and_metrics_show_only_it(tmp_path):
    log, clock = tmp_path / "engine.log", ManualClock()
    log.write_bytes(b"")
    p = open_pipeline(tmp_path, log, clock, commit_interval_seconds=1.0)
    commits = []
    commit = p.store.commit
    p.store.commit = lambda *args, **kwargs: (commits.append(len(args[0])), commit(*args, **kwargs))  # counts, commits
    try:
        for line in LINES:
            with open(log, "ab") as f:
                f.write(line)
            p.step()
            p.commit_if_due()
            clock.advance(0.01)
        assert lines_on(p.state) == len(LINES)  # applied at once
        assert len(commits) == 1  # the first line, after a quiet spell, at once; the rest wait
        assert lines_on(p.exposed) == 1 and stored(p) == commits[0]
        clock.advance(1.0)
        p.commit_if_due()
        assert len(commits) == 2 and stored(p) == 35 and lines_on(p.exposed) == len(LINES)
        assert render(p.exposed) == render(p.state)
    finally:
        p.close()


def test_a_full_batch_commits_before_the_interval(tmp_path):
    log, clock = tmp_path / "engine.log", ManualClock()
    log.write_bytes(b"".join(LINES))
    p = open_pipeline(tmp_path, log, clock, commit_interval_seconds=60.0, commit_max_events=10)
    try:
        p.step()
        p.commit_if_due()
        assert stored(p) == 35  # 35 events waiting >= 10: committed although the interval is not over
    finally:
        p.close()


def test_a_crash_before_the_commit_rereads_and_never_shows_a_scraped_counter_lower(tmp_path):
    log, clock = tmp_path / "engine.log", ManualClock()
    log.write_bytes(b"".join(LINES[:20]))
    first = open_pipeline(tmp_path, log, clock, commit_interval_seconds=1.0)
    first.step()
    first.commit_if_due()
    with open(log, "ab") as f:
        f.write(b"".join(LINES[20:]))
    first.step()  # read and applied, not committed: the crash comes now
    scraped = render(first.exposed).decode()  # the last scrape before the crash
    assert lines_on(first.state) > lines_on(first.exposed)
    first.store.con.close()  # kill -9: the tailer, the pending events and the live state are gone

    second = open_pipeline(tmp_path, log, clock, commit_interval_seconds=1.0)
    try:
        assert render(second.exposed).decode() == scraped  # what was scraped, not less
        second.run_until_idle()
        assert stored(second) == 35  # the uncommitted lines were read again, once
        assert lines_on(second.exposed) == len(LINES)
    finally:
        second.close()


def test_the_state_file_commits_by_time_too(tmp_path):
    log, clock = tmp_path / "engine.log", ManualClock()
    log.write_bytes(b"")
    p = open_pipeline(tmp_path, log, clock, store=False, commit_interval_seconds=1.0)
    saved = StateFile(tmp_path / "state" / "state.json")

    def lines_saved() -> float:
        return sum(v for _, v in saved.load().metrics["values"]["spyglass_source_lines_total"])

    try:
        for line in LINES[:20]:
            with open(log, "ab") as f:
                f.write(line)
            p.step()
            p.commit_if_due()
        assert lines_saved() == 1  # the first line went in at once, the next 19 wait
        clock.advance(1.0)
        p.commit_if_due()
        assert lines_saved() == 20 and lines_on(p.exposed) == 20
    finally:
        p.close()


def request_rows(p: Pipeline) -> int:
    return p.store.con.execute("SELECT count(*) FROM requests_engine").fetchone()[0]


def test_request_rows_are_folded_once_an_interval_and_at_a_clean_stop(tmp_path):
    """Commits every second store the events; the per-request rows catch up every request_rows_seconds, in
    the commit then due, and at the last commit of a clean stop."""
    log, clock = tmp_path / "engine.log", ManualClock()
    log.write_bytes(b"")
    p = open_pipeline(tmp_path, log, clock, commit_interval_seconds=1.0, request_rows_seconds=10.0)
    try:
        half = len(LINES) // 2
        for chunk in (LINES[:half], LINES[half:]):
            with open(log, "ab") as f:
                f.write(b"".join(chunk))
            clock.advance(1.0)
            p.step()
            p.commit_if_due()
        assert stored(p) == 35 and request_rows(p) == 0 and p.store.rows_behind
        clock.advance(10.0)
        p.step()
        p.commit_if_due()  # nothing new, but the rows wait: their fold is due
        folded = request_rows(p)
        assert folded > 0 and not p.store.rows_behind
        with open(log, "ab") as f:
            f.write(LINES[7].replace(b"task 18231", b"task 901"))  # a later request's queued line
        clock.advance(1.0)
        p.step()
        p.commit_if_due()
        assert p.store.rows_behind and request_rows(p) == folded
        p.committer.flush()
        assert not p.store.rows_behind
    finally:
        p.close()
