"""The polled sources' HTTP (collectors/http_poll.py) against real HTTP/1.1 servers on 127.0.0.1: one
connection kept across polls, a connection the server closed is replaced, and llama-server's bodies that
did not change are not parsed again."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator

import pytest

from spyglass.collectors import llama_server
from spyglass.collectors.http_poll import HttpPoller
from spyglass.collectors.llama_server import LlamaServerOptions, LlamaServerSource

BODIES = {
    "/health": b'{"status": "ok"}',
    "/metrics": b"llamacpp:requests_deferred 2\nllamacpp:n_decode_total 7\n",
    "/slots": json.dumps([{"id": 0, "is_processing": False}]).encode(),
    "/props": b'{"build_info": "b1-abc"}',
}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless told otherwise
    connections: list[int] = []
    close_after: int | None = None  # close each connection after this many answers

    def setup(self) -> None:
        super().setup()
        Handler.connections.append(0)
        self.index = len(Handler.connections) - 1

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = BODIES.get(self.path, b"")
        Handler.connections[self.index] += 1
        self.send_response(200 if body else 404)
        self.send_header("content-length", str(len(body)))
        if Handler.close_after and Handler.connections[self.index] >= Handler.close_after:
            self.close_connection = True  # closes without saying so: the client finds out on its next request
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Handler.connections, Handler.close_after = [], None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_polls_share_one_kept_alive_connection(server: str) -> None:
    source = LlamaServerSource("metrics", LlamaServerOptions(url=server, instance="llama-a"))
    for now in range(5):
        (event,) = source.poll(float(now)).events
        assert event.kind == "llama_status" and event.fields["metrics"]["requests_deferred"] == 2
    source.close()
    assert Handler.connections == [20]  # 5 polls of 4 endpoints, one connection


def test_a_connection_the_server_closed_is_replaced_and_the_poll_answers(server: str) -> None:
    Handler.close_after = 3
    poller = HttpPoller(server)
    for _ in range(7):
        poller.start(2.0)
        assert poller.get(server + "/health", 1024) == (200, BODIES["/health"])
    poller.close()
    assert sum(Handler.connections) == 7 and len(Handler.connections) == 3


def test_a_body_that_did_not_change_is_not_parsed_again(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []
    real = llama_server.parse_metrics
    monkeypatch.setattr(
        llama_server, "parse_metrics", lambda text, invalid=None: parsed.append(text) or real(text, invalid)
    )
    source = LlamaServerSource("metrics", LlamaServerOptions(url=server, instance="llama-a"))
    for now in range(3):
        source.poll(float(now))
    BODIES["/metrics"] = b"llamacpp:requests_deferred 3\n"
    try:
        (event,) = source.poll(3.0).events
    finally:
        BODIES["/metrics"] = b"llamacpp:requests_deferred 2\nllamacpp:n_decode_total 7\n"
    source.close()
    assert len(parsed) == 2 and event.fields["metrics"] == {"requests_deferred": 3.0}
