"""Finding 5 and 6 of issue 9: a serve's /v1/status cannot hold, bloat or mislabel the agent.

Real HTTP servers on 127.0.0.1 written with asyncio streams: one that drips a byte at a time,
one that sends an endless chunked body, one that announces 100 MB, and one whose answers an
attacker chooses (a 5,000-character engine name, 5,000 status codes, counters going backwards).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
import tomllib

import duckdb
import pytest
from conftest import wait_until

from spyglass.agent.pipeline import Pipeline
from spyglass.collectors.clock import ManualClock
from spyglass.collectors.serve_status import ServeStatusOptions, ServeStatusSource
from spyglass.config import parse_config
from spyglass.exporters.prometheus import render
from spyglass.exporters.store import DuckDBStore
from spyglass.signals import full_catalogue
from spyglass.signals.serve_status import ServeSignals
from spyglass.signals.state import MetricState

BODY = {
    "engine": "strata-a",
    "build": "Strata 0.9.3 (build 7f3c2e1)",
    "serve_version": "2026.10.18",
    "state": "ready",
    "uptime_s": 8123.4,
    "slots": {"total": 20, "busy": 3},
    "prefill_queue": 2,
    "prompt_escapes": {"calls": 365, "literals": 1603},
    "stops_while_reasoning": 16,
    "requests": {"total": 5120, "by_status": {"200": 5101, "400": 12, "429": 7}},
}


class Server:
    """An asyncio HTTP/1.1 server on its own thread; `mode` picks how it answers the next GET."""

    def __init__(self) -> None:
        self.mode, self.body, self.raw = "ok", BODY, b""
        self.connections = 0
        self.sent = 0
        self.loop = asyncio.new_event_loop()
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.started.wait(5)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        self.started.set()
        self.loop.run_forever()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/status"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while (await reader.readline()) not in (b"\r\n", b""):
                pass
            if self.mode == "drip":  # a valid answer, one byte every 0.1 s
                for byte in (
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n" + json.dumps(self.body).encode()
                ):
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(0.1)
            elif self.mode == "endless":  # chunks of 64 KiB, forever
                writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                chunk = b"[" + b"1," * 32767
                while True:
                    writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.sent += len(chunk)
                    await writer.drain()
            elif self.mode == "huge":  # announces 100 MB
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100000000\r\n\r\n" + b" " * 65536)
                await writer.drain()
                await asyncio.sleep(30)
            else:
                payload = self.raw if self.mode == "raw" else json.dumps(self.body).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                    b"connection: close\r\n\r\n%s" % (len(payload), payload)
                )
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        if not self.loop.is_running():
            return

        async def stop() -> None:
            self.server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def server():
    serve = Server()
    yield serve
    serve.close()


def source_for(url: str, **options) -> ServeStatusSource:
    return ServeStatusSource("serve-a", ServeStatusOptions(url=url, instance="strata-a", **options))


def test_a_dripping_server_costs_one_poll_deadline_not_minutes(server):
    server.mode = "drip"  # the whole answer would take about 40 s
    source = source_for(server.url, timeout_seconds=0.5)
    started = time.monotonic()
    (event,) = source.poll(0.0).events
    elapsed = time.monotonic() - started
    assert (event.kind, event.fields["error"]) == ("poll_error", "timeout")
    assert elapsed < 2.0, f"one poll took {elapsed:.1f} s with a 0.5 s deadline"


@pytest.mark.parametrize("mode", ["endless", "huge"])
def test_a_body_past_the_cap_is_refused_without_reading_it_all(server, mode):
    server.mode = mode
    source = source_for(server.url, timeout_seconds=10, max_body_bytes=256 * 1024)
    started = time.monotonic()
    (event,) = source.poll(0.0).events
    assert (event.kind, event.fields["error"]) == ("poll_error", "too_large")
    assert time.monotonic() - started < 5
    assert server.sent < 64 * 1024 * 1024  # it stopped reading: only socket buffers' worth was sent


def test_the_stored_snapshot_is_bounded_and_instance_comes_from_config(server, tmp_path):
    server.body = dict(
        BODY,
        engine="x" * 5000,
        build=["not", "a", "string"],
        serve_version="v" * 5000,
        padding="p" * 200_000,
        uptime_s=10**30,
        prefill_queue="1.2.3",
        requests={"total": 99, "by_status": {**{str(i): 1 for i in range(5000)}, "200": 90}},
    )
    config = parse_config(
        tomllib.loads(
            f'[agent]\nstate_dir = "{tmp_path}"\n[sources.serve-a]\n'
            f'kind = "serve_status"\nurl = "{server.url}"\ninstance = "strata-a"\n'
            "[exporters.prometheus]\nenabled = false\n"
        ),
        "t",
    )
    pipeline = Pipeline(config, ManualClock(start=1_793_000_000.0), DuckDBStore(config.store_path()))
    pipeline.run_until_idle()
    text = render(pipeline.state).decode()
    values = pipeline.state.values
    pipeline.close()
    assert {k[0] for n, s in values.items() if n.startswith("spyglass_serve_") for k in s} == {"strata-a"}
    statuses = {k[1] for k in values["spyglass_serve_requests_total"]}
    assert "200" in statuses and "other" in statuses and len(statuses) <= 501
    assert values["spyglass_serve_requests_total"][("strata-a", "200")] == 90
    assert values["spyglass_source_invalid_fields_total"] == {
        ("serve-a", "build"): 1,
        ("serve-a", "uptime_s"): 1,
        ("serve-a", "prefill_queue"): 1,
    }
    assert ("strata-a",) not in values["spyglass_serve_uptime_seconds"]
    assert len(text) < 200_000
    con = duckdb.connect(str(config.store_path()), read_only=True)
    ((size, instance),) = con.execute("SELECT strlen(fields::VARCHAR), instance FROM events").fetchall()
    assert instance == "strata-a" and size < 16_384


def test_gauges_go_stale_while_down_and_a_restart_is_a_reset_not_a_drop(server):
    source = source_for(server.url, timeout_seconds=2, interval_seconds=1, max_backoff_seconds=1)
    state = MetricState(full_catalogue())
    signals, key, now, current = ServeSignals(state), ("strata-a",), 0.0, [server]

    def poll(mode: str, body: dict | None = None) -> None:
        nonlocal now
        current[0].mode, current[0].body = mode, body or current[0].body
        now += 1.0
        for event in source.poll(now).events:
            signals.apply(event)

    requests = lambda status: state.values["spyglass_serve_requests_total"].get(key + (status,))  # noqa: E731
    poll("ok", BODY)
    assert state.values["spyglass_serve_slots_busy"][key] == 3 and requests("200") == 5101
    server.close()  # the serve goes away
    poll("ok")
    assert state.values["spyglass_serve_up"][key] == 0.0
    for gauge in (
        "spyglass_serve_slots",
        "spyglass_serve_slots_busy",
        "spyglass_serve_uptime_seconds",
        "spyglass_serve_prefill_queue_depth",
    ):
        assert key not in state.values[gauge], gauge
    assert not [k for k in state.values["spyglass_serve_state"] if k[0] == "strata-a"]
    assert requests("200") == 5101  # a counter keeps its value: down is not a reset
    again = Server()  # restarted on another port: the serve restarted, its counters count from 0
    source.options = source.options.model_copy(update={"url": again.url})
    current[0] = again
    try:
        restarted = dict(
            BODY,
            uptime_s=30.0,
            requests={"total": 40, "by_status": {"200": 40}},
            prompt_escapes={"calls": 2, "literals": 5},
            stops_while_reasoning=1,
        )
        poll("ok", restarted)
        assert requests("200") == 5101 + 40 and requests("400") == 12
        assert state.values["spyglass_serve_prompt_escape_calls_total"][key] == 367
        assert state.values["spyglass_serve_restarts_total"][key] == 1
        poll("ok", dict(restarted, uptime_s=60.0, requests={"total": 50, "by_status": {"200": 50}}))
        assert requests("200") == 5101 + 50
        # restarted between two polls and already past its old count: uptime tells
        poll("ok", dict(restarted, uptime_s=5.0, requests={"total": 7000, "by_status": {"200": 7000}}))
        assert requests("200") == 5101 + 50 + 7000 and state.values["spyglass_serve_restarts_total"][key] == 2
    finally:
        again.close()


DEEP = b'{"state": "ready", "x": ' + b"[" * 3000 + b"]" * 3000 + b"}"  # 6 KB, 3,000 deep


@pytest.mark.parametrize("attack,error", [("deep", "invalid_json"), ("bug", "unexpected")])
def test_any_error_of_a_poll_is_a_failed_poll_with_up_0_and_no_stale_gauges(
    server, tmp_path, monkeypatch, attack, error
):
    """Issue 21 item 8: a 3,000-deep body raised RecursionError on every poll, and the serve stayed
    up=1 with its last gauges. Any error of a poll, foreseen or not, is a counted failed poll."""
    config = parse_config(
        tomllib.loads(
            f'[agent]\nstate_dir = "{tmp_path}"\n[sources.serve-a]\n'
            f'kind = "serve_status"\nurl = "{server.url}"\ninstance = "strata-a"\n'
            "interval_seconds = 1\nmax_backoff_seconds = 1\n"
            "[exporters.prometheus]\nenabled = false\n"
        ),
        "t",
    )
    clock = ManualClock()
    pipeline = Pipeline(config, clock, DuckDBStore(config.store_path()))
    values, key = pipeline.state.values, ("strata-a",)
    try:
        pipeline.run_until_idle()
        assert values["spyglass_serve_up"][key] == 1.0 and values["spyglass_serve_slots_busy"][key] == 3
        if attack == "deep":
            server.mode, server.raw = "raw", DEEP
        else:
            monkeypatch.setattr("spyglass.collectors.serve_status.snapshot_event", lambda *a: 1 / 0)
        for _ in range(2):  # every poll, not only the first
            clock.advance(1.0)
            pipeline.run_until_idle()
        assert values["spyglass_serve_up"][key] == 0.0
        assert values["spyglass_serve_poll_errors_total"][key + (error,)] == 2
        assert values["spyglass_source_up"][("serve-a",)] == 0.0
        assert values["spyglass_source_polls_total"][("serve-a", "error")] == 2
        for gauge in ("spyglass_serve_slots", "spyglass_serve_slots_busy", "spyglass_serve_uptime_seconds"):
            assert key not in values[gauge], gauge
    finally:
        pipeline.close()


def test_sigterm_during_a_hung_poll_stops_the_agent_within_the_deadline(spawns, server, tmp_path):
    server.mode = "drip"
    config = tmp_path / "spyglass.toml"
    config.write_text(
        f'[agent]\nstate_dir = "{tmp_path / "state"}"\n[exporters.prometheus]\nenabled = false\n'
        f'[sources.serve-a]\nkind = "serve_status"\nurl = "{server.url}"\ninstance = "strata-a"\n'
        "timeout_seconds = 2\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "spyglass.cli.app", "run", "-c", str(config)], stderr=subprocess.PIPE, text=True
    )
    try:
        wait_until(lambda: server.connections >= 1, what="the agent's first poll")
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert time.monotonic() - started < 6, "SIGTERM waited for the hung poll"
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
