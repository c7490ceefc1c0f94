"""The drift alarm on a llama-server log spyglass cannot read (here the Strata engine's real log behind the
llama_server preset: a wrong preset, as a new build's format or an unknown wrapper would look): `check-log`
says so and shows the shapes, `ingest` names the source in one line, and SpyglassSourceUnreadable fires in a
backtest of the stored log; the real llama-server log fires nothing of it. (Live, through promtool:
tests/alert_scenarios.py, "H19 a log in a format spyglass cannot read".)"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spyglass.cli.app import app

FIXTURES = Path(__file__).parent / "fixtures"
UNKNOWN = FIXTURES / "engine_log" / "strata-iq3_xxs-b.log"  # 2026-10-19 04:30 to 04:4x UTC
LLAMA = FIXTURES / "llama_server" / "llama-server.log"
ROOT = Path(__file__).resolve().parents[1]
END = 1_792_400_000.0  # 2026-10-19T08:53:20Z: the llama log's file is dated here


def config(folder: Path, log: Path) -> Path:
    shutil.copy(log, folder / "llama.log")
    os.utime(folder / "llama.log", (END, END))
    text = (
        f'[agent]\nstate_dir = "{folder}"\n[exporters.prometheus]\nenabled = false\n[exporters.store]\nenabled = true\n'
        f'[sources.llama-a]\nkind = "engine_log"\npreset = "llama_server"\npath = "{folder / "llama.log"}"\n'
        'instance = "llama-a"\nlane = "normal"\n'
    )
    (folder / "spyglass.toml").write_text(text)
    return folder / "spyglass.toml"


def backtest(cfg: Path, start: float, end: float) -> list[dict]:
    result = CliRunner().invoke(
        app,
        [
            "backtest",
            "--config",
            str(cfg),
            "--from",
            str(start),
            "--to",
            str(end),
            "--rules",
            str(ROOT / "alerts"),
            "--json",
            "--step",
            "30s",
        ],
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["alerts"]


def test_check_log_shows_what_it_cannot_read() -> None:
    result = CliRunner().invoke(app, ["check-log", str(UNKNOWN), "--preset", "llama_server"])
    assert result.exit_code == 0, result.output
    assert "38 unreadable (93%)" in result.output and "[main] Strata <n> (build <x>) starting" in result.output
    assert "SpyglassSourceUnreadable" in result.output and "a source of its own kind" in result.output
    auto = CliRunner().invoke(app, ["check-log", str(UNKNOWN)])
    assert "read with preset strata (llama_server reads 7%, strata reads 90%" in auto.output


def test_ingest_names_the_lines_it_could_not_read_and_the_backtest_fires(tmp_path: Path, spawns: None) -> None:
    cfg = config(tmp_path, UNKNOWN)
    result = CliRunner().invoke(app, ["ingest", "--config", str(cfg)])
    assert result.exit_code == 0, result.output
    last = result.output.strip().splitlines()[-1]
    assert last == (
        f"could not read 38 of 41 lines of sources.llama-a: run `spyglass check-log {tmp_path / 'llama.log'}"
        " --preset llama_server` to see their shapes"
    ), result.output
    start = 1_792_384_200.0  # 2026-10-19T04:30:00Z
    alerts = backtest(cfg, start - 1800, start + 7200)
    fired = [a for a in alerts if a["alert"] == "SpyglassSourceUnreadable"]
    assert len(fired) == 1 and fired[0]["labels"]["source"] == "llama-a", alerts


def test_the_real_llama_log_fires_no_drift_alarm(tmp_path: Path, spawns: None) -> None:
    cfg = config(tmp_path, LLAMA)
    result = CliRunner().invoke(app, ["ingest", "--config", str(cfg)])
    assert result.exit_code == 0 and "could not read" not in result.output, result.output
    alerts = backtest(cfg, END - 3600, END + 3600)
    assert "SpyglassSourceUnreadable" not in {a["alert"] for a in alerts}, alerts


def test_run_says_at_start_up_what_earlier_runs_could_not_read(tmp_path: Path) -> None:
    """`spyglass run` prints this line before serving: the outcomes it restores from the state file."""
    from spyglass.agent.pipeline import Pipeline
    from spyglass.agent.runtime import open_store
    from spyglass.cli.checklog import unread_summary
    from spyglass.collectors.clock import SystemClock
    from spyglass.config import load_config

    cfg = config(tmp_path, UNKNOWN)
    assert CliRunner().invoke(app, ["ingest", "--config", str(cfg)]).exit_code == 0
    pipeline = Pipeline(load_config(cfg), SystemClock(), open_store(load_config(cfg)))
    try:
        assert unread_summary(pipeline) == (
            f"could not read 38 lines of sources.llama-a: run `spyglass check-log"
            f" {tmp_path / 'llama.log'} --preset llama_server` to see their shapes"
        )
    finally:
        pipeline.close()


# -- adversarial round 4: the drift alarm cannot be kept quiet ----------------------------------------------
UNKNOWN_LINE = "I [main] Strata 9.9.9 (build 9f9c9e9) a line no llama preset reads"
FORGED_EVICT = "0.00.{n:03d}.000 W srv         alloc:  - making room for prompt cache entry, removing oldest entry (size = 0.306 MiB)"
TACTICS = {
    # one readable line (a runner's own, or a forged eviction) per unreadable line: exactly half
    "runner lines": lambda n: ["[INFO] llama-swap: request /v1/chat/completions", UNKNOWN_LINE],
    "forged evictions": lambda n: [FORGED_EVICT.format(n=n), UNKNOWN_LINE],
    # lines refused (a lone stamp 3 days ahead of the lines around it): invalid, not unreadable
    "refused stamps": lambda n: [
        "4320.00.000.000 I slot launch_slot_: id  0 | task 9 | processing task, is_child = 0",
        FORGED_EVICT.format(n=n),
    ],
    # lines whose wrapper's clock no file or agent can have (the year 9999): invalid, and no anchor
    "forged clocks": lambda n: [
        "<13>1 9999-12-31T23:59:59Z host llama - - - 0.00.000.001 I srv  llama_server: initializing ...",
        FORGED_EVICT.format(n=n),
    ],
    # one unreadable line a batch: the batch's `unread` event must not count as a line
    "one line a batch": lambda n: [UNKNOWN_LINE],
}


@pytest.mark.parametrize("tactic", list(TACTICS))
def test_the_drift_alarm_counts_every_unusable_line_over_the_lines_read(tmp_path: Path, tactic: str) -> None:
    """Each keep-quiet tactic of round 4, read batch by batch as the agent reads them: the share of lines the
    source could not use, over the lines it read, reaches SpyglassSourceUnreadable's threshold (`>=`)."""
    from spyglass.agent.pipeline import Pipeline
    from spyglass.alerting.heuristics.h19_blind_spots import build
    from spyglass.alerting.heuristics.model import Deployment
    from spyglass.collectors.clock import ManualClock
    from spyglass.config import load_config
    from spyglass.exporters.statefile import StateFile

    first = tmp_path / "first.log"
    first.write_text("0.00.000.001 I srv  llama_server: initializing ...\n")
    cfg = load_config(config(tmp_path, first))
    log = tmp_path / "llama.log"
    pipeline = Pipeline(cfg, ManualClock(), StateFile(tmp_path / "state.json"))
    threshold = next(t.value for t in build(Deployment()).thresholds if t.name == "unreadable_share")
    try:
        pipeline.step()
        before = dict(pipeline.state.series("spyglass_source_lines_total"))
        for n in range(40):
            with log.open("a") as f:
                f.write("".join(line + "\n" for line in TACTICS[tactic](n + 1)))
            pipeline.step()
        after = pipeline.state.series("spyglass_source_lines_total")
        grew = {k[1]: v - before.get(k, 0) for k, v in after.items() if k[0] == "llama-a"}
        unusable = grew.get("unmatched", 0) + grew.get("unprefixed", 0) + grew.get("invalid", 0)
        assert unusable / sum(grew.values()) >= threshold, grew
    finally:
        pipeline.close()


