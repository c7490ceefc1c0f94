"""The process that writes a llama-server log, read from /proc (I/O at the edge): its start instant, its
command line and the flags that matter downstream; and the request id of one of its tasks."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ARG_FLAGS = {
    "-np": "slots",
    "--parallel": "slots",
    "-c": "ctx",
    "--ctx-size": "ctx",
    "--port": "port",
    "--cache-ram": "cache_ram_mib",
    "-cram": "cache_ram_mib",
    "-m": "model",
    "--model": "model",
    "-t": "threads",
    "--threads": "threads",
    "--ctx-checkpoints": "ctx_checkpoints",
    "--reasoning-budget": "reasoning_budget",
    "--n-cpu-moe": "n_cpu_moe",
    "-ncmoe": "n_cpu_moe",
}


def parse_args(argv: list[str]) -> dict[str, Any]:
    """The llama-server flags that matter downstream, from its command line (numbers as ints)."""
    found: dict[str, Any] = {}
    for flag, value in zip(argv, argv[1:]):
        name = ARG_FLAGS.get(flag)
        if name is not None and name not in found:
            found[name] = int(value) if value.isascii() and value.lstrip("-").isdigit() else value
    return found


def request_id(instance: str, start: float, task: int, ts: float) -> str:
    """The request id of a llama.cpp task: its launch time (UTC) and a hash of instance, process start and task."""
    digest = hashlib.sha1(f"{instance}:{start:.3f}:{task}".encode()).hexdigest()[:16]
    return f"{datetime.fromtimestamp(ts, tz=UTC):%Y%m%d-%H%M%S}-{digest}"


@dataclass(frozen=True)
class Writer:
    """The running process that writes a log file: pid, start (epoch seconds), command line."""

    pid: int
    start: float
    argv: list[str]


def process_start(pid: int, now: Callable[[], float]) -> float:
    """Epoch seconds at which process `pid` started: /proc/PID/stat's starttime (clock ticks since boot)
    on a boot instant of `now()` minus /proc/uptime, read together (10 ms; /proc/stat's btime is cut to
    the second)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    with open("/proc/uptime") as uptime:
        since_boot = float(uptime.read().split()[0])
    return now() - since_boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def find_writer(log: Path, now: Callable[[], float]) -> Writer | None:
    """The running process whose command line has `--log-file` naming `log` (the same file), if any;
    `now` gives the wall clock's epoch seconds."""
    try:
        target = os.stat(log)
    except OSError:
        return None
    with os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit():
                writer = _writer(entry.path, target, now)
                if writer is not None:
                    return writer
    return None


def _writer(proc: str, target: os.stat_result, now: Callable[[], float]) -> Writer | None:
    """The process at `proc` (/proc/PID) if its `--log-file` is the file `target`."""
    try:
        argv = Path(proc, "cmdline").read_bytes().decode("utf-8", "replace").split("\0")
        if "--log-file" not in argv:
            return None
        other = os.stat(os.path.join(os.readlink(f"{proc}/cwd"), argv[argv.index("--log-file") + 1]))
        if (other.st_dev, other.st_ino) != (target.st_dev, target.st_ino):
            return None
        pid = int(os.path.basename(proc))
        return Writer(pid, process_start(pid, now), [a for a in argv if a])
    except (OSError, IndexError, ValueError):
        return None
