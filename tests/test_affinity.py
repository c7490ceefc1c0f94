"""`agent.cpus` and `agent.nice` (spyglass/agent/affinity.py): a real agent process pins itself and every
thread, and H2's host source compares an engine's CPUs with the agent's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spyglass.agent.affinity import cpu_list
from spyglass.collectors.host import HostOptions, HostSource, ProcessRef
from spyglass.config import ConfigError, parse_config


@pytest.mark.parametrize(("cpus", "text"), [({0, 1, 2, 5}, "0-2,5"), ({7}, "7"), ({0, 2, 3, 4, 9, 10}, "0,2-4,9-10")])
def test_cpu_list_is_the_kernels_notation(cpus: set[int], text: str) -> None:
    assert cpu_list(cpus) == text


@pytest.mark.parametrize("bad", ["62-", "a-b", "63-62", "1,,2"])
def test_a_bad_cpu_list_names_the_key(bad: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"agent\.cpus"):
        parse_config({"agent": {"state_dir": str(tmp_path), "cpus": bad}}, "t")


@pytest.mark.parametrize("huge", ["0-999999999", "0-9999999", f"0-{max(os.sched_getaffinity(0)) + 8193}"])
def test_a_cpu_list_past_the_machines_cpus_is_refused_in_one_line(huge: str, tmp_path: Path) -> None:
    """Round 4: `0-999999999` passed validation and built a set of a billion numbers (MemoryError at 1.26 GB);
    `0-9999999` started after a 1.28 GB peak. Now each is one line naming the key, and no set is built."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ConfigError, match=r"agent\.cpus.*is not on this machine") as refused:
        parse_config({"agent": {"state_dir": str(tmp_path), "cpus": huge}}, "t")
    assert len(str(refused.value).strip().splitlines()) <= 2
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB: no billion-number set


def test_a_cpu_list_from_a_log_line_is_bounded() -> None:
    from spyglass.collectors.host import cpu_set

    with pytest.raises(ValueError, match="no machine has a CPU past 8191"):
        cpu_set("0-999999999")
    assert cpu_set("0-3,8") == {0, 1, 2, 3, 8}


def test_the_agent_pins_every_thread_and_lowers_its_priority(spawns: None) -> None:
    last = max(os.sched_getaffinity(0))
    code = (
        "import os, threading\n"
        "from spyglass.agent.affinity import settle\n"
        "ready = threading.Event(); t = threading.Thread(target=ready.wait, daemon=True); t.start()\n"
        f"settle('{last}', 5)\n"
        "tasks = sorted(os.sched_getaffinity(int(x)) == {"
        f"{last}"
        "} for x in os.listdir('/proc/self/task'))\n"
        "print(len(tasks), all(tasks), os.nice(0)); ready.set()"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[1] == "True" and int(out[0]) >= 2
    assert int(out[2]) >= 5


def test_the_host_source_reports_an_engine_sharing_the_agents_cpus(tmp_path: Path) -> None:
    (tmp_path / "engine.pid").write_text(str(os.getpid()))  # this process stands for the engine
    source = HostSource("host", HostOptions(processes={"strata-a": ProcessRef(pid_file=tmp_path / "engine.pid")}))
    shared = [e for e in source.poll(0.0).events if e.kind == "shared_cpus"]
    assert [(e.instance, e.fields) for e in shared] == [
        ("strata-a", {"other": "spyglass-agent", "shared": len(os.sched_getaffinity(0))})
    ]
