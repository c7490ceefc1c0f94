"""The diagnosis and the Prometheus rules agree on the emulator's scenarios: the same heuristics found.

Each scenario runs on the emulated stack under a real supervisord and is read by spyglass into a
real DuckDB store. The diagnosis runs over the store. The rules (generated for the same deployment)
are evaluated by Debian's promtool over the scenario's metrics. The scenario is replayed as minute
samples: counters at 0 before it, at their final value from its end on, the stack idle for the
hour after (gauges hold their final value; timestamps are moved onto promtool's clock). Each
alert may fire at any minute of that hour, so every `for:` has elapsed. Only heuristics the
diagnosis checks are compared (H7's hold is not replayed: see rules_found); H17-H19 are left to the alerts.

`crash-loop` is read at a moment strata-b is ready, between two of its aborts (its ready gauge is
held for the hour). `hung-engine` is read while the engine hangs, not after the stack stopped: its signal is a serve that
says ready with work queued while the engine finishes nothing and writes no [stats] line past `alerts.hung_minutes`
(1 here, so the test waits a real minute without progress, while the engine logs each new request queued; the
replay's clock then carries that silence on).
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from conftest import wait_until

from spyglass.agent.pipeline import Pipeline
from spyglass.agent.runtime import open_store
from spyglass.alerting.heuristics import Deployment, catalogue
from spyglass.alerting.rules import render_rules
from spyglass.collectors.clock import SystemClock
from spyglass.config import parse_config
from spyglass.engine.emulator.scenarios import SCENARIOS, run_scenario
from spyglass.engine.emulator.stack import Stack
from spyglass.exporters.prometheus import render
from spyglass.forensics.diagnose import diagnose
from spyglass.forensics.run import Window
from spyglass.ports import free_port_base

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("spawns")]  # starts processes: the e2e tier
MINUTES = 60
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$")
# Bounded in time on this machine: one scenario per incident family the diagnosis checks.
COMPARED = [
    "healthy",
    "eviction-storm",
    "special-tokens",
    "plan-then-eos",
    "crash-loop",
    "token-count",
    "concurrency",
    "hung-engine",
]
HUNG_MINUTES = 1


def scenario_run(name: str, folder: Path):
    scenario = SCENARIOS[name]
    stack = Stack(
        folder / "stack",
        free_port_base(),
        dict(scenario.engine_patch),
        dict(scenario.gateway_patch),
        set(scenario.crash_loop),
    )
    document = tomllib.loads(stack.spyglass_toml(folder / "spyglass"))
    hung = name == "hung-engine"
    if hung:
        document["alerts"] = {"hung_minutes": HUNG_MINUTES}
    config = parse_config(document, name)
    began = datetime.now(UTC)
    with stack:
        stack.wait_ready(scenario.ready)
        asyncio.run(run_scenario(scenario, stack.url))
        stack.flush()
        pipeline = Pipeline(config, SystemClock(), open_store(config))
        pipeline.run_until_idle()
        if hung:  # until a poll of the hung engine's serve comes past the threshold of its log's silence
            # (a poll is due every interval_seconds, so one comes within an interval of the threshold)
            due = HUNG_MINUTES * 60 + config.sources["serve-b"].interval_seconds + 1

            def silent_past_threshold() -> bool:
                pipeline.run_until_idle()
                last = pipeline.state.values["spyglass_engine_last_progress_timestamp_seconds"].get(
                    ("strata-b", "normal")
                )
                return last is not None and time.time() - last > due

            wait_until(silent_past_threshold, due + 60, "a serve poll past the hung engine's silence")
            pipeline.run_until_idle()
            exposition, ended = render(pipeline.state).decode(), time.time()
        elif name == "crash-loop":  # read between a ready and the abort after it: the replay holds the
            # ready gauge at the value read for the whole hour, and a respawn caught loading would replay
            # as an engine that never became ready (H14), which the scenario is not

            def strata_b_ready() -> bool:
                pipeline.run_until_idle()
                return pipeline.state.values["spyglass_engine_ready"].get(("strata-b", "normal")) == 1.0

            wait_until(strata_b_ready, 60, "strata-b ready between two aborts")
            exposition, ended = render(pipeline.state).decode(), time.time()
    pipeline.run_until_idle()
    if not hung and name != "crash-loop":
        exposition, ended = render(pipeline.state).decode(), time.time()
    pipeline.close()
    return config, Window(began, datetime.now(UTC)), exposition, ended


def input_series(exposition: str, ended: float, job: str) -> list[dict]:
    """Minute samples of the scenario's metrics on promtool's clock (the scenario ends at minute 1)."""
    kinds, out = {}, [{"series": f'up{{job="{job}", instance="spyglass"}}', "values": f"1+0x{MINUTES}"}]
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split(" ", 3)
            kinds[family] = kind
            continue
        found = SAMPLE.match(line)
        if not found or line.startswith("#"):
            continue
        name, labels, value = found.group(1), found.group(2) or "{}", float(found.group(3))
        family = re.sub(r"_(total|bucket|count|sum|created)$", "", name)
        if name.endswith("_created"):
            continue
        if re.search(r"timestamp_seconds|start_time_seconds", name):
            value = value - ended + 60  # an instant: onto promtool's clock, where the scenario ends at 60 s
        if kinds.get(family, kinds.get(name)) in ("counter", "histogram"):
            out.append({"series": name + labels, "values": f"0 {value!r}+0x{MINUTES - 1}"})
        else:
            out.append({"series": name + labels, "values": f"{value!r}+0x{MINUTES}"})
    return out


def rules_found(
    tmp_path: Path, config, exposition: str, ended: float, expected: set[str]
) -> subprocess.CompletedProcess:
    d = Deployment.of(config)
    rules = tmp_path / "rules.yml"
    rules.write_text(render_rules(d))
    # H7's probe wants the skew to have lasted ServeBuildSkew's for: in the polls themselves; the replay holds
    # the status gauges for the hour after a scenario that polled for a minute, so only the rule sees it.
    probed = {h.id for h in catalogue(d) if h.probe} - {"H7"}
    test = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "group_eval_order": ["spyglass-recording", "spyglass-alerts"],
        "tests": [
            {
                "interval": "1m",
                "input_series": input_series(exposition, ended, d.settings.job),
                "promql_expr_test": [
                    {
                        "expr": 'group by (heuristic) (max_over_time(ALERTS{alertstate="firing", heuristic=~"'
                        + "|".join(sorted(probed))
                        + f'"}}[{MINUTES}m]))',
                        "eval_time": f"{MINUTES}m",
                        "exp_samples": [{"labels": f'{{heuristic="{h}"}}', "value": 1} for h in sorted(expected)],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "agreement_test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    return subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name", COMPARED)
def test_diagnosis_and_rules_find_the_same_heuristics(name, tmp_path):
    config, window, exposition, ended = scenario_run(name, tmp_path)
    found = {f.heuristic for f in diagnose(config, window).findings}
    if name == "healthy":  # the emulator's English filler is estimated at 3.3x by the gateway: H10, on both sides;
        # its engines run unpinned on this machine's CPUs, which the host source measures: H2, on both sides
        assert found <= {"H10", "H2"}
    else:
        assert found, f"the diagnosis found nothing in {name}"
    agreed = rules_found(tmp_path, config, exposition, ended, found)
    assert agreed.returncode == 0, f"diagnosis found {sorted(found)}; promtool:\n{agreed.stdout}{agreed.stderr}"
