"""An emulated Strata engine and its serve layer in one process: FastAPI on 127.0.0.1.

It speaks the serve API (sources.md §2: /v1/messages, /v1/chat/completions,
/v1/messages/count_tokens, /v1/status, /health) and writes the engine log of §1 as things happen,
from spyglass.engine.emulator.mechanism: slots, one global serial prefill queue, a conversation cache with a byte
budget, thinking with a budget, special-token escaping, a 400 #545 past the window, a load phase,
graph rebuilds for unseen shapes, and contention (two instances on the same cores decode 10x
slower). Durations are multiplied by `time_scale`; the figures it logs are the model's own.

    python -m spyglass.engine.emulator.serve --settings '{"instance": "strata-a", "port": 8081, "log": "a.log"}'
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import random
import signal
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

from spyglass.collectors.infer_store import text_of
from spyglass.engine.emulator import logsynth as log
from spyglass.engine.emulator.logsynth import line, park_lines
from spyglass.engine.emulator.mechanism import (
    ANCHOR,
    SPECIAL_LITERALS,
    ConversationCache,
    Response,
    count_tokens,
    plan_response,
)
from spyglass.engine.instrument import annotate, event, instrument, otlp_tracing


class EngineSettings(BaseModel):
    instance: str = "strata-a"
    port: int = 8081
    log: Path = Path("strata.log")
    slots: int = 20
    window: int = 262_144
    prompt_cache_every: int = 16_384
    cache_mib: int = 8192
    cpus: str = "0-15"
    pool_workers: int = 24
    decode_tps: float = 90.0
    prefill_tokens_per_ms: float = 2.0
    load_seconds: float = 435.0
    time_scale: float = 0.01
    shares_cores: bool = False  # incident 1: another engine's expert pool on the same cores
    escape_fix: bool = True  # the serve build has the special-token escape fix (and its counters)
    escape_special: bool = True  # STRATA_ESCAPE_SPECIAL: the fix switched on
    serve_version: str = "2026.10.18"
    # Abort (SIGABRT) this long after ready: a crash loop of an engine that loads fine. Counted from
    # ready, not from start, so a loaded machine that slows the load cannot turn it into a restart
    # while loading (H14), another incident.
    crash_after_seconds: float | None = None
    # H20: after finishing this many requests the engine hangs: the process runs, /health answers 200 and
    # /v1/status says ready, but no request finishes and no [stats] line is written; new requests are still
    # accepted and logged `queued` (the HTTP thread lives on), then wait in the prefill queue for ever.
    hang_after_requests: int | None = None
    affinity: list[int] | None = None  # really pin the process to these CPUs (stack.py runs it under taskset)
    seed: int = 1
    otlp_endpoint: str | None = None  # trace the serve (engine.instrument) and push spans here


class Engine:
    """The engine state the HTTP handlers share; writes its log line by line."""

    def __init__(self, settings: EngineSettings) -> None:
        self.s = settings
        self.log = open(settings.log, "ab", buffering=0)  # noqa: SIM115 - open for the process's life
        self.cache = ConversationCache(settings.cache_mib << 20, settings.prompt_cache_every)
        self.rng = random.Random(settings.seed)
        self.state, self.started = "loading", time.time()
        self.task, self.busy, self.queue_depth = 0, 0, 0
        self.slots = asyncio.Semaphore(settings.slots)
        self.prefill = asyncio.Lock()  # one global serial prefill queue
        self.shapes: set[str] = set()
        self.requests: dict[str, int] = {}
        self.escapes = {"calls": 0, "literals": 0}
        self.stops_while_reasoning = 0
        self.finished = 0
        self.hung = settings.hang_after_requests == 0
        self.never = asyncio.Event()  # never set: what a hung engine's work waits on

    def write(self, record: log.Record) -> None:
        self.log.write(line(time.time(), *record) + b"\n")

    async def sleep(self, model_seconds: float) -> None:
        await asyncio.sleep(model_seconds * self.s.time_scale)
        if self.hung:  # work in progress when the engine hung never resumes
            await self.never.wait()

    def start_lines(self) -> None:
        s = self.s
        self.write(log.starting(os.getpid()))
        self.write(log.args(s.port, s.slots, s.window, s.pool_workers, s.cache_mib, s.prompt_cache_every))
        self.write(log.model_path())
        self.write(log.cpus(s.cpus, s.pool_workers))

    async def load(self) -> None:
        await self.sleep(self.s.load_seconds)
        self.write(log.loaded(self.s.load_seconds - 2.5))
        self.write(log.ready(self.s.load_seconds))
        self.state = "ready"
        if self.s.crash_after_seconds is not None:
            asyncio.get_running_loop().call_later(self.s.crash_after_seconds, os.kill, os.getpid(), signal.SIGABRT)

    async def stats(self) -> None:
        while True:
            await asyncio.sleep(max(0.5, 10 * self.s.time_scale))
            if self.hung:
                continue
            c = self.cache
            self.write(
                log.stats(
                    self.busy,
                    self.s.slots,
                    self.queue_depth,
                    self.decode_rate(),
                    len(c.parked),
                    c.used_bytes(),
                    c.budget_bytes,
                    c.evictions,
                )
            )

    def decode_rate(self) -> float:
        return self.s.decode_tps / (10 if self.s.shares_cores else 1)

    def count(self, status: int) -> None:
        self.requests[str(status)] = self.requests.get(str(status), 0) + 1

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "engine": self.s.instance,
            "build": log.BUILD,
            "serve_version": self.s.serve_version,
            "state": self.state,
            "uptime_s": round(time.time() - self.started, 1),
            "slots": {"total": self.s.slots, "busy": self.busy},
            "prefill_queue": self.queue_depth,
            "requests": {"total": sum(self.requests.values()), "by_status": dict(self.requests)},
        }
        if self.s.escape_fix:  # an old build has neither key: "not measured", never 0
            body["prompt_escapes"] = dict(self.escapes)
            body["stops_while_reasoning"] = self.stops_while_reasoning
        return body

    async def run(
        self, body: dict[str, Any], req_id: str, first_token: asyncio.Event | None = None
    ) -> tuple[int, dict[str, Any], Response | None]:
        """One request through queue, prefill, thinking and decode; (status, usage, response).
        `first_token` is set when prefill ends, for a streamed reply's first chunk."""
        messages = body.get("messages") or []
        system = text_of(body.get("system"))
        text = system + "".join(text_of(m.get("content")) for m in messages)
        prompt = count_tokens(text)
        escaped = self.s.escape_fix and self.s.escape_special
        if escaped:
            literals = sum(text.count(lit) for lit in SPECIAL_LITERALS)
            if literals:
                self.escapes["calls"] += 1
                self.escapes["literals"] += literals
                event("escape", literals=literals)
        self.task += 1
        task = self.task
        if prompt > self.s.window:
            self.write(log.rejected(task, prompt, self.s.window))
            self.count(400)
            return 400, {"error": f"#545 prompt too long: {prompt} > {self.s.window}"}, None
        first = text_of(messages[0].get("content")) if messages else ""
        conv = hashlib.sha256((system + first).encode()).hexdigest()[:16]
        self.queue_depth += 1
        self.write(log.queued(task, req_id, conv, self.queue_depth))
        if self.hung:  # the HTTP thread still accepts and logs it queued; nothing ever serves it
            await self.never.wait()
        queued = time.monotonic() if self.slots.locked() or self.prefill.locked() else None
        async with self.slots:
            self.busy += 1
            try:
                return await self._serve(task, conv, prompt, messages, body, escaped, queued, first_token)
            finally:
                self.busy -= 1

    async def _serve(
        self,
        task: int,
        conv: str,
        prompt: int,
        messages: list,
        body: dict,
        escaped: bool,
        queued: float | None,
        first_token: asyncio.Event | None,
    ) -> tuple[int, dict[str, Any], Response]:
        slot = f"slot {task % self.s.slots}"
        async with self.prefill:
            # Waiting counts only when another request held a slot or the prefill queue: the
            # interpreter's own overhead, divided by time_scale, would pose as minutes.
            wait_ms = 0 if queued is None else int((time.monotonic() - queued) / self.s.time_scale * 1000)
            self.queue_depth -= 1
            reused, origin = self.cache.restore(conv, prompt)
            if origin != "none":
                self.write(log.restored(conv, origin, reused))
            read = prompt - reused
            read_ms = 300 + int(read / self.s.prefill_tokens_per_ms)
            shape = f"1x{2 ** max(9, math.ceil(math.log2(max(read, 1))))}"
            if shape not in self.shapes:
                self.shapes.add(shape)
                self.write(log.rebuild(shape, 840))
                read_ms += 840
            await self.sleep(read_ms / 1000)
            self.write(log.prompt_read(slot, task, prompt, reused, read_ms))
        ttft_ms = wait_ms + read_ms
        if first_token is not None:
            first_token.set()
        last_user = next((text_of(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
        anchored = any(ANCHOR in text_of(m.get("content")) for m in messages if m.get("role") == "user")
        budget = int((body.get("thinking") or {}).get("budget_tokens", 32000))
        max_tokens = int(body.get("max_tokens") or 32000)
        response = plan_response(self.rng, last_user, anchored, bool(body.get("tools")), max_tokens, budget, escaped)
        await self.sleep(response.thinking / self.decode_rate())
        self.write(log.thinking(slot, task, response.thinking, budget, response.thinking_cause))
        await self.sleep((response.completion - response.thinking) / self.decode_rate())
        if response.tool_call:
            self.write(log.tool_call(slot, task))
        self.write(log.done(slot, task, response.finish, prompt, response.completion, ttft_ms, self.decode_rate()))
        if response.finish == "stop" and not response.content and not response.tool_call:
            event("stop_while_reasoning")
            if self.s.escape_fix:  # only builds with the fix count it in /v1/status
                self.stops_while_reasoning += 1
        annotate(
            input_tokens=prompt,
            output_tokens=response.completion,
            reasoning_tokens=response.thinking,
            finish=response.finish,
            model=str(body.get("model") or "local"),
            engine=prompt,
        )
        for park_line in park_lines(self.cache, conv, prompt + response.completion, time.time()):
            self.log.write(park_line + b"\n")
        self.count(200)
        self.finished += 1
        if self.s.hang_after_requests is not None and self.finished >= self.s.hang_after_requests:
            self.hung = True
        model_ms = ttft_ms + int(response.completion / self.decode_rate() * 1000)
        return (
            200,
            {"input_tokens": prompt, "output_tokens": response.completion, "ttft_ms": ttft_ms, "model_ms": model_ms},
            response,
        )


def anthropic_message(response: Response, usage: dict[str, Any], model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "thinking", "thinking": "…" * min(response.thinking, 64)}]
    if response.content:
        content.append({"type": "text", "text": response.content})
    if response.tool_call:
        content.append({"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}})
    stop = {"tool_calls": "tool_use", "length": "max_tokens"}.get(response.finish, "end_turn")
    return {
        "id": "msg_emulated",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "usage": {"input_tokens": usage["input_tokens"], "output_tokens": usage["output_tokens"]},
    }


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


async def stream_message(run: asyncio.Task, first_token: asyncio.Event, model: str):
    """Anthropic server-sent events: message_start as soon as prefill ends, the rest when decoded."""
    await asyncio.wait([run, asyncio.ensure_future(first_token.wait())], return_when=asyncio.FIRST_COMPLETED)
    yield sse(
        "message_start",
        {
            "type": "message_start",
            "message": {"id": "msg_emulated", "type": "message", "role": "assistant", "model": model, "content": []},
        },
    )
    code, usage, response = await run
    if response is None:
        yield sse("error", {"type": "error", "error": {"type": "invalid_request_error", "message": usage["error"]}})
        return
    message = anthropic_message(response, usage, model)
    for index, block in enumerate(message["content"]):
        yield sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})
        yield sse("content_block_stop", {"type": "content_block_stop", "index": index})
    yield sse(
        "message_delta",
        {"type": "message_delta", "delta": {"stop_reason": message["stop_reason"]}, "usage": message["usage"]},
    )
    yield sse("message_stop", {"type": "message_stop"})


def create_app(settings: EngineSettings) -> FastAPI:
    engine = Engine(settings)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        engine.start_lines()
        tasks = [asyncio.create_task(engine.load()), asyncio.create_task(engine.stats())]
        yield
        engine.state = "draining"
        for task in tasks:
            task.cancel()

    app = FastAPI(lifespan=lifespan)
    app.state.engine = engine

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({"state": engine.state}, status_code=200 if engine.state == "ready" else 503)

    @app.get("/v1/status")
    async def status() -> dict[str, Any]:
        return engine.status()

    @app.post("/v1/messages/count_tokens")
    async def count(request: Request) -> dict[str, Any]:
        body = await request.json()
        text = text_of(body.get("system")) + "".join(text_of(m.get("content")) for m in body.get("messages") or [])
        return {"input_tokens": count_tokens(text)}

    @app.post("/v1/messages")
    async def messages(request: Request):
        if engine.state != "ready":
            return JSONResponse({"type": "error", "error": {"type": "overloaded_error", "message": "loading"}}, 503)
        body = await request.json()
        rid = request.headers.get("x-request-id", "-")
        if body.get("stream"):
            first_token = asyncio.Event()
            run = asyncio.create_task(engine.run(body, rid, first_token))
            return StreamingResponse(
                stream_message(run, first_token, str(body.get("model", "local"))), media_type="text/event-stream"
            )
        code, usage, response = await engine.run(body, rid)
        if response is None:
            return JSONResponse(
                {"type": "error", "error": {"type": "invalid_request_error", "message": usage["error"]}}, code
            )
        message = anthropic_message(response, usage, str(body.get("model", "local")))
        return JSONResponse(message, headers={"x-ttft-ms": str(usage["ttft_ms"]), "x-model-ms": str(usage["model_ms"])})

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        if engine.state != "ready":
            return JSONResponse({"error": {"message": "loading"}}, 503)
        body = await request.json()
        code, usage, response = await engine.run(body, request.headers.get("x-request-id", "-"))
        if response is None:
            return JSONResponse({"error": {"message": usage["error"]}}, code)
        calls = (
            [{"id": "call_1", "type": "function", "function": {"name": "Bash", "arguments": '{"command": "ls"}'}}]
            if response.tool_call
            else []
        )
        return {
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": response.finish,
                    "message": {"role": "assistant", "content": response.content or None, "tool_calls": calls},
                }
            ],
            "usage": {"prompt_tokens": usage["input_tokens"], "completion_tokens": usage["output_tokens"]},
        }

    return app


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="An emulated Strata engine + serve layer.")
    parser.add_argument("--settings", required=True, help="EngineSettings as JSON")
    settings = EngineSettings.model_validate_json(parser.parse_args().settings)
    if os.environ.get("STRATA_ESCAPE_SPECIAL") == "0":
        settings.escape_special = False
    app: Any = create_app(settings)
    if settings.otlp_endpoint:
        app = instrument(app, "serve", otlp_tracing(settings.otlp_endpoint, settings.instance))
    uvicorn.run(app, host="127.0.0.1", port=settings.port, log_level="warning")


if __name__ == "__main__":
    main()
