"""Record what a llama-server build really writes and answers: the fixtures of tests/fixtures/llama/<version>/.

`record(version)` runs one scripted workload against the cached build of that llama-cpp-python version, in
every logging mode the build offers (versions.py says which), and writes for each mode the server's log,
and the `/metrics`, `/slots` (idle, and while a task runs) and `/props` bodies it answered; then a load
failure (a model path that does not exist). `expected.json` lists, per log, the events it must yield by
kind, counted from what the workload did (requests sent and answered, the abort, the processes started),
never from spyglass's parser; the only count taken from the log is the server's own eviction lines
(the host cache decides what it evicts), found by their fixed wording.

The workload: a prompt, the same prompt again (reused), it grown by a turn (partly reused), distinct long
prompts (evictions where `--cache-ram` exists, run at 1 MiB), the first conversation once more (restored or
processed again), then a streamed request aborted by the client. Loopback only; each step has a deadline.

Run `scripts/record-llama VERSION` (builds the version first if it is not cached).
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from spyglass.engine.llama.build import REPO_ROOT, LlamaBuild, ensure_built
from spyglass.engine.llama.load import text
from spyglass.engine.llama.model import ensure_model
from spyglass.engine.llama.versions import HOST_CACHE, JSON_LOG, LOG_PREFIX, ROUTER, VERBOSE, LlamaVersion, version

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "llama"
EVICTION_WORDING = ("removing oldest entry",)  # the host cache's own eviction lines (server-common/-context)
N_PREDICT = 8


@dataclass(frozen=True)
class Mode:
    """One way of running the build: its log flags, and whether the log is the console or --log-file."""

    name: str
    flags: tuple[str, ...] = ()
    log_file: bool = False
    router: bool = False
    models: int = 1  # in router mode: the models it serves, each its own child process, used in turn


def modes(row: LlamaVersion) -> list[Mode]:
    found = [Mode("default")]
    if row.has(JSON_LOG):
        found.append(Mode("text", ("--log-format", "text")))
    if row.has(LOG_PREFIX):
        found.append(Mode("prefix", ("--log-prefix", "--log-timestamps"), log_file=True))
    if row.has(VERBOSE):
        found.append(Mode("verbose", ("-v",)))
    if row.has(ROUTER):
        found.append(Mode("router", ("--log-prefix", "--log-timestamps"), router=True))
        found.append(Mode("router-two", ("--log-prefix", "--log-timestamps"), router=True, models=2))
    return found


@dataclass
class Tally:
    """What the workload did, as the client saw it."""

    sent: int = 0
    completed: int = 0
    aborted: int = 0
    statuses: list[int] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def help_text(build: LlamaBuild) -> str:
    done = subprocess.run(
        [str(build.server), "--help"], env=build.env(), capture_output=True, text=True, timeout=60, check=False
    )
    return done.stdout + done.stderr


def server_argv(
    build: LlamaBuild, row: LlamaVersion, mode: Mode, model: Path, port: int, log: Path, flags_known: str
) -> list[str]:
    argv = [str(build.server)]
    argv += ["--models-dir", str(model.parent)] if mode.router else ["-m", str(model)]
    argv += ["--host", "127.0.0.1", "--port", str(port), "-c", "4096", "-np", "2", "-t", "1", "--metrics"]
    if "--slots " in flags_known or "--slots," in flags_known:
        argv.append("--slots")
    if row.has(HOST_CACHE):
        argv += ["--cache-ram", "1"]
    argv += list(mode.flags)
    if mode.log_file:
        argv += ["--log-file", str(log)]
    return argv


class Server:
    """One llama-server process, its console into a file; stopped with SIGTERM (as supervisord and systemd do)."""

    def __init__(self, build: LlamaBuild, argv: list[str], console: Path) -> None:
        self.console = console
        with console.open("wb") as out:
            self.proc = subprocess.Popen(
                argv,
                env=build.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=console.parent,
            )

    def wait_healthy(self, url: str, timeout: float = 120) -> None:
        pause, deadline = threading.Event(), time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({self.proc.returncode}): {self.tail()}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            pause.wait(0.1)
        raise TimeoutError(f"llama-server not healthy after {timeout:.0f} s: {self.tail()}")

    def tail(self) -> str:
        return "\n".join(self.console.read_text(errors="replace").splitlines()[-15:])

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode


def complete(client: httpx.Client, url: str, prompt: str, tally: Tally, model: str | None) -> None:
    body: dict[str, Any] = {"prompt": prompt, "n_predict": N_PREDICT, "cache_prompt": True, "temperature": 0.0}
    if model:
        body["model"] = model
    tally.sent += 1
    try:
        response = client.post(url + "/completion", json=body, timeout=120)
    except httpx.RemoteProtocolError:  # a router may close a kept-alive connection as it spawns a child: once more
        response = client.post(url + "/completion", json=body, headers={"Connection": "close"}, timeout=120)
    tally.statuses.append(response.status_code)
    tally.completed += response.status_code == 200


def abort_one(client: httpx.Client, url: str, tally: Tally, model: str | None) -> bytes:
    """A streamed request closed by the client after its first tokens; returns /slots as seen while it ran."""
    body: dict[str, Any] = {
        "prompt": text(200, "abort"),
        "n_predict": 4000,
        "stream": True,
        "cache_prompt": True,
        "ignore_eos": True,
        "temperature": 0.0,
    }
    if model:
        body["model"] = model
    tally.sent += 1
    busy = b""
    with client.stream("POST", url + "/completion", json=body, timeout=120) as response:
        tally.statuses.append(response.status_code)
        for n, _ in enumerate(response.iter_lines()):
            if n == 2:
                answer = client.get(url + "/slots", params={"model": model} if model else None, timeout=30)
                busy = answer.content if answer.status_code == 200 else b""
            if n >= 4:
                break
    tally.aborted += 1
    return busy


def wait_idle(client: httpx.Client, url: str, timeout: float = 60) -> None:
    """Until no slot is processing (the aborted task was noticed and released)."""
    pause, deadline = threading.Event(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            slots = client.get(url + "/slots", timeout=10).json()
            if isinstance(slots, list) and not any(s.get("is_processing") or s.get("state") for s in slots):
                return
        except (httpx.HTTPError, ValueError):
            return  # no /slots: nothing to wait on
        pause.wait(0.2)


def router_models(client: httpx.Client, url: str) -> list[str]:
    listed = client.get(url + "/v1/models", timeout=30).json()
    return sorted(str(entry["id"]) for entry in listed["data"])


def run_workload(url: str, folder: Path, router: bool) -> Tally:
    """The workload; in router mode each prompt goes to every model the router lists in turn, so that
    with two models their children's lines interleave in the router's log."""
    tally = Tally()
    with httpx.Client() as client:
        models: list[str | None] = list(router_models(client, url)) if router else [None]
        model = models[0]
        first = text(300, "alpha")
        grown = first + " " + text(64, "alpha-1")
        if len(models) > 1:
            # the first child runs a while alone: the next one's stamps (from its own start) then run seconds
            # behind it, as children started at different times do (a recorder's pause, not a test's)
            complete(client, url, text(50, "warm"), tally, model)
            threading.Event().wait(5.0)
        for prompt in (
            first,
            first,
            grown,
            text(200, "bravo"),
            *(text(600, name) for name in ("charlie", "delta", "echo", "foxtrot")),
            grown,
        ):
            for each in models:
                complete(client, url, prompt, tally, each)
        busy = abort_one(client, url, tally, model)
        wait_idle(client, url)
        for name, path in (("metrics.txt", "/metrics"), ("slots.json", "/slots"), ("props.json", "/props")):
            query = f"?model={model}" if model else ""
            response = client.get(url + path + query, timeout=30)
            if response.status_code == 200:
                (folder / name).write_bytes(response.content)
        if busy:
            (folder / "slots-busy.json").write_bytes(busy)
    return tally


def count_lines(log: Path, wording: tuple[str, ...]) -> int:
    return sum(1 for line in log.read_text(errors="replace").splitlines() if any(w in line for w in wording))


def record_mode(build: LlamaBuild, row: LlamaVersion, mode: Mode, model: Path, out: Path, flags_known: str) -> dict:
    folder = out / mode.name
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="record-llama-") as tmp:
        work = Path(tmp)
        run_model = model
        if mode.router:
            (work / "models").mkdir()
            names = [model.name] if mode.models == 1 else [f"{model.stem}-{n}{model.suffix}" for n in "ab"]
            for name in names:
                run_model = work / "models" / name
                shutil.copy(model, run_model)  # a real file: the router lists regular .gguf files
        log_file = work / "server.log"
        argv = server_argv(build, row, mode, run_model, port, log_file, flags_known)
        server = Server(build, argv, work / "console.log")
        try:
            server.wait_healthy(f"http://127.0.0.1:{port}")
            tally = run_workload(f"http://127.0.0.1:{port}", folder, mode.router)
        finally:
            code = server.stop()
        shutil.copy(log_file if mode.log_file else work / "console.log", folder / "server.log")
    evictions = count_lines(folder / "server.log", EVICTION_WORDING)
    # a router starts, then one child per model on that model's first request
    processes = 1 + mode.models if mode.router else 1
    return {
        "log": f"{mode.name}/server.log",
        "flags": list(mode.flags) + (["--log-file"] if mode.log_file else []),
        "argv": [Path(a).name if a.startswith("/") else a for a in argv[1:]],
        "workload": {
            "sent": tally.sent,
            "completed": tally.completed,
            "aborted": tally.aborted,
            "statuses": tally.statuses,
            "exit_code": code,
        },
        "events": {
            "start": processes,
            "ready": processes,
            "queued": tally.sent,
            "done": tally.completed + tally.aborted,  # every request ends: each `done` carries its outcome
            "prompt": tally.completed,
            "evict": evictions,
        },
        "outcomes": {"done": tally.completed, "cancelled": tally.aborted},
    }


def record_load_failure(build: LlamaBuild, out: Path) -> dict:
    folder = out / "load-failure"
    folder.mkdir(parents=True, exist_ok=True)
    argv = [
        str(build.server),
        "-m",
        "/nonexistent/missing-model.gguf",
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
        "-t",
        "1",
    ]
    done = subprocess.run(
        argv, env=build.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120, check=False
    )
    (folder / "server.log").write_bytes(done.stdout)
    return {
        "log": "load-failure/server.log",
        "flags": [],
        "argv": argv[1:],
        "workload": {"sent": 0, "exit_code": done.returncode},
        "events": {"start": 1, "ready": 0, "done": 0},
        "at_least": {"error": 1},
    }


def record(name: str, only: tuple[str, ...] = ()) -> Path:
    """Record every mode of `name` afresh, or only the modes named in `only` (the others' fixtures kept)."""
    row = version(name)
    build, model = ensure_built(name, progress=True), ensure_model(split_experts=row.split_experts)
    out = FIXTURES / name
    logs: dict[str, Any] = {}
    if only and (out / "expected.json").is_file():
        logs = json.loads((out / "expected.json").read_text())["logs"]
    elif out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    flags_known = help_text(build)
    for mode in modes(row):
        if only and mode.name not in only:
            continue
        print(f"recording {name} {mode.name}", file=sys.stderr)
        logs[mode.name] = record_mode(build, row, mode, model, out, flags_known)
    if not only or "load-failure" in only:
        logs["load-failure"] = record_load_failure(build, out)
    logs = {**{m: logs[m] for m in logs if m != "load-failure"}, "load-failure": logs["load-failure"]}
    expected = {
        "llama_cpp_python": name,
        "vendored": row.vendored,
        "llama_cpp_commit": row.commit,
        "log_era": row.log_era,
        "version_text": build.info().get("version_text", ""),
        "features": sorted(row.features),
        "logs": logs,
    }
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(
            "usage: scripts/record-llama VERSION [MODE ...]   (a llama-cpp-python version of"
            " engine/llama/versions.py; MODEs: only those, e.g. router-two, the other fixtures kept)",
            file=sys.stderr,
        )
        return 2
    print(record(args[0], tuple(args[1:])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
