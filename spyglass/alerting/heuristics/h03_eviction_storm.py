"""H3: Eviction storm. Incident 2 (eight-way TTFT ~2 min, 2026-10-07 evening)."""

from __future__ import annotations

from spyglass.alerting.heuristics.model import (
    INSTANCE,
    LANE,
    PERCENT,
    VALUE,
    Alert,
    Check,
    Deployment,
    Evidence,
    Heuristic,
    Probe,
    Threshold,
    Words,
    probe_sql,
)
from spyglass.alerting.heuristics.promql import (
    EVICTIONS,
    EVICTIONS_BASELINE,
    HOURLY,
    PEAK,
    RECENT,
    SNAPSHOT_SHARE,
    minutes,
    num,
    spoken,
    sql_interval,
)


def build(d: Deployment) -> Heuristic:
    s = d.settings
    floor, spike = 1.0, 3.0
    share = s.cache_snapshot_budget_share
    # Per eviction: the rate over the 10 minutes before it and over the hour before those (the
    # views read an hour beyond the window, so the first 10 minutes see a shorter baseline), and
    # the mean parked snapshot's share of the budget at that moment, as the rule computes them.
    probe = Probe(
        needs=("engine_log",),
        alert="EngineEvictionStorm",
        sql=probe_sql(
            __name__,
            floor=num(floor),
            spike=num(spike),
            share=num(share),
            recent=sql_interval(RECENT),
            recent_minutes=minutes(RECENT),
            baseline_from=sql_interval(HOURLY, RECENT),
            baseline_to=sql_interval(RECENT),
            hourly_minutes=minutes(HOURLY),
            peak=sql_interval(PEAK),
        ),
        summary="{instance} evicted {evictions:,} conversation snapshots (up to {evictions_per_minute_peak:g} a minute); the"
        " largest parked snapshot, {largest_snapshot_bytes:,} bytes, is {snapshot_share_of_budget:.0%} of the"
        " {budget_bytes:,}-byte budget, {snapshot_in_slot_shares:g} times the share of one of {slots} slots.",
        figures=(
            "evictions",
            "evictions_per_minute_peak",
            "largest_snapshot_bytes",
            "largest_evicted_bytes",
            "budget_bytes",
            "slots",
            "snapshot_share_of_budget",
            "snapshot_in_slot_shares",
        ),
    )
    return Heuristic(
        words={
            "llama_server": Words(
                summary="{instance} evicted {evictions:,} prompts from its host prompt cache (up to"
                " {evictions_per_minute_peak:g} a minute). The largest evicted entry was {largest_evicted_bytes:,}"
                " bytes. The --cache-ram limit is {budget_bytes:,} bytes for {slots} slots (-np).",
                evidence_text="Evictions from the host prompt cache and its largest entry against the hour before.",
                this="{evictions:,} evictions, up to {evictions_per_minute_peak:g} a minute; the largest entry"
                " {largest_evicted_bytes:,} bytes",
                check="The same conversation's next turn with a short prompt eval proves the cache works; compare the"
                " largest evicted entry with --cache-ram over -np.",
                knobs=(
                    "--cache-ram MiB (the host prompt cache's limit; 8192 by default)",
                    "-np (slots: each one's prompt becomes a cache entry)",
                    "-c (context: how large one entry can grow)",
                    "admission (concurrent long sessions per lane)",
                ),
                unknown={
                    "budget_bytes": "the --cache-ram limit is read from a running llama-server's command line or its"
                    " `- cache state:` lines (-lv 4); neither was in the window",
                    "slots": "-np is read from a running llama-server's command line, not from its log",
                    "largest_evicted_bytes": "no eviction line named its size",
                },
            )
        },
        evidence=Evidence(
            control="hour before",
            text="Evictions and the largest parked snapshot against the hour before.",
            this="{evictions:,} evictions, up to {evictions_per_minute_peak:g} a minute;"
            " the largest snapshot {snapshot_share_of_budget:.0%} of the budget",
            series="evictions",
            threshold=floor,
        ),
        id="H3",
        title="Eviction storm",
        incident="2 (eight-way TTFT ~2 min, 2026-10-07 evening)",
        symptom=f"Conversation snapshots evicted over {num(floor)} a minute, at over {num(spike)}x the baseline over"
        f" {spoken(HOURLY)}, or"
        f" parked snapshots each larger than {num(share)} of the cache budget.",
        history="Incident 2 (2026-10-07 evening): one 254k-token snapshot was 4,716,362,992 bytes against strata-b's"
        " 8 GiB budget; 2,508 evictions that day; the same conversation's next turn reused 251,787 of 253,214"
        " tokens and read 1,427 in 2.2 s, so the mechanism worked.",
        wrong_guess="a prefill bug in the engine",
        check=Check(
            text="The same conversation's next turn reusing almost everything proves the mechanism works;"
            " compare the parked snapshot's bytes with budget/slots.",
            promql=f"{SNAPSHOT_SHARE} and on (host, instance, lane) {EVICTIONS} > 0",
            sql="SELECT instance, count(*) AS evictions, max(bytes) AS largest_snapshot,"
            " any_value(budget) AS budget FROM events_engine_log WHERE kind = 'evict'"
            " GROUP BY instance",
        ),
        knobs=(
            "--conversation-cache-mib",
            "--prompt-cache-every",
            "admission (concurrent long sessions per lane)",
            "the gateway's assembly budget (prompt size)",
        ),
        thresholds=(
            Threshold(name="evictions_per_minute", value=floor, unit="1/min", meaning="eviction rate floor"),
            Threshold(
                name="baseline_factor",
                value=spike,
                unit="ratio",
                meaning=f"eviction rate above this times its baseline over {spoken(HOURLY)}",
            ),
            Threshold(
                name="snapshot_budget_share",
                value=s.cache_snapshot_budget_share,
                unit="ratio",
                meaning="mean parked snapshot above this share of the budget",
                setting="alerts.cache_snapshot_budget_share",
            ),
        ),
        alerts=(
            Alert(
                name="EngineEvictionStorm",
                severity="critical",
                expr=f"{EVICTIONS} * 60 > {num(floor)}\n  and on (host, instance, lane) (\n"
                f"    {EVICTIONS} > {num(spike)} * {EVICTIONS_BASELINE}\n"
                f"    or on (host, instance, lane) {SNAPSHOT_SHARE} > {num(s.cache_snapshot_budget_share)}\n  )",
                for_="5m",
                summary=f"{INSTANCE} is evicting conversation snapshots every minute.",
                description=f"{INSTANCE} ({LANE}) evicts {VALUE} snapshots a minute over {spoken(RECENT)}"
                f" (over {num(floor)}/min and {num(spike)}x its baseline over {spoken(HOURLY)} before, or snapshots over"
                f" {num(s.cache_snapshot_budget_share)} of the budget).",
            ),
            Alert(
                name="EngineSnapshotOverBudget",
                severity="warning",
                expr=f"{SNAPSHOT_SHARE} > {num(s.cache_snapshot_budget_share)}",
                for_="15m",
                summary=f"{INSTANCE}'s parked snapshots are each a large share of the cache budget.",
                description=f"A parked snapshot on {INSTANCE} averages {PERCENT} of the conversation-cache budget: the cache holds"
                " two or three conversations before it evicts.",
            ),
        ),
        probe=probe,
    )
