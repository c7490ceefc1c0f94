"""Issue 21 item 12, the small ones not tested beside their module: control characters in a label
value, and a symlink planted where /api/sql writes its copy of the store."""

from __future__ import annotations

import os
import tomllib

from spyglass.agent.pipeline import Pipeline
from spyglass.agent.snapshot import Snapshots
from spyglass.collectors.clock import ManualClock
from spyglass.collectors.event import Event
from spyglass.config import parse_config
from spyglass.exporters.prometheus import render
from spyglass.exporters.statefile import StateFile
from spyglass.exporters.store import DuckDBStore
from spyglass.signals import full_catalogue
from spyglass.signals.serve_status import ServeSignals
from spyglass.signals.state import MetricState


def test_nul_and_control_characters_never_reach_a_build_label(tmp_path):
    log = tmp_path / "switch.log"
    log.write_bytes(b"2026-10-17 20:34:12 switch strata-b engine=old -> Strata\x00\x01\x1b[2J by=ops\n")
    config = parse_config(
        tomllib.loads(
            f'[agent]\nstate_dir = "{tmp_path}"\n[exporters.prometheus]\nenabled = false\n'
            f'[sources.switch]\nkind = "switch_log"\npath = "{log}"\ninstances = ["strata-b"]\n'
        ),
        "t",
    )
    pipeline = Pipeline(config, ManualClock(), StateFile(tmp_path / "state.json"))
    try:
        pipeline.run_until_idle()
        [(instance, build)] = pipeline.state.values["spyglass_switch_engine_build_info"]
        text = render(pipeline.state)
    finally:
        pipeline.close()
    assert (instance, build) == ("strata-b", "Strata\\x00\\x01\\x1b[2J")
    assert b"\x00" not in text and b"\x1b" not in text and b"\x01" not in text

    state = MetricState(full_catalogue())  # the serve's body: the same rule
    ServeSignals(state).apply(Event(1.0, "serve-a", "status", "strata-a", {"build": "B\x00" + "x" * 500}))
    [(_, build, _)] = state.values["spyglass_serve_info"]
    assert build.startswith("B\\x00x") and len(build) == 200


def test_a_symlink_planted_in_the_copies_folder_is_never_followed(tmp_path):
    """The copy /api/sql reads was written to a predictable `copy-N.partial`: a symlink there made
    the agent overwrite its target. Every name it could use is planted here; the target is intact."""
    store = DuckDBStore(tmp_path / "spyglass.duckdb")
    store.commit([Event(1_790_000_000.0, "s", "k", "i", {"n": 1})], {}, {})
    copies = tmp_path / "sql-copies"
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\n")
    snapshots = Snapshots(lambda: store.con, copies, max_age=0)
    for n in range(1, 6):
        for name in (f"copy-{n}.partial", f"copy-{n}.partial.wal", f"copy-{n}.duckdb.wal"):
            os.symlink(victim, copies / name)
    try:
        for _ in range(3):  # the first copy, then copies that start from the previous one
            with snapshots.lease() as copy:
                assert not copy.path.is_symlink() and copy.path.stat().st_size > 0
            store.commit([Event(1_790_000_001.0, "s", "k", "i", {"n": 2})], {}, {})
    finally:
        snapshots.close()
        store.close()
    assert victim.read_bytes() == b"precious\n"
