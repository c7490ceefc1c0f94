"""Named scenarios that reproduce each incident of the seeds on the emulated stack, and a load driver.

A scenario is the stack's settings, a driver (bounded in requests and time, loopback only), and
the signals it must move. `healthy` moves none of the incident signals.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from spyglass.engine.emulator.mechanism import ASCII_CHARS_PER_TOKEN, SPECIAL_LITERALS

FILLER = "the expert pool reads the arena and the cache parks the snapshot "


def filler(tokens: int, salt: str = "") -> str:
    """About `tokens` engine tokens of English text, unique per salt."""
    chars = int(tokens * ASCII_CHARS_PER_TOKEN)
    return (salt + " " + FILLER * (chars // len(FILLER) + 1))[:chars]


class Driver:
    """Sends requests to the gateway; at most `concurrency` at a time, none after the deadline."""

    def __init__(self, url: str, concurrency: int = 2, deadline_seconds: float = 60.0) -> None:
        self.url, self.limit = url, asyncio.Semaphore(concurrency)
        self.deadline = asyncio.get_event_loop().time() + deadline_seconds
        self.statuses: list[int] = []

    async def send(
        self,
        client: httpx.AsyncClient,
        lane: str,
        messages: list[dict],
        *,
        tools: bool = True,
        mode: str = "assembled",
        max_tokens: int = 32000,
        timeout: float = 300,
    ) -> dict[str, Any]:
        """The reply's JSON; {} after the deadline, or when no answer came within `timeout` (status 0)."""
        if asyncio.get_event_loop().time() > self.deadline:
            return {}
        async with self.limit:
            body = {
                "model": "qwen3.5-397b",
                "max_tokens": max_tokens,
                "messages": messages,
                "tools": [{"name": "Bash", "input_schema": {"type": "object"}}] if tools else [],
            }
            try:
                response = await client.post(
                    self.url + "/v1/messages", json=body, timeout=timeout, headers={"x-lane": lane, "x-mode": mode}
                )
            except httpx.TimeoutException:
                self.statuses.append(0)
                return {}
            self.statuses.append(response.status_code)
            return response.json()

    async def conversation(
        self,
        client: httpx.AsyncClient,
        lane: str,
        name: str,
        turns: int,
        tokens: int,
        grow: int = 2000,
        mode: str = "passthrough",
        anchored: bool = True,
    ) -> None:
        first = ("Task: " if anchored else "Continue where we left off. ") + name
        messages = [{"role": "user", "content": first + "\n" + filler(tokens, name)}]
        for turn in range(turns):
            await self.send(client, lane, messages, mode=mode)
            messages += [
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": filler(grow, f"{name}-{turn}")},
            ]


async def healthy(d: Driver, c: httpx.AsyncClient) -> None:
    await asyncio.gather(
        *(d.conversation(c, lane, f"{lane}-{i}", 3, 20_000) for lane in ("fast", "normal") for i in range(2))
    )


async def eviction_storm(d: Driver, c: httpx.AsyncClient) -> None:
    # Five ~200k-token conversations on an 8 GiB cache whose snapshots are ~4 GB each (incident 2).
    await asyncio.gather(*(d.conversation(c, "normal", f"book-{i}", 3, 195_000 + 2_000 * i) for i in range(5)))


async def special_tokens(d: Driver, c: httpx.AsyncClient) -> None:
    repeat = f"Repeat exactly: ABC{SPECIAL_LITERALS[2]}XYZ"
    for lane in ("normal", "fast"):  # normal runs the old serve build, fast has the escape fix
        for i in range(4):
            await d.send(c, lane, [{"role": "user", "content": f"Task: explain generate.cpp {i}. {repeat}"}])
            await d.send(c, lane, [{"role": "user", "content": f"Task: explain generate.cpp {i}. 2+2?"}])


async def plan_then_eos(d: Driver, c: httpx.AsyncClient) -> None:
    for i in range(5):
        await d.send(c, "fast", [{"role": "user", "content": f"Continue the chapter, part {i}."}])


async def assembly_drop(d: Driver, c: httpx.AsyncClient) -> None:
    # 315 client messages; assembly keeps the newest within its budget and drops the task (incident 5).
    for i in range(3):
        messages = [{"role": "user", "content": f"Task: write chapter {i} of the book"}]
        messages += [{"role": "user" if j % 2 else "assistant", "content": filler(120, f"{i}-{j}")} for j in range(314)]
        await d.send(c, "fast", messages, mode="assembled")


async def token_count(d: Driver, c: httpx.AsyncClient) -> None:
    # English prompts: the gateway's estimate is 3.3x the engine's count; one overfills the window.
    await d.send(
        c, "normal", [{"role": "user", "content": "Task: summarise. " + filler(240_000, "near")}], mode="no_rag"
    )
    await d.send(
        c, "normal", [{"role": "user", "content": "Task: summarise. " + filler(300_000, "over")}], mode="no_rag"
    )


async def recompile_storm(d: Driver, c: httpx.AsyncClient) -> None:
    for i, tokens in enumerate(600 * 2**k for k in range(9)):  # every request a new graph shape
        await d.send(
            c, "fast", [{"role": "user", "content": f"Task: {i} " + filler(tokens, f"shape-{i}")}], mode="passthrough"
        )


async def light_load(d: Driver, c: httpx.AsyncClient) -> None:
    await asyncio.gather(*(d.conversation(c, lane, f"{lane}-light", 2, 5_000) for lane in ("fast", "normal")))


