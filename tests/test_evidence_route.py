"""GET /evidence/... and /trace/... on a real agent serving a real store (incident 3 of the corpus, ingested
with `spyglass ingest`): Alertmanager's notification POSTed to /api/alerts sets the window, the page shows
the figures and links each request to its trace page, which answers too. Bad names, labels and times are a
400 saying why; an unknown alert or a notification never received a 404; another Host a 421; with a token,
no page without it. `spyglass evidence` prints the same page."""

from __future__ import annotations

import json
import re
import threading
import tomllib
from html import unescape

import httpx
import pytest
import tomli_w
from conftest import wait_until
from incidents.windows import BY_NAME
from typer.testing import CliRunner

from spyglass.cli.app import app
from spyglass.ports import free_port

pytestmark = pytest.mark.usefixtures("spawns")  # ingest, an agent and its query processes
TOKEN = "evidence-test-token-0123456789"


def visible(page: str) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def notification(name: str, labels: dict[str, str], starts: str, ends: str) -> bytes:
    alert = {
        "status": "resolved",
        "startsAt": starts,
        "endsAt": ends,
        "fingerprint": "0123456789abcdef",
        "labels": {"alertname": name, "severity": "warning", "heuristic": "H6", **labels},
        "annotations": {"summary": "s"},
        "generatorURL": "http://prometheus/graph",
    }
    return json.dumps(
        {
            "version": "4",
            "status": "resolved",
            "receiver": "ticket",
            "groupLabels": {},
            "commonLabels": {},
            "commonAnnotations": {},
            "externalURL": "http://am",
            "alerts": [alert],
        }
    ).encode()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The incident-3 window ingested, then a real Agent serving its store on a free port."""
    from spyglass.agent.runtime import Agent
    from spyglass.config import load_config

    folder = tmp_path_factory.mktemp("incident3")
    config = BY_NAME["incident3"].build(folder)
    document = tomllib.loads(config.read_text())
    listen = f"127.0.0.1:{free_port()}"
    document.setdefault("exporters", {})["prometheus"] = {"listen": listen}
    config.write_text(tomli_w.dumps(document))
    assert CliRunner().invoke(app, ["ingest", "--config", str(config)]).exit_code == 0
    agent = Agent(load_config(config))
    loop = threading.Thread(target=agent.serve, daemon=True)
    loop.start()
    base = f"http://{listen}"
    wait_until(lambda: httpx.get(f"{base}/health").status_code == 200, what="the agent serving")
    window = BY_NAME["incident3"]
    body = notification(
        "ThinkingOnlyResponses",
        {"lane": "fast"},
        window.start.isoformat().replace("+00:00", "Z"),
        window.end.isoformat().replace("+00:00", "Z"),
    )
    answer = httpx.post(f"{base}/api/alerts", content=body, headers={"Content-Type": "application/json"}, timeout=30)
    assert answer.status_code == 200, answer.text
    try:
        yield base, config
    finally:
        agent.stop.set()
        agent.wake.set()
        loop.join(timeout=60)


def test_the_notifications_window_gives_the_figures_and_trace_links_that_answer(served) -> None:
    base, _ = served
    page = httpx.get(f"{base}/evidence/ThinkingOnlyResponses?lane=fast", timeout=120)
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    shown = visible(page.text)
    assert "with_literals_thinking_only 16" in shown and "with_literals_requests 58" in shown
    assert "16 of 58 with literals thinking-only" in shown and "0 of 295 without literals" in shown
    assert "notification fired 2026-10-17 14:00:00 UTC (2026-10-17 22:00:00 CST), resolved" in shown
    assert "window (Asia/Shanghai)" in shown and "summary Lane fast answers with reasoning only." in shown
    links = re.findall(r'href="(/trace/[^"]+)"', page.text)
    assert links, "no trace link"
    trace = httpx.get(base + links[0], timeout=60)
    assert trace.status_code == 200, trace.text
    assert f"Request {links[0].removeprefix('/trace/')}" in visible(trace.text)


@pytest.mark.parametrize(
    "path,status,says",
    [
        ("/evidence/Not%20An%20Alert", 400, "not an alert name"),
        ("/evidence/NoSuchAlert", 404, "no alert NoSuchAlert"),
        ("/evidence/ThinkingOnlyResponses?lane=slow", 404, "no notification of ThinkingOnlyResponses"),
        ("/evidence/ThinkingOnlyResponses?lane=fast&at=yesterday", 400, "at: not an RFC 3339 time"),
        ("/evidence/ThinkingOnlyResponses?lane=fast&at=2026-10-17T15:00:00", 400, "needs its offset"),
        ("/evidence/ThinkingOnlyResponses?bad-label=x&at=2026-10-17T15:00:00Z", 400, "not a label name"),
        ("/evidence/ThinkingOnlyResponses?lane=a&lane=b", 400, "given twice"),
        ("/trace/not-a-request", 400, "not a request id or a trace id"),
        # round 4: an unknown request is a 404, as the docs say (it was a 400)
        ("/trace/20261017-140000-abcdef", 404, "no finished request"),
        ("/trace/0123456789abcdef0123456789abcdef", 404, "no request of trace"),
        # round 4: times a window cannot be computed around were a 500 and 7.9 KB of traceback each
        ("/evidence/ThinkingOnlyResponses?lane=fast&at=0001-01-01T00:00:00Z", 400, "not between 2000-01-01"),
        ("/evidence/ThinkingOnlyResponses?lane=fast&at=9999-12-31T23:59:59Z", 400, "not between 2000-01-01"),
        ("/evidence/ThinkingOnlyResponses?lane=fast&from=0001-01-01T00:00:00%2B14:00", 400, "not between"),
        ("/evidence/ThinkingOnlyResponses?lane=" + "x" * 2000, 400, "over 1024 characters"),
    ],
)
def test_a_bad_request_is_refused_with_why(served, path: str, status: int, says: str) -> None:
    base, _ = served
    answer = httpx.get(base + path, timeout=60)
    assert (answer.status_code, says in answer.text) == (status, True), answer.text
    assert answer.headers["x-content-type-options"] == "nosniff" and answer.text.count("\n") == 1


def test_at_gives_the_window_ending_there_even_without_a_notification(served) -> None:
    base, _ = served
    window = BY_NAME["incident3"]
    at = window.end.isoformat().replace("+00:00", "Z")
    page = httpx.get(
        f"{base}/evidence/ThinkingOnlyWithSpecialTokens",
        params={"lane": "fast", "at": at, "from": window.start.isoformat()},
        timeout=120,
    )
    assert page.status_code == 200, page.text
    assert "16 of 58 with literals thinking-only" in visible(page.text)


def test_a_page_for_another_host_is_refused(served) -> None:
    base, _ = served
    answer = httpx.get(f"{base}/evidence/ThinkingOnlyResponses?lane=fast", headers={"Host": "evil.example:80"})
    assert answer.status_code == 421


def test_the_cli_prints_the_same_page(served, tmp_path) -> None:
    base, config = served
    out = tmp_path / "page.html"
    result = CliRunner().invoke(
        app, ["evidence", "--config", str(config), "ThinkingOnlyResponses", "--label", "lane=fast", "--html", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "with_literals_thinking_only: 16" in result.stdout and "0 of 295 without literals" in result.stdout
    assert f'href="{base}/trace/' in out.read_text()
    missing = CliRunner().invoke(app, ["evidence", "--config", str(config), "ThinkingOnlyResponses", "-l", "lane=slow"])
    assert missing.exit_code == 1 and "no notification" in missing.output
    bad = CliRunner().invoke(app, ["evidence", "--config", str(config), "ThinkingOnlyResponses", "-l", "lane"])
    assert bad.exit_code == 2 and "NAME=VALUE" in bad.output


def test_with_a_token_no_page_without_it(tmp_path) -> None:
    """Off loopback a token guards every page: the same route table, with a token configured."""
    from spyglass import signals
    from spyglass.agent.server import AgentServer, ServerLimits
    from spyglass.signals.state import MetricState

    hits: list[str] = []
    pages = {
        ("GET", "/evidence/"): lambda request, body: (
            hits.append(request.path),
            request.answer(200, "text/html", b"page"),
        )
    }
    server = AgentServer(
        "127.0.0.1:0", MetricState(signals.full_catalogue()), dict, limits=ServerLimits(token=TOKEN), pages=pages
    ).start()
    try:
        assert httpx.get(f"{server.url}/evidence/X?instance=a").status_code == 401 and hits == []
        answer = httpx.get(f"{server.url}/evidence/X?instance=a", headers={"Authorization": f"Bearer {TOKEN}"})
        assert answer.status_code == 200 and hits == ["/evidence/X?instance=a"]
        assert httpx.get(f"{server.url}/evidences", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 404
    finally:
        server.stop()
