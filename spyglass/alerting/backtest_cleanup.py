"""A backtest leaves nothing behind: not its Prometheus, not its temporary folder, whatever ends it.

Guarantees:
- every child (promtool, prometheus) gets SIGKILL from the kernel when the backtest dies, even by
  SIGKILL (`PR_SET_PDEATHSIG`, Linux), and runs in its own process group, so a terminal's Ctrl-C
  reaches the backtest alone, which then stops the child itself;
- SIGTERM, SIGHUP and SIGINT unwind the backtest (SystemExit 128+N), so its `finally` blocks stop
  Prometheus and remove the folder;
- each work folder holds `owner.json` (the backtest's pid and that process's start time, in clock
  ticks since boot); `sweep_orphans` removes a folder only when that process is provably gone (no
  such pid, or a pid reused by a process started at another time), after killing a Prometheus
  whose storage path is inside it. A folder without a readable owner file is left alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

PREFIX = "spyglass-backtest-"
OWNER = "owner.json"
PR_SET_PDEATHSIG = 1
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def die_with_parent(signum: int = signal.SIGKILL) -> None:
    """For Popen's preexec_fn (or a worker's initializer): the kernel sends `signum` to this process when
    the thread that started it exits."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)


def process_start(pid: int) -> int | None:
    """The start time of process `pid` (field 22 of /proc/PID/stat), None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def make_workdir() -> Path:
    """A new private temporary folder with the owner file of this process."""
    folder = Path(tempfile.mkdtemp(prefix=PREFIX))
    (folder / OWNER).write_text(json.dumps({"pid": os.getpid(), "start": process_start(os.getpid())}))
    return folder


def _owner_gone(folder: Path) -> bool:
    try:
        owner = json.loads((folder / OWNER).read_text())
        pid, start = int(owner["pid"]), owner["start"]
    except (OSError, ValueError, KeyError, TypeError):
        return False  # not provably ours, or still being created
    return pid != os.getpid() and process_start(pid) != start


def _children_in(folder: Path) -> Iterator[int]:
    """Pids of this user's processes whose command line names a path inside `folder`."""
    needle = str(folder).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid == os.getuid() and needle in (entry / "cmdline").read_bytes():
                yield int(entry.name)
        except OSError:
            continue


def sweep_orphans(root: Path | None = None) -> list[Path]:
    """Remove the work folders (and their processes) of backtests that died without cleaning up."""
    removed = []
    for folder in Path(root or tempfile.gettempdir()).glob(f"{PREFIX}*"):
        try:
            if not folder.is_dir() or folder.is_symlink() or folder.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        if not _owner_gone(folder):
            continue
        for pid in _children_in(folder):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


@contextlib.contextmanager
def unwind_on_signals() -> Iterator[None]:
    """SIGTERM, SIGHUP and SIGINT raise SystemExit(128 + N) in the main thread while inside."""

    def leave(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    try:
        previous = {s: signal.signal(s, leave) for s in ENDING_SIGNALS}
    except ValueError:  # not the main thread: nothing to install
        yield
        return
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
