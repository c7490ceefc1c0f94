"""The load driver for llama-server: conversations whose turns grow, sent to its /completion endpoint.

Each turn sends the whole conversation so far as the prompt (`cache_prompt` on), as a chat client does:
a turn that lands on a slot still holding its conversation, or restores it from the host prompt cache,
processes only the new text; one whose cache was evicted processes it all again (the seeds' incident 2).
Bounded in requests and time, loopback only.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import httpx

SENTENCE = (
    "the expert pool reads the arena and the cache parks the snapshot while a slot decodes tokens"
    " for a long conversation about engines caches budgets and slots"
)
WORDS = tuple(SENTENCE.split(" "))


def text(tokens: int, salt: str) -> str:
    """About `tokens` tokens of text (the SentencePiece vocabulary takes a short English word as about one),
    unique per salt from its first word."""
    words = [salt] + [WORDS[(i * 7 + len(salt)) % len(WORDS)] for i in range(max(tokens - 1, 0))]
    return " ".join(words)


@dataclass
class LlamaDriver:
    """At most `concurrency` requests at a time to one llama-server, none after the deadline. Made inside
    the event loop that runs it (`asyncio.run(LlamaDriver.run(...))`)."""

    url: str
    concurrency: int = 2
    deadline_seconds: float = 120.0
    n_predict: int = 8
    statuses: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.limit = asyncio.Semaphore(self.concurrency)
        self.deadline = asyncio.get_running_loop().time() + self.deadline_seconds

    async def send(self, client: httpx.AsyncClient, prompt: str, timeout: float = 120) -> dict:
        """The reply's JSON; {} after the deadline or on a timeout (status 0)."""
        if asyncio.get_running_loop().time() > self.deadline:
            return {}
        async with self.limit:
            body = {"prompt": prompt, "n_predict": self.n_predict, "cache_prompt": True, "temperature": 0.0}
            try:
                response = await client.post(self.url + "/completion", json=body, timeout=timeout)
            except httpx.TimeoutException:
                self.statuses.append(0)
                return {}
            self.statuses.append(response.status_code)
            return response.json() if response.status_code == 200 else {}

    async def conversation(self, client: httpx.AsyncClient, name: str, turns: int, tokens: int, grow: int = 64) -> None:
        prompt = text(tokens, name)
        for turn in range(turns):
            await self.send(client, prompt)
            prompt += " " + text(grow, f"{name}-{turn}")

    async def conversations(self, names: list[str], turns: int, tokens: int, grow: int = 64) -> None:
        """The conversations side by side (each turn after the previous one of the same conversation)."""
        async with httpx.AsyncClient() as client:
            await asyncio.gather(*(self.conversation(client, name, turns, tokens, grow) for name in names))

    async def burst(self, prompts: list[str]) -> None:
        """Every prompt at once (up to `concurrency`)."""
        async with httpx.AsyncClient() as client:
            await asyncio.gather(*(self.send(client, p) for p in prompts))


async def conversations(
    url: str,
    names: list[str],
    turns: int,
    tokens: int,
    concurrency: int = 2,
    n_predict: int = 8,
    deadline_seconds: float = 240,
) -> list[int]:
    """The statuses of `names` conversations of `turns` turns against `url`."""
    driver = LlamaDriver(url, concurrency, deadline_seconds, n_predict)
    await driver.conversations(names, turns, tokens)
    return driver.statuses


async def burst(url: str, prompts: list[str], n_predict: int = 8, deadline_seconds: float = 240) -> list[int]:
    """The statuses of every prompt sent at once."""
    driver = LlamaDriver(url, len(prompts), deadline_seconds, n_predict)
    await driver.burst(prompts)
    return driver.statuses
