"""Where a running process's CPU goes: py-spy (from PyPI) attached to a pid for a window, its samples
summarised by function (own samples, and samples with the function anywhere on the stack).

    with Profile(pid, "bench/out/idle.pyspy") as p: ...   # then p.summary()

The bench scripts take `--py-spy` to profile their agent this way (docs/benchmarks.md records it).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path


def py_spy() -> str:
    found = Path(sys.executable).with_name("py-spy")
    return str(found) if found.exists() else shutil.which("py-spy") or "py-spy"


class Profile:
    """py-spy record --idle off, 100 Hz, all threads, raw (collapsed) stacks into `out`."""

    def __init__(self, pid: int, out: Path, rate: int = 100) -> None:
        self.pid, self.out, self.rate = pid, out, rate
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Profile:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                py_spy(),
                "record",
                "-p",
                str(self.pid),
                "-r",
                str(self.rate),
                "-f",
                "raw",
                "-o",
                str(self.out),
                "--threads",
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.send_signal(2)  # SIGINT: py-spy writes what it sampled
        self.proc.wait(60)

    def summary(self, top: int = 25) -> str:
        return summarise(self.out.read_text(), top)


def summarise(collapsed: str, top: int = 25) -> str:
    """The functions with most samples: own (the top of the stack) and total (anywhere on it)."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        samples += n
        if frames:
            own[frames[-1]] += n
        for frame in set(frames):
            total[frame] += n
    lines = [f"{samples} samples (CPU only)", "own% total% function"]
    for frame, n in total.most_common(top):
        lines.append(f"{100 * own[frame] / max(samples, 1):5.1f} {100 * n / max(samples, 1):5.1f} {frame}")
    lines.append("-- by own samples --")
    for frame, n in own.most_common(top):
        lines.append(f"{100 * n / max(samples, 1):5.1f} {frame}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summarise(Path(sys.argv[1]).read_text(), int(sys.argv[2]) if len(sys.argv) > 2 else 25))
