"""A load driver that records, per request, what its client saw: the HTTP status, whether the client hung up
(a cancelled stream), and the time to the first byte of the answer. What spyglass makes of llama-server's log
is held against it (tests/test_llama_real.py); `python -m spyglass.engine.llama.outcomes` records the
fixture tests/fixtures/llama/<version>/outcomes/ (the log and client.json) from the cached build.

The workload, on one llama-server with `-c 1024 -np 2 --kv-unified` (both slots share one 1,024-cell KV cache)
and `--threads-http 8`:
a warm request; a prompt longer than the context (400, context exceeded); a stream the client closes after
its first bytes (cancelled); two long prompts at once whose tokens do not fit the shared cache together (the
server halves its batch down to 1, then answers both 500 `Context size has been exceeded.`); a burst of six
streamed requests on the two slots (four of them wait for a slot). Every request streams, so its first byte
is its first token: the wait a client sees. Loopback only; every request has a deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from spyglass.engine.llama.build import REPO_ROOT, LlamaBuild, ensure_built
from spyglass.engine.llama.load import text
from spyglass.engine.llama.model import ensure_model
from spyglass.engine.llama.record import help_text
from spyglass.engine.llama.versions import PINNED
from spyglass.engine.llama.versions import version as version_row

# --threads-http 8: every request of the burst has an HTTP thread at once (the default is max(-np + 2, cores - 1),
# 4 here), so what it waits for is a slot, which the log shows; a wait for an HTTP thread is in no line.
FLAGS = ("-c", "1024", "-np", "2", "-t", "1", "--threads-http", "8")
# Where the build has them (its --help says): one KV pool for both slots (older builds give each -c/-np cells, so
# the two long prompts overflow their own slot instead), the host prompt cache at 1 MiB.
IF_KNOWN = (("--kv-unified",), ("--cache-ram", "1"))
BURST = 6


@dataclass(frozen=True)
class ClientSaw:
    """One request as its client saw it; `sent` is the wall clock when it was sent (time.time())."""

    name: str
    sent: float
    status: int  # 0: no answer
    cancelled: bool
    ttfb: float | None  # seconds from sending to the first byte of the body
    total: float
    error_code: int | None = None  # the code of an error event in a stream already answered 200
    truncated: bool = False  # the answer's last event says its prompt was cut to fit the slot's context

    @property
    def outcome(self) -> str:
        """What spyglass must name it: the client hung up, was answered an error, or got its answer."""
        if self.cancelled:
            return "cancelled"
        if self.status != 200 or self.error_code is not None:
            return "error"
        return "truncated" if self.truncated else "done"

    @property
    def error_status(self) -> int | None:
        """The status of the error the client got: the HTTP status, or the code of the stream's error event."""
        return self.error_code if self.error_code is not None else (self.status if self.status != 200 else None)


def stream_error(body: bytes) -> int | None:
    """The code of an error event in a server-sent-events body (`error: {"code": 500, ...}`, or a `data:`
    event holding `{"error": {...}}`), if any."""
    for line in body.splitlines():
        event: object = None
        if line.startswith((b"error: ", b"data: {")):
            try:
                event = json.loads(line.split(b": ", 1)[1])
            except ValueError:
                continue
        if isinstance(event, dict) and line.startswith(b"data: "):
            event = event.get("error")
        if isinstance(event, dict) and isinstance(event.get("code"), int):
            return int(event["code"])
    return None


def stream_truncated(body: bytes) -> bool:
    """Whether a streamed answer's last event (`"stop": true`) says `"truncated": true`."""
    for line in reversed(body.splitlines()):
        if line.startswith(b"data: {"):
            try:
                event = json.loads(line[6:])
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("stop"):
                return event.get("truncated") is True
    return False


