"""Real llama-server instances under a real supervisord, and the spyglass config that watches them.

`LlamaStack` writes the supervisord config (one program per instance: the cached build, the tiny model or
any path, `--metrics --log-prefix --log-timestamps --log-file`), starts supervisord, waits for /health,
and writes the matching spyglass config (the engine log with the llama_server preset, the /metrics poller,
supervisord's log and API, the host, the model path).
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from spyglass.engine.llama.build import LlamaBuild

BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Instance:
    """One llama-server program: its port and flags (the seeds' knobs: slots, context, cache budget)."""

    name: str
    port: int
    model: Path
    slots: int = 2
    ctx: int = 4096
    cache_ram_mib: int = 8
    threads: int = 1
    extra: tuple[str, ...] = ()
    retries: int = 3

    def argv(self, build: LlamaBuild, log: Path) -> list[str]:
        return [
            str(build.server),
            "-m",
            str(self.model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "-c",
            str(self.ctx),
            "-np",
            str(self.slots),
            "--cache-ram",
            str(self.cache_ram_mib),
            "-t",
            str(self.threads),
            "--metrics",
            "--log-prefix",
            "--log-timestamps",
            "--log-file",
            str(log),
            *self.extra,
        ]


@dataclass
class LlamaStack:
    folder: Path
    build: LlamaBuild
    instances: dict[str, Instance] = field(default_factory=dict)
    proc: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)

    def log(self, name: str) -> Path:
        return self.folder / f"{name}.log"

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.instances[name].port}"

    def supervisord_conf(self) -> Path:
        sections = [
            f"[supervisord]\nlogfile={self.folder}/supervisord.log\npidfile={self.folder}/supervisord.pid\n"
            "nodaemon=true\nloglevel=info\n",
            f"[unix_http_server]\nfile={self.folder}/supervisor.sock\n",
            "[rpcinterface:supervisor]\nsupervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n",
            f"[supervisorctl]\nserverurl=unix://{self.folder}/supervisor.sock\n",
        ]
        for name, inst in self.instances.items():
            command = shlex.join(inst.argv(self.build, self.log(name)))
            sections.append(
                f"[program:{name}]\ncommand={command.replace('%', '%%')}\ndirectory={self.folder}\n"
                f'environment=LD_LIBRARY_PATH="{self.build.bin_dir}"\n'
                f"startsecs=1\nstartretries={inst.retries}\nautorestart=true\nstopwaitsecs=5\n"
                f"stdout_logfile={self.folder}/{name}.out\nredirect_stderr=true\n"
            )
        path = self.folder / "supervisord.conf"
        path.write_text("\n".join(sections))
        return path

    def spyglass_sources(self) -> dict[str, Any]:
        """Every source of this stack, for a spyglass config's [sources]."""
        rpc = f"unix://{self.folder}/supervisor.sock"
        sources: dict[str, Any] = {
            "supervisord": {"kind": "supervisord_log", "path": f"{self.folder}/supervisord.log"},
            "supervisord-api": {"kind": "supervisord_rpc", "endpoint": rpc},
            "host": {
                "kind": "host",
                "supervisord": rpc,
                "agent_name": "",  # one small box: the agent shares by necessity
                "processes": {n: {"program": n} for n in self.instances},
            },
        }
        for name, inst in self.instances.items():
            sources[f"engine-{name}"] = {
                "kind": "engine_log",
                "preset": "llama_server",
                "path": str(self.log(name)),
                "instance": name,
                "lane": "normal",
            }
            sources[f"metrics-{name}"] = {"kind": "llama_server", "url": self.url(name), "instance": name}
            sources[f"model-{name}"] = {"kind": "model_path", "path": str(inst.model), "instance": name}
        return sources

    def start(self) -> LlamaStack:
        for name in self.instances:
            self.log(name).touch()  # every source file exists when the agent starts
        self.proc = subprocess.Popen(
            [str(BIN / "supervisord"), "-c", str(self.supervisord_conf())],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return self

    def ctl(self, *args: str) -> str:
        conf = self.folder / "supervisord.conf"
        done = subprocess.run(
            [str(BIN / "supervisorctl"), "-c", str(conf), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return done.stdout

    def pid(self, name: str) -> int:
        """The running pid of a program (0 if it is not running)."""
        out = self.ctl("pid", name).strip()
        return int(out) if out.isdigit() else 0

    def wait_ready(self, names: tuple[str, ...] | None = None, timeout: float = 120.0) -> None:
        """Until each named instance's /health is 200; on timeout the error carries its output's end."""
        pause, deadline = threading.Event(), time.monotonic() + timeout
        with httpx.Client(timeout=2) as client:
            for name in names or tuple(self.instances):
                while True:
                    try:
                        if client.get(self.url(name) + "/health").status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{name} not ready after {timeout:.0f} s\n{self.output_tail(name)}")
                    pause.wait(0.1)

    def output_tail(self, name: str, lines: int = 20) -> str:
        path = self.folder / f"{name}.out"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) or f"({path.name} is empty)"
        except OSError as e:
            return f"({path.name}: {e.strerror})"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
