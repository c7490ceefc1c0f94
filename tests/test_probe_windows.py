"""Every window is written once: a probe's SQL window frames are its alerts' PromQL range selectors (with their
offsets), read off both as generated, recording rules expanded; no probe file writes an interval of its own."""

from __future__ import annotations

import re

import pytest

from spyglass import resources
from spyglass.alerting.heuristics import Deployment, Heuristic, catalogue, recording_rules
from spyglass.alerting.heuristics.promql import PEAK, seconds, sql_interval
from spyglass.config import AlertsConfig

UNIT = {"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400}
FRAME = re.compile(r"RANGE BETWEEN INTERVAL (\d+) (\w+) PRECEDING AND (?:CURRENT ROW|INTERVAL (\d+) (\w+) PRECEDING)")
# A frame found by ASOF joins instead (DuckDB evaluates a RANGE frame that ends before the current row row by row):
# each join's alias names its bound, `NAME_from` or `NAME` the start (strict: a row before ts - A is not in it) and
# `NAME_to` the end (at or before ts - B); a start with no `_to` partner is a frame ending at the current row.
BOUND = re.compile(r"ASOF LEFT JOIN \w+ (\w+)\s+ON [^\n]*?\b\1\.ts (<=?) \w+\.ts - INTERVAL (\d+) (\w+)")
SELECTOR = re.compile(r"\[(\d+[smhd])\](?:\s+offset\s+(\d+[smhd]))?")
DEPLOYMENTS = [Deployment(), Deployment(settings=AlertsConfig(crash_loop_window_minutes=45))]


def probe_windows(sql: str) -> set[tuple[int, int]]:
    """(range, offset) in seconds of each window frame: BETWEEN 70 MINUTE AND 10 MINUTE PRECEDING is (3600, 600)."""
    found = set()
    for start, start_unit, end, end_unit in FRAME.findall(sql):
        offset = int(end) * UNIT[end_unit] if end else 0
        found.add((int(start) * UNIT[start_unit] - offset, offset))
    bounds = {alias: (op, int(n) * UNIT[unit]) for alias, op, n, unit in BOUND.findall(sql)}
    for alias, (op, reach) in bounds.items():
        end = bounds.get(alias.removesuffix("_from") + "_to", ("<=", 0)) if alias.endswith("_from") else ("<=", 0)
        if op == "<" and end[0] == "<=":
            found.add((reach - end[1], end[1]))
    return found


def alert_windows(h: Heuristic, d: Deployment) -> set[tuple[int, int]]:
    """(range, offset) in seconds of each range selector of the heuristic's alerts, through the recording rules."""
    text = "\n".join(alert.expr for alert in h.alerts)
    rules = {rule.record: rule.expr for rule in recording_rules(d)}
    for _ in range(3):  # recordings read raw metrics only; one pass expands them, the rest is a guard
        text = re.sub(r"[\w:]+", lambda m: f"({rules[m.group(0)]})" if m.group(0) in rules else m.group(0), text)
    return {(seconds(r), seconds(o) if o else 0) for r, o in SELECTOR.findall(text)}


@pytest.mark.parametrize("d", DEPLOYMENTS, ids=["defaults", "crash-loop-45m"])
def test_each_probe_window_is_a_range_of_its_alerts(d):
    peak = (seconds(PEAK), 0)  # the probes' peak figure (the most in one real minute) is no alert's window
    checked = {}
    for h in catalogue(d):
        if h.probe is None:
            continue
        windows = probe_windows(h.probe.sql) - {peak}
        assert windows <= alert_windows(h, d), (h.id, windows - alert_windows(h, d))
        checked[h.id] = windows
    assert {hid for hid, windows in checked.items() if windows} >= {"H1", "H3", "H4", "H5", "H8", "H13", "H16"}


def test_no_probe_file_writes_its_own_interval():
    probes = [f for f in resources.folder("spyglass.alerting.heuristics").iterdir() if f.name.endswith(".sql")]
    literal = {f.name: re.findall(r"INTERVAL\s+'?\d", f.read_text()) for f in probes}
    assert len(literal) >= 18
    assert {name: found for name, found in literal.items() if found} == {}


def test_the_window_rule_reads_offsets_and_sums_intervals():
    assert probe_windows("RANGE BETWEEN INTERVAL 70 MINUTE PRECEDING AND INTERVAL 10 MINUTE PRECEDING") == {(3600, 600)}
    assert probe_windows("RANGE BETWEEN INTERVAL 6 HOUR PRECEDING AND CURRENT ROW") == {(21600, 0)}
    asof = (
        "ASOF LEFT JOIN k b_from ON b_from.i = e.i AND b_from.ts < e.ts - INTERVAL 70 MINUTE\n"
        "ASOF LEFT JOIN k b_to\n  ON b_to.i = e.i AND b_to.ts <= e.ts - INTERVAL 10 MINUTE\n"
        "ASOF LEFT JOIN k peak ON peak.i = e.i AND peak.ts < e.ts - INTERVAL 1 MINUTE"
    )
    assert probe_windows(asof) == {(3600, 600), (60, 0)}
    assert probe_windows(asof.replace("b_from.ts <", "b_from.ts <=")) == {(60, 0)}  # a start must be strict
    assert sql_interval("1h", "10m") == "INTERVAL 70 MINUTE" and sql_interval("1h", "1h") == "INTERVAL 2 HOUR"
    h = next(h for h in catalogue() if h.id == "H3")
    assert (3600, 600) in alert_windows(h, Deployment())  # [1h] offset 10m, inside a recording rule
