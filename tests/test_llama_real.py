"""The seeds' incidents on the real engine: llama.cpp's llama-server (built here, engine/llama/build.py) on the
tiny random-weight MoE model (engine/llama/model.py), under a real supervisord, watched by the spyglass agent
(`spyglass run`), scraped by Debian's Prometheus with the rules `spyglass rules` writes, paging through
Debian's Alertmanager with the committed routes to a webhook this test runs.

One stack, one agent, one Prometheus and one Alertmanager serve every incident: each has an instance of its
own (llama-storm, llama-crash, ...), so what pages is told apart by its instance label. Time as in
tests/test_pager_e2e.py: `alerts.time_scale` 0.01 (a 5m for: is 3 s), evaluation every second. Asserted per
incident: the alert reaching its receiver, and at the end that each instance got nothing but its own
incident's alerts (the healthy one nothing at all), then `diagnose`, `requests`, `trace` and `timeline` on
the stored window.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import tomli_w
from conftest import wait_until
from live_prometheus import ProcessGroups, query, scraping, start_prometheus
from test_pager_e2e import DEFAULTS, Webhook, answers, write_rules

from spyglass.collectors.event import Event
from spyglass.collectors.supervisord_log import SupervisordLogOptions, SupervisordLogSource
from spyglass.collectors.supervisord_rpc import rpc
from spyglass.config import AlertsConfig
from spyglass.engine.llama.build import LlamaBuild, ensure_built
from spyglass.engine.llama.load import burst, conversations, text
from spyglass.engine.llama.model import ensure_model
from spyglass.engine.llama.stack import Instance, LlamaStack
from spyglass.ports import free_port

pytestmark = pytest.mark.slow
ALERTS = {
    "time_scale": 0.01,
    "evaluation_interval_seconds": 1,
    "hung_minutes": 1,
    "lanes": {"normal": {"ttft_seconds": 60.0}},
}
POLL_SECONDS = 0.5
# What each instance may page, beyond its incident (each says why), and what it must page.
MUST = {
    "llama-storm": {"EngineEvictionStorm"},
    "llama-crash": {"ProgramCrashLoop"},
    "llama-missing": {"ProgramFatal", "EngineModelPathDangling", "SpyglassSourceDown"},
    "llama-dangling": {"ProgramFatal", "EngineModelPathDangling", "SpyglassSourceDown"},
    "llama-busy": {"EngineRequestsDeferred"},
    "llama-hung": {"SpyglassSourceDown"},
    "llama-healthy": set(),
}
# A failed load respawned twice in three seconds is a crash loop too, and a restart before ready. The crash
# loop's poller may find no server between respawns for the 1.5 s of SpyglassSourceDown's scaled for:. A decode
# rate over the scaled 6 s window can fall under a quarter of its 36 s baseline on a loaded machine.
MAY = {
    "llama-missing": {"ProgramCrashLoop", "EngineRestartedWhileLoading"},
    "llama-dangling": {"ProgramCrashLoop", "EngineRestartedWhileLoading"},
    "llama-crash": {"SpyglassSourceDown", "EngineThroughputCollapse"},
    "llama-storm": {"EngineThroughputCollapse"},
    # Twelve distinct long prompts through one slot evict each other from its small --cache-ram; and
    # llama-server answers /metrics and /slots through the same task queue, so a poll can time out while
    # the one slot decodes (docs/llama-server.md).
    "llama-busy": {"EngineThroughputCollapse", "EngineEvictionStorm", "SpyglassSourceDown"},
}


@dataclass
class Deployment:
    stack: LlamaStack
    config: Path
    prom: str
    agent: str
    hook: Webhook
    fired: set[tuple[str, str]] = field(default_factory=set)
    started: float = field(default_factory=time.time)

    def paged(self, name: str, instance: str, path: str | None = None) -> bool:
        return any(
            n == name and status == "firing" and instance_of(labels) == instance and (path is None or p == path)
            for p, n, status, labels in self.hook.alerts()
        )


def instance_of(labels: dict) -> str:
    """The instance an alert is about: the one its source's name ends with (a source's alert carries the
    scrape target as its instance label), else its instance label."""
    found = re.search(r"(llama-\w+)$", labels.get("source", ""))
    return found.group(1) if found else str(labels.get("instance", ""))


def firing(api: str) -> set[tuple[str, str]]:
    """(alertname, instance it is about) of every alert firing in Prometheus."""
    alerts = httpx.get(f"{api}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    return {(a["labels"]["alertname"], instance_of(a["labels"])) for a in alerts if a["state"] == "firing"}


def sql(config: Path, statement: str) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-m", "spyglass.cli.app", "sql", "--config", str(config), "--format", "json", statement],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def views(config: Path, statement: str) -> list[dict]:
    """A SELECT over the forensic views (`spyglass views`), as the analyst runs it."""
    done = cli(config, "views", statement, "--format", "json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def cli(config: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "spyglass.cli.app", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.fixture(scope="module")
def llama(spawns) -> LlamaBuild:
    return ensure_built()  # builds once per machine (cached); a missing compiler is an error naming the package


@pytest.fixture(scope="module")
def deployment(spawns, llama: LlamaBuild, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    alertmanager = shutil.which("prometheus-alertmanager")
    assert alertmanager, "run scripts/setup --test (installs Debian's prometheus-alertmanager)"
    model = ensure_model()
    folder = tmp_path_factory.mktemp("llama")
    (folder / "current.gguf").symlink_to(folder / "gone.gguf")  # a dangling link: the file it named was removed
    instances = [
        Instance("llama-storm", free_port(), model, slots=2, cache_ram_mib=1),
        Instance("llama-crash", free_port(), model, slots=1, retries=100),
        Instance("llama-missing", free_port(), folder / "absent.gguf", retries=2),
        Instance("llama-dangling", free_port(), folder / "current.gguf", retries=2),
        Instance("llama-busy", free_port(), model, slots=1),
        Instance("llama-hung", free_port(), model, slots=1),
        Instance("llama-healthy", free_port(), model, slots=2, cache_ram_mib=64),
    ]
    stack = LlamaStack(folder / "stack", llama, {i.name: i for i in instances})
    hook = Webhook()
    listen, am_port, prom_port = f"127.0.0.1:{free_port()}", free_port(), free_port()
    sources = stack.spyglass_sources()
    del sources["host"]  # seven engines on two CPUs share them all: H2 would fire for every one (see docs)
    for options in sources.values():
        if options["kind"] in ("llama_server", "model_path", "supervisord_rpc"):
            options["interval_seconds"] = POLL_SECONDS
        if options["kind"] == "llama_server":
            options["max_backoff_seconds"] = 1.0
    document = {
        "agent": {"state_dir": str(folder / "state"), "host": "llama-test", "commit_interval_seconds": 0.5},
        "exporters": {"prometheus": {"listen": listen}, "store": {"enabled": True}},
        "alerts": {
            **ALERTS,
            "pager_webhook_url": f"{hook.url}/pager",
            "ticket_webhook_url": f"{hook.url}/ticket",
            "heartbeat_webhook_url": f"{hook.url}/heartbeat",
            "store_webhook_url": f"http://{listen}/api/alerts",
        },
        "sources": sources,
    }
    config = folder / "spyglass.toml"
    config.write_text(tomli_w.dumps(document))
    rules = write_rules(config, folder, hook.url, listen)
    group = ProcessGroups()
    deployed = Deployment(stack, config, f"http://127.0.0.1:{prom_port}", f"http://{listen}", hook)
    watching = threading.Event()
    try:
        stack.start()
        stack.wait_ready(("llama-storm", "llama-crash", "llama-busy", "llama-hung", "llama-healthy"))
        group.start([sys.executable, "-m", "spyglass.cli.app", "run", "-c", str(config)], folder / "agent.log")
        group.start(
            [
                alertmanager,
                f"--config.file={folder / 'am.yml'}",
                f"--storage.path={folder / 'am'}",
                f"--web.listen-address=127.0.0.1:{am_port}",
                "--cluster.listen-address=",
            ],
            folder / "am.log",
        )
        wait_until(
            lambda: answers(f"http://{listen}/health") and answers(f"http://127.0.0.1:{am_port}/-/ready"),
            60,
            "the agent and Alertmanager",
        )
        prom_api = start_prometheus(
            group,
            folder,
            scraping(listen, DEFAULTS.job, alertmanager=f"127.0.0.1:{am_port}"),
            prom_port,
            rules / "spyglass-rules.yml",
            DEFAULTS.job,
            "--rules.alert.resend-delay=1s",
        )
        wait_until(lambda: any(p == "/heartbeat" for p, *_ in hook.alerts()), 60, "the Watchdog at the heartbeat")

        def watch() -> None:
            while not watching.wait(0.25):
                with contextlib.suppress(httpx.HTTPError):
                    deployed.fired.update(firing(prom_api))

        watcher = threading.Thread(target=watch)
        watcher.start()
        yield deployed
        watching.set()
        watcher.join()
    finally:
        watching.set()
        group.stop()
        stack.stop()
        hook.server.shutdown()
        hook.server.server_close()


def drive(url: str, names: list[str], turns: int, tokens: int) -> list[int]:
    return asyncio.run(conversations(url, names, turns, tokens))


def test_healthy_traffic_is_served(deployment: Deployment) -> None:
    """First, so that the whole run is the window in which the healthy instance must page nothing (the last test)."""
    assert set(drive(deployment.stack.url("llama-healthy"), ["a", "b"], 3, 400)) == {200}


def test_an_eviction_storm_is_counted_from_the_log_raises_ttft_and_pages(deployment: Deployment) -> None:
    d, url = deployment, deployment.stack.url("llama-storm")
    # Warm: two conversations on two slots, each turn finds its own slot's cache.
    assert set(drive(url, ["warm-0", "warm-1"], 4, 600)) == {200}
    # The storm: eight conversations on two slots and a 1 MiB host cache (three entries of ~0.3 MiB).
    assert set(drive(url, [f"conv-{i}" for i in range(8)], 4, 600)) == {200}
    wait_until(  # a loaded CI machine: it fired, and reached the pager, just after 120 s once
        lambda: d.paged("EngineEvictionStorm", "llama-storm", "/pager"),
        300,
        f"EngineEvictionStorm at the pager; fired in Prometheus: {sorted(d.fired)}",
    )
    # Every eviction line of the real log is counted, by the store and by the exported counter.
    logged = d.stack.log("llama-storm").read_text().count("removing oldest entry")
    assert logged > 8
    stored = wait_until(
        lambda: (
            (
                rows := sql(
                    d.config,
                    "SELECT count(*) AS n, min((fields->>'budget')::BIGINT) AS budget"
                    " FROM events WHERE kind = 'evict' AND instance = 'llama-storm'",
                )
            )
            and rows[0]["n"] == logged
            and rows[0]
        ),
        60,
        "every eviction line stored",
    )
    assert stored["budget"] == 2**20  # --cache-ram 1, from the command line
    wait_until(
        lambda: [
            r
            for r in query(d.prom, 'spyglass_engine_evictions_total{instance="llama-storm"}')
            if float(r["value"][1]) == logged
        ],
        60,
        f"Prometheus scraping all {logged} evictions",
    )
    # TTFT rose: the follow-up turns of the storm processed their whole prompt again; the warm ones did not.
    rows = views(
        d.config,
        "SELECT epoch(ts_utc) AS t, ttft_ms, reused_tokens, read_tokens FROM engine_requests"
        " WHERE instance = 'llama-storm' AND ttft_ms IS NOT NULL ORDER BY ts_utc",
    )
    assert len(rows) == 40  # in time order: the warm phase's 8 tasks, then the storm's 32
    warm, storm = rows[:8], rows[8:]
    warm_follow = sorted(r["ttft_ms"] for r in warm[2:])
    storm_follow = sorted(r["ttft_ms"] for r in storm[8:])
    assert sum(r["read_tokens"] for r in storm[8:]) > 4 * sum(r["read_tokens"] for r in warm[2:])
    # 4x the tokens read; the time per token of a loaded two-core machine varies, so the median is held to 1.5x
    assert storm_follow[len(storm_follow) // 2] > 1.5 * warm_follow[len(warm_follow) // 2], (warm_follow, storm_follow)


def spawn_times(stack: LlamaStack, program: str) -> list[float]:
    """When supervisord spawned `program`, by its own log (its clock, read with the collector's parser)."""
    log = stack.folder / "supervisord.log"
    source = SupervisordLogSource("supervisord", SupervisordLogOptions(path=log))
    events = [source.handle(raw) for raw in log.read_bytes().splitlines()]
    return [e.ts for e in events if isinstance(e, Event) and e.kind == "spawned" and e.fields.get("program") == program]


def crash_burst(stack: LlamaStack, program: str, spawns: int) -> None:
    """Abort each new process of `program` as soon as supervisord reports its pid, until it has been spawned
    `spawns` more times. The pid is asked over supervisord's RPC socket in this process (supervisorctl is a
    process start per question, seconds on a loaded machine): the loop is then as tight as supervisord's own
    back-off allows (1 s, 2 s, ... after a start that died within startsecs)."""

    def pid_in(states: tuple[str, ...], old: int = 0) -> int:
        with rpc(f"unix://{stack.folder}/supervisor.sock", timeout=10) as proxy:  # a connection a question
            info = proxy.supervisor.getProcessInfo(program)
        return int(info["pid"]) if info["statename"] in states and info["pid"] not in (0, old) else 0

    # RUNNING first (up for startsecs): supervisord's back-off starts over, the first respawn is at once.
    pid = wait_until(lambda: pid_in(("RUNNING",)), 60, f"{program} RUNNING")
    for n in range(spawns):
        os.kill(pid, signal.SIGABRT)
        if n < spawns - 1:
            pid = wait_until(
                lambda old=pid: pid_in(("STARTING", "RUNNING"), old), 60, f"supervisord respawning {program}"
            )


def test_a_crash_loop_of_the_real_engine_pages(deployment: Deployment) -> None:
    """The page is asserted for a loop that supervisord's own log shows to be one: `crash_loop_spawns` starts
    within the scaled window, less the two scrapes and the agent's tailing that stand between a spawn and the
    counter Prometheus compares. A burst that a loaded machine spread wider (each respawn is supervisord's
    back-off plus this test's reaction) is not a crash loop by the rule's definition, so it is not the
    expectation: the program is let reach RUNNING (supervisord's back-off starts over) and a burst tried
    again, at most three times."""
    d, settings = deployment, AlertsConfig(**ALERTS)
    need = settings.crash_loop_spawns
    window = settings.crash_loop_window_minutes * 60 * settings.time_scale
    slack = 2 * 1.0 + POLL_SECONDS * 2  # two scrapes (scrape_interval 1s) and the agent's tailing and commit
    spans: list[float] = []
    for _ in range(3):
        before = len(spawn_times(d.stack, "llama-crash"))
        crash_burst(d.stack, "llama-crash", need)
        d.stack.wait_ready(("llama-crash",))
        times = spawn_times(d.stack, "llama-crash")[before:]
        spans.append(min(b - a for a, b in zip(times, times[need - 1 :], strict=False)))
        if spans[-1] <= window - slack:
            break
    assert spans[-1] <= window - slack, (
        f"no burst of {need} spawns within {window - slack:g} s on this machine;"
        f" the tightest spans (supervisord's log): {spans}"
    )
    wait_until(
        lambda: d.paged("ProgramCrashLoop", "llama-crash", "/pager"),
        120,
        f"ProgramCrashLoop at the pager (spawns {spans[-1]:.1f} s apart); fired in Prometheus: {sorted(d.fired)}",
    )
    spawned = len(spawn_times(d.stack, "llama-crash"))
    wait_until(
        lambda: (
            sql(
                d.config,
                "SELECT count(*) AS n FROM events WHERE kind = 'spawned' AND fields->>'program' = 'llama-crash'",
            )[0]["n"]
            == spawned
        ),
        60,
        f"all {spawned} spawns of llama-crash stored",
    )
    # Each process's start line, from the one log file they all appended to: at least the first and the
    # last (one aborted within milliseconds of its spawn may have written none).
    rows = sql(d.config, "SELECT count(*) AS n FROM events WHERE kind = 'start' AND instance = 'llama-crash'")
    assert rows[0]["n"] >= 2


def test_a_failed_load_pages_for_a_missing_model_and_a_dangling_link(deployment: Deployment) -> None:
    d = deployment
    for instance in ("llama-missing", "llama-dangling"):
        for alert in ("ProgramFatal", "EngineModelPathDangling"):
            wait_until(
                lambda a=alert, i=instance: d.paged(a, i, "/pager"),
                120,
                f"{alert} for {instance}; fired in Prometheus: {sorted(d.fired)}",
            )
        rows = sql(
            d.config,
            "SELECT fields->>'component' AS component, fields->>'message' AS message FROM events"
            f" WHERE kind = 'error' AND instance = '{instance}'",
        )
        assert any(r["component"] == "load" and "failed to load model" in r["message"] for r in rows), rows


def test_concurrency_full_defers_requests_and_pages(deployment: Deployment) -> None:
    d = deployment
    prompts = [text(1500, f"burst-{i}") for i in range(12)]
    assert asyncio.run(burst(d.stack.url("llama-busy"), prompts, n_predict=800)) == [200] * 12
    seen = wait_until(
        lambda: query(d.prom, 'max_over_time(spyglass_llama_requests_deferred{instance="llama-busy"}[5m]) > 0'),
        60,
        "deferred requests in Prometheus",
    )
    assert float(seen[0]["value"][1]) >= 1
    busy = query(d.prom, 'max_over_time(spyglass_engine_slots_busy{instance="llama-busy"}[5m])')
    assert float(busy[0]["value"][1]) == 1  # -np 1: the one slot
    # A queue that never drained over the (scaled) window raises a ticket: the engine-side face of H12.
    wait_until(
        lambda: d.paged("EngineRequestsDeferred", "llama-busy", "/ticket"),
        120,
        f"EngineRequestsDeferred at the pager; fired in Prometheus: {sorted(d.fired)}",
    )


def test_a_stopped_engine_is_a_source_down_not_a_hang(deployment: Deployment) -> None:
    d = deployment
    pid = d.stack.pid("llama-hung")
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(
            lambda: d.paged("SpyglassSourceDown", "llama-hung", "/ticket"),
            120,
            f"SpyglassSourceDown for llama-hung; fired in Prometheus: {sorted(d.fired)}",
        )
    finally:
        os.kill(pid, signal.SIGCONT)
    d.stack.wait_ready(("llama-hung",))
    assert ("EngineHung", "llama-hung") not in d.fired  # its /health is as stopped as its main loop (docs)


def test_a_healthy_engine_pages_nothing_and_no_instance_pages_beyond_its_incident(deployment: Deployment) -> None:
    d = deployment
    received: dict[str, set[str]] = {}
    for _, name, _, labels in d.hook.alerts():
        if name != "Watchdog":
            received.setdefault(instance_of(labels), set()).add(name)
    for instance, must in MUST.items():
        got = received.get(instance, set())
        assert must <= got <= must | MAY.get(instance, set()), (instance, sorted(got))
    assert set(received) <= set(MUST), received
    for name, instance in d.fired:  # what fired in Prometheus, delivered or not (inhibited)
        if instance:
            assert name in MUST.get(instance, set()) | MAY.get(instance, set()), (name, instance)
    assert ("SpyglassTargetDown", "") not in d.fired


def test_diagnose_requests_trace_and_timeline_read_the_real_engines_window(deployment: Deployment) -> None:
    d = deployment
    found = cli(d.config, "diagnose", "--json")
    findings = json.loads(found.stdout)["findings"]
    by = {(f["alert"], f["instance"]) for f in findings}
    assert ("EngineEvictionStorm", "llama-storm") in by, sorted(by)
    assert ("ProgramCrashLoop", "llama-crash") in by, sorted(by)
    assert {("ProgramCrashLoop", "llama-missing"), ("ProgramCrashLoop", "llama-dangling")} <= by, sorted(by)  # FATAL
    assert not [f for f in findings if f["instance"] == "llama-healthy"]
    window = [
        f"--{edge}={datetime.fromtimestamp(at, tz=UTC):%Y-%m-%d %H:%M:%S}"
        for edge, at in (("from", d.started - 60), ("to", time.time() + 60))
    ]
    listed = cli(d.config, "requests", *window, "--instance", "llama-storm", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines() if line.strip()]
    assert len(rows) == 40 and all(r["ttft_ms_engine"] is not None for r in rows)
    request = rows[-1]["request_id"]
    traced = cli(d.config, "trace", request)
    assert traced.returncode == 0, traced.stderr
    assert "engine llama-storm" in traced.stdout and "prefill" in traced.stdout and "decode" in traced.stdout
    timeline = cli(d.config, "timeline", *window, "--request", request)
    assert timeline.returncode == 0, timeline.stderr
    assert "queued" in timeline.stdout and "done" in timeline.stdout
