"""Issue 21 item 4: a web page cannot make the agent store anything. A page served from another
localhost port, in real headless Chromium, posts a fake critical alert and a fake smoke result with
`fetch(..., {mode: "no-cors"})` (text/plain, which needs no CORS preflight); a forged Host (DNS
rebinding) and a foreign Origin are refused too. The store holds none of it; the agent's own
clients (JSON with the right Content-Type, no Origin) are still served."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from test_alert_webhook import alert, notification
from test_report_page import FLAGS
from test_time_bounds import GOOD_SMOKE, _stored, agent  # noqa: F401 - the fixture

CHROMIUM = shutil.which("chromium")
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("spawns")]  # starts Chromium: the e2e tier

PAGE = """<!doctype html><body><script>
const agent = "AGENT";
const sends = [
  fetch(agent + "/api/alerts", {method: "POST", mode: "no-cors", body: ALERT}),
  fetch(agent + "/api/smoke", {method: "POST", mode: "no-cors", body: SMOKE}),
  fetch(agent + "/api/smoke", {method: "POST", mode: "no-cors", body: SMOKE,
                               headers: {"Content-Type": "text/plain;charset=UTF-8"}}),
];
Promise.allSettled(sends).then(r => { document.body.setAttribute("data-sent", r.length); });
</script></body>"""


def attack_page(folder: Path, agent_url: str) -> ThreadingHTTPServer:
    forged_alert = notification(alert("firing", name="FakeCritical")).decode()
    forged_smoke = json.dumps({**GOOD_SMOKE, "at": time.time(), "reason": "forged"})
    (folder / "attack.html").write_text(
        PAGE.replace("AGENT", agent_url)
        .replace("ALERT", json.dumps(forged_alert))
        .replace("SMOKE", json.dumps(forged_smoke))
    )

    class Quiet(SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, directory=str(folder), **kwargs)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_page_on_another_localhost_port_cannot_store_an_alert_or_a_smoke_result(spawns, agent, tmp_path):  # noqa: F811
    assert CHROMIUM, "Debian's chromium is not installed: run scripts/setup --test"
    running, url, _, stop = agent
    page = attack_page(tmp_path, url)
    try:
        done = subprocess.run(
            [
                CHROMIUM,
                *FLAGS,
                f"--user-data-dir={tmp_path / 'profile'}",
                "--virtual-time-budget=10000",
                "--dump-dom",
                f"http://127.0.0.1:{page.server_address[1]}/attack.html",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        page.shutdown()
        page.server_close()
    assert done.returncode == 0, done.stderr[-2000:]
    assert 'data-sent="3"' in done.stdout  # the page ran and its three POSTs went out

    rebound = httpx.post(
        f"{url}/api/smoke",
        content=json.dumps({**GOOD_SMOKE, "at": time.time()}),
        headers={"Content-Type": "application/json", "Host": f"rebound.example:{url.rsplit(':', 1)[1]}"},
    )
    assert rebound.status_code == 421, rebound.text
    foreign = httpx.post(
        f"{url}/api/alerts",
        content=notification(alert("firing", name="FakeCritical")),
        headers={"Content-Type": "application/json", "Origin": "http://127.0.0.1:1"},
    )
    assert foreign.status_code == 403, foreign.text
    plain = httpx.post(
        f"{url}/api/alerts",
        content=notification(alert("firing", name="FakeCritical")),
        headers={"Content-Type": "text/plain"},
    )
    assert plain.status_code == 415 and "application/json" in plain.text

    own = httpx.post(
        f"{url}/api/alerts",
        content=notification(alert("firing", name="RealOne")),
        headers={"Content-Type": "application/json"},
    )
    assert own.status_code == 200, own.text
    assert httpx.get(f"{url}/metrics", headers={"Host": "rebound.example:1"}).status_code == 200  # open paths
    stop()
    stored = _stored(running.config)
    assert [kind for kind, _, _ in stored] == ["alert"]  # only the real one
