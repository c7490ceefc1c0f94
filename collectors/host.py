"""Host: each engine process's CPU affinity, CPU time, memory and run-queue wait, its cgroup's
throttling and memory, and the CPUs each pair of engines share (incident 1's smoking gun).

Formats: research/process-lifecycle.md §3-4. Parsers are pure; `read_process` does the I/O under
`proc_root` and `cgroup_root`, so fixture trees of both cgroup versions stand in for the host.
Fixture: tests/fixtures/host/{v1,v2}/
"""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from spyglass.collectors import PolledOptions, PolledSourceBase, PollPolicy, PollResult, register
from spyglass.collectors.event import Event
from spyglass.collectors.fields import declare
from spyglass.collectors.supervisord_rpc import pid_of

TICKS = os.sysconf("SC_CLK_TCK")


class ProcessRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    program: str | None = Field(None, description="supervisord program name (needs `supervisord`).")
    pid_file: Path | None = Field(None, description="File holding the process id.")
    cmdline: str | None = Field(None, description="Regex over /proc/PID/cmdline (NULs read as spaces).")


class HostOptions(PolledOptions):
    kind: Literal["host"] = "host"
    processes: dict[str, ProcessRef] = Field(default_factory=dict, description="Instance name -> how to find it.")
    interval_seconds: float = Field(5.0, gt=0, description="Seconds between samples.")
    proc_root: Path = Field(Path("/proc"), description="Where /proc is (a fixture tree in tests).")
    cgroup_root: Path = Field(Path("/sys/fs/cgroup"), description="Where the cgroup hierarchy is mounted.")
    supervisord: str | None = Field(None, description="supervisord endpoint (unix:///path) for `program` lookups.")
    agent_name: str = Field(
        "spyglass-agent",
        description="Name (`other`) under which the agent's own CPUs (its"
        " affinity, agent.cpus) are compared with each process's: a shared_cpus pair of an engine"
        " and the agent is the agent taking the engine's CPUs (H2). Empty: not compared. Unset in a config"
        " without agent.cpus: an agent the scheduler places may run on every CPU, the engine's too, by design.",
    )

    def instances_named(self) -> set[str]:
        return super().instances_named() | set(self.processes)


MAX_CPU = 8191  # the highest CPU number a Linux kernel can have (NR_CPUS is at most 8192)
POSSIBLE = Path("/sys/devices/system/cpu/possible")


def cpu_set(text: str) -> set[int]:
    """The CPUs of a Linux cpu list such as '0-15,38-53'; ValueError for a CPU past MAX_CPU (a list from a
    log line or a config, `0-999999999`, would otherwise build a set of a billion numbers)."""
    cpus: set[int] = set()
    for part in filter(None, text.strip().split(",")):
        low, _, high = part.partition("-")
        if int(high or low) > MAX_CPU:
            raise ValueError(f"CPU {int(high or low)} in {text[:60]!r}: no machine has a CPU past {MAX_CPU}")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def machine_cpus() -> set[int]:
    """The CPUs this machine can have (/sys/devices/system/cpu/possible), or those the process may run on."""
    try:
        return cpu_set(POSSIBLE.read_text())
    except (OSError, ValueError):
        return set(range(os.cpu_count() or 1))


def parse_status(text: str) -> dict[str, Any]:
    """Affinity, resident memory (bytes) and threads from /proc/PID/status."""
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    found: dict[str, Any] = {}
    if "Cpus_allowed_list" in fields:
        found["cpus"] = fields["Cpus_allowed_list"].strip()
    for key, name in (("VmRSS", "rss_bytes"), ("RssAnon", "rss_anon_bytes")):
        if key in fields:
            found[name] = int(fields[key].split()[0]) * 1024  # the file says kB
    if "Threads" in fields:
        found["threads"] = int(fields["Threads"])
    return found


def parse_stat(text: str) -> dict[str, Any]:
    """CPU seconds (all threads) from /proc/PID/stat; comm may hold spaces, so split after ')'."""
    rest = text[text.rindex(")") + 2 :].split()
    return {"cpu_seconds": (int(rest[11]) + int(rest[12])) / TICKS, "threads": int(rest[17])}


def parse_schedstat(text: str) -> tuple[int, int]:
    """(run ns, run-queue wait ns) of one thread."""
    run, wait, _ = text.split()
    return int(run), int(wait)


def parse_cgroup(text: str) -> tuple[int, str, str] | None:
    """(version, cpu cgroup path, memory cgroup path) from /proc/PID/cgroup."""
    cpu = memory = None
    for line in text.splitlines():
        number, controllers, path = line.split(":", 2)
        if number == "0" and controllers == "":
            return 2, path, path
        names = controllers.split(",")
        cpu = path if "cpu" in names else cpu
        memory = path if "memory" in names else memory
    return (1, cpu or "/", memory or "/") if cpu or memory else None


def parse_flat_keyed(text: str) -> dict[str, int]:
    return {key: int(value) for key, value in (line.split() for line in text.splitlines() if line.strip())}


