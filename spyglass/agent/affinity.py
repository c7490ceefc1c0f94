"""The agent stays off the engines' CPUs: `agent.cpus` pins the whole process (every thread it has,
and those it starts later inherit it) and `agent.nice` lowers its priority, before anything else starts.

The engines' expert pools are CPU-bound; a CPU the agent shares with one is taken from decode
(incident 1: two engines on the same CPUs fell from 76.8 to 9.3 tok/s). docs/deploy.md says to give the
agent the host's housekeeping CPUs; H2 reports an engine whose CPUs the agent may also run on.
"""

from __future__ import annotations

import os
from pathlib import Path

from loguru import logger

from spyglass.collectors.host import cpu_set


class CpusUnavailable(ValueError):
    """agent.cpus names no CPU the agent may run on here."""


def cpu_list(cpus: set[int]) -> str:
    """A Linux cpu list of `cpus`: {0, 1, 2, 5} -> '0-2,5'."""
    parts: list[str] = []
    for cpu in sorted(cpus):
        if parts and parts[-1].rsplit("-", 1)[-1] == str(cpu - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{cpu}"
        else:
            parts.append(str(cpu))
    return ",".join(parts)


def settle(cpus: str | None, nice: int) -> None:
    """Pin every thread of this process to `cpus` (a cpu list) and add `nice`; CpusUnavailable naming the key when
    the list has no CPU this host can give."""
    if nice:
        os.nice(nice)
    if cpus is None:
        return
    wanted = cpu_set(cpus)
    usable = wanted & os.sched_getaffinity(0) if wanted else set()
    if not usable:
        raise CpusUnavailable(
            f"agent.cpus = {cpus!r}: none of these CPUs is available to the agent here"
            f" (it may run on {cpu_list(os.sched_getaffinity(0))})"
        )
    if usable != wanted:
        logger.warning(
            "agent.cpus = {!r}: CPUs {} are not available here; pinned to {}",
            cpus,
            cpu_list(wanted - usable),
            cpu_list(usable),
        )
    for task in Path("/proc/self/task").iterdir():  # threads already started (an import's pool) too
        try:
            os.sched_setaffinity(int(task.name), usable)
        except (ProcessLookupError, PermissionError):
            continue
    os.sched_setaffinity(0, usable)
