"""Everyday traffic written as every source writes it, around and between the incidents.

A `History` collects the lines of each file of one replay folder: both engine logs (queued,
restore, prompt, thinking, done, park and evict lines, a `[stats]` line every 10 s), the gateway
log (`req=` and `done` lines whose counts agree with the engine's), the infer store (rows and
settled gzip segments with the raw records), the supervisord log, the serve's `/v1/status`
polls every 30 s (recorded JSONL, one instance per url), and where a window needs them the host
source's samples (committed to the store before ingest: the live agent keeps them nowhere else). `write(folder)` writes them and the
config that reads them all. Everyday traffic is healthy by construction: conversations of 8-40k
tokens that fit the cache, TTFT about a second, visible text or a tool call, the gateway's
estimate within 5% of the engine's count, no 400 and no 429.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from fixtures.incidents.replay import (
    ANSWER,
    BUDGET,
    EVERY,
    GOOD_CALL,
    SLOTS,
    Infer,
    body,
    engine_turn,
    gateway_line,
    replay_config,
    rid,
)

from spyglass.agent.runtime import open_store
from spyglass.collectors.event import Event
from spyglass.collectors.host import cpu_set
from spyglass.config import load_config
from spyglass.engine.emulator.logsynth import line, stats
from spyglass.engine.emulator.mechanism import ConversationCache

PORTS = {"strata-a": 8081, "strata-b": 8082}
LANES = {"strata-a": "fast", "strata-b": "normal"}
FILES = {"strata-a": "strata-iq3_xxs-a.log", "strata-b": "strata-iq3_xxs-b.log"}
POLL_SECONDS = 30
COUNTER = re.compile(rb"\b(parked|used|evictions)=(\d+)")


@dataclass
class Engine:
    """One engine's log and the state its `[stats]` lines report."""

    instance: str
    cache: ConversationCache = field(default_factory=lambda: ConversationCache(BUDGET, EVERY))
    lines: list[bytes] = field(default_factory=list)
    task: int = 1000
    decode_tps: float = 77.1
    convs: dict[str, int] = field(default_factory=dict)  # conv -> tokens so far

    def next_task(self) -> int:
        self.task += 1
        return self.task


