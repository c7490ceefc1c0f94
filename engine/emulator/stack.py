"""The emulated stack under a real supervisord: the gateway and two engine instances as programs.

`Stack` writes the supervisord config and the matching spyglass config (every source of the
stack), starts supervisord, waits for the engines to finish loading, and stops it all.
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
import tomli_w

from spyglass.engine.emulator.gateway import GatewaySettings
from spyglass.engine.emulator.serve import EngineSettings

BIN = Path(sys.executable).parent


def engines(folder: Path, base_port: int, **patch) -> dict[str, EngineSettings]:
    """strata-a (fast lane, cores 0-15) and strata-b (normal lane, cores 38-53), as in sources.md."""
    defaults = {"load_seconds": 60.0, "time_scale": 0.005}
    return {
        name: EngineSettings(
            instance=name,
            port=base_port + i + 1,
            log=folder / f"strata-iq3_xxs-{name[-1]}.log",
            seed=i + 1,
            **{"cpus": cpus, **defaults, **patch.get(name, {})},
        )
        for i, (name, cpus) in enumerate((("strata-a", "0-15"), ("strata-b", "38-53")))
    }


@dataclass
class Stack:
    folder: Path
    base_port: int = 18080
    engine_patch: dict[str, dict] = field(default_factory=dict)
    gateway_patch: dict = field(default_factory=dict)
    crash_loop: set[str] = field(default_factory=set)  # programs that abort: no startretries limit
    proc: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.engines = engines(self.folder, self.base_port, **self.engine_patch)
        lanes = {"fast": f"http://127.0.0.1:{self.base_port + 1}", "normal": f"http://127.0.0.1:{self.base_port + 2}"}
        self.gateway = GatewaySettings(
            **{
                "port": self.base_port,
                "log": self.folder / "rag-proxy.log",
                "infer": self.folder / "infer",
                "lanes": lanes,
                "time_scale": self.engines["strata-a"].time_scale,
                **self.gateway_patch,
            }
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.base_port}"

    def supervisord_conf(self) -> Path:
        py = shlex.quote(sys.executable)
        programs = {
            "rag-proxy": f"{py} -m spyglass.engine.emulator.gateway --settings {shlex.quote(self.gateway.model_dump_json())}"
        }
        for name, settings in self.engines.items():
            # Pinned from exec on (taskset), so no moment of the process runs on other CPUs.
            pin = f"taskset -c {','.join(map(str, settings.affinity))} " if settings.affinity else ""
            programs[name] = (
                f"{pin}{py} -m spyglass.engine.emulator.serve --settings {shlex.quote(settings.model_dump_json())}"
            )
        sections = [
            f"[supervisord]\nlogfile={self.folder}/supervisord.log\npidfile={self.folder}/supervisord.pid\n"
            f"nodaemon=true\nloglevel=info\n",
            f"[unix_http_server]\nfile={self.folder}/supervisor.sock\n",
            "[rpcinterface:supervisor]\nsupervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n",
            f"[supervisorctl]\nserverurl=unix://{self.folder}/supervisor.sock\n",
        ]
        # The folder on sys.path that holds the package (spyglass/engine/emulator/stack.py: unresolved, a checkout's
        # spyglass/engine link and an installed wheel alike), for a child started outside any venv.
        root = Path(__file__).parents[3]
        for name, command in programs.items():
            retries = 100 if name in self.crash_loop else 3
            # Programs run in the stack's folder (a core dump lands there, not in the work tree).
            sections.append(
                f"[program:{name}]\ncommand={command.replace('%', '%%')}\ndirectory={self.folder}\n"
                f'environment=PYTHONPATH="{root}",PYTHONUNBUFFERED="1"\n'  # its output, as it happens
                f"startsecs=1\nstartretries={retries}\nautorestart=true\nstopwaitsecs=5\n"
                f"stdout_logfile={self.folder}/{name}.out\nredirect_stderr=true\n"
            )
        path = self.folder / "supervisord.conf"
        path.write_text("\n".join(sections))
        return path

    def spyglass_config(self, state: Path | None = None) -> dict[str, Any]:
        """A spyglass config document reading every source this stack writes."""
        f, a, b = self.folder, self.engines["strata-a"], self.engines["strata-b"]
        rpc = f"unix://{f}/supervisor.sock"
        return {
            "agent": {"state_dir": str(state or f / "spyglass"), "host": "emulated"},
            "exporters": {"prometheus": {"enabled": False}},
            "sources": {
                "engine-a": {"kind": "engine_log", "path": str(a.log), "instance": "strata-a", "lane": "fast"},
                "engine-b": {"kind": "engine_log", "path": str(b.log), "instance": "strata-b", "lane": "normal"},
                "gateway": {"kind": "gateway_log", "path": str(self.gateway.log), "instance": "rag-proxy"},
                "supervisord": {"kind": "supervisord_log", "path": f"{f}/supervisord.log"},
                "serve-a": {
                    "kind": "serve_status",
                    "url": f"http://127.0.0.1:{a.port}/v1/status",
                    "instance": "strata-a",
                },
                "serve-b": {
                    "kind": "serve_status",
                    "url": f"http://127.0.0.1:{b.port}/v1/status",
                    "instance": "strata-b",
                },
                "infer": {"kind": "infer_store", "path": f"{self.gateway.infer}/infer.db", "settle_seconds": 0},
                "supervisord-api": {"kind": "supervisord_rpc", "endpoint": rpc},
                "host": {
                    "kind": "host",
                    "supervisord": rpc,
                    "agent_name": "",  # one small box: the agent shares by necessity
                    "processes": {"strata-a": {"program": "strata-a"}, "strata-b": {"program": "strata-b"}},
                },
            },
        }

    def spyglass_toml(self, state: Path | None = None) -> str:
        """spyglass_config as TOML text, for a config file."""
        return tomli_w.dumps(self.spyglass_config(state))

    def start(self) -> Stack:
        self.proc = subprocess.Popen(
            [str(BIN / "supervisord"), "-c", str(self.supervisord_conf())],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return self

    def wait_ready(self, names: tuple[str, ...] = ("strata-a", "strata-b"), timeout: float = 60.0) -> None:
        """Until the gateway answers and the named engines report ready (they load first); on timeout the
        error carries the end of the late program's own output (a traceback, a port it could not bind)."""
        pause, deadline = threading.Event(), time.monotonic() + timeout
        pending = [("rag-proxy", self.url)] + [(n, f"http://127.0.0.1:{self.engines[n].port}") for n in names]
        with httpx.Client(timeout=1) as client:  # one connection, not a fresh one per probe
            while pending:
                program, url = pending[0]
                try:
                    if client.get(url + "/health").status_code == 200:
                        pending.pop(0)
                        continue
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"not ready after {timeout:.0f} s: {program} at {url}\n{self.output_tail(program)}"
                    )
                pause.wait(0.05)

    def output_tail(self, program: str, lines: int = 20) -> str:
        """The last lines a program wrote to its stdout/stderr log, or why there are none."""
        path = self.folder / f"{program}.out"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) or f"({path.name} is empty)"
        except OSError as e:
            return f"({path.name}: {e.strerror})"

    def reconfigure(self, engine_patch: dict[str, dict]) -> None:
        """The operator's fix: rewrite the supervisord config with these engine patches (over the defaults)
        and have supervisord restart the programs whose command changed (`supervisorctl update`)."""
        self.engine_patch = engine_patch
        self.engines = engines(self.folder, self.base_port, **engine_patch)
        conf = self.supervisord_conf()
        subprocess.run(
            [str(BIN / "supervisorctl"), "-c", str(conf), "update"], check=True, capture_output=True, timeout=60
        )

    def flush(self) -> None:
        """Have the gateway publish its open infer segment."""
        httpx.post(self.url + "/admin/flush", timeout=5)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