async def over_limit(d: Driver, c: httpx.AsyncClient) -> None:
    # Six at once on a lane whose model takes two: 429 "model concurrency full (limit 2)" (H12).
    d.limit = asyncio.Semaphore(6)
    await asyncio.gather(
        *(
            d.send(c, "fast", [{"role": "user", "content": f"Task: {i} " + filler(40_000, str(i))}], mode="passthrough")
            for i in range(6)
        )
    )


async def crash_loop(d: Driver, c: httpx.AsyncClient) -> None:
    await asyncio.sleep(12)  # strata-b aborts 1 s after each ready; supervisord respawns it


HUNG_REQUESTS, HUNG_EVERY_SECONDS = 12, 5.0  # requests arriving at a hung engine, and how often (real seconds)


async def hung_engine(d: Driver, c: httpx.AsyncClient) -> None:
    # strata-b finishes one request, then hangs (H20). Requests keep arriving, one every 5 s for a minute:
    # each is accepted and logged `queued` (the engine log never goes quiet) and never answered; the
    # client gives up on each, the gateway (its concurrency limit raised) and the engine keep them in flight.
    await d.send(c, "normal", [{"role": "user", "content": "Task: hello " + filler(2_000, "first")}])

    async def arrive(i: int) -> None:
        await asyncio.sleep(i * HUNG_EVERY_SECONDS)
        await d.send(c, "normal", [{"role": "user", "content": f"Task: {i} " + filler(2_000, str(i))}], timeout=2)

    await asyncio.gather(*(arrive(i) for i in range(HUNG_REQUESTS)))


async def slow_load(d: Driver, c: httpx.AsyncClient) -> None:
    await d.send(c, "normal", [{"role": "user", "content": "Task: hello"}])  # still loading: 503


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    drive: Callable[[Driver, httpx.AsyncClient], Awaitable[None]]
    engine_patch: dict[str, dict[str, Any]] = field(default_factory=dict)
    gateway_patch: dict[str, Any] = field(default_factory=dict)
    crash_loop: frozenset[str] = frozenset()
    ready: tuple[str, ...] = ("strata-a", "strata-b")


BIG_CACHE = {"cache_mib": 65_536}
SCENARIOS = {
    s.name: s
    for s in [
        Scenario(
            "healthy",
            "Moderate load, big caches, anchored tasks: no incident signal moves.",
            healthy,
            {"strata-a": BIG_CACHE, "strata-b": BIG_CACHE},
        ),
        Scenario(
            "eviction-storm",
            "~4 GB snapshots on an 8 GiB cache: evictions, checkpoint-only reuse (incident 2).",
            eviction_storm,
            {"strata-a": BIG_CACHE},
        ),
        Scenario(
            "special-tokens",
            "Literals repeated on a lane without the escape fix: thinking-only (incident 3).",
            special_tokens,
            {"strata-a": BIG_CACHE, "strata-b": {**BIG_CACHE, "escape_fix": False, "serve_version": "2026.10.16"}},
        ),
        Scenario(
            "plan-then-eos",
            "Tools offered, no task anchor: a plan, then EOS (incidents 4, 5).",
            plan_then_eos,
            {"strata-a": BIG_CACHE},
        ),
        Scenario(
            "assembly-drop",
            "Assembly drops 315 -> few messages and the task with them (incident 5).",
            assembly_drop,
            {"strata-a": BIG_CACHE},
            {"assembly_budget_chars": 20_000},
        ),
        Scenario(
            "token-count",
            "Estimate 3.3x the engine count; an overfit 400 and a blind retry (incident 6).",
            token_count,
            {"strata-b": BIG_CACHE},
        ),
        Scenario(
            "concurrency",
            "More requests at once than the model's limit: 429s at the gateway (H12).",
            over_limit,
            {"strata-a": BIG_CACHE},
        ),
        Scenario(
            "crash-loop",
            "strata-b aborts after it is ready and is respawned: never FATAL (upgrade article).",
            crash_loop,
            {"strata-b": {"crash_after_seconds": 1.0}},
            crash_loop=frozenset({"strata-b"}),
            ready=("strata-a",),
        ),
        Scenario(
            "hung-engine",
            "strata-b stops finishing requests and writing [stats]; it still logs each new request"
            " queued, and /health still answers 200 (H20).",
            hung_engine,
            {"strata-b": {"hang_after_requests": 1}},
            {"concurrency_limit": 2 + HUNG_REQUESTS},
        ),
        Scenario(
            "slow-load",
            "strata-b loads far longer than a probe allows: loading, /health 503.",
            slow_load,
            {"strata-b": {"load_seconds": 6000.0}},
            ready=("strata-a",),
        ),
        Scenario(
            "recompile-storm",
            "Every request a new shape: graph rebuilds (upgrade article).",
            recompile_storm,
            {"strata-a": BIG_CACHE},
        ),
        Scenario(
            "contention",
            "Both engines on the same cores: decode an order of magnitude slower (incident 1).",
            light_load,
            {name: {"shares_cores": True, "cpus": "0-31", **BIG_CACHE} for name in ("strata-a", "strata-b")},
        ),
    ]
}


async def run_scenario(scenario: Scenario, url: str, deadline_seconds: float = 90.0) -> Driver:
    driver = Driver(url, deadline_seconds=deadline_seconds)
    async with httpx.AsyncClient() as client:
        await scenario.drive(driver, client)
    return driver
