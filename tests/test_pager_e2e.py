"""The pager end to end, for real: the emulated stack under supervisord, the spyglass agent
(`spyglass run`) reading every source of it, Debian's Prometheus scraping the agent every second
and evaluating the rules `spyglass rules` writes for this test deployment, and Debian's
Alertmanager with the committed alerts/alertmanager.yml (its routes and inhibitions as committed;
only its receivers' URLs and its group timers are the test's), sending to a webhook this test
runs and to the agent's own /api/alerts.

The test deployment pages on the emulator's clock: `alerts.time_scale` 0.01 (every window, offset
and for: a hundredth of the catalogue's, so a 5m for: is 3 s), evaluation every second, an engine
hung after 1 minute. Each scenario runs on a stack of its own; the incident is then ended as an
operator would (the troubled program restarted with a fixed config, `supervisorctl update`) and
every alert that fired must resolve. Asserted per scenario: the alert names the webhook received
(Watchdog aside, which goes to the heartbeat), that an inhibited alert never reaches a receiver,
that every firing notification is followed by its resolved one, and that the agent's store holds
both (`spyglass sql`, through the agent's API while it runs).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import tomli_w
import yaml
from conftest import wait_until
from live_prometheus import ProcessGroups, scraping, start_prometheus

from spyglass.config import AlertsConfig
from spyglass.engine.emulator.scenarios import BIG_CACHE, SCENARIOS, run_scenario
from spyglass.engine.emulator.stack import Stack, engines
from spyglass.ports import free_port, free_port_base

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("spawns")]  # starts processes: the e2e tier
ROOT = Path(__file__).resolve().parents[1]
COMMITTED = yaml.safe_load((ROOT / "alerts" / "alertmanager.yml").read_text())
DEFAULTS = AlertsConfig()
# The emulator's prompts are book-length (a 200k-token prefill is 100 model seconds): lanes whose
# objective is 640 s, so a scenario pages for its incident, not for every long prompt's TTFT.
ALERTS = {
    "time_scale": 0.01,
    "evaluation_interval_seconds": 1,
    "hung_minutes": 1,
    "lanes": {"fast": {"ttft_seconds": 640.0}, "normal": {"ttft_seconds": 640.0}},
}
# Each engine really pinned to a CPU of its own: on this machine both would otherwise run on every
# CPU, which the host source reports as shared (H2) in every scenario.
PINNED = {"strata-a": {"affinity": [0]}, "strata-b": {"affinity": [(os.cpu_count() or 1) - 1]}}
POLL_SECONDS = 1.0  # the polled sources (status, supervisord API, host, infer store), at the rules' scaled pace


@dataclass(frozen=True)
class Case:
    scenario: str
    pages: frozenset[str]  # the alert names the receivers get, Watchdog aside
    fix: dict[str, dict] | None = None  # the engine patches the operator restarts with; None: traffic ending is the end
    after_fix: frozenset[str] = frozenset()  # what the fix itself pages (each case says why)
    may: frozenset[str] = frozenset()  # consequences whose paging depends on timing (each case says why)
    slower: float = 1.0  # the engines' model time runs this many times slower than the stack's default
    inhibited: frozenset[str] = frozenset()  # alerts Prometheus must fire that the inhibitions keep from receivers
    # alerts that must fire in Prometheus while the scenario still drives traffic, or within this many seconds
    # of its end: a hung engine that keeps logging queued requests must page before its log falls silent
    while_driving: frozenset[str] = frozenset()


CASES = [
    # The same over-budget snapshots raise the H3 warning: inhibited while the storm pages, it reaches the
    # ticket when the storm's (scaled) 6 s rate window empties before the restart has emptied the cache.
    # The fix restarts strata-b with a bigger cache: its status endpoint may not answer for the (scaled) 3 s of
    # SpyglassSourceDown's for: on a loaded machine. The five conversations bring new graph shapes: their few
    # warm-up rebuilds fall in the scaled 6 s window of EngineRecompileStorm, whose "2 a minute" is not scaled.
    Case(
        "eviction-storm",
        frozenset({"EngineEvictionStorm"}),
        {"strata-a": BIG_CACHE, "strata-b": BIG_CACHE},
        may=frozenset({"EngineSnapshotOverBudget", "SpyglassSourceDown", "EngineRecompileStorm"}),
    ),
    # (SpyglassSourceDown: the fix restarts strata-b, as for the eviction storm.)
    # GatewayEstimateSkew compares estimates counted at arrival with engine counts at completion: over the
    # scaled 36 s window a few long sequential requests can skew that ratio for its 18 s for: in some runs.
    # Ten times slower model time: at the default the 16 short requests end within a scrape or two, and a
    # counter first seen at its final value has no increase for a rate to see.
    Case(
        "special-tokens",
        frozenset({"ThinkingOnlyResponses", "ServeBuildSkew"}),
        {"strata-a": BIG_CACHE, "strata-b": BIG_CACHE},
        may=frozenset({"GatewayEstimateSkew", "SpyglassSourceDown"}),
        slower=10.0,
    ),
    # Between respawns strata-b's status endpoint does not answer: for a (scaled) 3 s in a row in some runs.
    Case("crash-loop", frozenset({"ProgramCrashLoop"}), {}, may=frozenset({"SpyglassSourceDown"})),
    # The fix restarts the hung engine, which ignores SIGTERM: supervisord kills it after stopwaitsecs (5 s),
    # and its status endpoint is down longer than SpyglassSourceDown's (scaled) 3 s. The hung engine keeps
    # logging each new request queued, a line every 5 s for a minute: it pages on its progress (done and
    # [stats] lines), a minute after the hang, while its log still speaks.
    Case(
        "hung-engine",
        frozenset({"EngineHung"}),
        {},
        after_fix=frozenset({"SpyglassSourceDown"}),
        while_driving=frozenset({"EngineHung"}),
    ),
]


class Webhook:
    """Alertmanager's receivers: every notification body, by path (/pager, /ticket, /heartbeat)."""

    def __init__(self) -> None:
        self.lock, self.received = threading.Lock(), []
        received, lock = self.received, self.lock

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    received.append((self.path, body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self, since: int = 0) -> list[tuple[str, str, str, dict]]:
        """(path, alertname, status, labels) of every alert of every notification after the first `since`."""
        with self.lock:
            bodies = self.received[since:]
        return [
            (path, a["labels"]["alertname"], a["status"], a["labels"]) for path, body in bodies for a in body["alerts"]
        ]

    def __len__(self) -> int:
        with self.lock:
            return len(self.received)


@pytest.fixture(scope="module")
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    yield hook
    hook.server.shutdown()
    hook.server.server_close()  # the listening socket too, or it is an unclosed-socket warning at exit


def pinned(patch: dict[str, dict], slower: float = 1.0) -> dict[str, dict]:
    """The engine patches with each engine pinned to its CPU and its model time `slower`."""
    scale = engines(Path("."), 0)["strata-a"].time_scale * slower
    return {name: {**PINNED[name], "time_scale": scale, **patch.get(name, {})} for name in PINNED}


def inhibited(name: str, instance: str, fired: set[tuple[str, str]]) -> bool:
    """Whether a committed inhibit rule covers this alert: a source alert of the same instance fired too."""

    def matches(matchers: list[str], alertname: str) -> bool:
        (matcher,) = matchers
        label, op, value = matcher.split(" ", 2)
        assert label == "alertname" and op in ("=", "=~"), matcher
        value = value.strip('"')
        return alertname == value if op == "=" else re.fullmatch(value, alertname) is not None

    return any(
        matches(rule["target_matchers"], name)
        and rule["equal"] == ["instance"]
        and any(matches(rule["source_matchers"], other) and where == instance for other, where in fired)
        for rule in COMMITTED["inhibit_rules"]
    )


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def alertmanager_config(hook: str, store: str) -> dict:
    """The committed Alertmanager config with this test's receivers' URLs and short group timers."""
    config = json.loads(json.dumps(COMMITTED))
    urls = {
        DEFAULTS.pager_webhook_url: f"{hook}/pager",
        DEFAULTS.ticket_webhook_url: f"{hook}/ticket",
        DEFAULTS.heartbeat_webhook_url: f"{hook}/heartbeat",
        DEFAULTS.store_webhook_url: store,
    }
    for receiver in config["receivers"]:
        for webhook in receiver.get("webhook_configs", []):
            webhook["url"] = urls[webhook["url"]]
    for route in [config["route"], *config["route"]["routes"]]:
        route.update({k: v for k, v in {"group_wait": "1s", "group_interval": "1s"}.items() if k in route})
    return config


def deployment(stack: Stack, folder: Path, listen: str, hook: str) -> Path:
    """The agent's config for this stack: /metrics and the API on `listen`, the store on, the pager's settings."""
    document = tomllib.loads(stack.spyglass_toml(folder / "state"))
    document["exporters"] = {"prometheus": {"listen": listen}, "store": {"enabled": True}}
    document["alerts"] = {
        **ALERTS,
        "pager_webhook_url": f"{hook}/pager",
        "ticket_webhook_url": f"{hook}/ticket",
        "heartbeat_webhook_url": f"{hook}/heartbeat",
        "store_webhook_url": f"http://{listen}/api/alerts",
    }
    for name in ("serve-a", "serve-b", "supervisord-api", "host", "infer"):
        document["sources"][name]["interval_seconds"] = POLL_SECONDS
    for name in ("serve-a", "serve-b"):
        document["sources"][name]["max_backoff_seconds"] = POLL_SECONDS
    path = folder / "spyglass.toml"
    path.write_text(tomli_w.dumps(document))
    return path


def pager_setup(stack: Stack, folder: Path, hook: str) -> tuple[str, int, int, Path, Path]:
    """Ports, the agent's config, its generated rules (`spyglass rules`) and Alertmanager's config in
    `folder` for a pager test: (listen, Alertmanager port, Prometheus port, config, rules folder)."""
    listen, am_port, prom_port = f"127.0.0.1:{free_port()}", free_port(), free_port()
    config = deployment(stack, folder, listen, hook)
    return listen, am_port, prom_port, config, write_rules(config, folder, hook, listen)


def write_rules(config: Path, folder: Path, hook: str, listen: str) -> Path:
    """`spyglass rules` for `config` into folder/alerts (returned), and Alertmanager's config in folder/am.yml."""
    rules = folder / "alerts"
    subprocess.run(
        [sys.executable, "-m", "spyglass.cli.app", "rules", "--config", str(config), "--out", str(rules)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    (folder / "am.yml").write_text(yaml.safe_dump(alertmanager_config(hook, f"http://{listen}/api/alerts")))
    return rules


def firing_in_prometheus(api: str) -> set[tuple[str, str]]:
    alerts = httpx.get(f"{api}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    return {(a["labels"]["alertname"], a["labels"].get("instance", "")) for a in alerts if a["state"] == "firing"}


def pending_or_firing(api: str) -> set[str]:
    return {a["labels"]["alertname"] for a in httpx.get(f"{api}/api/v1/alerts", timeout=5).json()["data"]["alerts"]}


def sql(config: Path, query: str) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-m", "spyglass.cli.app", "sql", "--config", str(config), "--format", "json", query],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.mark.parametrize("case", CASES, ids=[c.scenario for c in CASES])
def test_the_pager_rings_for_the_incident_and_stops_when_it_is_fixed(
    case: Case, webhook: Webhook, tmp_path: Path
) -> None:
    alertmanager = shutil.which("prometheus-alertmanager")
    assert alertmanager, "run scripts/setup --test (installs Debian's prometheus-alertmanager)"
    scenario = SCENARIOS[case.scenario]
    assert (os.cpu_count() or 1) >= 2, "the engines are pinned to CPUs of their own: this needs two"
    # The gateway with the incident-6 fix: the emulator's English prompts would otherwise be estimated at
    # 3.3x the engine's count, a standing GatewayEstimateSkew (H10) in every scenario.
    # Each infer record published at once (segment_records 1), as a busy gateway's segments fill: a counter
    # first seen at its final value has no increase for a rate to see.
    gateway = {"estimate_by_engine": True, "segment_records": 1, **scenario.gateway_patch}
    stack = Stack(
        tmp_path / "stack",
        free_port_base(),
        pinned(scenario.engine_patch, case.slower),
        gateway,
        set(scenario.crash_loop),
    )
    listen, am_port, prom_port, config, rules = pager_setup(stack, tmp_path, webhook.url)
    am_api, agent_api = f"http://127.0.0.1:{am_port}", f"http://{listen}"
    group, seen = ProcessGroups(), len(webhook)
    started = time.monotonic()
    try:
        stack.start()
        stack.wait_ready(scenario.ready)
        stack.gateway.infer.mkdir(parents=True, exist_ok=True)  # every source folder exists when the agent starts
        group.start([sys.executable, "-m", "spyglass.cli.app", "run", "-c", str(config)], tmp_path / "agent.log")
        group.start(
            [
                alertmanager,
                f"--config.file={tmp_path / 'am.yml'}",
                f"--storage.path={tmp_path / 'am'}",
                f"--web.listen-address=127.0.0.1:{am_port}",
                "--cluster.listen-address=",
            ],
            tmp_path / "am.log",
        )
        wait_until(
            lambda: answers(f"{agent_api}/health") and answers(f"{am_api}/-/ready"), 60, "the agent and Alertmanager"
        )
        prom_api = start_prometheus(
            group,
            tmp_path,
            scraping(listen, DEFAULTS.job, alertmanager=f"127.0.0.1:{am_port}"),
            prom_port,
            rules / "spyglass-rules.yml",
            DEFAULTS.job,
            "--rules.alert.resend-delay=1s",
        )
        wait_until(
            lambda: any(p == "/heartbeat" for p, *_ in webhook.alerts(seen)), 60, "the Watchdog at the heartbeat"
        )

        # The incident, with Prometheus's firing alerts watched meanwhile (for the inhibition check).
        fired: set[tuple[str, str]] = set()
        watching = threading.Event()

        first_fired: dict[str, float] = {}

        def watch() -> None:
            while not watching.wait(0.25):
                now = firing_in_prometheus(prom_api)
                fired.update(now)
                for name, _ in now:
                    first_fired.setdefault(name, time.monotonic())

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            asyncio.run(run_scenario(scenario, stack.url, deadline_seconds=60))
            driven = time.monotonic()  # the scenario's last request: its engine log's last line, for a hung engine
            stack.flush()

            def paged() -> set[str]:
                return {
                    name
                    for path, name, status, _ in webhook.alerts(seen)
                    if status == "firing" and path != "/heartbeat"
                }

            try:
                wait_until(lambda: case.pages <= paged(), 120, f"{sorted(case.pages)} at the receivers")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; got {sorted(paged())}, fired in Prometheus: {sorted(fired)}") from None
            # Fired before the engine log's silence (from its last queued line) could reach alerts.hung_minutes.
            late = {
                name: round(first_fired[name] - driven, 1)
                for name in case.while_driving
                if first_fired.get(name, driven + 60) >= driven + 30
            }
            assert not late, f"fired only after the log fell silent (seconds after the last request): {late}"
            if case.fix is not None:
                stack.reconfigure(
                    pinned(case.fix, case.slower)
                )  # the operator's fix: the troubled program restarted healthy
            left: list[set[str]] = [set()]

            def quiet() -> bool:
                left[0] = pending_or_firing(prom_api) - {"Watchdog"}
                return not left[0]

            try:
                wait_until(quiet, 120, "every alert but Watchdog to resolve")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; still pending or firing: {sorted(left[0])}") from None
        finally:
            watching.set()
            watcher.join()

        def unresolved() -> list[tuple[str, str]]:
            alerts = webhook.alerts(seen)
            resolved = {
                (name, json.dumps(labels, sort_keys=True))
                for path, name, status, labels in alerts
                if status == "resolved"
            }
            return [
                (name, labels)
                for path, name, status, labels in alerts
                if status == "firing"
                and path != "/heartbeat"
                and (name, json.dumps(labels, sort_keys=True)) not in resolved
            ]

        wait_until(lambda: not unresolved(), 60, "a resolved notification for every firing one")
        received = webhook.alerts(seen)
        names = {name for path, name, status, _ in received if path != "/heartbeat"}
        report = f"received: {sorted({(n, st, lb.get('instance', '')) for _, n, st, lb in received})}; fired: {sorted(fired)}"
        assert case.pages | case.after_fix <= names <= case.pages | case.after_fix | case.may, report
        assert all(name == "Watchdog" for path, name, *_ in received if path == "/heartbeat")
        for path, name, _, labels in received:  # each to the receiver its severity routes to
            if name != "Watchdog":
                assert path == {"critical": "/pager"}.get(labels["severity"], "/ticket"), (name, path)
        # What Prometheus fired and no receiver got is exactly what an inhibit rule covers (a timing-dependent
        # `may` alert can also fire for less than Alertmanager's group_wait and resolve unnotified).
        kept = {(name, instance) for name, instance in fired if name != "Watchdog" and name not in names | case.may}
        assert all(inhibited(name, instance, fired) for name, instance in kept), f"fired in Prometheus: {sorted(fired)}"
        assert {name for name, _ in kept} >= case.inhibited, f"fired in Prometheus: {sorted(fired)}"

        def stored() -> set[tuple[str, str]] | None:
            rows = sql(
                config,
                "SELECT DISTINCT fields->>'alertname' AS alertname, fields->>'status' AS status"
                " FROM events WHERE kind = 'alert'",
            )
            got = {(r["alertname"], r["status"]) for r in rows}
            return got if got >= {(n, s) for n in case.pages for s in ("firing", "resolved")} else None

        got = wait_until(stored, 60, "the agent's store holding every notification, firing and resolved")
        assert {name for name, _ in got} == names
    finally:
        group.stop()
        stack.stop()
    print(f"{case.scenario}: {time.monotonic() - started:.0f} s")