@dataclass
class History:
    """The lines of every source of one replay; `write` puts them on disk with their config."""

    engines: dict[str, Engine] = field(
        default_factory=lambda: {i: Engine(i, task=1000 + 0x80000 * n) for n, i in enumerate(PORTS)}
    )
    gateway: list[tuple[datetime, bytes]] = field(default_factory=list)
    infer: Infer = field(default_factory=Infer)
    supervisord: list[bytes] = field(default_factory=list)
    status: list[tuple[datetime, bytes]] = field(default_factory=list)
    served: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PORTS, 0))
    unrecorded: set[str] = field(default_factory=set)  # instances whose everyday turns the infer store lacks
    host: list[Event] = field(default_factory=list)  # host samples: in the store only, as the live agent keeps them
    extra_config: str = ""

    # -- engines -------------------------------------------------------------------------------
    def banner(self, instance: str, at: datetime, cpus: str, pid: int = 48211, load_seconds: float = 435.0) -> None:
        from fixtures.incidents.replay import engine_banner

        lines = engine_banner(at, PORTS[instance], cpus)
        lines[0] = lines[0].replace(b"pid=48211", f"pid={pid}".encode())
        lines[-1] = line(at.timestamp() + load_seconds, "I", "main", f"ready in {load_seconds:.1f} s")
        self.engines[instance].lines += lines
        self.engines[instance].cache = ConversationCache(BUDGET, EVERY)  # a new process starts empty
        self.engines[instance].convs.clear()

    def turn(
        self,
        instance: str,
        at: datetime,
        conv: str,
        prompt: int,
        *,
        tool: bool,
        ms: int = 800,
        decode_tps: float | None = None,
        gateway: bool = True,
    ) -> str:
        """One request through gateway and engine; returns its id."""
        e = self.engines[instance]
        task = e.next_task()
        req = rid(at, task)
        parked = conv in e.cache.parked
        reused = e.convs.get(conv, 0) if parked else 0
        lines = engine_turn(
            e.cache,
            at,
            task,
            req,
            conv,
            prompt,
            reused,
            "parked" if parked else "none",
            ms if parked or prompt < 20_000 else ms + prompt // 40,
            tool=tool,
        )
        tps = decode_tps if decode_tps is not None else e.decode_tps
        e.lines += [raw.replace(b"decode_tps=77.1", f"decode_tps={tps:.1f}".encode()) for raw in lines]
        e.convs[conv] = prompt
        self.served[instance] += 1
        if gateway:
            self._gateway_and_infer(instance, at, req, conv, prompt, tool, ms, instance not in self.unrecorded)
        return req

    def _gateway_and_infer(
        self, instance: str, at: datetime, req: str, conv: str, prompt: int, tool: bool, ms: int, infer: bool
    ) -> None:
        lane, chars, msgs = LANES[instance], int(prompt * 0.95), 1 + prompt // 4000
        calls = GOOD_CALL if tool else []
        self.gateway.append(
            gateway_line(
                at,
                f"req={req} session=auto:{conv} lane={lane} mode=assembled"
                f" client_msgs={msgs} sent_msgs={msgs} chars={chars} cjk=0.900"
                f" est_tokens={chars} max_tokens=32000",
            )
        )
        self.gateway.append(
            gateway_line(
                at + timedelta(seconds=9),
                f"done req={req} status=200 engine_prompt={prompt}"
                f" completion=900 finish={'tool_calls' if tool else 'stop'}"
                f" tool_calls={len(calls)} content_chars={0 if tool else len(ANSWER)}"
                f" ttft_ms={ms + 14} dur_ms=9100",
            )
        )
        if not infer:
            return
        record = body(
            system="你是一个编程助手。",
            first_user="解释 generate.cpp",
            sent_user="解释 generate.cpp",
            tools=True,
            content="" if tool else ANSWER,
            calls=calls,
            finish="tool_calls" if tool else "stop",
        )
        self.infer.add(
            at,
            {
                "id": req,
                "session": f"auto:{conv}",
                "lane": lane,
                "upstream": instance,
                "mode": "assembled",
                "client_msgs": msgs,
                "sent_msgs": msgs,
                "chars": chars,
                "est_tokens": chars,
                "prompt_tokens": prompt,
                "completion_tokens": 900,
                "max_tokens": 32000,
                "status": 200,
                "finish": record["response"]["finish_reason"],
                "tool_calls": len(calls),
                "content_chars": len(record["response"]["content"]),
                "reasoning_chars": 800,
                "ttft_ms": ms + 14,
                "dur_ms": 9100,
            },
            record,
        )

    def everyday(
        self,
        instance: str,
        start: datetime,
        end: datetime,
        every: float = 60.0,
        conversations: int = 6,
        decode_tps: float | None = None,
        seed: int = 0,
    ) -> None:
        """Multi-turn conversations of 8-40k tokens taking turns every `every` seconds."""
        at, n = start, 0
        convs = [f"{seed:04x}{PORTS[instance]:04x}{c:08x}" for c in range(conversations)]
        while at < end:
            conv = convs[n % conversations]
            prompt = self.engines[instance].convs.get(conv, 6_000) + 2_000
            if prompt > 40_000:
                prompt = 8_000
                self.engines[instance].convs.pop(conv, None)
                self.engines[instance].cache.parked.pop(conv, None)
            self.turn(instance, at, conv, prompt, tool=n % 2 == 0, decode_tps=decode_tps)
            at += timedelta(seconds=every)
            n += 1

    def stats(
        self, instance: str, start: datetime, end: datetime, every: float = 10.0, busy: int = 2, queue: int = 0
    ) -> None:
        """`[stats]` lines whose parked/used/evictions follow the park and evict lines written before them."""
        e = self.engines[instance]
        e.lines.sort(key=lambda raw: raw[:23])
        latest = {b"parked": 0, b"used": 0, b"evictions": 0}
        i, at = 0, start
        stamp = lambda t: line(t.timestamp(), "I", "x", "")[:23]  # noqa: E731 - the log's own stamp
        while at < end:
            upto = stamp(at)
            while i < len(e.lines) and e.lines[i][:23] <= upto:
                if b"[cache]" in e.lines[i] and (b" park " in e.lines[i] or b" evict " in e.lines[i]):
                    latest.update({k: int(v) for k, v in COUNTER.findall(e.lines[i])})
                i += 1
            e.lines.append(
                line(
                    at.timestamp(),
                    *stats(
                        busy,
                        SLOTS,
                        queue,
                        e.decode_tps,
                        latest[b"parked"],
                        latest[b"used"],
                        BUDGET,
                        latest[b"evictions"],
                    ),
                )
            )
            at += timedelta(seconds=every)

    # -- serve status ----------------------------------------------------------------------------
    def polls(
        self,
        start: datetime,
        end: datetime,
        *,
        escape_fix: dict[str, bool],
        state: dict[str, str] | None = None,
        busy: dict[str, int] | None = None,
        queue: dict[str, int] | None = None,
        down: tuple[str, ...] = (),
    ) -> None:
        """`/v1/status` every 30 s per instance (none for an instance in `down`: its polls fail)."""
        at = start
        while at < end:
            for instance, port in PORTS.items():
                if instance in down:
                    continue
                b = {
                    "engine": instance,
                    "build": "Strata 0.9.3 (build 7f3c2e1)",
                    "serve_version": "2026.10.18" if escape_fix[instance] else "2026.10.16",
                    "state": (state or {}).get(instance, "ready"),
                    "uptime_s": 8000.0,
                    "slots": {"total": SLOTS, "busy": (busy or {}).get(instance, 2)},
                    "prefill_queue": (queue or {}).get(instance, 0),
                    "requests": {"total": self.served[instance], "by_status": {"200": self.served[instance]}},
                }
                if escape_fix[instance]:
                    b["prompt_escapes"] = {"calls": 365, "literals": 1603}
                    b["stops_while_reasoning"] = 0
                self.status.append(
                    (
                        at,
                        json.dumps(
                            {
                                "ts": at.isoformat().replace("+00:00", "Z"),
                                "url": f"http://127.0.0.1:{port}/v1/status",
                                "body": b,
                            }
                        ).encode(),
                    )
                )
            at += timedelta(seconds=POLL_SECONDS)

    # -- host samples ----------------------------------------------------------------------------
    def samples(
        self, start: datetime, end: datetime, cpus: dict[str, str], *, throttled: bool = False, every: float = 15.0
    ) -> None:
        """What the host source samples every `every` s: each engine's CPUs, CPU time, RSS and its cgroup's
        CFS periods (throttled in most when `throttled`), and the CPUs each pair shares."""
        at, n = start, 0
        while at < end:
            ts, n = at.timestamp(), n + 1
            for instance, allowed in cpus.items():
                self.host.append(
                    Event(
                        ts,
                        "host",
                        "process",
                        instance,
                        {
                            "cpus": allowed,
                            "cpu_seconds": 24.0 * every * n,
                            "rss_bytes": 180 << 30,
                            "threads": 40,
                            "periods": 150 * n,
                            "throttled_periods": (120 if throttled else 0) * n,
                            "throttled_seconds": (9.0 if throttled else 0.0) * n,
                        },
                        None,
                        "replay",
                    )
                )
            names = sorted(cpus)
            for i, a in enumerate(names):
                for b in names[i + 1 :]:
                    shared = len(cpu_set(cpus[a]) & cpu_set(cpus[b]))
                    self.host.append(
                        Event(ts, "host", "shared_cpus", a, {"other": b, "shared": shared}, None, "replay")
                    )
            at += timedelta(seconds=every)

    # -- supervisord -----------------------------------------------------------------------------
    def sup(self, at: datetime, level: str, message: str) -> None:
        self.supervisord.append(f"{at:%Y-%m-%d %H:%M:%S},{at.microsecond // 1000:03d} {level} {message}".encode())

    def start_all(self, at: datetime, programs: tuple[str, ...] = ("rag-proxy", "strata-a", "strata-b")) -> None:
        self.sup(at, "INFO", "supervisord started with pid 3426001")
        for n, program in enumerate(programs):
            self.sup(at + timedelta(seconds=1), "INFO", f"spawned: '{program}' with pid {3426010 + n}")
            self.sup(
                at + timedelta(seconds=31),
                "INFO",
                f"success: {program} entered RUNNING state, process has stayed up for > than 30 seconds (startsecs)",
            )

    def restart(self, program: str, at: datetime, pid: int) -> None:
        """`supervisorctl restart`: a clean stop, then a spawn that reaches RUNNING."""
        self.sup(at, "INFO", f"waiting for {program} to stop")
        self.sup(at + timedelta(seconds=2), "WARN", f"stopped: {program} (terminated by SIGTERM)")
        self.sup(at + timedelta(seconds=3), "INFO", f"spawned: '{program}' with pid {pid}")
        self.sup(
            at + timedelta(seconds=33),
            "INFO",
            f"success: {program} entered RUNNING state, process has stayed up for > than 30 seconds (startsecs)",
        )

    # -- disk ------------------------------------------------------------------------------------
    def write(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        files = {FILES[i]: sorted(e.lines, key=lambda raw: raw[:23]) for i, e in self.engines.items()}
        files["rag-proxy.log"] = [raw for _, raw in sorted(self.gateway, key=lambda pair: pair[0])]
        files["supervisord.log"] = sorted(self.supervisord)
        files["status.jsonl"] = [raw for _, raw in sorted(self.status, key=lambda pair: pair[0])]
        for name, lines in files.items():
            (folder / name).write_bytes(b"\n".join(lines) + b"\n" if lines else b"")
        db = self.infer.write(folder / "infer")
        config = folder / "spyglass.toml"
        config.write_text(
            replay_config(folder, db, alerts=ALERTS, supervisord=SUPERVISORD, status=STATUS)
            + self.extra_config
            + (HOST.format(folder=folder) if self.host else "")
        )
        if self.host:
            (folder / "no-proc").mkdir(exist_ok=True)  # the live sampler finds nothing at ingest time
            store = open_store(load_config(config))
            try:
                store.commit(sorted(self.host, key=lambda e: e.ts), {}, {})
            finally:
                store.close()
        return config


ALERTS = "[alerts]\nprobe_budget_seconds = 600\n"
SUPERVISORD = 'tz = "UTC"\n'
STATUS = """interval_seconds = 30
[sources.serve-status.instances]
"http://127.0.0.1:8081/v1/status" = "strata-a"
"http://127.0.0.1:8082/v1/status" = "strata-b"
"""
HOST = """[sources.host]
kind = "host"
interval_seconds = 15
proc_root = "{folder}/no-proc"
cgroup_root = "{folder}/no-proc"
[sources.host.processes.strata-a]
pid_file = "{folder}/no-proc/strata-a.pid"
[sources.host.processes.strata-b]
pid_file = "{folder}/no-proc/strata-b.pid"
"""
