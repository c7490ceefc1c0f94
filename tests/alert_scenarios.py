"""Series shaped like each incident, on a healthy background, for `promtool test rules`.

Time is minutes from 0 at a 1-minute interval; incidents start at minute 120 (two healthy hours,
so an hourly baseline exists). Counters are piecewise linear (`counter`), gauges piecewise constant
(`gauge`). A scenario lists, per evaluation time, exactly the alerts that fire (Watchdog always).
"""

from __future__ import annotations

from dataclasses import dataclass, field

GiB = 2**30
T0 = 120  # minute the incident starts


def counter(*pieces: tuple[int, float], start: float = 0.0) -> str:
    """A counter as promtool series notation: pieces of (minutes, increase per minute)."""
    terms, value = [], start
    for minutes, rate in pieces:
        terms.append(f"{value:g}+{rate:g}x{minutes - 1}")
        value += rate * minutes
    return " ".join(terms)


def gauge(*pieces: tuple[int, float]) -> str:
    return " ".join(f"{value:g}x{minutes - 1}" for minutes, value in pieces)


def clock(minutes: int, offset_s: float = 0.0) -> str:
    """A timestamp gauge that follows the test's own clock (seconds since 0)."""
    return f"{offset_s:g}+60x{minutes - 1}"


ENGINES = {"strata-a": "fast", "strata-b": "normal"}
SOURCES = {"strata-a": "engine-a", "strata-b": "engine-b"}


def _ttft(instance: str, lane: str, n: int, per_min: float = 60, buckets: dict[str, float] | None = None) -> dict:
    """TTFT histogram: `buckets` maps le -> share of requests at or below it (all under 1 s when healthy)."""
    shares = {"1.0": 1.0, "10.0": 1.0, "40.0": 1.0, "160.0": 1.0, "+Inf": 1.0, **(buckets or {})}
    il = f'instance="{instance}", lane="{lane}"'
    out = {
        f'spyglass_engine_ttft_seconds_bucket{{{il}, le="{le}"}}': counter((n, per_min * s)) for le, s in shares.items()
    }
    out[f"spyglass_engine_ttft_seconds_count{{{il}}}"] = counter((n, per_min))
    out[f"spyglass_engine_ttft_seconds_sum{{{il}}}"] = counter((n, per_min * 0.5))
    return out


