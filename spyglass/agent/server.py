"""The agent's HTTP server on one port: /metrics, /health, /debug/sources, /api/sql, /v1/traces,
/api/alerts (Alertmanager's webhook), /api/smoke (the smoke gate's results), and the pages under
/evidence/ and /trace/ (spyglass.agent.evidence_route; a route keyed `/name/` serves every path under it).

Every request is bounded: a connection holds no worker until its request line and headers have arrived
(a reception thread reads them for every connection at once; a head not sent within
`request_timeout_seconds`, `scrape_read_seconds` on the metrics port, is dropped there, as are the oldest
past MAX_PENDING), so no number of slow or dripping clients can starve a scrape; at most `workers` are
served at once (past that a connection gets 503 at once, never a queue), its body must arrive within
`request_timeout_seconds` (a half-sent body is dropped at its deadline, so it cannot pin a worker),
a body must have a Content-Length no larger than `max_body_bytes` (else 411 or 413, unread), and
with a token configured every path but `open_paths` needs `Authorization: Bearer TOKEN`.

No web page can make it act (cross-site requests, DNS rebinding): a POST needs its endpoint's
Content-Type (application/json, or application/x-protobuf for /v1/traces; else 415), an `Origin`
header, if any, must be the agent's own (else 403), and on a loopback listener every path but
`open_paths` needs a `Host` naming a loopback address and the port (else 421).
"""

from __future__ import annotations

import contextlib
import hmac
import io
import json
import queue
import selectors
import socket
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import _SocketWriter  # type: ignore[attr-defined]  # http.server's own writer
from typing import Any

from loguru import logger
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics

from spyglass.agent.budgets import Refused
from spyglass.exporters.prometheus import CONTENT_TYPE_OPENMETRICS, CONTENT_TYPE_TEXT, registry_for, wants_openmetrics
from spyglass.signals.state import MetricState


class ListenError(Exception):
    """The listen address could not be bound (in use, not an address of this host, no permission)."""


class NotYetStored(Exception):
    """A POSTed body's events are not committed: refused while the store fails (nothing taken), or
    taken and not committed in time (stored once the store recovers): `taken` says which."""

    def __init__(self, message: str, taken: bool = False) -> None:
        super().__init__(message)
        self.taken = taken


@dataclass(frozen=True)
class ServerLimits:
    workers: int = 32
    request_timeout_seconds: float = 10.0
    max_body_bytes: int = 1 << 20
    token: str | None = None
    open_paths: tuple[str, ...] = ("/metrics", "/health")
    scrape_read_seconds: float = 2.0  # on the metrics port: how long a request may take to arrive


class _DeadlineReader(io.RawIOBase):
    """A socket's bytes until a deadline, after the `head` the reception already read: each recv waits only
    for what is left of it."""

    def __init__(self, sock: socket.socket, deadline: float, head: bytes = b"") -> None:
        self.sock, self.deadline, self.head = sock, deadline, memoryview(head)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.head:
            n = min(len(buffer), len(self.head))
            buffer[:n] = self.head[:n]
            self.head = self.head[n:]
            return n
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request not received in time")
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)


SCRAPE_READ_SECONDS = 1.0  # a scrape sends its whole request at once: the kept worker waits no longer
_connection = (
    threading.local()
)  # the worker's current connection: its read budget, whether it is the kept one, its head
MAX_PENDING = 256  # connections whose head has not arrived, per port: past it the oldest is dropped
MAX_HEAD = 64 << 10  # bytes of a request line and headers (http.server reads at most 100 headers of 64 KiB)
HEAD_ENDS = (b"\r\n\r\n", b"\n\n")


