"""Table tests for the smaller line sources (switch log, supervisord log), and robustness of all."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from conftest import FIXTURES
from hypothesis import given
from hypothesis import strategies as st

from spyglass import collectors
from spyglass.collectors.event import Event
from spyglass.collectors.supervisord_log import SupervisordLogOptions, SupervisordLogSource
from spyglass.collectors.switch_log import SwitchLogOptions, SwitchLogSource


def utc(e: Event) -> str:
    return datetime.fromtimestamp(e.ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def test_switch_log_is_local_time_and_names_its_instance():
    source = SwitchLogSource("switch", SwitchLogOptions(path="x", instances=["strata-a", "strata-b"]))
    events, _, _ = source.handle_lines((FIXTURES / "switch_log" / "switch-engine.log").read_bytes().splitlines())
    assert [(e.kind, e.instance, utc(e)) for e in events] == [
        ("switch", "strata-a", "2026-10-07 13:02:44"),
        ("switch", "strata-b", "2026-10-17 12:34:12"),
        ("restart", "strata-a", "2026-10-18 06:15:36"),
        ("restart", "strata-b", "2026-10-19 10:58:03"),
    ]
    assert events[1].fields == {"instance": "strata-b", "from_build": "SSEStraBed", "to_build": "Strata", "by": "ops"}


def test_switch_log_takes_only_configured_instances_as_labels(tmp_path):
    """Issue 21 item 12: 5,000 names in switch lines filled the series cap. A name the config does not
    list is exported as `other` and counted; the line's text stays in the stored event."""
    import tomllib

    from spyglass.agent.pipeline import Pipeline
    from spyglass.collectors.clock import ManualClock
    from spyglass.config import parse_config
    from spyglass.exporters.statefile import StateFile

    log = tmp_path / "switch.log"
    log.write_bytes(
        b"".join(f"2026-10-17 20:34:{i % 60:02d} restart strata-{i} reason=r by=ops\n".encode() for i in range(5000))
        + b"2026-10-18 14:15:36 restart strata-b reason=r by=ops\n"
    )
    config = parse_config(
        tomllib.loads(
            f'[agent]\nstate_dir = "{tmp_path}"\n[exporters.prometheus]\nenabled = false\n'
            f'[sources.engine-b]\nkind = "engine_log"\npath = "{tmp_path / "e.log"}"\ninstance = "strata-b"\n'
            f'[sources.switch]\nkind = "switch_log"\npath = "{log}"\n'
        ),
        "t",
    )
    assert config.sources["switch"].instances == ["strata-b"]
    pipeline = Pipeline(config, ManualClock(), StateFile(tmp_path / "state.json"))
    try:
        pipeline.run_until_idle()
        values = pipeline.state.values
    finally:
        pipeline.close()
    assert values["spyglass_switch_restarts_total"] == {("other",): 5000, ("strata-b",): 1}
    assert values["spyglass_source_unlisted_labels_total"][("switch", "instance")] == 5000
    assert values.get("spyglass_state_dropped_series_total", {}) == {}


@pytest.mark.parametrize(
    ("line", "kind", "fields"),
    [
        (
            b"2026-10-19 06:20:01,777 WARN exited: strata-b (terminated by SIGABRT (core dumped); not expected)",
            "exited",
            {"program": "strata-b", "signal": "SIGABRT", "core": True, "expected": "not expected"},
        ),
        (
            b"2026-10-19 06:14:30,002 INFO exited: strata-a (exit status 0; expected)",
            "exited",
            {"program": "strata-a", "status": 0, "expected": "expected"},
        ),
        (
            b"2026-10-19 06:20:09,112 INFO gave up: strata-b entered FATAL state, too many start retries too quickly",
            "fatal",
            {"program": "strata-b"},
        ),
        (
            b"2026-10-19 06:14:31,000 INFO spawnerr: can't find command '/home/cloud/Strata/run-iq3_xxs-a.sh'",
            "spawn_error",
            {"error": "can't find command '/home/cloud/Strata/run-iq3_xxs-a.sh'"},
        ),
        (
            b"2026-11-30 14:35:28,265 WARN killing 'stubborn' (7762) with SIGKILL",
            "stop_kill",
            {"program": "stubborn", "pid": 7762, "signal": "SIGKILL"},
        ),
        (
            b"2026-11-30 14:35:31,884 INFO waiting for spy, slowstop, victim to die",
            "shutdown_wait",
            {"programs": "spy, slowstop, victim"},
        ),
    ],
)
def test_supervisord_templates(line, kind, fields):
    event = SupervisordLogSource("s", SupervisordLogOptions(path="x")).handle(line)
    assert (event.kind, event.fields) == (kind, fields)


@given(
    st.sampled_from(sorted(k for k, r in collectors.load_all().items() if r.tailed is not None)),
    st.binary(max_size=200),
)
def test_random_bytes_never_crash_any_line_source(kind, data):
    registration = collectors.load_all()[kind]
    source = registration.tailed("s", registration.options(kind=kind, path="x"))
    source.file_mtime(1_792_454_399.0)
    events, misses, _ = source.handle_lines([data, data + b"\n" + data])
    assert len(events) + sum(misses.values()) == 2