def background(n: int) -> dict[str, str]:
    """A healthy deployment for n minutes: every metric an alert reads, at healthy values."""
    s: dict[str, str] = {'up{job="spyglass", instance="127.0.0.1:9464"}': gauge((n, 1))}
    for instance, lane in ENGINES.items():
        il, i = f'instance="{instance}", lane="{lane}"', f'instance="{instance}"'
        s.update(_ttft(instance, lane, n))
        s.update(
            {
                f"spyglass_engine_request_decode_tokens_per_second_sum{{{il}}}": counter((n, 60 * 76.8)),
                f"spyglass_engine_request_decode_tokens_per_second_count{{{il}}}": counter((n, 60)),
                f"spyglass_engine_evictions_total{{{il}}}": gauge((n, 0)),
                f"spyglass_engine_cache_used_bytes{{{il}}}": gauge((n, 4 * GiB)),
                f"spyglass_engine_cache_parked_snapshots{{{il}}}": gauge((n, 8)),
                f"spyglass_engine_cache_budget_bytes{{{il}}}": gauge((n, 8 * GiB)),
                f"spyglass_engine_long_prompts_total{{{il}}}": gauge((n, 0)),
                f"spyglass_engine_long_prompts_checkpoint_only_total{{{il}}}": gauge((n, 0)),
                f'spyglass_engine_requests_finished_total{{{il}, finish="stop"}}': counter((n, 60)),
                f"spyglass_engine_last_progress_timestamp_seconds{{{il}}}": clock(n),
                f"spyglass_engine_slots_busy{{{il}}}": gauge((n, 2)),
                f"spyglass_engine_prefill_queue_depth{{{il}}}": gauge((n, 0)),
                f"spyglass_engine_start_time_seconds{{{il}}}": gauge((n, 0)),
                f"spyglass_engine_ready{{{il}}}": gauge((n, 1)),
                f"spyglass_engine_model_checksum_mismatches_total{{{il}}}": gauge((n, 0)),
                f'spyglass_engine_graph_rebuilds_total{{{il}, reason="new_shape"}}': gauge((n, 0)),
                f"spyglass_host_process_up{{{i}}}": gauge((n, 1)),
                f"spyglass_host_process_resident_bytes{{{i}}}": gauge((n, 100 * GiB)),
                f"spyglass_host_cgroup_periods_total{{{i}}}": counter((n, 600)),
                f"spyglass_host_cgroup_throttled_periods_total{{{i}}}": gauge((n, 0)),
                f'spyglass_serve_state{{{i}, state="ready"}}': gauge((n, 1)),
                f"spyglass_serve_measures_escapes{{{i}}}": gauge((n, 1)),
                f"spyglass_serve_slots_busy{{{i}}}": gauge((n, 2)),
                f"spyglass_serve_prefill_queue_depth{{{i}}}": gauge((n, 0)),
                f"spyglass_serve_stops_while_reasoning_total{{{i}}}": gauge((n, 0)),
                f'spyglass_serve_requests_total{{{i}, status="200"}}': counter((n, 60)),
                f'spyglass_supervisord_spawns_total{{program="{instance}"}}': gauge((n, 1)),
                f'spyglass_supervisord_process_state{{program="{instance}", state="RUNNING"}}': gauge((n, 1)),
                f'spyglass_supervisord_process_state{{program="{instance}", state="FATAL"}}': gauge((n, 0)),
                f'spyglass_source_last_event_timestamp_seconds{{source="{SOURCES[instance]}"}}': clock(n),
            }
        )
    other = {"strata-a": "strata-b", "strata-b": "strata-a"}
    s.update({f'spyglass_host_shared_cpus{{instance="{a}", other="{b}"}}': gauge((n, 0)) for a, b in other.items()})
    for lane in ENGINES.values():
        ln = f'lane="{lane}"'
        s.update(
            {
                f'spyglass_gateway_requests_received_total{{{ln}, mode="assembled"}}': counter((n, 60)),
                f'spyglass_gateway_requests_total{{{ln}, status="200"}}': counter((n, 60)),
                f'spyglass_gateway_prompt_tokens_total{{{ln}, counted_by="engine"}}': counter((n, 6000)),
                f'spyglass_gateway_prompt_tokens_total{{{ln}, counted_by="gateway_estimate"}}': counter((n, 6600)),
                f"spyglass_gateway_concurrency_rejections_total{{{ln}}}": gauge((n, 0)),
                f"spyglass_gateway_blind_retries_total{{{ln}}}": gauge((n, 0)),
                f'spyglass_infer_requests_total{{{ln}, status="200", finish="stop"}}': counter((n, 60)),
                f'spyglass_infer_thinking_only_total{{{ln}, special_tokens="yes"}}': gauge((n, 0)),
                f"spyglass_infer_bodies_total{{{ln}}}": counter((n, 60)),
                f"spyglass_infer_special_token_requests_total{{{ln}}}": gauge((n, 0)),
                f"spyglass_infer_plan_then_stop_total{{{ln}}}": gauge((n, 0)),
                f"spyglass_infer_anchor_lost_total{{{ln}}}": gauge((n, 0)),
            }
        )
    s['spyglass_source_last_event_timestamp_seconds{source="serve-a"}'] = clock(n)
    s['spyglass_source_last_event_timestamp_seconds{source="serve-b"}'] = clock(n)
    # A supervisord log is quiet by nature: its last line is from when the programs started.
    s['spyglass_source_last_event_timestamp_seconds{source="supervisord"}'] = gauge((n, 0))
    for source in ("engine-a", "engine-b", "gateway", "serve-a", "serve-b"):
        s[f'spyglass_source_up{{source="{source}"}}'] = gauge((n, 1))
        s[f'spyglass_source_lines_total{{source="{source}", outcome="event"}}'] = counter((n, 100))
        s[f'spyglass_source_lines_total{{source="{source}", outcome="unmatched"}}'] = gauge((n, 0))
    return s


@dataclass
class Scenario:
    name: str
    minutes: int
    series: dict[str, str]  # overrides of (or additions to) the background
    checks: dict[int, list[tuple[str, dict[str, str]]]]  # minute -> the alerts firing then, besides Watchdog
    exact: dict[str, tuple[int, dict[str, str], str]] = field(default_factory=dict)  # alert -> (minute, labels, value)


A, B = {"instance": "strata-a", "lane": "fast"}, {"instance": "strata-b", "lane": "normal"}
N = T0 + 60


