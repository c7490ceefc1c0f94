"""The infer-store importer on a store the test writes while it imports."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import threading
from pathlib import Path

from spyglass.collectors.infer_store import InferStoreOptions, InferStoreSource
from spyglass.signals import full_catalogue
from spyglass.signals.infer_store import InferSignals
from spyglass.signals.state import MetricState

COLUMNS = (
    "id TEXT PRIMARY KEY, ts TEXT, session TEXT, lane TEXT, upstream TEXT, mode TEXT, client_msgs INT,"
    " sent_msgs INT, chars INT, est_tokens INT, prompt_tokens INT, completion_tokens INT, max_tokens INT,"
    " status INT, finish TEXT, tool_calls INT, content_chars INT, reasoning_chars INT, ttft_ms INT,"
    " dur_ms INT, seg TEXT"
)


def row(i: int, lane: str = "fast") -> tuple:
    rid = f"20261017-22{i // 60 % 60:02d}{i % 60:02d}-{i:06x}"
    ts = f"2026-10-17 22:{i // 60 % 60:02d}:{i % 60:02d}.000"
    return (
        rid,
        ts,
        f"auto:{i:016x}",
        lane,
        "strata-a",
        "assembled",
        40,
        38,
        52000,
        30000,
        24100,
        800,
        32000,
        200,
        "stop",
        0,
        2000,
        300,
        1400,
        15000,
        "20261017/seg-220000-00001.jsonl.gz",
    )


def create(db: Path) -> None:
    with sqlite3.connect(db) as con:
        con.execute(f"CREATE TABLE requests ({COLUMNS})")


ROWS = 600  # six of the importer's batches of 100, each commit racing its polls


def test_rows_are_imported_once_while_the_gateway_writes(tmp_path):
    db = tmp_path / "infer.db"
    create(db)
    written, errors, committed, done = [], [], threading.Event(), threading.Event()

    def gateway():
        # A tight loop of commits starves readers and writers of the lock in turn on a loaded
        # machine; each side retries (the source at its next poll), and no row may be lost or doubled.
        con = sqlite3.connect(db, timeout=0.25)
        con.execute("PRAGMA synchronous = OFF")  # the race under test is the locks', not the disk's flushes
        try:
            for i in range(ROWS):
                while True:
                    try:
                        con.execute(f"INSERT INTO requests VALUES ({','.join('?' * 21)})", row(i))
                        con.commit()
                        break
                    except sqlite3.OperationalError as exc:
                        con.rollback()  # else the next commit would write this row twice
                        errors.append(str(exc))
                written.append(row(i)[0])
                committed.set()
        finally:
            con.close()
            done.set()
            committed.set()

    source = InferStoreSource("infer", InferStoreOptions(path=db, interval_seconds=1, batch_rows=100))
    writer = threading.Thread(target=gateway)
    writer.start()
    imported, now = [], 0.0
    while True:  # until a poll that began after the last commit finds nothing new
        finished = done.is_set()
        committed.wait(5)
        committed.clear()
        now += 1
        new = [e.request_id for e in source.poll(now).events if e.kind == "request"]
        imported += new
        if finished and not new:
            break
        assert now < 10_000, "the importer never caught up with the writer"
    writer.join()
    assert {e for e in errors if "locked" not in e} == set()
    assert imported == written and len(imported) == ROWS


def seg_record(
    rid: str,
    *,
    prompt: str,
    first_user: str,
    sent_user: str,
    tools: bool,
    content: str,
    reasoning: str = "",
    calls: list | None = None,
    finish: str = "stop",
) -> dict:
    return {
        "id": rid,
        "request": {
            "client": {"messages": [{"role": "user", "content": first_user}]},
            "sent": {
                "system": prompt,
                "messages": [{"role": "user", "content": [{"type": "text", "text": sent_user}]}],
                "tools": [{"name": "Bash"}] if tools else [],
                "max_tokens": 32000,
            },
        },
        "response": {
            "content": content,
            "reasoning": reasoning,
            "tool_calls": calls or [],
            "finish_reason": finish,
            "usage": {},
        },
    }


def write_segment(path: Path, records: list[dict], age: float | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
    if age is not None:
        os.utime(path, (age, age))


def test_body_facts_and_signals(tmp_path):
    db = tmp_path / "infer.db"
    create(db)
    with sqlite3.connect(db) as con:
        for i, lane in enumerate(["fast", "fast", "normal", "fast", "normal"]):
            con.execute(f"INSERT INTO requests VALUES ({','.join('?' * 21)})", row(i, lane))
    ids = [row(i)[0] for i in range(5)]
    task = "Write chapter 7 of the book"
    records = [
        seg_record(
            ids[0],
            prompt="see generate.cpp: <|endoftext|> and <|im_end|>",
            first_user=task,
            sent_user=task,
            tools=True,
            content="",
            reasoning="I will repeat <|im_end|",
        ),
        seg_record(
            ids[1], prompt="plain", first_user=task, sent_user=task, tools=True, content="I'll now write the chapter."
        ),
        seg_record(
            ids[2],
            prompt="plain",
            first_user=task,
            sent_user=task,
            tools=True,
            content="",
            calls=[{"name": "Bash", "arguments": '{"command": "ls'}],
            finish="tool_calls",
        ),
        seg_record(
            ids[3],
            prompt="plain",
            first_user=task,
            sent_user="(older messages dropped) continue",
            tools=False,
            content="x" * 900,
        ),
        seg_record(
            ids[4],
            prompt="plain",
            first_user=task,
            sent_user=task,
            tools=True,
            content="done" * 200,
            calls=[{"name": "Bash", "arguments": {"command": "ls"}}],
            finish="tool_calls",
        ),
    ]
    segs = tmp_path / "infer-segs" / "20261017"
    write_segment(segs / "seg-220000-00001.jsonl.gz", records, age=1_000.0)
    (segs / "seg-223000-00002.jsonl.gz").write_bytes(gzip.compress(b'{"id": "x"}\n' * 50)[:40])  # being written

    source = InferStoreSource("infer", InferStoreOptions(path=db, settle_seconds=30))
    events = source.poll(10_000.0).events
    bodies = {e.request_id: e.fields for e in events if e.kind == "request_body"}
    assert [
        (
            b["special_literals"],
            b["thinking_only"],
            b["invalid_tool_json"],
            b["anchor_survived"],
            b["plan_then_stop"],
            b["lane"],
        )
        for b in (bodies[i] for i in ids)
    ] == [
        (2, True, 0, True, False, "fast"),
        (0, False, 0, True, True, "fast"),
        (0, False, 1, True, False, "normal"),
        (0, False, 0, False, False, "fast"),
        (0, False, 0, True, False, "normal"),
    ]
    assert not any(key in fields for fields in bodies.values() for key in ("request", "response"))  # no text
    assert list(source.checkpoint()["segments"]) == ["20261017/seg-220000-00001.jsonl.gz"]  # the partial one waits

    state = MetricState(full_catalogue())
    signals = InferSignals(state)
    for event in events:
        signals.apply(event)
    v = state.values
    assert v["spyglass_infer_special_token_requests_total"] == {("fast",): 1}
    assert v["spyglass_infer_thinking_only_total"] == {("fast", "yes"): 1}
    assert v["spyglass_infer_plan_then_stop_total"] == {("fast",): 1}
    assert v["spyglass_infer_invalid_tool_arguments_total"] == {("normal",): 1}
    assert v["spyglass_infer_anchor_lost_total"] == {("fast",): 1}
    assert sum(v["spyglass_infer_requests_total"].values()) == 5

    write_segment(
        segs / "seg-223000-00002.jsonl.gz",
        [seg_record("20261017-223000-aaaaaa", prompt="p", first_user=task, sent_user=task, tools=False, content="ok")],
        age=2_000.0,
    )
    again = source.poll(20_000.0).events
    assert [(e.kind, e.request_id) for e in again] == [("request_body", "20261017-223000-aaaaaa")]

    # A gateway that appends a gzip member to a segment later: only the new record is read.
    with gzip.open(segs / "seg-223000-00002.jsonl.gz", "at") as f:
        f.write(
            json.dumps(
                seg_record(
                    "20261017-223100-bbbbbb", prompt="p", first_user=task, sent_user=task, tools=False, content="ok"
                )
            )
            + "\n"
        )
    os.utime(segs / "seg-223000-00002.jsonl.gz", (3_000.0, 3_000.0))
    assert [e.request_id for e in source.poll(30_000.0).events] == ["20261017-223100-bbbbbb"]
    assert source.poll(40_000.0).events == []


def test_a_poll_that_fails_half_way_keeps_the_rows_it_moved_past(tmp_path, monkeypatch):
    """The lock is lost between two batches (a fault a test cannot time for real): the rows of the
    first batch come with the poll's error, and the next poll starts right after them."""
    db = tmp_path / "infer.db"
    create(db)
    with sqlite3.connect(db) as con:
        con.executemany(f"INSERT INTO requests VALUES ({','.join('?' * 21)})", [row(i) for i in range(250)])
    source = InferStoreSource("infer", InferStoreOptions(path=db, interval_seconds=1, batch_rows=100))
    connect = source._connect

    class LockedAfterOneBatch:
        def __init__(self) -> None:
            self.con, self.calls = connect(), 0

        def execute(self, *args):
            self.calls += 1
            if self.calls == 2:
                raise sqlite3.OperationalError("database is locked")
            return self.con.execute(*args)

        def close(self) -> None:
            self.con.close()

    monkeypatch.setattr(source, "_connect", LockedAfterOneBatch)
    first = source.poll(1.0)
    assert not first.ok and [e.kind for e in first.events][-1] == "poll_error"
    monkeypatch.setattr(source, "_connect", connect)
    second = source.poll(2.0)
    ids = [e.request_id for e in first.events + second.events if e.kind == "request"]
    assert ids == [row(i)[0] for i in range(250)]