class _Reception:
    """Connections until their request line and headers have arrived, read on one thread for all of them: a
    complete head is handed on (`deliver`) with its bytes; a connection that closes, sends more than MAX_HEAD
    without a blank line, or not a whole head within `seconds`, is closed here, and past MAX_PENDING the
    oldest is. A slow or dripping client holds a socket here, never a worker."""

    def __init__(self, deliver: Callable[[socket.socket, Any, bytes], None], seconds: float) -> None:
        self.deliver, self.seconds = deliver, seconds
        self.selector = selectors.DefaultSelector()
        self.incoming: queue.SimpleQueue[tuple[socket.socket, Any]] = queue.SimpleQueue()
        self.wake, self.waker = socket.socketpair()
        self.wake.setblocking(False)
        self.waker.setblocking(False)
        self.selector.register(self.wake, selectors.EVENT_READ)
        self.pending: OrderedDict[socket.socket, tuple[Any, bytearray, float]] = OrderedDict()
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._run, name="spyglass-reception", daemon=True)
        self.thread.start()

    def add(self, sock: socket.socket, address: Any) -> None:
        self.incoming.put((sock, address))
        with contextlib.suppress(OSError):  # the wake-up pipe is full: the loop is awake anyway
            self.waker.send(b"\0")

    def close(self) -> None:
        self.closed.set()
        with contextlib.suppress(OSError):  # the loop may have closed the pipe already: then it is gone
            self.waker.send(b"\0")
        self.thread.join(timeout=5)
        self._close_incoming()  # what arrived while the loop was leaving (CI once found one, unclosed)

    def _close_incoming(self) -> None:
        """Close what is queued; safe from two threads at once (a loop slower than close's join is still leaving)."""
        while True:
            try:
                sock, _ = self.incoming.get_nowait()
            except queue.Empty:
                return
            sock.close()

    def _run(self) -> None:
        while not self.closed.is_set():
            first = next(iter(self.pending.values()), None)
            wait = 1.0 if first is None else max(0.0, min(1.0, first[2] - time.monotonic()))
            for key, _ in self.selector.select(wait):
                if key.fileobj is self.wake:
                    self._take()
                else:
                    self._read(key.fileobj)  # type: ignore[arg-type]
            now = time.monotonic()
            while self.pending and next(iter(self.pending.values()))[2] <= now:
                self._drop(next(iter(self.pending)))
        self._close_incoming()
        for sock in [*self.pending, self.wake, self.waker]:
            self._drop(sock)
        self.selector.close()

    def _take(self) -> None:
        try:
            while self.wake.recv(4096):
                pass
        except OSError:
            pass
        while not self.incoming.empty():
            sock, address = self.incoming.get()
            sock.setblocking(False)
            self.selector.register(sock, selectors.EVENT_READ)
            self.pending[sock] = (address, bytearray(), time.monotonic() + self.seconds)
            if len(self.pending) > MAX_PENDING:
                self._drop(next(iter(self.pending)))

    def _read(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(MAX_HEAD)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data or sock not in self.pending:
            self._drop(sock)
            return
        address, head, _ = self.pending[sock]
        head += data
        if any(end in head for end in HEAD_ENDS):
            self.selector.unregister(sock)
            del self.pending[sock]
            sock.setblocking(True)
            self.deliver(sock, address, bytes(head))
        elif len(head) > MAX_HEAD:
            self._drop(sock, b"HTTP/1.0 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n\r\n")

    def _drop(self, sock: socket.socket, answer: bytes = b"") -> None:
        self.pending.pop(sock, None)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(sock)
        try:
            if answer:
                sock.send(answer)
        except OSError:
            pass
        sock.close()


class _BoundedServer(HTTPServer):
    """HTTPServer with a fixed pool of workers instead of a thread per connection, plus one worker
    kept for scrapes.

    While every worker is busy a new connection gets the kept worker, which serves only GET /metrics
    and /health and waits at most SCRAPE_READ_SECONDS for the request (a dripping client cannot hold
    it); while that one is busy too, 503 at once: waiting for a worker would hold the accept loop, so
    a flood of half-sent requests would delay every other client."""

    request_queue_size = 64

    def __init__(self, address: tuple[str, int], site: Site, workers: int, family: int) -> None:
        self.address_family, self.site = family, site
        # Before the bind: a failed bind calls server_close, which shuts the pool down.
        self.pool = ThreadPoolExecutor(workers + 1, thread_name_prefix="spyglass-http")
        self.slots = threading.BoundedSemaphore(workers)
        self.kept = threading.BoundedSemaphore(1)
        limits = site.limits
        seconds = limits.request_timeout_seconds
        self.reception = _Reception(
            self._dispatch, min(seconds, limits.scrape_read_seconds) if site.only is not None else seconds
        )
        super().__init__(address, AgentHandler)

    def process_request(self, request: Any, client_address: Any) -> None:  # a socket, for TCP
        self.reception.add(request, client_address)

    def _dispatch(self, request: socket.socket, client_address: Any, head: bytes) -> None:
        """A connection whose head has arrived: to a worker, the kept one (scrapes only), or 503 at once."""
        if self.slots.acquire(blocking=False):
            self.pool.submit(self._serve, request, client_address, self.slots, None, head)
        elif self.kept.acquire(blocking=False):
            self.pool.submit(self._serve, request, client_address, self.kept, SCRAPE_READ_SECONDS, head)
        else:
            try:
                request.setblocking(False)  # the reception thread never waits on a client
                request.send(b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 5\r\nRetry-After: 1\r\n\r\nbusy\n")
            except OSError:
                pass
            self.shutdown_request(request)

    def _serve(
        self,
        request: socket.socket,
        client_address: Any,
        slot: threading.BoundedSemaphore,
        scrape_only: float | None,
        head: bytes,
    ) -> None:
        _connection.scrape_only, _connection.head = scrape_only, head
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - a broken connection costs itself, never the server
            pass
        finally:
            _connection.scrape_only, _connection.head = None, b""
            self.shutdown_request(request)
            slot.release()

    def server_close(self) -> None:
        super().server_close()
        self.reception.close()
        self.pool.shutdown(wait=False, cancel_futures=True)


def bind(listen: str, site: Site, workers: int, what: str) -> _BoundedServer:
    """A bounded server for `site` on `listen` (host:port, [v6]:port), with the site's `loopback` set
    to the port it got; ListenError if it cannot bind."""
    host, _, port = listen.rpartition(":")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        httpd = _BoundedServer((host.strip("[]"), int(port)), site, workers, family)
    except OSError as exc:
        raise ListenError(f"cannot listen on {listen}{what}: {exc.strerror or exc}") from None
    site.loopback = _loopback_port(host, httpd.server_address[1])
    return httpd


LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})
# What a POST body must be: a browser page can send only text/plain, form types and multipart
# without a CORS preflight, so none of those is taken.
POST_TYPES = {
    "/v1/traces": ("application/x-protobuf",),
    "/api/sql": ("application/json",),
    "/api/alerts": ("application/json",),
    "/api/smoke": ("application/json",),
}