def scenarios() -> list[Scenario]:
    rest = N - T0
    b_il, a_il = 'instance="strata-b", lane="normal"', 'instance="strata-a", lane="fast"'
    return [
        Scenario("healthy", 26 * 60, {}, {115: [], 600: [], 26 * 60 - 5: []}),
        Scenario(
            "H1 contention: decode 76.8 -> 9.3 tok/s, CPUs shared",
            N,
            {
                f"spyglass_engine_request_decode_tokens_per_second_sum{{{a_il}}}": counter(
                    (T0, 60 * 76.8), (rest, 60 * 9.3)
                ),
                'spyglass_host_shared_cpus{instance="strata-a", other="strata-b"}': gauge((T0, 0), (rest, 16)),
                'spyglass_host_shared_cpus{instance="strata-b", other="strata-a"}': gauge((T0, 0), (rest, 16)),
            },
            {
                115: [],
                132: [("EngineCPUsShared", {"instance": "strata-a"}), ("EngineCPUsShared", {"instance": "strata-b"})],
                150: [
                    ("EngineThroughputCollapse", A),
                    ("EngineCPUsShared", {"instance": "strata-a"}),
                    ("EngineCPUsShared", {"instance": "strata-b"}),
                ],
            },
            {"EngineThroughputCollapse": (150, A, "9.3")},
        ),
        Scenario(
            "H2 cgroup throttled",
            N,
            {
                'spyglass_host_cgroup_throttled_periods_total{instance="strata-b"}': counter((T0, 0), (rest, 300)),
            },
            {125: [], 140: [("EngineCPUThrottled", {"instance": "strata-b"})]},
        ),
        Scenario(
            "H3 eviction storm: 4.7 GB snapshots, 8 GiB budget",
            N,
            {
                f"spyglass_engine_evictions_total{{{b_il}}}": counter((T0, 0), (rest, 5)),
                f"spyglass_engine_cache_used_bytes{{{b_il}}}": gauge((T0, 4 * GiB), (rest, 4716362992)),
                f"spyglass_engine_cache_parked_snapshots{{{b_il}}}": gauge((T0, 8), (rest, 1)),
            },
            {
                115: [],
                124: [],
                130: [("EngineEvictionStorm", B)],
                140: [("EngineEvictionStorm", B), ("EngineSnapshotOverBudget", B)],
            },
            {"EngineEvictionStorm": (140, B, "5")},
        ),
        Scenario(
            "H4 long prompts checkpoint-only",
            N,
            {
                f"spyglass_engine_long_prompts_total{{{b_il}}}": counter((T0, 0), (rest, 3)),
                f"spyglass_engine_long_prompts_checkpoint_only_total{{{b_il}}}": counter((T0, 0), (rest, 2)),
            },
            {130: [], 140: [("EngineLongPromptsCheckpointOnly", B)]},
        ),
        Scenario(
            "H5 TTFT ~2 min for a fifth of the fast lane",
            N,
            _ttft_incident(),
            {
                115: [],
                130: [],
                140: [("EngineTTFTSpike", A)],
                170: [("EngineTTFTSpike", A), ("EngineTTFTBudgetFastBurn", A)],
            },
        ),
        Scenario(
            "H5 slow burn: 1.5% of the normal lane late",
            200,
            _ttft_slow(),
            {30: [], 150: [("EngineTTFTBudgetSlowBurn", B)]},
        ),
        Scenario(
            "H6/H7 thinking-only on the lane without the escape fix",
            N,
            {
                'spyglass_infer_thinking_only_total{lane="normal", special_tokens="yes"}': counter((T0, 0), (rest, 10)),
                'spyglass_serve_measures_escapes{instance="strata-b"}': gauge((N, 0)),
                'spyglass_serve_stops_while_reasoning_total{instance="strata-b"}': f"_x{N - 1}",
            },
            {
                25: [],
                100: [("ServeBuildSkew", {"instance": "strata-b"})],
                170: [("ServeBuildSkew", {"instance": "strata-b"}), ("ThinkingOnlyResponses", {"lane": "normal"})],
            },
        ),
        # The seed's own day (incident 3): 16 of 58 prompts with literals thinking-only, 0 of 295 without. The
        # lane's share, 16 of 353 = 4.5%, stays under ThinkingOnlyResponses' 5%; the comparison pages.
        Scenario(
            "H6 the seed's split: 16 of 58 with literals, 0 of 295 without",
            N,
            {
                'spyglass_infer_requests_total{lane="normal", status="200", finish="stop"}': counter(
                    (T0, 60), (rest, 353 / 60)
                ),
                'spyglass_infer_bodies_total{lane="normal"}': counter((T0, 60), (rest, 353 / 60)),
                'spyglass_infer_special_token_requests_total{lane="normal"}': counter((T0, 0), (rest, 58 / 60)),
                'spyglass_infer_thinking_only_total{lane="normal", special_tokens="yes"}': counter(
                    (T0, 0), (rest, 16 / 60)
                ),
            },
            {125: [], 170: [("ThinkingOnlyWithSpecialTokens", {"lane": "normal"})]},
        ),
        Scenario(
            "H6 stops while reasoning",
            N,
            {
                'spyglass_serve_stops_while_reasoning_total{instance="strata-a"}': counter((T0, 0), (rest, 10)),
            },
            {130: [], 170: [("StopsWhileReasoning", {"instance": "strata-a"})]},
        ),
        Scenario(
            "H8 plan then stop",
            N,
            {
                'spyglass_infer_plan_then_stop_total{lane="fast"}': counter((T0, 0), (rest, 1)),
            },
            {123: [], 135: [("PlanThenStop", {"lane": "fast"})]},
        ),
        Scenario(
            "H9 task anchor lost",
            N,
            {
                'spyglass_infer_anchor_lost_total{lane="normal"}': gauge((T0, 0), (rest, 1)),
            },
            {115: [], 130: [("AssemblyLostTaskAnchor", {"lane": "normal"})]},
        ),
        Scenario(
            "H10 estimate 3.34x the engine's count",
            N + 30,
            {
                'spyglass_gateway_prompt_tokens_total{lane="fast", counted_by="gateway_estimate"}': counter(
                    (T0, 6600), (rest + 30, 6000 * 3.34)
                ),
            },
            {150: [], 205: [("GatewayEstimateSkew", {"lane": "fast"})]},
        ),
        Scenario(
            "H11 blind retries after overfits",
            N,
            {
                'spyglass_gateway_blind_retries_total{lane="fast"}': gauge((T0, 0), (rest, 1)),
            },
            {115: [], 125: [("GatewayBlindRetries", {"lane": "fast"})], 150: []},
        ),
        # As the gateway logs them: a reject line names no lane and has no request line before it.
        Scenario(
            "H12 429 concurrency full",
            N,
            {
                'spyglass_gateway_concurrency_rejections_total{lane="unknown"}': counter((T0, 0), (rest, 12)),
                'spyglass_gateway_requests_total{lane="unknown", status="429"}': counter((T0, 0), (rest, 12)),
            },
            {122: [], 140: [("GatewayConcurrencyFull", {})]},
            {"GatewayConcurrencyFull": (140, {}, "9.091%")},
        ),
        # llama-server defers instead of answering 429: two minutes of queue that drains is no alert, five
        # minutes in which every poll found requests waiting is.
        Scenario(
            "H12 llama-server: a queue that never drains",
            N,
            {
                f"spyglass_llama_requests_deferred{{{a_il}}}": gauge((T0, 0), (2, 3), (1, 0), (rest - 3, 2)),
            },
            {T0 + 1: [], T0 + 6: [], T0 + 9: [("EngineRequestsDeferred", A)]},
        ),
        Scenario(
            "H13 crash loop, then FATAL",
            N,
            {
                'spyglass_supervisord_spawns_total{program="strata-b"}': gauge(
                    (T0, 1), *[(3, 2 + k) for k in range(10)], (rest - 30, 11)
                ),
                'spyglass_supervisord_process_state{program="strata-b", state="FATAL"}': gauge(
                    (T0 + 30, 0), (rest - 30, 1)
                ),
                'spyglass_supervisord_process_state{program="strata-b", state="RUNNING"}': gauge(
                    (T0 + 30, 1), (rest - 30, 0)
                ),
                'spyglass_host_process_up{instance="strata-b"}': gauge((T0 + 30, 1), (rest - 30, 0)),
                # its log shows each start too: under supervisord that is ProgramCrashLoop's page, not a second one
                f"spyglass_engine_starts_total{{{b_il}}}": gauge(
                    (T0, 1), *[(3, 2 + k) for k in range(10)], (rest - 30, 11)
                ),
                'spyglass_source_last_event_timestamp_seconds{source="engine-b"}': clock(T0 + 30)
                + f" {(T0 + 29) * 60}x{rest - 31}",
            },
            {
                115: [],
                124: [],
                130: [("ProgramCrashLoop", {"instance": "strata-b", "program": "strata-b"})],
                155: [
                    ("ProgramCrashLoop", {"instance": "strata-b", "program": "strata-b"}),
                    ("ProgramFatal", {"instance": "strata-b", "program": "strata-b", "state": "FATAL"}),
                ],
                175: [("ProgramFatal", {"instance": "strata-b", "program": "strata-b", "state": "FATAL"})],
            },
        ),
        # llama-server under systemd (or in a container): no supervisord counts its spawns, its log shows each start.
        Scenario(
            "H13 llama-server restarting outside supervisord",
            N,
            {
                'spyglass_engine_starts_total{instance="llama-a", lane="normal"}': gauge(
                    (T0, 1), *[(3, 2 + k) for k in range(10)], (rest - 30, 11)
                ),
            },
            {
                115: [],
                T0 + 5: [],
                T0 + 6: [("EngineRestartLoop", {"instance": "llama-a"})],
                T0 + 30: [("EngineRestartLoop", {"instance": "llama-a"})],
                N - 2: [],
            },
            {"EngineRestartLoop": (T0 + 6, {"instance": "llama-a"}, "3")},
        ),
        Scenario(
            "H14 loading past the probe budget, then a slow load",
            N,
            {
                f"spyglass_engine_start_time_seconds{{{a_il}}}": gauge((T0, 0), (rest, T0 * 60)),
                f"spyglass_engine_ready{{{a_il}}}": gauge((T0, 1), (20, 0), (rest - 20, 1)),
                f"spyglass_engine_load_duration_seconds{{{a_il}}}": gauge((T0 + 20, 60), (rest - 20, 1200)),
                'spyglass_supervisord_spawns_total{program="strata-a"}': gauge((T0, 1), (rest, 2)),
            },
            {130: [], 137: [("EngineNotReady", A)], 145: [("EngineLoadOverProbeBudget", A)]},
        ),
        Scenario(
            "H14 restarted while loading: the probe kills each load after 10 min",
            N,
            {
                f"spyglass_engine_start_time_seconds{{{b_il}}}": gauge(
                    (T0, 0), *[(10, (T0 + 10 * k) * 60) for k in range(6)]
                ),
                f"spyglass_engine_ready{{{b_il}}}": gauge((T0, 1), (rest, 0)),
                'spyglass_supervisord_spawns_total{program="strata-b"}': gauge(
                    (T0, 1), *[(10, 2 + k) for k in range(6)]
                ),
                'spyglass_supervisord_exits_total{program="strata-b", expected="false", cause="SIGKILL"}': gauge(
                    (T0, 0), *[(10, 1 + k) for k in range(6)]
                ),
            },
            {
                115: [],
                130: [],
                T0 + 50: [("EngineRestartedWhileLoading", {"instance": "strata-b", "program": "strata-b"})],
            },
        ),
        # The upgrade's crash loop: SIGABRT 50 s after each start, never ready. H13's, not a probe killing a load.
        Scenario(
            "H13 not H14: SIGABRT 50 s after each start",
            N,
            {
                f"spyglass_engine_start_time_seconds{{{b_il}}}": gauge(
                    (T0, 0), *[(1, (T0 + k) * 60) for k in range(rest)]
                ),
                f"spyglass_engine_ready{{{b_il}}}": gauge((T0, 1), (rest, 0)),
                'spyglass_supervisord_spawns_total{program="strata-b"}': gauge(
                    (T0, 1), *[(1, 2 + k) for k in range(rest)]
                ),
                'spyglass_supervisord_exits_total{program="strata-b", expected="false", cause="SIGABRT"}': gauge(
                    (T0, 0), *[(1, 1 + k) for k in range(rest)]
                ),
            },
            {115: [], T0 + 20: [("ProgramCrashLoop", {"instance": "strata-b", "program": "strata-b"})]},
        ),
        # A slow load is reported for an hour after it became ready, not for days (905 s against 900 s kept
        # EngineLoadOverProbeBudget firing on a quiet day).
        Scenario(
            "H14 one slow load, then a quiet day",
            T0 + 240,
            {
                f"spyglass_engine_start_time_seconds{{{a_il}}}": gauge((T0, 0), (240, T0 * 60)),
                f"spyglass_engine_load_duration_seconds{{{a_il}}}": gauge((T0 + 20, 60), (220, 1200)),
                'spyglass_supervisord_spawns_total{program="strata-a"}': gauge((T0, 1), (240, 2)),
            },
            {115: [], T0 + 30: [("EngineLoadOverProbeBudget", A)], T0 + 90: []},
        ),
        Scenario(
            "H15 dangling model link after a cleanup",
            N,
            {
                'spyglass_model_path_resolves{instance="strata-a"}': gauge((T0, 1), (rest, 0)),
                'spyglass_model_path_changed_timestamp_seconds{instance="strata-a"}': gauge(
                    (T0, 3600), (rest, T0 * 60)
                ),
            },
            {115: [], 125: [("EngineModelPathDangling", {"instance": "strata-a"})]},
        ),
        Scenario(
            "H15 model path switched under the running engine",
            N,
            {
                'spyglass_model_path_resolves{instance="strata-b"}': gauge((N, 1)),
                'spyglass_model_path_mismatch{instance="strata-b"}': gauge((T0, 0), (rest, 1)),
                'spyglass_model_path_changed_timestamp_seconds{instance="strata-b"}': gauge(
                    (T0, 3600), (rest, T0 * 60)
                ),
            },
            {115: [], 125: [], 135: [("EngineModelPathMismatch", {"instance": "strata-b"})]},
            {"EngineModelPathMismatch": (135, {"instance": "strata-b"}, "15m 0s")},
        ),
        Scenario(
            "H15 model checksum mismatch",
            N,
            {
                f"spyglass_engine_model_checksum_mismatches_total{{{a_il}}}": gauge((T0, 0), (rest, 1)),
            },
            {115: [], 125: [("EngineModelChecksumMismatch", A)]},
        ),
        Scenario(
            "H16 recompile storm",
            N,
            {
                f'spyglass_engine_graph_rebuilds_total{{{b_il}, reason="new_shape"}}': counter((T0, 0), (rest, 5)),
            },
            {125: [], 145: [("EngineRecompileStorm", B)]},
        ),
        Scenario(
            "H17 memory growth",
            N + 60,
            {
                'spyglass_host_process_resident_bytes{instance="strata-a"}': counter(
                    (T0, 0), (rest + 60, 3 * GiB), start=100 * GiB
                ),
            },
            {125: [], 230: [("EngineMemoryGrowth", {"instance": "strata-a"})]},
        ),
        *_regressions(),
        Scenario(
            "H19 spyglass target down",
            N,
            {
                'up{job="spyglass", instance="127.0.0.1:9464"}': gauge((T0, 1), (rest, 0)),
            },
            {121: [], 125: [("SpyglassTargetDown", {"job": "spyglass", "instance": "127.0.0.1:9464"})]},
        ),
        Scenario(
            "H19 status endpoint down",
            N,
            {
                'spyglass_source_up{source="serve-b"}': gauge((T0, 1), (rest, 0)),
            },
            {122: [], 130: [("SpyglassSourceDown", {"source": "serve-b"})]},
        ),
        Scenario(
            "H19 idle engine log silent",
            N,
            {
                'spyglass_source_last_event_timestamp_seconds{source="engine-a"}': clock(T0)
                + f" {(T0 - 1) * 60}x{rest - 1}",
                'spyglass_engine_slots_busy{instance="strata-a", lane="fast"}': gauge((T0, 2), (rest, 0)),
                'spyglass_serve_slots_busy{instance="strata-a"}': gauge((T0, 2), (rest, 0)),
            },
            {123: [], 130: [("SpyglassSourceSilent", {"instance": "strata-a", "source": "engine-a"})]},
        ),
        Scenario(
            "H19 a status endpoint no longer polled",
            N,
            {
                'spyglass_source_last_event_timestamp_seconds{source="serve-b"}': clock(T0)
                + f" {(T0 - 1) * 60}x{rest - 1}",
            },
            {123: [], 130: [("SpyglassSourceSilent", {"instance": "strata-b", "source": "serve-b"})]},
        ),
        Scenario(
            "H19 format drift",
            N,
            {
                'spyglass_source_lines_total{source="engine-b", outcome="unmatched"}': counter((T0, 0), (rest, 20)),
            },
            {125: [], 140: [("SpyglassUnparsedLines", {"source": "engine-b"})]},
        ),
        # A llama-server upgraded to a format no preset reads (or a log behind an unknown wrapper): it writes
        # as many lines as before, none recognized. Lines without a level letter count as much as others.
        Scenario(
            "H19 a log in a format spyglass cannot read",
            N,
            {
                'spyglass_source_lines_total{source="engine-b", outcome="event"}': counter((T0, 100), (rest, 0)),
                'spyglass_source_lines_total{source="engine-b", outcome="unprefixed"}': counter((T0, 0), (rest, 100)),
            },
            {125: [], 140: [("SpyglassSourceUnreadable", {"source": "engine-b"})]},
        ),
        # Round 4's keep-quiet tactics: one readable line per unusable one (exactly half), the unusable ones
        # refused as invalid (forged stamps or clocks) as much as unreadable: at the threshold, it fires.
        Scenario(
            "H19 half the lines unusable, invalid or unreadable",
            N,
            {
                'spyglass_source_lines_total{source="engine-b", outcome="event"}': counter((T0, 100), (rest, 100)),
                'spyglass_source_lines_total{source="engine-b", outcome="invalid"}': counter((T0, 0), (rest, 60)),
                'spyglass_source_lines_total{source="engine-b", outcome="unprefixed"}': counter((T0, 0), (rest, 40)),
            },
            {125: [], 150: [("SpyglassSourceUnreadable", {"source": "engine-b"})]},
        ),
        Scenario(
            "H19 a source's clock 8 h ahead",
            N,
            {
                'spyglass_source_last_event_timestamp_seconds{source="switch"}': clock(N, 8 * 3600),
            },
            {3: [], 30: [("SpyglassSourceClockAhead", {"source": "switch"})]},
        ),
        # The engine log goes on: the hung engine's HTTP thread logs each new request queued. Its progress
        # (done and [stats] lines) stops.
        Scenario(
            "H20 engine hung with work queued",
            N,
            {
                f"spyglass_engine_last_progress_timestamp_seconds{{{b_il}}}": clock(T0)
                + f" {(T0 - 1) * 60}x{rest - 1}",
                f'spyglass_engine_requests_finished_total{{{b_il}, finish="stop"}}': counter((T0, 60), (rest, 0)),
                'spyglass_serve_slots_busy{instance="strata-b"}': gauge((T0, 2), (rest, 3)),
                'spyglass_serve_prefill_queue_depth{instance="strata-b"}': gauge((T0, 0), (rest, 2)),
            },
            {123: [], 130: [("EngineHung", {"instance": "strata-b"})]},
            {"EngineHung": (130, {"instance": "strata-b"}, "11m 0s")},
        ),
        # llama-server (issue 37): 60 requests a minute, 1 a minute cancelled by its client as always; from
        # T0 60 a minute more answered 500 `Context size has been exceeded.`: half of them now fail.
        Scenario(
            "H21 requests failing: errors rise from 2% to half",
            N,
            {
                f'spyglass_engine_request_outcomes_total{{{a_il}, outcome="done", reason="none"}}': counter((N, 60)),
                f'spyglass_engine_request_outcomes_total{{{a_il}, outcome="cancelled", reason="none"}}': counter(
                    (N, 1)
                ),
                f'spyglass_engine_request_outcomes_total{{{a_il}, outcome="error", reason="context_exceeded"}}': counter(
                    (T0, 0), (rest, 60)
                ),
            },
            {T0 - 5: [], T0 + 2: [], T0 + 12: [("EngineRequestsFailing", {"instance": "strata-a"})]},
        ),
        # A chat UI whose users press stop: a third of its requests are cancelled, every hour alike. Not rising.
        Scenario(
            "H21 a steady share of cancels is no alert",
            N,
            {
                f'spyglass_engine_request_outcomes_total{{{a_il}, outcome="done", reason="none"}}': counter((N, 40)),
                f'spyglass_engine_request_outcomes_total{{{a_il}, outcome="cancelled", reason="none"}}': counter(
                    (N, 20)
                ),
            },
            {T0: [], N - 5: []},
        ),
        # llama-server's KV cache full (issue 37): from T0 it halves a batch 3 times a minute; at T0 + 30 a
        # decode is refused at batch size 1 (its requests answered 500), once.
        Scenario(
            "H22 KV cache full: batches split, then a decode refused",
            N,
            {
                f'spyglass_engine_kv_pressure_events_total{{{a_il}, event="batch_retry"}}': counter(
                    (T0, 0), (30, 3), (rest - 30, 0)
                ),
                f'spyglass_engine_kv_pressure_events_total{{{b_il}, event="context_full"}}': gauge(
                    (T0 + 30, 0), (rest - 30, 1)
                ),
            },
            {
                T0 + 3: [],
                T0 + 12: [("EngineKVCacheFull", {"instance": "strata-a"})],
                T0 + 32: [
                    ("EngineKVCacheFull", {"instance": "strata-a"}),
                    ("EngineKVCacheFull", {"instance": "strata-b"}),
                ],
                T0 + 55: [],
            },
        ),
        Scenario(
            "planned restart announced in the switch log",
            N,
            {
                'spyglass_switch_last_change_timestamp_seconds{instance="strata-a"}': f"_x{T0 - 1} {T0 * 60}x{rest - 1}",
                f"spyglass_engine_start_time_seconds{{{a_il}}}": gauge((T0, 0), (rest, T0 * 60)),
                f"spyglass_engine_ready{{{a_il}}}": gauge((T0, 1), (5, 0), (rest - 5, 1)),
                'spyglass_supervisord_spawns_total{program="strata-a"}': gauge((T0, 1), (rest, 2)),
            },
            {115: [], 125: [("EnginePlannedRestart", {"instance": "strata-a"})], 140: []},
        ),
    ]