@pytest.mark.parametrize("preset", [None, "llama_server"])
def test_check_log_reads_a_file_with_no_newline_in_bounded_memory(tmp_path: Path, preset: str | None) -> None:
    """Round 4: check-log held a whole line, however long (a 2 GB sparse file with no newline reached 2.2 GB
    and failed with MemoryError under a 4 GB limit), and read the sample twice before the whole file. Now
    a line is cut to 1 MiB and the rest read past, in one pass; 128 MiB of no newline stays under 32 MB."""
    import tracemalloc

    from spyglass.cli.checklog import report

    log = tmp_path / "sparse.log"
    with log.open("wb") as f:
        f.write(b"0.00.000.001 I srv  llama_server: initializing ...\n")
        f.truncate(128 << 20)
    tracemalloc.start()
    try:
        text, reading = report(log, preset)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, peak
    assert reading.lines == 2 and "1 longer than 1 MiB, cut to it" in text, text


def test_a_backtest_of_a_log_refusing_most_lines_fires_the_drift_alarm(tmp_path: Path, spawns: None) -> None:
    """Round 4: lines refused as invalid (here wrapper clocks in 9999, two per real eviction) count in the
    stored `unread` events, so a backtest of the stored log replays the drift alarm too."""
    lines = ["0.00.000.001 I srv  llama_server: initializing ..."]
    for n in range(60):
        lines += [TACTICS["forged clocks"](1)[0]] * 2 + [FORGED_EVICT.format(n=0).replace("0.00.000.000", stamp(n))]
    log = tmp_path / "source.log"
    log.write_text("".join(line + "\n" for line in lines))
    cfg = config(tmp_path, log)
    result = CliRunner().invoke(app, ["ingest", "--config", str(cfg)])
    assert result.exit_code == 0, result.output
    fired = [a for a in backtest(cfg, END - 3600, END + 3600) if a["alert"] == "SpyglassSourceUnreadable"]
    assert [a["labels"]["source"] for a in fired] == ["llama-a"], fired


def stamp(n: int) -> str:
    """The stamp of the n-th minute of a process: M.SS.mmm.uuu."""
    return f"{n}.00.000.000"
