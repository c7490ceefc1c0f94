"""The agent's HTTP server on one loopback port: /metrics, /health, /debug/sources, /api/sql, /v1/traces,
/api/alerts."""
from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from exporters.prometheus import registry_for
from exporters.state import MetricState


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class AgentServer:
    """/metrics, /health, /debug/sources, POST /api/sql, POST /v1/traces and POST /api/alerts (Alertmanager's
    webhook) on one loopback port."""

    def __init__(self, listen: str, state: MetricState, debug: Callable[[], dict[str, Any]],
                 query: Callable[[str], tuple[list[str], list[Any]]] | None = None,
                 traces: Callable[[bytes], None] | None = None,
                 alerts: Callable[[bytes], None] | None = None) -> None:
        host, _, port = listen.rpartition(":")
        registry = registry_for(state)

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                if self.path == "/v1/traces" and traces is not None:
                    self._traces()
                    return
                if self.path == "/api/alerts" and alerts is not None:
                    self._alerts()
                    return
                if self.path != "/api/sql" or query is None:
                    self._send(404, "text/plain", b"not found\n")
                    return
                try:
                    text = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))["query"]
                    columns, rows = query(str(text))
                except Exception as exc:  # noqa: BLE001 - the analyst gets the reason, the agent goes on
                    self._send(400, "application/json", json.dumps({"error": str(exc)}).encode())
                    return
                body = json.dumps({"columns": columns, "rows": rows}, default=str).encode()
                self._send(200, "application/json", body)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, CONTENT_TYPE_LATEST, generate_latest(registry))
                elif path == "/health":
                    self._send(200, "text/plain", b"ok\n")
                elif path == "/debug/sources":
                    self._send(200, "application/json", json.dumps(debug(), indent=2).encode())
                else:
                    self._send(404, "text/plain", b"not found\n")

            def _traces(self) -> None:
                try:
                    traces(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                except ValueError as exc:
                    self._send(400, "text/plain", str(exc).encode())
                    return
                self._send(200, "application/x-protobuf", b"")  # an empty ExportTraceServiceResponse

            def _alerts(self) -> None:
                try:
                    alerts(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                except ValueError as exc:
                    self._send(400, "text/plain", f"{exc}\n".encode())
                    return
                self._send(200, "text/plain", b"ok\n")

            def _send(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass  # scrapes every 15 s would drown the agent's own log

        server_class = _IPv6Server if ":" in host else ThreadingHTTPServer
        self.httpd = server_class((host.strip("[]"), int(port)), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="spyglass-http", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self) -> AgentServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
