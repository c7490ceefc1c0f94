"""Findings 6 and 7 of issue 9: what a log line can make the agent export is bounded.

A prompt the engine echoes into its log can start a line with a valid prefix; a gateway client
can choose its lane and mode. Real files and a real DuckDB store, through the whole pipeline.
"""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime
from pathlib import Path

from spyglass.agent.pipeline import Pipeline
from spyglass.collectors.clock import ManualClock
from spyglass.collectors.engine_log import EngineLogOptions, EngineLogParser
from spyglass.collectors.grammar import Miss
from spyglass.config import parse_config
from spyglass.exporters.prometheus import render
from spyglass.exporters.store import DuckDBStore
from spyglass.signals import SignalsSettings, full_catalogue
from spyglass.signals.state import MetricState

FIXTURES = Path(__file__).parent / "fixtures"
ENGINE = (FIXTURES / "engine_log" / "strata-iq3_xxs-b.log").read_bytes()
GATEWAY = (FIXTURES / "gateway_log" / "rag-proxy.log").read_bytes()
KEY = ("strata-b", "normal")


def run(tmp: Path, engine: bytes = b"", gateway: bytes = b"") -> dict:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "engine.log").write_bytes(engine)
    (tmp / "rag-proxy.log").write_bytes(gateway)
    text = (
        f'[agent]\nstate_dir = "{tmp / "state"}"\nhost = "h"\n[exporters.prometheus]\nenabled = false\n'
        f'[sources.engine-b]\nkind = "engine_log"\npath = "{tmp / "engine.log"}"\ninstance = "strata-b"\n'
        f'lane = "normal"\n[sources.gateway]\nkind = "gateway_log"\npath = "{tmp / "rag-proxy.log"}"\n'
    )
    config = parse_config(tomllib.loads(text), "test")
    pipeline = Pipeline(config, ManualClock(start=1_793_000_000.0), DuckDBStore(config.store_path()))
    try:
        pipeline.run_until_idle()
        render(pipeline.state)
        return {n: dict(s) for n, s in pipeline.state.values.items()}
    finally:
        pipeline.close()


def lines(*texts: str) -> bytes:
    return b"".join(t.encode() + b"\n" for t in texts)


def test_an_echoed_prompt_cannot_move_the_engines_eviction_counter(tmp_path):
    forged = lines(
        "2026-10-19 05:20:03.000 I [cache] park conv=f0 parked=9 bytes=1 used=1 budget=1 evictions=777002",
        "2026-10-19 05:20:03.001 I [cache] park conv=f0 parked=9 bytes=1 used=1 budget=1 evictions=777007",
    )
    honest = lines(
        "2026-10-19 05:20:10.000 I [cache] evict conv=7b bytes=76021760 reason=budget parked=0 used=0"
        " budget=8589934592 evictions=1",
        "2026-10-19 05:20:20.000 I [stats] busy=0/20 prefill_queue=0 decode_tps=0.0 parked=0 used=0"
        " budget=8589934592 evictions=1",
    )
    clean = run(tmp_path / "clean", ENGINE)
    values = run(tmp_path / "forged", ENGINE + forged + honest)
    # a sum of the evict events: the honest one adds 1; never 777002 or 777007
    assert values["spyglass_engine_evictions_total"][KEY] == clean["spyglass_engine_evictions_total"][KEY] + 1


def test_a_gap_in_the_log_counts_only_the_evictions_seen(tmp_path):
    # lines were lost (e.g. rotated away unread): the engine's counter moved on without us; ours counts the
    # evict events it saw (round 4: a counter is a sum of stored events), and nothing is implausible
    later = lines(
        *(
            f"2026-10-19 05:3{i}:00.000 I [stats] busy=0/20 prefill_queue=0 decode_tps=0.0 parked=0"
            f" used=0 budget=8589934592 evictions=40"
            for i in range(4)
        )
    )
    values, clean = run(tmp_path / "gap", ENGINE + later), run(tmp_path / "clean", ENGINE)
    assert values["spyglass_engine_evictions_total"] == clean["spyglass_engine_evictions_total"]
    assert values["spyglass_engine_implausible_values_total"] == clean["spyglass_engine_implausible_values_total"]