async def ask(
    client: httpx.AsyncClient, url: str, name: str, prompt: str, n_predict: int, hang_up: bool = False
) -> ClientSaw:
    """One streamed /completion; `hang_up`: close the connection after the first bytes."""
    body = {"prompt": prompt, "n_predict": n_predict, "cache_prompt": True, "temperature": 0.0, "stream": True}
    if hang_up:
        body["ignore_eos"] = True
    sent, start = time.time(), time.monotonic()
    first: float | None = None
    status, chunks = 0, []
    try:
        async with client.stream("POST", url + "/completion", json=body, timeout=120) as response:
            status = response.status_code
            async for chunk in response.aiter_bytes():
                if first is None:
                    first = time.monotonic() - start
                if hang_up:
                    break
                chunks.append(chunk)
    except httpx.HTTPError as exc:
        if status == 0:  # no answer at all: the driver's failure, which no log line can show
            raise RuntimeError(f"{name}: no answer from llama-server ({exc!r})") from exc
    answer = b"".join(chunks)
    code = stream_error(answer) if status == 200 else None
    return ClientSaw(name, sent, status, hang_up, first, time.monotonic() - start, code, stream_truncated(answer))


async def workload(url: str) -> list[ClientSaw]:
    """The workload of the module's docstring, in order."""
    # a new connection a request: llama-server closes a connection after a streamed answer, and a request sent
    # on it before the close is seen got no answer at all (under load, in CI)
    async with httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0)) as client:
        seen = [await ask(client, url, "warm", text(100, "warm"), 8)]
        seen.append(await ask(client, url, "too-long", text(1500, "long"), 8))
        seen.append(await ask(client, url, "hang-up", text(200, "hangup"), 400, hang_up=True))
        await asyncio.sleep(0.5)  # the server notices the closed stream and releases the slot
        seen += await asyncio.gather(*(ask(client, url, f"kv-{k}", text(500, f"kv{k}"), 400) for k in "ab"))
        seen += await asyncio.gather(
            *(ask(client, url, f"burst-{i}", text(150, f"burst{i}"), 160) for i in range(BURST))
        )
    return list(seen)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_argv(build: LlamaBuild, model: Path, port: int, log: Path, known: str) -> list[str]:
    """The server's command line; `known`: its --help. A build before --log-file (2024) logs to its console,
    which record() writes to `log`, as a user's redirect does."""
    argv = [str(build.server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), *FLAGS, "--metrics"]
    argv += [flag for flags in IF_KNOWN if f"{flags[0]} " in known or f"{flags[0]}," in known for flag in flags]
    if "--slots " in known or "--slots," in known:
        argv.append("--slots")
    if "--log-file" in known:
        argv += ["--log-prefix", "--log-timestamps", "--log-file", str(log)]
    return argv


def wait_healthy(proc: subprocess.Popen, url: str, timeout: float = 120) -> None:
    pause, deadline = threading.Event(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited ({proc.returncode})")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        pause.wait(0.1)
    raise TimeoutError(f"llama-server not healthy after {timeout:.0f} s")


def record(out: Path, version: str = PINNED) -> list[ClientSaw]:
    """Run the workload on a fresh llama-server of `version`; its log and client.json into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    build, port = ensure_built(version), free_port()
    model = ensure_model(split_experts=version_row(version).split_experts)  # 2024 builds read experts split
    log = out / "server.log"
    log.unlink(missing_ok=True)
    argv = server_argv(build, model, port, log, help_text(build))
    console = open(os.devnull, "wb") if "--log-file" in argv else log.open("wb")  # noqa: SIM115 (closed below)
    # a console into a file is block-buffered: SIGTERM would lose the last lines, so a line is written at once
    line_buffered = [] if "--log-file" in argv else ["stdbuf", "-oL", "-eL"]
    # in `out`: a 2024 build also writes a llama.log of its own to its working folder
    proc = subprocess.Popen([*line_buffered, *argv], env=build.env(), stdout=console, stderr=subprocess.STDOUT, cwd=out)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(proc, url)
        seen = asyncio.run(workload(url))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        console.close()
    flags = [Path(a).name if a.startswith("/") else a for a in argv[1:]]
    (out / "client.json").write_text(
        json.dumps(
            {
                "argv": flags,
                "requests": [asdict(s) | {"outcome": s.outcome, "error_status": s.error_status} for s in seen],
            },
            indent=1,
        )
        + "\n"
    )
    return seen


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    version = args[0] if args else PINNED
    seen = record(REPO_ROOT / "tests" / "fixtures" / "llama" / version / "outcomes", version)
    for s in seen:
        print(f"{s.name:10} {s.status} {s.outcome:9} {s.error_status} ttfb {s.ttfb}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