def _ttft_incident() -> dict[str, str]:
    """From minute 120 a fifth of the fast lane's first tokens take 40-160 s (the seed's ~2 minutes)."""
    rest, il = N - T0, 'instance="strata-a", lane="fast"'
    out = {}
    for le, late in (("1.0", 0.8), ("10.0", 0.8), ("40.0", 0.8), ("160.0", 1.0), ("+Inf", 1.0)):
        out[f'spyglass_engine_ttft_seconds_bucket{{{il}, le="{le}"}}'] = counter((T0, 60), (rest, 60 * late))
    return out


def _ttft_slow() -> dict[str, str]:
    """1.5% of the normal lane's first tokens over its 40 s objective (1.5x the budget), all along."""
    il = 'instance="strata-b", lane="normal"'
    return {
        f'spyglass_engine_ttft_seconds_bucket{{{il}, le="{le}"}}': counter((200, 60 * share))
        for le, share in (("1.0", 0.985), ("10.0", 0.985), ("40.0", 0.985), ("160.0", 1.0), ("+Inf", 1.0))
    }


def _ttft_a(*pieces: tuple[int, float, float]) -> dict[str, str]:
    """strata-a's TTFT histogram in pieces of (minutes, requests a minute, share under 1 s); the rest take 1-10 s."""
    il = 'instance="strata-a", lane="fast"'
    fast = [(minutes, per_min * share) for minutes, per_min, share in pieces]
    every = [(minutes, per_min) for minutes, per_min, _ in pieces]
    out = {f'spyglass_engine_ttft_seconds_bucket{{{il}, le="1.0"}}': counter(*fast)}
    out.update(
        {
            f'spyglass_engine_ttft_seconds_bucket{{{il}, le="{le}"}}': counter(*every)
            for le in ("10.0", "40.0", "160.0", "+Inf")
        }
    )
    out[f"spyglass_engine_ttft_seconds_count{{{il}}}"] = counter(*every)
    return out


