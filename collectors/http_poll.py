"""HTTP for polled sources: one long-lived keep-alive connection per endpoint, one deadline over a whole poll.

An agent polling llama-server every second spent about 40 ms of CPU a poll building an httpx client and
an asyncio event loop for it (docs/benchmarks.md, issue #32). Here a source keeps one `HttpPoller` for
its life: the standard library's `http.client` over one connection, reused while the server keeps it
open (measured: 2 ms of CPU for llama-server's four endpoints, against 7 ms with a long-lived
`httpx.Client` and 13 ms with a long-lived `httpx.AsyncClient`).

The guarantees the async client gave stay: `deadline` covers a whole poll, connect, headers and bodies
(every read of the socket waits only for what is left of it, so a server dripping a byte at a time
cannot hold a poll longer); a body past `cap` bytes raises `BodyTooLarge` without being read further;
any failure closes the connection, and the next request opens a new one. A connection the server
closed while idle is retried once on a new one.
"""

from __future__ import annotations

import http.client
import io
import socket
import time
from typing import Any
from urllib.parse import urlsplit

CHUNK = 64 * 1024


class BodyTooLarge(Exception):
    """A body passed its cap."""


class HttpStatusError(Exception):
    """An answer other than 2xx where one was required (`status` is its code)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


class _DeadlineReader(socket.SocketIO):
    """The socket as http.client reads it (what socket.makefile gives, the socket kept open while the
    response reads): each read waits at most until the poll's deadline."""

    def __init__(self, conn: _Deadlined) -> None:
        super().__init__(conn.raw, "rb")
        self.conn = conn

    def readinto(self, buffer: Any) -> int | None:
        self.conn.arm()
        return super().readinto(buffer)


class _Deadlined:
    """What http.client holds as its socket: the real one, armed with the poll's deadline before each use."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.deadline = float("inf")

    def arm(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the poll's deadline passed")
        self.raw.settimeout(left)

    def makefile(self, mode: str, *args: Any, **kwargs: Any) -> io.BufferedReader:
        self.raw._io_refs += 1  # as socket.makefile: a close() waits for the reader's
        return io.BufferedReader(_DeadlineReader(self))

    def sendall(self, data: Any) -> None:
        self.arm()
        self.raw.sendall(data)

    def close(self) -> None:
        self.raw.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def _connection_class(scheme: str) -> type[http.client.HTTPConnection]:
    base = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection

    class Connection(base):  # type: ignore[valid-type,misc]
        def connect(self) -> None:
            super().connect()
            self.sock: Any = _Deadlined(self.sock)

    return Connection


class HttpPoller:
    """GETs to one scheme://host:port over one kept-alive connection; not for two threads at once."""

    def __init__(self, url: str) -> None:
        self.url, parts = url, urlsplit(url)
        self.invalid = None if parts.scheme in ("http", "https") and parts.hostname else f"not an http(s) URL: {url!r}"
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self._conn = _connection_class(parts.scheme)(parts.hostname or "", parts.port, timeout=10)
        self.deadline = float("inf")

    def start(self, seconds: float) -> None:
        """Begin a poll: every request until the next `start` must end within `seconds` from now."""
        self.deadline = time.monotonic() + seconds

    def get(self, url: str, cap: int, *, ok_only: bool = False) -> tuple[int, bytes]:
        """(status, body) of a GET of `url` (on this poller's origin; a path alone is taken on it).
        BodyTooLarge past `cap` bytes (a Content-Length over it is refused before the body);
        HttpStatusError for a status other than 2xx with `ok_only`; TimeoutError past the deadline;
        OSError or http.client.HTTPException when the exchange fails. Any error closes the connection."""
        if self.invalid is not None or not url.startswith(self.origin):  # a poll error (transport), as httpx made it
            raise http.client.InvalidURL(self.invalid or f"{url!r} is not on {self.origin}")
        path = url.removeprefix(self.origin) or "/"
        try:
            status, body = self._exchange(path, cap)
        except BaseException:
            self._conn.close()
            raise
        if ok_only and not 200 <= status < 300:
            raise HttpStatusError(status)
        return status, body

    def _exchange(self, path: str, cap: int) -> tuple[int, bytes]:
        conn = self._conn
        for attempt in (1, 2):
            reused = conn.sock is not None
            self._arm()
            try:
                conn.request("GET", path, headers={"Accept-Encoding": "identity"})
                response = conn.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                if not reused or attempt == 2:
                    raise
                conn.close()  # the server closed the idle connection: once more on a new one
                continue
            return response.status, _body(response, cap)
        raise AssertionError("unreachable")

    def _arm(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the poll's deadline passed")
        conn = self._conn
        conn.timeout = left  # the connect, when the connection is new
        if not isinstance(conn.sock, _Deadlined):
            conn.connect()
        sock: Any = conn.sock
        sock.deadline = self.deadline

    def close(self) -> None:
        self._conn.close()


def _body(response: http.client.HTTPResponse, cap: int) -> bytes:
    length = response.getheader("content-length", "")
    if length.isdigit() and int(length) > cap:
        raise BodyTooLarge
    body = bytearray()
    while chunk := response.read(CHUNK):
        body += chunk
        if len(body) > cap:
            raise BodyTooLarge
    if response.will_close:
        response.close()
    return bytes(body)
