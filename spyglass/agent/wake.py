"""What ends the main loop's wait between steps: inotify on the sources' folders, or `set()`.

inotify only hints (a polling pass runs regardless, so NFS, a missed event or a watch that
could not be placed never stall a source: log-tailers.md F25). The kernel queues the events and
merges repeats; the loop drains the queue with one read when it wakes, so a busy writer costs
one read per step and no Python per write. (watchdog, used before, turned each write into work
on three threads: about 1.5 % of a core at 100 writes a second.)
"""

from __future__ import annotations

import contextlib
import os
import select
from collections.abc import Iterable
from pathlib import Path

from inotify_simple import INotify, flags
from loguru import logger

CHANGES = (
    flags.MODIFY | flags.CREATE | flags.DELETE | flags.MOVED_FROM | flags.MOVED_TO | flags.CLOSE_WRITE | flags.ATTRIB
)


class Wake:
    """A threading.Event-like wake-up (`set`, `wait`, `clear`) that inotify also sets.

    `set()` is safe from any thread and from a signal handler (one eventfd write)."""

    def __init__(self) -> None:
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._inotify: INotify | None = None

    def watch(self, folders: Iterable[Path]) -> int:
        """Watch each folder for changes; returns how many could be watched."""
        watched = 0
        for folder in folders:
            try:
                if self._inotify is None:
                    self._inotify = INotify(nonblocking=True)
                self._inotify.add_watch(str(folder), CHANGES)
                watched += 1
            except OSError as exc:
                logger.info("no inotify watch on {} ({}); polling covers it", folder, exc)
        return watched

    def set(self) -> None:
        if self._fd >= 0:  # a late set() after close() has nothing left to wake
            os.eventfd_write(self._fd, 1)

    def wait(self, timeout: float) -> bool:
        """Block until set or a watched folder changed, at most `timeout` seconds."""
        fds = [self._fd] + ([self._inotify.fileno()] if self._inotify is not None else [])
        ready, _, _ = select.select(fds, [], [], timeout)
        return bool(ready)

    def clear(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self._fd)
        if self._inotify is not None:
            self._inotify.read(timeout=0)  # the events themselves say nothing the poll does not

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None
        os.close(self._fd)
        self._fd = -1
