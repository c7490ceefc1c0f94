"""The host collector: fixture trees of both cgroup versions, and two real pinned processes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import FIXTURES

from spyglass.collectors.host import HostOptions, HostSource, cpu_set, parse_cgroup, parse_stat
from spyglass.signals import full_catalogue
from spyglass.signals.host import HostSignals
from spyglass.signals.state import MetricState


def source(tree: str, processes: dict) -> HostSource:
    root = FIXTURES / "host" / tree
    return HostSource("host", HostOptions(proc_root=root / "proc", cgroup_root=root / "cgroup", processes=processes))


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0-15", set(range(16))), ("0-15,38-53", set(range(16)) | set(range(38, 54))), ("3", {3}), ("", set())],
)
def test_cpu_lists(text, expected):
    assert cpu_set(text) == expected


def test_cgroup_lines_of_both_versions():
    assert parse_cgroup("0::/system.slice/strata.slice\n") == (
        2,
        "/system.slice/strata.slice",
        "/system.slice/strata.slice",
    )
    assert parse_cgroup("12:hugetlb:/\n4:cpu,cpuacct:/strata\n3:memory:/mem\n") == (1, "/strata", "/mem")


def test_stat_splits_after_the_last_parenthesis():
    facts = parse_stat(
        "10712 (python3 (worker)) R 10709 10709 2504 0 -1 4194304 2958 6508 1 0 168 2 2 4 20 0 7 0 "
        "49707 16961536 3372 18446744073709551615"
    )
    assert facts == {"cpu_seconds": 170 / os.sysconf("SC_CLK_TCK"), "threads": 7}


def test_incident_one_on_cgroup_v2_two_engines_on_the_same_cores():
    events = (
        source("v2", {"strata-a": {"cmdline": "--port 8081"}, "strata-b": {"cmdline": "--port 8082"}}).poll(0).events
    )
    by_kind = {(e.kind, e.instance): e.fields for e in events}
    a = by_kind[("process", "strata-a")]
    assert (a["pid"], a["cpus"], a["rss_bytes"], a["threads"]) == (4242, "0-31", 98_304_000 * 1024, 26)
    assert a["runqueue_wait_seconds"] == pytest.approx((10272252 + 3905927925) / 1e9)  # summed over threads
    assert (a["periods"], a["throttled_periods"], a["throttled_seconds"]) == (36000, 29160, pytest.approx(4288.698555))
    assert (a["memory_bytes"], a["oom_kills"]) == (201326592000, 1)
    assert by_kind[("shared_cpus", "strata-a")] == {"other": "strata-b", "shared": 32}
    state = MetricState(full_catalogue())
    for event in events:
        HostSignals(state).apply(event)
    assert state.values["spyglass_host_shared_cpus"] == {("strata-a", "strata-b"): 32, ("strata-b", "strata-a"): 32}


def test_cgroup_v1_counters_are_converted_to_seconds():
    (event,) = source("v1", {"strata-b": {"cmdline": "--port 8082"}}).poll(0).events
    assert (event.fields["throttled_seconds"], event.fields["memory_bytes"], event.fields["oom_kills"]) == (
        pytest.approx(4.288698555),
        67108864,
        1,
    )


def test_a_missing_process_is_reported_not_fatal(tmp_path):
    (event,) = source("v2", {"strata-c": {"pid_file": str(tmp_path / "absent.pid")}}).poll(0).events
    assert (event.kind, event.instance) == ("process_missing", "strata-c")


def test_two_real_processes_pinned_to_overlapping_then_disjoint_cpus(spawns, tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs to pin apart")  # every machine this project runs on has two
    children = [
        subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
        for _ in range(2)
    ]
    try:
        processes = {}
        for name, child in zip(("strata-a", "strata-b"), children):
            (tmp_path / f"{name}.pid").write_text(str(child.pid))
            processes[name] = {"pid_file": str(tmp_path / f"{name}.pid")}
        host = HostSource("host", HostOptions(processes=processes, interval_seconds=1))

        def shared(now: float) -> int:
            return next(e.fields["shared"] for e in host.poll(now).events if e.kind == "shared_cpus")

        for child in children:
            os.sched_setaffinity(child.pid, {cpus[0]})
        assert shared(0) == 1
        os.sched_setaffinity(children[1].pid, {cpus[1]})
        assert shared(1) == 0
        facts = next(e.fields for e in host.poll(2).events if e.kind == "process")
        assert facts["cpus"] == str(cpus[0]) and facts["rss_bytes"] > 0 and facts["cpu_seconds"] >= 0
    finally:
        for child in children:
            child.stdin.close()
            child.wait(10)
