"""Issue 21 item 6: `/metrics` has capacity no other path can take. 32 dripping connections left 0
of 39 scrapes answered; with `metrics_listen`, /metrics and /health have a port and workers of their
own, and every scrape there is answered while the main port's workers are all held."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import httpx
import pytest
from conftest import wait_until

from spyglass.ports import free_port


def test_dripping_connections_on_the_main_port_cannot_starve_a_scrape(tmp_path: Path) -> None:
    from spyglass.agent.runtime import Agent
    from spyglass.config import load_config

    port, metrics_port = free_port(), free_port()
    config = tmp_path / "spyglass.toml"
    config.write_text(
        f'[agent]\nstate_dir = "{tmp_path}"\n'
        f'[exporters.prometheus]\nlisten = "127.0.0.1:{port}"\nmetrics_listen = "127.0.0.1:{metrics_port}"\n'
        f"workers = 8\nrequest_timeout_seconds = 60\n[exporters.store]\nenabled = false\n"
        f'[sources.engine-a]\nkind = "engine_log"\npath = "{tmp_path / "a.log"}"\ninstance = "strata-a"\n'
    )
    agent = Agent(load_config(config))
    loop = threading.Thread(target=agent.serve, daemon=True)
    loop.start()
    main, scrape = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}"
    wait_until(lambda: _status(scrape + "/health") == 200, what="the metrics port serving")
    drips = []
    try:
        for _ in range(32):  # an attacker's half-sent requests: they held every worker of the main port
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            drips.append(s)
        answers = [_status(scrape + "/metrics") for _ in range(40)]
        assert answers == [200] * 40
        # round 4: a half-sent request holds no worker at all (it waits in the reception): the main port answers
        assert [_status(main + "/metrics") for _ in range(10)] == [200] * 10
        assert b"spyglass_agent_info" in httpx.get(scrape + "/metrics").content
        assert _status(scrape + "/debug/sources") == 404  # nothing else is served there
        assert (
            httpx.post(scrape + "/api/alerts", content=b"{}", headers={"Content-Type": "application/json"}).status_code
            == 404
        )
    finally:
        for s in drips:
            s.close()
        agent.stop.set()
        agent.wake.set()
        loop.join(timeout=60)


def _status(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=10).status_code
    except httpx.TransportError:
        return None


def test_the_metrics_port_takes_a_host_naming_its_own_port() -> None:
    """A Host header must name the port it reached: with a token and /metrics not open, a scrape of the
    metrics port naming that port is served (it was refused with 421 while the metrics port checked
    Host against the main port's number), and a Host naming the other port is refused on each."""
    from spyglass import signals
    from spyglass.agent.server import AgentServer, ServerLimits
    from spyglass.signals.state import MetricState

    limits = ServerLimits(token="t0ken", open_paths=("/health",))
    server = AgentServer(
        "127.0.0.1:0", MetricState(signals.full_catalogue()), dict, limits=limits, metrics_listen="127.0.0.1:0"
    ).start()
    try:
        main, scrape = server.url, server.metrics_url
        assert scrape is not None
        token = {"Authorization": "Bearer t0ken"}
        assert httpx.get(scrape + "/metrics", headers=token).status_code == 200
        assert httpx.get(main + "/metrics", headers=token).status_code == 200
        assert (
            httpx.get(scrape + "/metrics", headers={**token, "Host": main.removeprefix("http://")}).status_code == 421
        )
        assert (
            httpx.get(main + "/metrics", headers={**token, "Host": scrape.removeprefix("http://")}).status_code == 421
        )
        assert httpx.get(scrape + "/metrics").status_code == 401
    finally:
        server.stop()


def test_eight_dripping_connections_on_the_metrics_port_leave_every_scrape_answered() -> None:
    """Issue 29 item 9: `metrics_listen` has 8 workers (workers = 32), and 8 connections dripping a
    request a byte at a time, reconnecting when cut, left 2 of 19 scrapes answered (17 x 503). Now
    the metrics port waits at most scrape_read_seconds for a request, and one more worker is kept
    for scrapes: every scrape is answered."""
    from spyglass import signals
    from spyglass.agent.server import AgentServer, ServerLimits
    from spyglass.signals.state import MetricState

    server = AgentServer(
        "127.0.0.1:0",
        MetricState(signals.full_catalogue()),
        dict,
        limits=ServerLimits(workers=32, request_timeout_seconds=10),
        metrics_listen="127.0.0.1:0",
    ).start()
    assert server.metrics_url is not None
    port = int(server.metrics_url.rsplit(":", 1)[1])
    stop = threading.Event()

    def drip() -> None:
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                    for byte in b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n":
                        s.sendall(bytes([byte]))
                        if stop.wait(0.2):
                            return
            except OSError:
                continue  # cut by the server: come back at once

    drippers = [threading.Thread(target=drip, daemon=True) for _ in range(8)]
    for t in drippers:
        t.start()
    try:
        wait_until(lambda: _status(server.metrics_url + "/debug/sources") == 404, what="the metrics port up")
        answers = []
        for _ in range(19):
            answers.append(_status(server.metrics_url + "/metrics"))
            stop.wait(0.25)
        assert answers == [200] * 19, answers
    finally:
        stop.set()
        for t in drippers:
            t.join(timeout=10)
        server.stop()


def _dripping(port: int, clients: int, stop: threading.Event) -> list[threading.Thread]:
    """`clients` connections each dripping a request a byte every 0.2 s, reconnecting when cut."""

    def drip() -> None:
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                    for byte in b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n":
                        s.sendall(bytes([byte]))
                        if stop.wait(0.2):
                            return
            except OSError:
                continue  # cut by the server: come back at once

    threads = [threading.Thread(target=drip, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    return threads


@pytest.mark.parametrize("clients", [9, 16, 32, 128])
def test_any_number_of_dripping_clients_leaves_every_scrape_answered(clients: int) -> None:
    """Round 4: the kept worker covered exactly 8 dripping clients (8 workers): with 9, 14 of 19 scrapes were
    answered; with 16, 6; with 32, 3. Now a connection holds no worker until its request's head has arrived."""
    from spyglass import signals
    from spyglass.agent.server import AgentServer, ServerLimits
    from spyglass.signals.state import MetricState

    server = AgentServer(
        "127.0.0.1:0",
        MetricState(signals.full_catalogue()),
        dict,
        limits=ServerLimits(workers=32, request_timeout_seconds=10),
        metrics_listen="127.0.0.1:0",
    ).start()
    assert server.metrics_url is not None
    stop = threading.Event()
    drippers = _dripping(int(server.metrics_url.rsplit(":", 1)[1]), clients, stop)
    try:
        wait_until(lambda: _status(server.metrics_url + "/debug/sources") == 404, what="the metrics port up")
        answers = []
        for _ in range(19):
            answers.append(_status(server.metrics_url + "/metrics"))
            stop.wait(0.25)
        assert answers == [200] * 19, answers
    finally:
        stop.set()
        for t in drippers:
            t.join(timeout=10)
        server.stop()
