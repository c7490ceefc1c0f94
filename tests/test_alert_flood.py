"""Issue 21 item 6: an alert flood is bounded, against a real agent process on 127.0.0.1.

The attack: 1,000-alert notifications, each alert new, as fast as senders can post; the store grew
13 MB/s and the agent's RSS reached 1.2 GB. Now the store takes at most AlertBudget's burst plus
its rate a second, the rest is answered 503 (deferred: the sender retries) or dropped and counted,
and /metrics answers throughout on its own listener.
"""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from conftest import wait_until
from test_api_hardening import peak_rss_mb, start_agent, stop  # noqa: F401 - start_agent is a fixture

from spyglass.agent.alert_webhook import AlertBudget
from spyglass.alerting.rules import MAX_ALERTS
from spyglass.ports import free_port

JSON_BODY = {"Content-Type": "application/json"}
FLOOD_SECONDS = 10.0
SENDERS = 6
RSS_BOUND_MB = 400  # as for the span bomb: the agent idles at about 90 MB
STORE_GROWTH_BOUND_MB = 9  # measured 6.9 MB, mostly DuckDB's blocks per checkpoint (docs/guarantees.md)
pytestmark = pytest.mark.usefixtures("spawns")


def flood_body(sender: int, n: int, alerts: int = MAX_ALERTS) -> bytes:
    """`alerts` alerts never sent before, each with labels near the size a notification's 1 MiB allows."""
    return json.dumps(
        {
            "version": "4",
            "status": "firing",
            "receiver": "store",
            "truncatedAlerts": 0,
            "alerts": [
                {
                    "status": "firing",
                    "startsAt": "2026-03-10T14:02:15Z",
                    "endsAt": "0001-01-01T00:00:00Z",
                    "fingerprint": f"{sender:02x}{n:06x}{i:08x}",
                    "labels": {
                        "alertname": f"Flood{sender}-{n}-{i}",
                        "instance": "strata-b",
                        "severity": "critical",
                        "note": "x" * 700,
                    },
                }
                for i in range(alerts)
            ],
        }
    ).encode()


def metric(text: str, name: str) -> float:
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def test_a_flood_of_thousand_alert_notifications_is_bounded(start_agent):  # noqa: F811 - the fixture
    """Six senders post 1,000-alert notifications of new alerts for 10 s. Measured on this machine:
    see docs/guarantees.md (rows, store growth, peak RSS). The bounds asserted: at most burst + rate
    x elapsed alerts stored, the store file grown by less than STORE_GROWTH_BOUND_MB, the peak RSS
    under RSS_BOUND_MB, every scrape of /metrics answered 200, and the agent alive to store more."""
    metrics_port = free_port()
    agent = start_agent(metrics_listen=f'"127.0.0.1:{metrics_port}"', workers="16", request_timeout_seconds="10")
    scrape_url = f"http://127.0.0.1:{metrics_port}/metrics"
    url = agent["url"] + "/api/alerts"
    warm = httpx.post(url, content=flood_body(98, 0, alerts=3), headers=JSON_BODY, timeout=30)
    assert warm.status_code == 200  # the alerts' table exists: its first blocks are not the flood's growth
    before = agent["store"].stat().st_size + _wal(agent["store"])
    budget = AlertBudget()
    done, answers, scrapes = threading.Event(), [], []
    bodies = {s: [flood_body(s, n) for n in range(3)] for s in range(SENDERS)}

    def send(sender: int) -> None:
        with httpx.Client(timeout=60) as client:
            n = 0
            while not done.is_set():
                body = bodies[sender][n % 3] if n < 3 else flood_body(sender, n)
                answers.append(client.post(url, content=body, headers=JSON_BODY).status_code)
                n += 1

    def scrape() -> None:
        with httpx.Client(timeout=30) as client:
            while not done.wait(0.25):  # a scrape every quarter second while the flood lasts
                scrapes.append(client.get(scrape_url).status_code)

    threads = [threading.Thread(target=send, args=(s,)) for s in range(SENDERS)] + [threading.Thread(target=scrape)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    done.wait(FLOOD_SECONDS)  # the flood's length: nothing waits on it but the flood
    done.set()
    for thread in threads:
        thread.join(timeout=120)
    elapsed = time.monotonic() - began
    text = httpx.get(scrape_url, timeout=30).text
    # The agent lives on, and what it deferred is stored when the sender retries, as Alertmanager does
    # until a 200 (its backoff sped up here), each alert once.
    retried = bodies[0][0]
    wait_until(
        lambda: httpx.post(url, content=retried, headers=JSON_BODY, timeout=60).status_code == 200,
        timeout=90,
        what="a deferred notification stored on a retry",
    )
    storing = time.monotonic() - began  # the seconds over which the budget let alerts in
    peak = peak_rss_mb(agent["proc"])
    stop(agent)
    import duckdb

    con = duckdb.connect(str(agent["store"]), read_only=True)
    try:
        rows = con.execute("SELECT count(*) FROM events WHERE kind = 'alert'").fetchone()[0]
        first = con.execute(
            "SELECT count(*), count(DISTINCT fields->>'alertname') FROM events WHERE kind = 'alert'"
            " AND fields->>'alertname' LIKE 'Flood0-0-%'"
        ).fetchone()
    finally:
        con.close()
    growth = (agent["store"].stat().st_size + _wal(agent["store"]) - before) / 1e6
    sent = answers.count(200) + answers.count(503)
    print(
        f"\nflood: {len(answers)} notifications ({sent * MAX_ALERTS} alerts) in {elapsed:.1f} s; {rows} alerts"
        f" stored; store +{growth:.1f} MB; peak RSS {peak:.0f} MB; scrapes {scrapes.count(200)}/{len(scrapes)};"
        f" deferred {metric(text, 'spyglass_alerts_deferred_total'):.0f}"
    )
    assert len(answers) > 10 and set(answers) <= {200, 503} and 503 in answers  # a flood, refused in part
    assert first == (MAX_ALERTS, MAX_ALERTS)  # the retried notification: all of it, once each
    assert 0 < rows <= budget.burst + budget.rate * storing
    assert metric(text, "spyglass_alerts_deferred_total") > 0
    assert growth < STORE_GROWTH_BOUND_MB
    assert peak < RSS_BOUND_MB
    assert scrapes and set(scrapes) == {200}, scrapes


def _wal(store) -> int:
    wal = store.with_name(store.name + ".wal")
    return wal.stat().st_size if wal.exists() else 0