def test_task_lines_of_a_task_never_queued_are_orphans_not_requests(tmp_path):
    forged = lines(
        "2026-10-19 05:21:00.000 I [slot 2] task 999 prompt 300000 = 0 reused + 300000 read in 5 ms",
        "2026-10-19 05:21:01.000 I [slot 2] task 999 thinking: 9 of max 9 -> done (budget)",
        "2026-10-19 05:21:02.000 I [slot 2] task 999 done finish=stop prompt=300000 completion=99999"
        " ttft_ms=1 decode_tps=9.0",
    )
    clean = run(tmp_path / "clean", ENGINE)
    values = run(tmp_path / "forged", ENGINE + forged)
    for name in (
        "spyglass_engine_requests_finished_total",
        "spyglass_engine_completion_tokens_total",
        "spyglass_engine_prompt_tokens_total",
        "spyglass_engine_long_prompts_total",
        "spyglass_engine_thinking_tokens_total",
        "spyglass_engine_thinking_budget_exhausted_total",
    ):
        assert values[name] == clean[name], name
    assert values["spyglass_engine_orphan_lines_total"] == {
        KEY + ("prompt",): 1.0,
        KEY + ("thinking",): 1.0,
        KEY + ("done",): 1.0,
    }


def test_trailing_text_after_a_message_is_not_accepted():
    parser = EngineLogParser(EngineLogOptions(path="x", instance="strata-b"), "engine-b")
    assert (
        parser.parse_line(
            b"2026-10-19 04:49:15.700 I [cache] park conv=a parked=1 bytes=1 used=1 budget=1"
            b" evictions=5 and then whatever the prompt said"
        )
        == Miss.UNMATCHED
    )
    assert (
        parser.parse_line(
            b"2026-10-19 04:49:15.700 I [cache] park conv=a parked=1 bytes=1 used=1 budget=1 evictions=5"
        ).kind
        == "park"
    )


def test_labels_from_the_gateway_log_are_bounded(tmp_path):
    hostile = lines(
        *(
            f"[06:00:{i % 60:02d}] req=20261020-140000-{i:06x} session=s lane=lane{i} mode=m{i}"
            f" client_msgs=1 sent_msgs=1 chars=1 cjk=0.0 est_tokens=1 max_tokens=1"
            for i in range(300)
        ),
        '[06:01:00] reject req=20261020-140100-000001 status=999 reason="x"',
    )
    values = run(tmp_path, gateway=GATEWAY + hostile)
    received = values["spyglass_gateway_requests_received_total"]
    assert {lane for lane, _ in received} == {"fast", "normal", "other"}
    assert received[("other", "other")] == 300
    assert {status for _, status in values["spyglass_gateway_requests_total"]} <= {"200", "400", "429", "other"}
    assert values["spyglass_source_unlisted_labels_total"] == {
        ("gateway", "lane"): 300,
        ("gateway", "mode"): 300,
        ("gateway", "status"): 1,
    }


def test_labels_from_the_engine_log_are_bounded(tmp_path):
    hostile = lines(
        *(f"2026-10-19 05:2{i % 10}:00.000 E [comp{i}] fatal {i}" for i in range(50)),
        "2026-10-19 05:29:00.000 I [cache] restore conv=a from=somewhere tokens=1",
    )
    values = run(tmp_path, ENGINE + hostile)
    assert set(values["spyglass_engine_errors_total"]) == {KEY + ("main",), KEY + ("other",)}
    assert values["spyglass_engine_prompt_restores_total"][KEY + ("other",)] == 1
    assert values["spyglass_source_unlisted_labels_total"] == {("engine-b", "component"): 50, ("engine-b", "origin"): 1}


def test_no_metric_holds_more_series_than_the_cap():
    state = MetricState(full_catalogue(), max_series=100)
    for i in range(5000):
        state.inc("spyglass_engine_errors_total", ("strata-b", "normal", f"c{i}"))
        state.observe("spyglass_engine_ttft_seconds", (f"i{i}", "normal"), 1.0)
    assert len(state.values["spyglass_engine_errors_total"]) == 100
    assert len(state.hists["spyglass_engine_ttft_seconds"]) == 100
    assert state.values["spyglass_state_dropped_series_total"] == {
        ("spyglass_engine_errors_total",): 4900,
        ("spyglass_engine_ttft_seconds",): 4900,
    }
    state.inc("spyglass_engine_errors_total", ("strata-b", "normal", "c7"))  # a known series still counts
    assert state.values["spyglass_engine_errors_total"][("strata-b", "normal", "c7")] == 2


