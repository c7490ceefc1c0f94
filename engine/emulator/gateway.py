"""An emulated RAG gateway (rag-proxy): FastAPI on 127.0.0.1 in front of the serve lanes.

Routes by lane, assembles (keeps the newest messages within a character budget, which can drop
the task anchor: incident 5), estimates tokens with the CJK 1.05 / other 0.70 rule, prechecks
with count_tokens, clamps max_tokens to the room left, optionally retries an overfit the blind way
(incident 6), enforces a model concurrency limit (429), relays a streamed reply (`"stream": true`)
event by event, and writes the gateway log (sources.md §4) and the infer store (§6: infer.db rows
and infer-segs/*/seg-*.jsonl.gz bodies).

    python -m spyglass.engine.emulator.gateway --settings '{"port": 8080, "log": "rag-proxy.log", "infer": "infer"}'
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import secrets
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel

from spyglass.collectors.clock import BEIJING
from spyglass.collectors.infer_store import text_of
from spyglass.collectors.trace_ids import new_request_id
from spyglass.engine.emulator.mechanism import cjk_chars, count_tokens, estimate_tokens
from spyglass.engine.instrument import annotate, event, instrument, otlp_tracing, request_id

FINISH = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"}
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS requests (id TEXT PRIMARY KEY, ts TEXT, session TEXT, lane TEXT, upstream TEXT,"
    " mode TEXT, client_msgs INT, sent_msgs INT, chars INT, est_tokens INT, prompt_tokens INT,"
    " completion_tokens INT, max_tokens INT, status INT, finish TEXT, tool_calls INT, content_chars INT,"
    " reasoning_chars INT, ttft_ms INT, dur_ms INT, seg TEXT)"
)


class GatewaySettings(BaseModel):
    port: int = 8080
    log: Path = Path("rag-proxy.log")
    infer: Path = Path("infer")
    lanes: dict[str, str] = {"fast": "http://127.0.0.1:8081", "normal": "http://127.0.0.1:8082"}
    upstreams: dict[str, str] = {"fast": "strata-a", "normal": "strata-b"}
    assembly_budget_chars: int = 600_000
    window: int = 262_144
    concurrency_limit: int = 2
    blind_retry: bool = True
    estimate_by_engine: bool = False  # the incident-6 fix: the estimate is the engine tokenizer's count, not 0.70/char
    segment_records: int = 20
    version: str = "2026.10.19-2"
    time_scale: float = 0.01  # the engines' scale: logged durations are model time, like theirs
    otlp_endpoint: str | None = None  # trace the gateway (engine.instrument) and push spans here


class Gateway:
    def __init__(self, s: GatewaySettings) -> None:
        self.s = s
        self.log = open(s.log, "ab", buffering=0)  # noqa: SIM115 - open for the process's life
        s.infer.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(s.infer / "infer.db", timeout=1.0, check_same_thread=False)  # used by its loop
        self.db.execute(SCHEMA)
        self.db.commit()
        self.in_flight = {lane: 0 for lane in s.lanes}
        self.pending: list[dict[str, Any]] = []  # bodies of the segment being filled
        self.segment = self._segment_name()
        self.client = httpx.AsyncClient(timeout=600)

    def write(self, message: str) -> None:
        self.log.write(f"[{time.strftime('%H:%M:%S', time.gmtime())}] {message}\n".encode())

    def _segment_name(self) -> str:
        now = datetime.now(BEIJING)
        return f"{now:%Y%m%d}/seg-{now:%H%M%S}-{secrets.token_hex(3)[:5]}.jsonl.gz"

    def flush_segment(self) -> None:
        """Publish the filled segment whole (tmp + rename): a reader never sees half of one."""
        if not self.pending:
            return
        path = self.s.infer / "infer-segs" / self.segment
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in self.pending).encode()))
        os.replace(tmp, path)
        self.pending, self.segment = [], self._segment_name()

    def record(self, row: dict[str, Any], body: dict[str, Any] | None) -> None:
        row["seg"] = self.segment
        self.db.execute(
            f"INSERT INTO requests ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values())
        )
        self.db.commit()
        if body is not None:
            self.pending.append(body)
            if len(self.pending) >= self.s.segment_records:
                self.flush_segment()

    async def handle(self, body: dict[str, Any], lane: str, mode: str) -> Response:
        started = time.monotonic()
        now = datetime.now(BEIJING)
        rid = request_id() or new_request_id()  # instrument() made it, when the gateway is traced
        messages = list(body.get("messages") or [])
        first_user = next((text_of(m.get("content")) for m in messages if m.get("role") == "user"), "")
        session = "auto:" + hashlib.sha256(first_user.encode()).hexdigest()[:16]
        row = {
            "id": rid,
            "ts": f"{now:%Y-%m-%d %H:%M:%S.%f}"[:-3],
            "session": session,
            "lane": lane,
            "upstream": self.s.upstreams.get(lane, lane),
            "mode": mode,
            "client_msgs": len(messages),
        }
        if self.in_flight[lane] >= self.s.concurrency_limit:
            reason = f"model concurrency full (limit {self.s.concurrency_limit})"
            self.write(f'reject req={rid} status=429 reason="{reason}"')
            self.record({**row, "status": 429, "sent_msgs": 0}, None)
            return JSONResponse({"type": "error", "error": {"type": "rate_limit_error", "message": reason}}, 429)
        sent = self.assemble(messages) if mode == "assembled" else messages
        text = text_of(body.get("system")) + "".join(text_of(m.get("content")) for m in sent)
        est = count_tokens(text) if self.s.estimate_by_engine else estimate_tokens(text)
        max_tokens = int(body.get("max_tokens") or 32000)
        self.write(
            f"req={rid} session={session} lane={lane} mode={mode} client_msgs={len(messages)}"
            f" sent_msgs={len(sent)} chars={len(text)} cjk={cjk_chars(text) / max(len(text), 1):.3f}"
            f" est_tokens={est} max_tokens={max_tokens}"
        )
        row.update(sent_msgs=len(sent), chars=len(text), est_tokens=est, max_tokens=max_tokens)
        if len(sent) < len(messages):
            event(
                "assembly_drop",
                client_msgs=len(messages),
                sent_msgs=len(sent),
                anchor_kept=first_user in {text_of(m.get("content")) for m in sent},
            )
        upstream = {**body, "messages": sent, "stream": bool(body.get("stream"))}
        self.in_flight[lane] += 1
        reply: Response | None = None
        try:
            reply = await self._forward(upstream, lane, rid, row, started, body)
            return reply
        finally:
            if not isinstance(reply, Relayed):  # a relayed stream is in flight until it ends
                self.in_flight[lane] -= 1

    def assemble(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The newest messages that fit the budget: older ones, the task anchor among them, drop."""
        kept: list[dict[str, Any]] = []
        total = 0
        for message in reversed(messages):
            total += len(text_of(message.get("content")))
            if total > self.s.assembly_budget_chars and kept:
                break
            kept.append(message)
        return kept[::-1]

    async def _forward(
        self,
        upstream: dict[str, Any],
        lane: str,
        rid: str,
        row: dict[str, Any],
        started: float,
        original: dict[str, Any],
    ) -> Response:
        base, headers = self.s.lanes[lane], {"x-request-id": rid}
        counted = (await self.client.post(f"{base}/v1/messages/count_tokens", json=upstream, headers=headers)).json()[
            "input_tokens"
        ]
        room = self.s.window - counted
        self.write(f"precheck req={rid} count_tokens={counted} window={self.s.window} room={room}")
        max_tokens = int(upstream.get("max_tokens") or 32000)
        if 0 < room < max_tokens:
            budget = max(1, room * 2 // 3)
            self.write(f"clamp req={rid} max_tokens {max_tokens} -> {room} thinking_budget {budget}")
            upstream = {**upstream, "max_tokens": room, "thinking": {"type": "enabled", "budget_tokens": budget}}
        if upstream["stream"]:
            request = self.client.build_request("POST", f"{base}/v1/messages", json=upstream, headers=headers)
            streamed = await self.client.send(request, stream=True)
            if streamed.status_code == 200:
                release = self._release(streamed, lane)
                return Relayed(self._relay(streamed, release, rid, row, started, original, upstream), release)
            await streamed.aread()
            await streamed.aclose()
            return self._answer(streamed, rid, row, started, original, upstream)
        response = await self.client.post(f"{base}/v1/messages", json=upstream, headers=headers)
        if response.status_code == 400:
            upstream_text = response.json()["error"]["message"]
            self.write(
                f"overfit req={rid} status=400 prompt={row['est_tokens']} max={self.s.window - 6144}"
                f' upstream="{upstream_text}"'
            )
            if self.s.blind_retry:  # incident 6: the retry only clamps max_tokens; the prompt is the problem
                event("blind_retry")
                self.write(f"retry_on_overfit req={rid} max_tokens {upstream.get('max_tokens', 32000)} -> 1")
                response = await self.client.post(
                    f"{base}/v1/messages", json={**upstream, "max_tokens": 1}, headers=headers
                )
        return self._answer(response, rid, row, started, original, upstream)

    def _answer(
        self,
        response: httpx.Response,
        rid: str,
        row: dict[str, Any],
        started: float,
        original: dict[str, Any],
        upstream: dict[str, Any],
    ) -> JSONResponse:
        status, body = response.status_code, response.json()
        if status == 200:
            self._finish(
                body,
                rid,
                row,
                started,
                original,
                upstream,
                ttft_ms=response.headers.get("x-ttft-ms"),
                model_ms=response.headers.get("x-model-ms"),
            )
        else:
            self.record({**row, "status": status, "dur_ms": self._model_ms(started)}, None)
        return JSONResponse(body, status)

    def _model_ms(self, since: float) -> int:
        return int((time.monotonic() - since) * 1000 / self.s.time_scale)

    def _release(self, response: httpx.Response, lane: str) -> Callable[[], Awaitable[None]]:
        """Closes the upstream stream and frees the lane's slot, once, however the relay ends."""
        released = False

        async def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.in_flight[lane] -= 1
                await response.aclose()

        return release

    async def _relay(
        self,
        response: httpx.Response,
        release: Callable[[], Awaitable[None]],
        rid: str,
        row: dict[str, Any],
        started: float,
        original: dict[str, Any],
        upstream: dict[str, Any],
    ):
        """The serve's events to the client as they come; the message they spell out is logged at the end."""
        message: dict[str, Any] = {"content": [], "usage": {}, "stop_reason": None}
        pending, ttft_ms, error = b"", None, None
        async for chunk in response.aiter_raw():
            ttft_ms = self._model_ms(started) if ttft_ms is None else ttft_ms
            yield chunk
            *frames, pending = (pending + chunk).split(b"\n\n")
            for frame in frames:
                error = _absorb(frame, message) or error
        await release()
        if error is not None:
            self.write(
                f'overfit req={rid} status=400 prompt={row["est_tokens"]} max={self.s.window - 6144} upstream="{error}"'
            )
            self.record({**row, "status": 400, "dur_ms": self._model_ms(started)}, None)
            return
        self._finish(message, rid, row, started, original, upstream, ttft_ms=ttft_ms)

    def _finish(
        self,
        body: dict[str, Any],
        rid: str,
        row: dict[str, Any],
        started: float,
        original: dict[str, Any],
        upstream: dict[str, Any],
        ttft_ms: str | int | None = None,
        model_ms: str | int | None = None,
    ) -> None:
        dur_ms = self._model_ms(started)
        blocks = body.get("content") or []
        content = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
        reasoning = "".join(b.get("thinking", "") for b in blocks if b.get("type") == "thinking")
        calls = [b for b in blocks if b.get("type") == "tool_use"]
        usage, finish = body.get("usage") or {}, FINISH.get(str(body.get("stop_reason")), "stop")
        annotate(
            input_tokens=usage.get("input_tokens"),
            output_tokens=usage.get("output_tokens"),
            finish=finish,
            model=str(original.get("model") or "local"),
            gateway_estimate=row["est_tokens"],
            engine=usage.get("input_tokens", 0),
        )
        ttft_ms = int(ttft_ms if ttft_ms is not None else dur_ms)
        dur_ms = int(model_ms if model_ms is not None else dur_ms)  # the engine's model time, as its log
        self.write(
            f"done req={rid} status=200 engine_prompt={usage.get('input_tokens', 0)}"
            f" completion={usage.get('output_tokens', 0)} finish={finish} tool_calls={len(calls)}"
            f" content_chars={len(content)} ttft_ms={ttft_ms} dur_ms={dur_ms}"
        )
        self.record(
            {
                **row,
                "status": 200,
                "prompt_tokens": usage.get("input_tokens"),
                "completion_tokens": usage.get("output_tokens"),
                "finish": finish,
                "tool_calls": len(calls),
                "content_chars": len(content),
                "reasoning_chars": len(reasoning),
                "ttft_ms": ttft_ms,
                "dur_ms": dur_ms,
            },
            {
                "id": rid,
                "request": {
                    "client": {"messages": original.get("messages")},
                    "sent": {
                        "system": upstream.get("system"),
                        "messages": upstream["messages"],
                        "tools": upstream.get("tools"),
                        "max_tokens": upstream.get("max_tokens"),
                    },
                },
                "response": {
                    "content": content,
                    "reasoning": reasoning,
                    "tool_calls": [{"name": c.get("name"), "arguments": json.dumps(c.get("input"))} for c in calls],
                    "finish_reason": finish,
                    "usage": usage,
                },
            },
        )


class Relayed(StreamingResponse):
    """A streamed reply relayed from the serve; `release` runs when it ends, even if it never started."""

    def __init__(self, content: AsyncIterator[bytes], release: Callable[[], Awaitable[None]]) -> None:
        super().__init__(content, media_type="text/event-stream")
        self.release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.release()


def _absorb(frame: bytes, message: dict[str, Any]) -> str | None:
    """One server-sent event folded into the message it spells out; an error event's text."""
    data = next((line[5:] for line in frame.split(b"\n") if line.startswith(b"data:")), None)
    if data is None:
        return None
    payload = json.loads(data)
    kind = payload.get("type")
    if kind == "content_block_start":
        message["content"].append(payload.get("content_block") or {})
    elif kind == "message_delta":
        message["stop_reason"] = (payload.get("delta") or {}).get("stop_reason")
        message["usage"] = payload.get("usage") or {}
    elif kind == "error":
        return str((payload.get("error") or {}).get("message", "error"))
    return None


def create_app(settings: GatewaySettings) -> FastAPI:
    gateway = Gateway(settings)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        gateway.write(f"rag-proxy started pid={os.getpid()} version={settings.version}")
        yield
        gateway.flush_segment()
        await gateway.client.aclose()
        gateway.db.close()

    app = FastAPI(lifespan=lifespan)
    app.state.gateway = gateway

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"state": "ready"}

    @app.post("/v1/messages")
    async def messages(request: Request) -> Response:
        lane = request.headers.get("x-lane", "fast")
        if lane not in settings.lanes:
            return JSONResponse({"error": f"unknown lane {lane}"}, 400)
        return await gateway.handle(await request.json(), lane, request.headers.get("x-mode", "assembled"))

    @app.post("/admin/flush")
    async def flush() -> dict[str, bool]:
        gateway.flush_segment()
        return {"flushed": True}

    return app


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="An emulated RAG gateway.")
    parser.add_argument("--settings", required=True, help="GatewaySettings as JSON")
    settings = GatewaySettings.model_validate_json(parser.parse_args().settings)
    app: Any = create_app(settings)
    if settings.otlp_endpoint:
        app = instrument(app, "gateway", otlp_tracing(settings.otlp_endpoint, "rag-proxy"))
    uvicorn.run(app, host="127.0.0.1", port=settings.port, log_level="warning")


if __name__ == "__main__":
    main()