def _restart_a(at: int, n: int) -> dict[str, str]:
    il = 'instance="strata-a", lane="fast"'
    return {
        f"spyglass_engine_start_time_seconds{{{il}}}": gauge((at, 0), (n - at, at * 60)),
        'spyglass_supervisord_spawns_total{program="strata-a"}': gauge((at, 1), (n - at, 2)),
    }


def _regressions() -> list[Scenario]:
    """H18: the median over 5m after a restart against the steady state before it, else the day before."""
    n, day = T0 + 60, 24 * 60
    slower = Scenario(
        "H18 slower after a restart than the hour before it, no day of history",
        n,
        _ttft_a((T0, 60, 1.0), (n - T0, 60, 0.0)) | _restart_a(T0, n),
        {T0 + 10: [], T0 + 25: [("EngineRegressionAfterRestart", A)]},
    )
    idle = day - 14 * 60  # busy until then, idle for the 12 h before the restart the ladder looks back
    fallback = Scenario(
        "H18 slower after a restart than the same hour a day before (idle before it)",
        day + 60,
        _ttft_a((idle, 60, 1.0), (day - idle, 0, 1.0), (60, 60, 0.0)) | _restart_a(day, day + 60),
        {day + 10: [], day + 25: [("EngineRegressionAfterRestart", A)]},
    )
    still = Scenario(
        "H18 as slow after a restart as before it, though faster a day before: quiet",
        day + 60,
        _ttft_a((day - 120, 60, 1.0), (180, 60, 0.0)) | _restart_a(day, day + 60),
        {day + 25: [], day + 55: []},
    )
    return [slower, fallback, still]
