"""GET /evidence/ALERTNAME?LABEL=VALUE...[&at=RFC3339][&from=RFC3339] and GET /trace/ID: an alert's evidence
page and a request's trace page, HTML, served by the agent from its store (read-only, through the same
bounded query path as /api/sql). Behind the server's checks like every path: loopback Host, or the token.

A bad name, label or time is a 400 saying which, in one line (a time must lie between 2000 and a day past
now, as every timestamp from outside: collectors/timebounds.py; a label name is Prometheus's, a value at
most MAX_LABEL_CHARS); an unknown alert, an alert that never notified this agent (without `at`) or an
unknown request a 404; a query the limits stop a 503. A page that fails anyway is a 500 whose traceback is
logged once per kind of failure, then counted in one line (never a traceback per request). The pages fetch
nothing: a Content-Security-Policy forbids every script and every load but inline styles and images."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, unquote, urlsplit

from spyglass.agent.server import failed
from spyglass.collectors import timebounds
from spyglass.config import Config
from spyglass.query.bounded import Answer, QueryError

if TYPE_CHECKING:
    from spyglass.agent.server import AgentHandler

EVIDENCE, TRACE = "/evidence/", "/trace/"
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
MAX_FIELDS = 40
MAX_LABEL_CHARS = 1024  # a label value from an alert's link: far above any the rules write
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]{0,127}")


def rfc3339(name: str, text: str, now: float | None = None) -> datetime:
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace(" ", "+"))
    except ValueError:
        raise QueryError(f"{name}: not an RFC 3339 time: {text[:40]!r}") from None
    if moment.tzinfo is None:
        raise QueryError(f"{name}: an RFC 3339 time needs its offset (Z or +08:00): {text[:40]!r}")
    try:
        reason = timebounds.problem(moment.timestamp(), time.time() if now is None else now)
    except (OverflowError, ValueError, OSError):  # year 1 with a positive offset: past what a datetime holds
        reason = "out of range"
    if reason is not None:
        raise QueryError(f"{name}: {text[:40]!r} is not between 2000-01-01 and a day past now")
    return moment


def evidence_request(target: str) -> tuple[str, dict[str, str], datetime | None, datetime | None]:
    """(alertname, labels, at, from) of a request target; QueryError for one that is not."""
    parts = urlsplit(target)
    name = unquote(parts.path[len(EVIDENCE) :])
    try:
        # not strict: the rules' template ends the query with "&" (Go templates cannot tell the last label)
        fields = parse_qsl(parts.query, keep_blank_values=True, max_num_fields=MAX_FIELDS)
    except ValueError as exc:
        raise QueryError(f"the query string: {exc}") from None
    labels: dict[str, str] = {}
    for key, value in fields:
        if key in labels:
            raise QueryError(f"label {key[:80]!r} given twice")
        if not LABEL_NAME.fullmatch(key):
            raise QueryError(f"not a label name: {key[:80]!r}")
        if len(value) > MAX_LABEL_CHARS:
            raise QueryError(f"label {key}: a value over {MAX_LABEL_CHARS} characters")
        labels[key] = value
    at, start = labels.pop("at", None), labels.pop("from", None)
    return (
        name,
        labels,
        rfc3339("at", at) if at is not None else None,
        rfc3339("from", start) if start is not None else None,
    )


def _answer(request: AgentHandler, render: Callable[[], str]) -> None:
    from spyglass.forensics.evidence import NotFound

    try:
        page = render()
    except NotFound as exc:
        request.answer(404, "text/plain; charset=utf-8", f"{exc}\n".encode())
        return
    except QueryError as exc:
        text = str(exc)
        busy = "busy" in text or "interrupted" in text or "limits" in text
        request.answer(503 if busy else 400, "text/plain; charset=utf-8", f"{text}\n".encode())
        return
    except Exception as exc:  # noqa: BLE001 - a page that fails is said and logged, never a hang-up
        failed(exc, f"GET {urlsplit(request.path).path[:120]}")
        request.answer(500, "text/plain", b"internal error (logged by the agent)\n")
        return
    request.answer(200, "text/html; charset=utf-8", page.encode(), HEADERS)


def evidence(config: Config, ask: Callable[[str], Answer], request: AgentHandler, body: bytes) -> None:
    def render() -> str:
        from spyglass.forensics.evidence import build
        from spyglass.forensics.evidence_page import html
        from spyglass.forensics.run import session

        name, labels, at, start = evidence_request(request.path)
        with session(config, ask=ask):
            return html(build(config, name, labels, at, start))

    _answer(request, render)


def trace(config: Config, ask: Callable[[str], Answer], request: AgentHandler, body: bytes) -> None:
    def render() -> str:
        from spyglass.forensics.run import session
        from spyglass.forensics.trace_page import trace_page

        given = unquote(urlsplit(request.path).path[len(TRACE) :])
        with session(config, ask=ask):
            return trace_page(config, given)

    _answer(request, render)