def cgroup_facts(root: Path, version: int, cpu_path: str, memory_path: str) -> dict[str, Any]:
    """Throttling (periods, throttled periods and seconds) and memory (bytes, OOM kills)."""

    def read(*parts: str) -> str | None:
        try:
            return root.joinpath(*parts).read_text()
        except OSError:
            return None

    facts: dict[str, Any] = {}
    if version == 2:
        cpu, mem, events = (
            read(cpu_path.lstrip("/"), "cpu.stat"),
            read(memory_path.lstrip("/"), "memory.current"),
            read(memory_path.lstrip("/"), "memory.events"),
        )
        throttled_key, scale = "throttled_usec", 1e-6
    else:
        cpu = read("cpu,cpuacct", cpu_path.lstrip("/"), "cpu.stat") or read("cpu", cpu_path.lstrip("/"), "cpu.stat")
        mem = read("memory", memory_path.lstrip("/"), "memory.usage_in_bytes")
        events = read("memory", memory_path.lstrip("/"), "memory.oom_control")
        throttled_key, scale = "throttled_time", 1e-9
    if cpu is not None:
        stat = parse_flat_keyed(cpu)
        if "nr_periods" in stat:
            facts.update(
                periods=stat["nr_periods"],
                throttled_periods=stat["nr_throttled"],
                throttled_seconds=stat.get(throttled_key, 0) * scale,
            )
    if mem is not None and mem.strip().isdigit():
        facts["memory_bytes"] = int(mem)
    if events is not None:
        facts["oom_kills"] = parse_flat_keyed(events).get("oom_kill", 0)
    return facts


def read_process(proc: Path, cgroup_root: Path, pid: int) -> dict[str, Any]:
    """Everything the host collector knows of one process; OSError if it is gone."""
    base = proc / str(pid)
    facts = {"pid": pid, **parse_status((base / "status").read_text()), **parse_stat((base / "stat").read_text())}
    wait = 0
    for task in (base / "task").iterdir():
        try:
            wait += parse_schedstat((task / "schedstat").read_text())[1]  # the main thread's file omits the others
        except (OSError, ValueError):
            continue  # a thread that just exited
    facts["runqueue_wait_seconds"] = wait / 1e9
    found = parse_cgroup((base / "cgroup").read_text())
    if found is not None:
        facts["cgroup_version"] = found[0]
        facts.update(cgroup_facts(cgroup_root, *found))
    return facts


declare(
    "host",
    {
        "process": {
            "pid": "int",
            "cpus": "text",
            "rss_bytes": "int",
            "rss_anon_bytes": "int",
            "threads": "int",
            "cpu_seconds": "float",
            "runqueue_wait_seconds": "float",
            "cgroup_version": "int",
            "periods": "int",
            "throttled_periods": "int",
            "throttled_seconds": "float",
            "memory_bytes": "int",
            "oom_kills": "int",
        },
        "process_missing": {"pid": "int"},
        "shared_cpus": {"other": "text", "shared": "int"},
    },
)


@register("host", HostOptions)
class HostSource(PolledSourceBase):
    """Samples each configured engine process and its cgroup; pairs of processes share CPUs or not."""

    def __init__(self, name: str, options: HostOptions, host: str = "") -> None:
        self.name, self.options, self.host = name, options, host

    def poll_policy(self) -> PollPolicy:
        return PollPolicy(self.options.interval_seconds)

    def find_pid(self, ref: ProcessRef) -> int | None:
        if ref.program and self.options.supervisord:
            return pid_of(self.options.supervisord, ref.program)
        if ref.pid_file is not None:
            try:
                return int(ref.pid_file.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                return None
        if ref.cmdline:
            pattern = re.compile(ref.cmdline)
            for entry in self.options.proc_root.iterdir():
                try:
                    if entry.name.isdigit() and pattern.search(
                        (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
                    ):
                        return int(entry.name)
                except OSError:
                    continue
        return None

    def poll(self, now: float) -> PollResult:
        """One sample; ok unless every configured process was missing."""
        events, cpus = [], {}
        for instance, ref in sorted(self.options.processes.items()):
            pid = self.find_pid(ref)
            try:
                facts = read_process(self.options.proc_root, self.options.cgroup_root, pid) if pid else None
            except (OSError, ValueError):
                facts = None
            if facts is None:
                events.append(Event(now, self.name, "process_missing", instance, {"pid": pid}, None, self.host))
                continue
            cpus[instance] = cpu_set(facts.get("cpus", ""))
            events.append(Event(now, self.name, "process", instance, facts, None, self.host))
        for a, b in itertools.combinations(sorted(cpus), 2):
            events.append(
                Event(now, self.name, "shared_cpus", a, {"other": b, "shared": len(cpus[a] & cpus[b])}, None, self.host)
            )
        if self.options.agent_name and self.options.proc_root == Path("/proc"):  # the agent runs on this /proc's host
            mine = os.sched_getaffinity(0)
            events += [
                Event(
                    now,
                    self.name,
                    "shared_cpus",
                    instance,
                    {"other": self.options.agent_name, "shared": len(found & mine)},
                    None,
                    self.host,
                )
                for instance, found in sorted(cpus.items())
            ]
        return PollResult(events, ok=bool(cpus) or not self.options.processes)