def _loopback_port(host: str, port: int) -> int | None:
    """The port, when the server listens on a loopback address (then Host is checked), else None."""
    import ipaddress

    name = host.strip("[]")
    try:
        return port if name == "localhost" or ipaddress.ip_address(name).is_loopback else None
    except ValueError:
        return None


def host_allowed(host: str | None, loopback: int | None) -> bool:
    """On a loopback listener, `Host` must name a loopback address and the port: a page whose name
    an attacker pointed at 127.0.0.1 (DNS rebinding) carries its own name. Off loopback a token
    guards every path, and Host is not checked. No Host at all (HTTP/1.0 tools) is allowed."""
    if loopback is None or host is None:
        return True
    name, _, port = host.strip().lower().rpartition(":")
    return name in LOOPBACK_NAMES and port == str(loopback)


def cross_site_refusal(path: str, headers: Any, loopback: int | None) -> tuple[int, str] | None:
    """Why a POST is refused as a possible cross-site request, or None: a `Content-Type` other than
    the endpoint's (415), or an `Origin` other than the agent's own (403; browsers send one with
    every cross-origin POST, `no-cors` included)."""
    kind = headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
    wanted = POST_TYPES.get(path, ("application/json",))
    if kind not in wanted:
        return 415, f"{path} takes Content-Type {' or '.join(wanted)}, not {kind[:60] or 'none'}\n"
    origin = headers.get("Origin")
    if origin is not None and origin.strip().lower() != f"http://{headers.get('Host', '').strip().lower()}":
        return 403, "a request from another origin (a web page?) is refused\n"
    return None


Route = Callable[["AgentHandler", bytes], None]  # answers one request; a GET route is given b""


def prefix(path: str) -> str:
    """`/evidence/` of `/evidence/NAME`: the key of a route that serves every path under it."""
    cut = path.find("/", 1)
    return path[: cut + 1] if cut > 0 else ""