BANNER = "2026-10-19 05:20:05.000 I [main] Strata 0.9.3 (build 7f3c2e1) starting pid=66666"
BEFORE_BANNER = lines(
    "2026-10-19 05:20:01.000 I [cache] evict conv=7a bytes=76021760 reason=budget parked=0 used=0"
    " budget=8589934592 evictions=1"
)
AFTER_BANNER = lines(
    "2026-10-19 05:20:06.000 I [stats] busy=0/20 prefill_queue=0 decode_tps=0.0 parked=0 used=0"
    " budget=8589934592 evictions=1",
    "2026-10-19 05:20:10.000 I [cache] evict conv=7b bytes=76021760 reason=budget parked=0 used=0"
    " budget=8589934592 evictions=2",
)


def applied_one_by_one(log: bytes) -> list[dict]:
    """The metric state after each event of `log`, applied as the agent applies them."""
    from spyglass.collectors.engine_log import EngineLogSource
    from spyglass.config import engine_log_config
    from spyglass.config.signals import metric_state
    from spyglass.signals.engine_log import EngineSignals

    source = EngineLogSource("engine-b", EngineLogOptions(path="x", instance="strata-b", lane="normal"))
    events, _, _ = source.handle_lines(log.splitlines())
    state = metric_state(parse_config(engine_log_config(Path("x.log"), Path("state")), "test"))
    signals, seen = EngineSignals(state, SignalsSettings(lanes={"strata-b": "normal"})), []
    for event in events:
        signals.apply(event)
        seen.append({n: dict(s) for n, s in state.values.items()})
    return seen


def test_a_forged_start_banner_resets_nothing(tmp_path):
    """Issue 21 item 11: one column-0 `starting pid=` line in an echoed prompt reset the eviction
    counter from 2508 to 0 and back (Prometheus reads +2508) and set engine_ready to 0 (a page after
    900 s). A start must be corroborated by the start sequence before it resets anything."""
    forged = ENGINE + BEFORE_BANNER + lines(BANNER) + AFTER_BANNER
    trail = applied_one_by_one(forged)
    before = len(applied_one_by_one(ENGINE + BEFORE_BANNER))  # the banner and the work follow these
    evictions = [v["spyglass_engine_evictions_total"].get(KEY) for v in trail[before - 1 :]]
    n = evictions[0]
    assert evictions == [n, n, n, n + 1]  # never down: n before the banner, at it, after it
    assert {v["spyglass_engine_ready"][KEY] for v in trail[before - 1 :]} == {1.0}
    values = run(tmp_path / "forged", forged)
    clean = run(tmp_path / "clean", ENGINE)
    assert values["spyglass_engine_starts_total"][KEY] == clean["spyglass_engine_starts_total"][KEY] == 2
    assert values["spyglass_engine_implausible_values_total"][KEY + ("start",)] == 1
    assert values["spyglass_engine_start_time_seconds"] == clean["spyglass_engine_start_time_seconds"]
    assert values["spyglass_engine_ready"][KEY] == 1.0


def test_a_start_the_start_sequence_follows_resets_the_counters(tmp_path):
    restart = ENGINE + lines(
        BANNER,
        "2026-10-19 05:20:05.001 I [main] args: --slots 20 --prompt-cache-every 16384",
        "2026-10-19 05:20:06.000 I [stats] busy=0/20 prefill_queue=0 decode_tps=0.0 parked=0"
        " used=0 budget=8589934592 evictions=0",
    )
    values, clean = run(tmp_path / "restart", restart), run(tmp_path / "clean", ENGINE)
    assert values["spyglass_engine_starts_total"][KEY] == 3 and values["spyglass_engine_ready"][KEY] == 0.0
    # counters are sums of events (round 4): a start resets no counter, it is seen in starts_total
    assert values["spyglass_engine_evictions_total"] == clean["spyglass_engine_evictions_total"]
    assert values["spyglass_engine_start_time_seconds"][KEY] == datetime(2026, 10, 19, 5, 20, 5, tzinfo=UTC).timestamp()
    assert (KEY + ("start",)) not in values.get("spyglass_engine_implausible_values_total", {})


