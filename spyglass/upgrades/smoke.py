"""The smoke gate a deploy script calls before it switches traffic (`spyglass smoke`): the seed's §5.1.

It waits for the serve's `/health` within the probe budget (a loading engine answers 503: that is
waiting, not failing), then sends fixed samples (a JSONL file, one request a line) to
`/v1/messages` one at a time and checks each answer: HTTP status, the answer's shape (content
blocks with text or a tool call), its finish reason, and its TTFT against a recorded baseline (the
engine's own `x-ttft-ms` where the serve sends it, else the wall time to the answer). The first
failing check is the reason; `--record` writes the baseline of a run that passed.
Pure checks; the HTTP calls and the clock are passed in.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

FINISHES = ("end_turn", "tool_use", "stop_sequence")


class Sample(BaseModel):
    """One line of the samples file."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., min_length=1, max_length=80)
    messages: list[dict[str, Any]] = Field(..., min_length=1)
    system: str | None = None
    max_tokens: int = Field(512, gt=0)
    tools: list[dict[str, Any]] | None = None
    expect_finish: list[str] = Field(default_factory=lambda: list(FINISHES))

    def body(self) -> dict[str, Any]:
        body = {"model": "local", "messages": self.messages, "max_tokens": self.max_tokens}
        if self.system:
            body["system"] = self.system
        if self.tools:
            body["tools"] = self.tools
        return body


class SamplesError(ValueError):
    """A samples file that cannot be used: the message names the file and line."""


def load_samples(path: Path) -> list[Sample]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SamplesError(f"{path}: cannot be read ({exc})") from None
    samples, names = [], set()
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            sample = Sample.model_validate(json.loads(raw))
        except json.JSONDecodeError as exc:
            raise SamplesError(f"{path}:{n}: not a JSON object ({exc.msg}); the file must be JSONL") from None
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "line"
            raise SamplesError(f"{path}:{n}: {where}: {first['msg']}") from None
        if sample.name in names:
            raise SamplesError(f"{path}:{n}: name: {sample.name!r} is used twice")
        names.add(sample.name)
        samples.append(sample)
    if not samples:
        raise SamplesError(f"{path}: holds no sample")
    return samples


@dataclass
class Outcome:
    name: str
    status: int
    ttft_ms: float | None = None
    finish: str | None = None
    problem: str | None = None
    request_id: str | None = None  # the id it was sent with: `spyglass trace ID` shows it


@dataclass
class Verdict:
    ok: bool
    reason: str
    waited_seconds: float = 0.0
    outcomes: list[Outcome] = field(default_factory=list)

    def baseline(self) -> dict[str, Any]:
        return {"samples": {o.name: {"ttft_ms": o.ttft_ms} for o in self.outcomes if o.ttft_ms is not None}}


def check(
    sample: Sample,
    status: int,
    body: Any,
    ttft_ms: float,
    baseline: dict[str, Any] | None,
    factor: float,
    slack_ms: float,
) -> Outcome:
    """The first thing wrong with one answer, or none."""
    out = Outcome(sample.name, status, ttft_ms)
    if status != 200:
        out.problem = f"HTTP {status}"
        return out
    content = body.get("content") if isinstance(body, dict) else None
    blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    if not any(b.get("type") == "text" and b.get("text") or b.get("type") == "tool_use" for b in blocks):
        out.problem = "the answer has neither text nor a tool call"
        return out
    out.finish = body.get("stop_reason")
    if out.finish not in sample.expect_finish:
        out.problem = f"finish reason {out.finish!r}, expected one of {', '.join(sample.expect_finish)}"
        return out
    before = ((baseline or {}).get("samples") or {}).get(sample.name, {}).get("ttft_ms")
    if isinstance(before, (int, float)) and ttft_ms > factor * before + slack_ms:
        out.problem = f"TTFT {ttft_ms:.0f} ms against a baseline of {before:.0f} ms (more than {factor:g}x)"
    return out


def wait_ready(
    get: Callable[[str], httpx.Response],
    url: str,
    budget: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    every: float = 0.5,
) -> tuple[bool, float, str]:
    """Poll /health until it answers 200 or the budget is spent: (ready, seconds waited, last state)."""
    start, state = clock(), "no answer"
    while True:
        try:
            r = get(f"{url}/health")
            if r.status_code == 200:
                return True, clock() - start, "ready"
            try:
                state = str(r.json().get("state", f"HTTP {r.status_code}"))
            except (ValueError, AttributeError):
                state = f"HTTP {r.status_code}"
        except httpx.HTTPError as exc:
            state = f"no answer ({type(exc).__name__})"
        waited = clock() - start
        if waited >= budget:
            return False, waited, state
        sleep(min(every, budget - waited))


def smoke(
    url: str,
    samples: list[Sample],
    baseline: dict[str, Any] | None = None,
    budget: float = 600.0,
    factor: float = 2.0,
    slack_ms: float = 50.0,
    timeout: float = 120.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    request_id: Callable[[], str] | None = None,
) -> Verdict:
    """Wait for /health, then send each sample with a request id of its own (a run's ids never merge with
    another run's in `spyglass requests`, and `spyglass trace` takes them), and judge the answers."""
    from spyglass.collectors.trace_ids import new_request_id

    request_id = request_id or new_request_id
    url = url.rstrip("/")
    with httpx.Client(timeout=timeout, trust_env=False) as client:
        ready, waited, state = wait_ready(client.get, url, budget, clock, sleep)
        if not ready:
            return Verdict(
                False, f"{url} is not ready after {waited:.0f} s (probe budget {budget:g} s): {state}", waited
            )
        outcomes = []
        for sample in samples:
            began, rid = clock(), request_id()
            try:
                r = client.post(f"{url}/v1/messages", json=sample.body(), headers={"x-request-id": rid})
            except httpx.HTTPError as exc:
                outcomes.append(Outcome(sample.name, 0, problem=f"no answer ({type(exc).__name__})", request_id=rid))
                break
            wall_ms = (clock() - began) * 1000
            try:
                ttft = float(r.headers.get("x-ttft-ms", wall_ms))
            except ValueError:
                ttft = wall_ms
            try:
                body = r.json()
            except ValueError:
                body = None
            outcomes.append(
                replace(check(sample, r.status_code, body, ttft, baseline, factor, slack_ms), request_id=rid)
            )
            if outcomes[-1].problem:
                break
    bad = next((o for o in outcomes if o.problem), None)
    if bad:
        return Verdict(False, f"sample {bad.name}: {bad.problem}", waited, outcomes)
    return Verdict(True, f"{len(outcomes)} samples passed", waited, outcomes)