@dataclass
class Site:
    """What one listening port serves: its route table, (method, path) -> route, and its limits.
    A port of a few paths has `only`: the 404 body any other request gets, before any check.
    `loopback` is the port a Host header must name (see host_allowed), once the server is bound."""

    routes: dict[tuple[str, str], Route]
    limits: ServerLimits
    only: bytes | None = None
    loopback: int | None = None

    @property
    def expected_token(self) -> bytes | None:
        return self.limits.token.encode() if self.limits.token else None


class AgentHandler(BaseHTTPRequestHandler):
    """One request to a port of the agent, answered by its route in the server's `Site` after the
    checks the module docstring lists: Host, token, and for a POST its Content-Type, Origin and body."""

    server: _BoundedServer

    def setup(self) -> None:
        self.connection = self.request
        self.scrape_only = getattr(_connection, "scrape_only", None)
        read = self.server.site.limits.request_timeout_seconds
        if self.scrape_only is not None:
            read = min(read, self.scrape_only)
        elif self.server.site.only is not None:  # the metrics port: a GET, its request sent at once
            read = min(read, self.server.site.limits.scrape_read_seconds)
        head = getattr(_connection, "head", b"")
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, time.monotonic() + read, head))
        self.wfile = _SocketWriter(self.connection)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self.route("POST")

    def route(self, method: str) -> None:
        site, path = self.server.site, self.path.split("?", 1)[0]
        if self.scrape_only is not None and (method, path) not in METRICS_ONLY:
            self.close_connection = True
            self.answer(
                503, "text/plain", b"busy: the last worker is kept for /metrics and /health\n", {"Retry-After": "1"}
            )
            return
        route = site.routes.get((method, path)) or site.routes.get((method, prefix(path)))
        if route is None and site.only is not None:
            if method == "POST":
                self.close_connection = True
            self.answer(404, "text/plain", site.only)
            return
        if not self._allowed(path):
            return
        if route is None:
            other = "POST" if method == "GET" else "GET"
            known = (
                path
                if site.routes.get((other, path))
                else prefix(path)
                if site.routes.get((other, prefix(path)))
                else ""
            )
            if known:  # named by the route, never by the rest of the path the client sent
                hint = ' with a JSON body {"query": "SELECT ..."}' if known == "/api/sql" else ""
                self.close_connection = method == "POST"  # its body is not read
                self.answer(405, "text/plain", f"{known} takes {other}{hint}\n".encode(), {"Allow": other})
                return
            self.answer(404, "text/plain", b"not found\n")
            return
        if method == "GET":
            route(self, b"")
            return
        body = self._post_body(path)
        if body is None:
            return
        self.connection.settimeout(site.limits.request_timeout_seconds)  # for writing the answer
        try:
            route(self, body)
        except Exception as exc:  # noqa: BLE001 - a bug a body found: said to the sender and logged, never a silent hang-up
            failed(exc, f"POST {path}")
            self.answer(500, "text/plain", b"internal error (logged by the agent); nothing was stored\n")

    def _allowed(self, path: str) -> bool:
        site = self.server.site
        if path not in site.limits.open_paths and not host_allowed(self.headers.get("Host"), site.loopback):
            self.close_connection = True
            self.answer(421, "text/plain", b"Host is not this agent's loopback address (DNS rebinding?)\n")
            return False
        expected = site.expected_token
        if expected is None or path in site.limits.open_paths:
            return True
        scheme, _, given = self.headers.get("Authorization", "").strip().partition(" ")
        # RFC 7235: the scheme is case-insensitive (`bearer` too); the token compared in constant time
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), expected):
            return True
        self.answer(401, "text/plain", b"a bearer token is required\n", {"WWW-Authenticate": "Bearer"})
        return False

    def _post_body(self, path: str) -> bytes | None:
        """The body of a POST that is not cross-site, or None once the refusal is answered."""
        refusal = cross_site_refusal(path, self.headers, self.server.site.loopback)
        if refusal is not None:
            self.close_connection = True
            self.answer(refusal[0], "text/plain", refusal[1].encode())
            return None
        return self._body()

    def _body(self) -> bytes | None:
        length, most = self.headers.get("Content-Length", ""), self.server.site.limits.max_body_bytes
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower() or not length.isdigit():
            self.answer(411, "text/plain", b"a Content-Length is required\n")
            return None
        if int(length) > most:
            self.answer(413, "text/plain", f"body over {most} bytes\n".encode())
            return None
        try:
            body = self.rfile.read(int(length))
        except (TimeoutError, OSError):
            self.close_connection = True
            return None
        if len(body) < int(length):
            self.close_connection = True
            return None
        return body

    def answer(self, status: int, content_type: str, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in {"X-Content-Type-Options": "nosniff", **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass  # scrapes every 15 s would drown the agent's own log


def failed(exc: Exception, what: str) -> None:
    """A request that failed: its traceback logged the first time its kind fails, then a count at each power of
    ten (a client repeating a request that fails cannot fill the agent's log)."""
    kind = type(exc).__name__
    FAILURES[kind] += 1
    n = FAILURES[kind]
    if n == 1:
        logger.opt(exception=exc).error("{} failed ({}; said once per kind of failure)", what, kind)
    elif str(n).rstrip("0") == "1":  # 10, 100, 1000, ...
        logger.error("{} failed ({}): {} requests have failed so far with this kind", what, kind, n)


def metrics(registry: CollectorRegistry, with_exemplars: CollectorRegistry, request: AgentHandler, body: bytes) -> None:
    if wants_openmetrics(request.headers.get("Accept")):
        request.answer(200, CONTENT_TYPE_OPENMETRICS, openmetrics.generate_latest(with_exemplars))
    else:
        request.answer(200, CONTENT_TYPE_TEXT, generate_latest(registry))


def health(problems: Callable[[], list[str]], request: AgentHandler, body: bytes) -> None:
    """200 `ok` while every source can be read; 200 `degraded` and a line per problem (a source whose
    path holds a FIFO, say) otherwise: the agent is alive either way, and says what it cannot read."""
    found = problems()
    request.answer(
        200, "text/plain", "".join(f"{line}\n" for line in ["degraded", *found]).encode() if found else b"ok\n"
    )


def debug_sources(debug: Callable[[], dict[str, Any]], request: AgentHandler, body: bytes) -> None:
    request.answer(200, "application/json", json.dumps(debug(), indent=2).encode())


def sql(query: Callable[[str], dict[str, Any]], request: AgentHandler, body: bytes) -> None:
    """200 with the answer; 400 with the reason for a body without a string `query`, or a query refused."""
    try:
        text = json.loads(body)["query"]
        if not isinstance(text, str):
            raise ValueError("query must be a string")
        answer = query(text)
    except Exception as exc:  # noqa: BLE001 - the analyst gets the reason, the agent goes on
        request.answer(400, "application/json", json.dumps({"error": str(exc)}).encode())
        return
    request.answer(200, "application/json", json.dumps(answer).encode())


def otlp_traces(receive: Callable[[bytes], None], request: AgentHandler, body: bytes) -> None:
    """200 once taken (stored at the next commit); 400 for a body that is no export; 413, 429 or 503
    (with Retry-After) past a budget or while the store cannot commit (spyglass.agent.budgets)."""
    try:
        receive(body)
    except ValueError as exc:
        request.answer(400, "text/plain", str(exc).encode())
        return
    except Refused as exc:
        request.answer(exc.status, "text/plain", f"{exc}\n".encode(), exc.headers())
        return
    request.answer(200, "application/x-protobuf", b"")  # an empty ExportTraceServiceResponse


def store_and_answer(
    committing: threading.BoundedSemaphore, store: Callable[[bytes], str | None], request: AgentHandler, body: bytes
) -> None:
    """200 once the body's events are committed (its text what `store` returned, or ok: what was not
    stored and why); 400 for a body that is not one (nothing stored);
    503 while the store fails or half the workers already wait for a commit (nothing taken: the
    sender retries, as Alertmanager does)."""
    if not committing.acquire(blocking=False):
        request.answer(
            503,
            "text/plain",
            b"busy: other POSTs wait for the next commit; nothing was taken, retry\n",
            {"Retry-After": "1"},
        )
        return
    try:
        answer = store(body)
    except ValueError as exc:
        request.answer(400, "text/plain", f"{exc}\n".encode())
        return
    except NotYetStored as exc:
        request.answer(503, "text/plain", f"{exc}\n".encode(), {"Retry-After": "5"})
        return
    except Refused as exc:
        request.answer(exc.status, "text/plain", f"{exc}\n".encode(), exc.headers())
        return
    finally:
        committing.release()
    request.answer(200, "text/plain", (answer or "ok\n").encode())


def route_table(
    state: MetricState,
    debug: Callable[[], dict[str, Any]],
    limits: ServerLimits,
    query: Callable[[str], dict[str, Any]] | None = None,
    traces: Callable[[bytes], None] | None = None,
    alerts: Callable[[bytes], str | None] | None = None,
    smoke: Callable[[bytes], str | None] | None = None,
    problems: Callable[[], list[str]] = list,
) -> dict[tuple[str, str], Route]:
    """(method, path) -> route: the GETs always, each POST when its callable is given."""
    # A POST that stores holds its worker until the commit (up to a commit interval): at most half
    # the workers wait so, and the rest stay free for /metrics, however many senders retry at once.
    committing = threading.BoundedSemaphore(max(1, limits.workers // 2))
    posts: dict[str, Route | None] = {
        "/v1/traces": traces and partial(otlp_traces, traces),
        "/api/sql": query and partial(sql, query),
        "/api/alerts": alerts and partial(store_and_answer, committing, alerts),
        "/api/smoke": smoke and partial(store_and_answer, committing, smoke),
    }
    return {
        ("GET", "/metrics"): partial(metrics, registry_for(state), registry_for(state, exemplars=True)),
        ("GET", "/health"): partial(health, problems),
        ("GET", "/debug/sources"): partial(debug_sources, debug),
        **{("POST", path): route for path, route in posts.items() if route},
    }


METRICS_ONLY = (("GET", "/metrics"), ("GET", "/health"))
FAILURES: Counter[str] = Counter()  # requests that failed (a 500), by kind of failure (the exception's type)


class AgentServer:
    """/metrics, /health, /debug/sources, POST /api/sql, /v1/traces, /api/alerts and /api/smoke on one port, bounded;
    with `metrics_listen`, /metrics and /health also on a port of their own, whose workers no
    other path can take (dripping or flooding requests to the main port cannot starve a scrape)."""

    def __init__(
        self,
        listen: str,
        state: MetricState,
        debug: Callable[[], dict[str, Any]],
        query: Callable[[str], dict[str, Any]] | None = None,
        traces: Callable[[bytes], None] | None = None,
        limits: ServerLimits = ServerLimits(),
        alerts: Callable[[bytes], str | None] | None = None,
        smoke: Callable[[bytes], str | None] | None = None,
        metrics_listen: str | None = None,
        problems: Callable[[], list[str]] = list,
        pages: dict[tuple[str, str], Route] | None = None,
    ) -> None:
        routes = {**route_table(state, debug, limits, query, traces, alerts, smoke, problems), **(pages or {})}
        site = Site(routes, limits)
        self.httpd = bind(listen, site, limits.workers, "")
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="spyglass-http", daemon=True)
        self.metrics_httpd: _BoundedServer | None = None
        if metrics_listen:
            only = Site({key: routes[key] for key in METRICS_ONLY}, limits, b"only /metrics and /health on this port\n")
            try:
                self.metrics_httpd = bind(metrics_listen, only, max(4, limits.workers // 4), " (metrics_listen)")
            except ListenError:
                self.httpd.server_close()
                raise

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    @property
    def metrics_url(self) -> str | None:
        """Where /metrics has workers of its own (`metrics_listen`), if configured."""
        if self.metrics_httpd is None:
            return None
        host, port = self.metrics_httpd.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self) -> AgentServer:
        self.thread.start()
        if self.metrics_httpd is not None:
            threading.Thread(target=self.metrics_httpd.serve_forever, name="spyglass-metrics", daemon=True).start()
        return self

    def stop(self) -> None:
        for httpd in (self.httpd, self.metrics_httpd):
            if httpd is not None:
                httpd.shutdown()
                httpd.server_close()