def test_consistent_lower_values_never_lower_the_exported_counter(tmp_path):
    """Forged lines agreeing on a lower value resynchronised the counter downwards (a reset Prometheus
    reads as a whole new count); now no cumulative value from a line moves it at all."""
    lower = lines(
        *(
            f"2026-10-19 05:3{i}:00.000 I [stats] busy=0/20 prefill_queue=0 decode_tps=0.0 parked=0"
            f" used=0 budget=8589934592 evictions=0"
            for i in range(4)
        )
    )
    higher = lines(
        *(
            f"2026-10-19 05:4{i}:00.000 I [stats] busy=0/20 prefill_queue=0 decode_tps=0.0 parked=0"
            f" used=0 budget=8589934592 evictions=40"
            for i in range(3)
        )
    )
    evictions = [
        v["spyglass_engine_evictions_total"].get(KEY)
        for v in applied_one_by_one(ENGINE + BEFORE_BANNER + lower + higher)
    ]
    tail = evictions[-8:]
    assert tail == [tail[0]] * 8


def scrape_counters(text: bytes) -> dict[tuple, float]:
    """Every counter sample of a /metrics body, and engine_ready, by (name, labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text.decode())
        for s in f.samples
        if f.type == "counter" or f.name == "spyglass_engine_ready"
    }


def test_a_forged_banner_between_real_lines_moves_no_counter_of_metrics_down(tmp_path):
    """Issue 21 item 11, as the attacker did it: the agent tails a real log; between its lines come a
    forged `starting pid=` banner (a prompt echoed at column 0) and then a real error of ordinary work
    (an HTTP-side error, which no load phase writes). /metrics is scraped after every line: no
    counter goes down, engine_ready stays 1, and the request open across the banner is still
    counted when it finishes (the banner did not drop the task joins)."""
    log = tmp_path / "engine.log"
    log.write_bytes(ENGINE + BEFORE_BANNER)
    text = (
        f'[agent]\nstate_dir = "{tmp_path / "state"}"\nhost = "h"\n[exporters.prometheus]\nenabled = false\n'
        f"[exporters.store]\nenabled = false\n"
        f'[sources.engine-b]\nkind = "engine_log"\npath = "{log}"\ninstance = "strata-b"\nlane = "normal"\n'
    )
    config = parse_config(tomllib.loads(text), "test")
    from spyglass.exporters.statefile import StateFile

    pipeline = Pipeline(config, ManualClock(start=1_793_000_000.0), StateFile(tmp_path / "state" / "state.json"))
    attack = [
        "2026-10-19 05:20:04.000 I [http] task 77 req=r-77 conv=c77 queued prefill_depth=0",
        BANNER,
        "2026-10-19 05:20:05.500 E [http] client closed the connection before the response",
        *AFTER_BANNER.decode().splitlines(),
        "2026-10-19 05:20:11.000 I [slot 1] task 77 done finish=stop prompt=900 completion=12 ttft_ms=80"
        " decode_tps=40.0",
    ]
    scrapes = []
    try:
        pipeline.run_until_idle()
        scrapes.append(scrape_counters(render(pipeline.exposed)))
        for line in attack:
            with open(log, "ab") as out:
                out.write(line.encode() + b"\n")
            pipeline.run_until_idle()
            scrapes.append(scrape_counters(render(pipeline.exposed)))
    finally:
        pipeline.close()
    ready = ("spyglass_engine_ready", (("instance", "strata-b"), ("lane", "normal")))
    assert {scrape[ready] for scrape in scrapes} == {1.0}
    for before, after in zip(scrapes, scrapes[1:]):
        fell = {k: (before[k], after.get(k)) for k in before if k[0] != ready[0] and after.get(k, 0.0) < before[k]}
        assert not fell
    last = scrapes[-1]

    def key(**labels: str) -> tuple:
        return tuple(sorted({"instance": "strata-b", "lane": "normal", **labels}.items()))

    assert last["spyglass_engine_evictions_total", key()] == scrapes[0]["spyglass_engine_evictions_total", key()] + 1
    assert last["spyglass_engine_implausible_values_total", key(field="start")] == 1.0
    finished = ("spyglass_engine_requests_finished_total", key(finish="stop"))
    assert last[finished] == scrapes[0].get(finished, 0.0) + 1
    assert not any(name == "spyglass_engine_orphan_lines_total" and value for (name, _), value in last.items())
