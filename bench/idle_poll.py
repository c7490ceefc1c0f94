"""Idle cost of polling: agents with the store on, an empty engine log, and a llama_server source polled
every `--interval` s, against a stand-in llama-server (HTTP/1.1, keep-alive, llama-server's four endpoints
with bodies of its shape); each tree's agent at the same time, CPU from /proc over the same window.

    .venv/bin/python bench/idle_poll.py --trees . /work/main --seconds 60 [--py-spy]

For the real llama-server (the project's own build), bench/llama_serve.py --seconds 0 measures the same.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import tomli_w

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.live import cpu_seconds  # noqa: E402
from bench.pyspy import Profile  # noqa: E402
from spyglass.ports import free_port  # noqa: E402

FAMILIES = (
    "prompt_tokens_total",
    "prompt_seconds_total",
    "tokens_predicted_total",
    "tokens_predicted_seconds_total",
    "n_decode_total",
    "n_busy_slots_per_decode",
    "prompt_tokens_seconds",
    "predicted_tokens_seconds",
    "requests_processing",
    "requests_deferred",
    "n_tokens_max",
)
BODIES = {
    "/health": b'{"status":"ok"}',
    "/metrics": "".join(
        f"# HELP llamacpp:{n} {n}\n# TYPE llamacpp:{n} counter\nllamacpp:{n} {i * 7}\n" for i, n in enumerate(FAMILIES)
    ).encode(),
    "/slots": json.dumps(
        [
            {
                "id": i,
                "id_task": -1,
                "n_ctx": 4096,
                "is_processing": False,
                "speculative": False,
                "params": {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "n_predict": -1},
            }
            for i in range(2)
        ]
    ).encode(),
    "/props": json.dumps(
        {
            "default_generation_settings": {"n_ctx": 4096},
            "total_slots": 2,
            "model_path": "tiny.gguf",
            "build_info": "b1-0c1e570",
        }
    ).encode(),
}


class StandIn(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = BODIES.get(self.path, b"")
        self.send_response(200 if body else 404)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def agent(tree: Path, folder: Path, url: str) -> tuple[subprocess.Popen, str]:
    folder.mkdir(parents=True)
    (folder / "llama.log").write_bytes(b"")
    listen = f"127.0.0.1:{free_port()}"
    config = folder / "spyglass.toml"
    config.write_text(
        tomli_w.dumps(
            {
                "agent": {"state_dir": str(folder / "state")},
                "exporters": {"prometheus": {"listen": listen}, "store": {"enabled": True}},
                "sources": {
                    "engine": {
                        "kind": "engine_log",
                        "preset": "llama_server",
                        "path": str(folder / "llama.log"),
                        "instance": "llama-bench",
                    },
                    "metrics": {
                        "kind": "llama_server",
                        "url": url,
                        "instance": "llama-bench",
                        "interval_seconds": ARGS.interval,
                    },
                },
            }
        )
    )
    proc = subprocess.Popen(
        [str(tree / ".venv/bin/python"), "-m", "spyglass.cli.app", "run", "-c", str(config)],
        cwd=tree,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return proc, f"http://{listen}/health"


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="spyglass-idle-"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    agents = [
        (str(tree), *agent(Path(tree).resolve(), folder / f"agent-{i}", url)) for i, tree in enumerate(ARGS.trees)
    ]
    try:
        for _, _proc, health in agents:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if httpx.get(health, timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
        time.sleep(3)  # start-up is not what is measured
        before = [cpu_seconds(proc.pid) for _, proc, _ in agents]
        profile = Profile(agents[0][1].pid, HERE / "out" / "idle_poll.pyspy") if ARGS.py_spy else None
        if profile:
            profile.__enter__()
        time.sleep(ARGS.seconds)
        spent = [cpu_seconds(proc.pid) - b for (_, proc, _), b in zip(agents, before)]
        if profile:
            profile.__exit__(None, None, None)
            print(profile.summary())
    finally:
        for _, proc, _ in agents:
            proc.terminate()
            proc.wait(30)
        server.shutdown()
    print(
        f"idle {ARGS.seconds:.0f} s, a poll every {ARGS.interval:g} s, store on, load average {os.getloadavg()[0]:.1f}"
    )
    print("| tree | agent CPU % of a core |\n|---|---|")
    for (tree, _, _), cpu in zip(agents, spent):
        print(f"| {tree} | {100 * cpu / ARGS.seconds:.2f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trees", nargs="+", default=["."], help="source trees, each with its .venv")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--py-spy", action="store_true", help="profile the first tree's agent")
    ARGS = parser.parse_args()
    main()
