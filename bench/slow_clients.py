"""Slow clients against /metrics: the agent's bounded http.server (a reception thread reads every request's
head before a worker takes it) against uvicorn (asyncio, h11: a slow client holds no thread either), both
serving the same metric state's /metrics in a process of their own; idle CPU from /proc, then each attack
(N connections dripping a request a byte every 0.2 s and reconnecting when cut; 32 half-sent requests
held open) while 19 scrapes are made 0.25 s apart: scrapes answered, their latency, and CPU.

    .venv/bin/python bench/slow_clients.py [--idle 20] [--clients 9 32 128]
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.live import cpu_seconds  # noqa: E402
from spyglass.ports import free_port  # noqa: E402

SERVERS = {
    "http.server": (
        "from spyglass import signals\n"
        "from spyglass.agent.server import AgentServer, ServerLimits\n"
        "from spyglass.signals.state import MetricState\n"
        "import threading\n"
        "s = AgentServer('127.0.0.1:{main}', MetricState(signals.full_catalogue()), dict,"
        " limits=ServerLimits(workers=32), metrics_listen='127.0.0.1:{port}').start()\n"
        "threading.Event().wait()\n"
    ),
    "uvicorn": (
        "import uvicorn\n"
        "from prometheus_client import generate_latest\n"
        "from spyglass import signals\n"
        "from spyglass.exporters.prometheus import CONTENT_TYPE_TEXT, registry_for\n"
        "from spyglass.signals.state import MetricState\n"
        "registry = registry_for(MetricState(signals.full_catalogue()))\n"
        "async def app(scope, receive, send):\n"
        "    if scope['type'] != 'http':\n"
        "        return\n"
        "    ok = scope['path'] == '/metrics'\n"
        "    body = generate_latest(registry) if ok else b'not found\\n'\n"
        "    await send({{'type': 'http.response.start', 'status': 200 if ok else 404,"
        " 'headers': [(b'content-type', CONTENT_TYPE_TEXT.encode())]}})\n"
        "    await send({{'type': 'http.response.body', 'body': body}})\n"
        "uvicorn.run(app, host='127.0.0.1', port={port}, log_level='warning', http='h11', lifespan='off')\n"
    ),
}


def start(name: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    code = SERVERS[name].format(port=port, main=free_port())
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            threading.Event().wait(0.1)
    proc.kill()
    raise RuntimeError(f"{name} did not start")


def drip(port: int, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                for byte in b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n":
                    s.sendall(bytes([byte]))
                    if stop.wait(0.2):
                        return
        except OSError:
            continue


def scrapes(url: str) -> tuple[int, list[float]]:
    answered, took = 0, []
    for _ in range(19):
        began = time.monotonic()
        with contextlib.suppress(httpx.HTTPError):
            answered += httpx.get(url, timeout=10).status_code == 200
        took.append(time.monotonic() - began)
        threading.Event().wait(0.25)
    return answered, took


def attack(proc: subprocess.Popen, url: str, clients: int, held: int) -> str:
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    stop = threading.Event()
    threads = [threading.Thread(target=drip, args=(port, stop), daemon=True) for _ in range(clients)]
    sockets = []
    for _ in range(held):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        sockets.append(s)
    for t in threads:
        t.start()
    before = cpu_seconds(proc.pid)
    began = time.monotonic()
    answered, took = scrapes(url)
    cpu = (cpu_seconds(proc.pid) - before) / (time.monotonic() - began)
    stop.set()
    for t in threads:
        t.join(timeout=10)
    for s in sockets:
        s.close()
    return (
        f"{answered}/19 answered, p50 {statistics.median(took) * 1000:.0f} ms, max {max(took) * 1000:.0f} ms,"
        f" CPU {cpu:.0%}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--idle", type=float, default=20.0)
    parser.add_argument("--clients", type=int, nargs="+", default=[9, 32, 128])
    args = parser.parse_args()
    for name in SERVERS:
        proc, url = start(name)
        try:
            threading.Event().wait(2)
            before = cpu_seconds(proc.pid)
            threading.Event().wait(args.idle)
            print(f"{name}: idle CPU {(cpu_seconds(proc.pid) - before) / args.idle:.2%} over {args.idle:.0f} s")
            for clients in args.clients:
                print(f"{name}: {clients} dripping clients: {attack(proc, url, clients, 0)}", flush=True)
            print(f"{name}: 32 half-sent requests held: {attack(proc, url, 0, 32)}", flush=True)
        finally:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
