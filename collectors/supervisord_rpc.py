"""supervisord's XML-RPC API (`getAllProcessInfo`), polled over its unix socket or http URL.

The log says why a process ended; the API says what runs now, with epoch times and pids. A
restart is counted whenever a program's (pid, start) changes, which catches restarts that happen
between two polls. Also the pid lookup the host collector uses (`pid_of`). Standard library only.
Fixture: the real supervisord of tests/test_supervisord_real.py.
"""

from __future__ import annotations

import http.client
import socket
import xmlrpc.client
from typing import Any, Literal, cast

from pydantic import Field, model_validator

from spyglass.collectors import PolledOptions, PolledSourceBase, PollPolicy, PollResult, register
from spyglass.collectors.event import Event
from spyglass.collectors.fields import POLL_ERROR, declare


class UnixStreamTransport(xmlrpc.client.Transport):
    """xmlrpc.client over an AF_UNIX socket (supervisord's [unix_http_server])."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__()
        self.path, self.timeout = path, timeout

    def make_connection(self, host: Any) -> http.client.HTTPConnection:
        connection = http.client.HTTPConnection("localhost", timeout=self.timeout)
        path, timeout = self.path, self.timeout

        def connect() -> None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            try:
                sock.connect(path)
            except OSError:
                sock.close()
                raise
            connection.sock = sock

        connection.connect = connect  # type: ignore[method-assign]
        self._connection = (host, connection)  # so that Transport.close() closes it
        return connection


def rpc(endpoint: str, timeout: float = 2.0) -> xmlrpc.client.ServerProxy:
    """A proxy to `unix:///path/supervisor.sock` or `http://127.0.0.1:9001/RPC2`."""
    if endpoint.startswith("unix://"):
        return xmlrpc.client.ServerProxy(
            "http://localhost/RPC2", transport=UnixStreamTransport(endpoint[len("unix://") :], timeout)
        )
    return xmlrpc.client.ServerProxy(endpoint)


def pid_of(endpoint: str, program: str) -> int | None:
    """The pid supervisord reports for `program`, or None when it is not running or unreachable."""
    try:
        with rpc(endpoint) as proxy:
            info = cast(dict[str, Any], proxy.supervisor.getProcessInfo(program))
            pid = info["pid"]
    except (OSError, xmlrpc.client.Error):
        return None
    return int(pid) or None


class SupervisordRpcOptions(PolledOptions):
    kind: Literal["supervisord_rpc"] = "supervisord_rpc"
    endpoint: str = Field("unix:///var/run/supervisor.sock", description="unix:///path or http://host:port/RPC2.")
    interval_seconds: float = Field(5.0, gt=0, description="Seconds between polls.")
    timeout_seconds: float = Field(2.0, gt=0, description="Socket timeout of one poll.")

    @model_validator(mode="after")
    def _endpoint(self) -> SupervisordRpcOptions:
        if not self.endpoint.startswith(("unix://", "http://127.", "http://localhost", "http://[::1]")):
            raise ValueError("endpoint must be unix:///path or a loopback http:// URL")
        return self


declare(
    "supervisord_rpc",
    {
        "process_info": {
            "name": "text",
            "group": "text",
            "statename": "text",
            "pid": "int",
            "start": "int",
            "stop": "int",
            "exitstatus": "int",
            "spawnerr": "text",
        },
        "restarted": {"pid": "int", "start": "int"},
        **POLL_ERROR,
    },
)


@register("supervisord_rpc", SupervisordRpcOptions)
class SupervisordRpcSource(PolledSourceBase):
    """Polls getAllProcessInfo: one `process_info` event per program, `restarted` when (pid, start) moved."""

    def __init__(self, name: str, options: SupervisordRpcOptions, host: str = "") -> None:
        self.name, self.options, self.host = name, options, host
        self.seen: dict[str, list[int]] = {}  # program -> [pid, start] at the last poll

    def poll_policy(self) -> PollPolicy:
        return PollPolicy(self.options.interval_seconds)

    def poll(self, now: float) -> PollResult:
        try:
            with rpc(self.options.endpoint, self.options.timeout_seconds) as proxy:
                infos = cast(list[dict[str, Any]], proxy.supervisor.getAllProcessInfo())
        except (OSError, xmlrpc.client.Error) as exc:
            return PollResult(
                [Event(now, self.name, "poll_error", "supervisord", {"error": type(exc).__name__}, None, self.host)],
                ok=False,
            )
        events = []
        for info in infos:
            program = str(info["name"])
            fields: dict[str, Any] = {
                k: info[k]
                for k in ("name", "group", "statename", "pid", "start", "stop", "exitstatus", "spawnerr")
                if k in info
            }
            events.append(Event(now, self.name, "process_info", program, fields, None, self.host))
            before, current = self.seen.get(program), [int(info["pid"]), int(info["start"])]
            if before is not None and current[0] and before != current and current[1] != before[1]:
                events.append(
                    Event(
                        now, self.name, "restarted", program, {"pid": current[0], "start": current[1]}, None, self.host
                    )
                )
            self.seen[program] = current
        return PollResult(events)

    def checkpoint(self) -> dict[str, Any]:
        return {"seen": self.seen}

    def restore(self, saved: dict[str, Any]) -> None:
        self.seen = {k: list(v) for k, v in saved.get("seen", {}).items()}
