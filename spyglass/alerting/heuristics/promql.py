"""PromQL the heuristics share: number formatting, 0/0-safe ratios, per-lane joins, and the recording
rules (level:metric:operations) that alerts and dashboards both read."""

from __future__ import annotations

from collections.abc import Callable

from spyglass.alerting.heuristics.model import BURN_WINDOWS, IL, Deployment, Recording
from spyglass.config import LaneObjective
from spyglass.signals.buckets import le_label


def num(x: float) -> str:
    """A number as PromQL and text show it: 0.144, 3, 1e+10."""
    return f"{x:.6g}"


UNIT_WORDS = {"s": "second", "m": "minute", "h": "hour", "d": "day"}
UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def seconds(duration: str) -> int:
    """A simple Prometheus duration in seconds: "10m" -> 600."""
    return int(duration[:-1]) * UNIT_SECONDS[duration[-1]]


def sql_interval(*durations: str) -> str:
    """The sum of Prometheus durations as a DuckDB interval, for the probes' window frames:
    ("1h", "10m") -> "INTERVAL 70 MINUTE", as `[1h] offset 10m` reaches back 70 minutes."""
    total = sum(map(seconds, durations))
    unit = next(u for u, size in UNIT_SECONDS.items() if total % size == 0)
    return f"INTERVAL {total // UNIT_SECONDS[unit]} {UNIT_WORDS[unit].upper()}"


def minutes(duration: str) -> str:
    """A duration in minutes, as a probe divides a count by it to get a rate a minute: "10m" -> "10"."""
    return num(seconds(duration) / 60)


def spoken(duration: str) -> str:
    """A simple Prometheus duration as prose: "10m" -> "10 minutes", "1h" -> "an hour", "1d" -> "a day"."""
    count, unit = int(duration[:-1]), UNIT_WORDS[duration[-1]]
    if count == 1:
        return f"{'an' if unit == 'hour' else 'a'} {unit}"
    return f"{count} {unit}s"


def last(duration: str) -> str:
    """ "the last ..." of a duration: "1h" -> "the last hour", "15m" -> "the last 15 minutes"."""
    return f"the last {UNIT_WORDS[duration[-1]]}" if int(duration[:-1]) == 1 else f"the last {spoken(duration)}"


def ratio(numerator: str, denominator: str, by: str) -> str:
    """A ratio of two sums that is absent, not NaN, when the denominator is 0 (0/0-safe)."""
    return f"sum by ({by}) ({numerator}) / (sum by ({by}) ({denominator}) > 0)"


def per_lane(d: Deployment, build: Callable[[str, LaneObjective], str]) -> str:
    """One expression per lane (each with its own numbers), joined with `or`."""
    return "\n  or\n".join(f"({build(lane, objective)})" for lane, objective in d.lanes.items())


# ---------------------------------------------------------------------------------------------
# Recording rules: level:metric:operations.
# ---------------------------------------------------------------------------------------------

# The windows of the recording rules, written once: their names, expressions and the prose that quotes them.
RECENT = "10m"  # the decode and eviction rates now
HOURLY = "1h"  # their baselines, and the hourly shares
DECODE_BASELINE_OFFSETS = ("1h", "1d")  # the decode rate's baseline: an hour or a day before
TTFT_QUANTILES = ((0.5, "5m"), (0.95, "5m"), (0.99, "5m"), (0.95, "30m"), (0.5, "1h"))
PEAK = "1m"  # a probe's peak figure: the most in one real minute (a figure, not an alert's window)

TTFT = "spyglass_engine_ttft_seconds"
DECODE = "spyglass_engine_request_decode_tokens_per_second"
SLO_ERRORS = "instance_lane:spyglass_engine_ttft_slo_errors:ratio_rate"
DECODE_MEAN = f"instance_lane:{DECODE}:mean_rate{RECENT}"
DECODE_BASELINE = f"instance_lane:{DECODE}:baseline_mean_rate{HOURLY}"
EVICTIONS = f"instance_lane:spyglass_engine_evictions:rate{RECENT}"
EVICTIONS_BASELINE = f"instance_lane:spyglass_engine_evictions:baseline_rate{HOURLY}"
SNAPSHOT_SHARE = "instance_lane:spyglass_engine_cache_parked_snapshot_per_budget:ratio"
CHECKPOINT_ONLY = f"instance_lane:spyglass_engine_long_prompts_checkpoint_only:ratio_rate{HOURLY}"
LONG_PROMPTS = f"instance_lane:spyglass_engine_long_prompts:increase{HOURLY}"
THINKING_ONLY = f"lane:spyglass_infer_thinking_only:ratio_rate{HOURLY}"
STOPS_REASONING = f"instance:spyglass_serve_stops_while_reasoning:ratio_rate{HOURLY}"
ESTIMATE_RATIO = f"lane:spyglass_gateway_prompt_tokens:estimate_ratio_rate{HOURLY}"
LOG_SILENCE = "instance:spyglass_engine_log_silence:seconds"
PROGRESS_SILENCE = "instance:spyglass_engine_progress_silence:seconds"


def ttft_quantile(q: float, window: str, offset: str = "") -> str:
    off = f" offset {offset}" if offset else ""
    return f"histogram_quantile({q}, sum by ({IL}, le) (rate({TTFT}_bucket[{window}]{off})))"


def mean_rate(metric: str, window: str, offset: str = "") -> str:
    off = f" offset {offset}" if offset else ""
    return ratio(f"rate({metric}_sum[{window}]{off})", f"rate({metric}_count[{window}]{off})", IL)


def _slo_errors(d: Deployment, window: str) -> str:
    def build(lane: str, o: LaneObjective) -> str:
        total = f'rate({TTFT}_count{{lane="{lane}"}}[{window}])'
        fast = f'rate({TTFT}_bucket{{lane="{lane}", le="{le_label(o.ttft_seconds)}"}}[{window}])'
        return f"(sum by ({IL}) ({total}) - sum by ({IL}) ({fast}))\n  / (sum by ({IL}) ({total}) > 0)"

    return per_lane(d, build)


def _silence(d: Deployment) -> str:
    parts = [
        f'label_replace(time() - spyglass_source_last_event_timestamp_seconds{{source="{source}"}},'
        f' "instance", "{instance}", "", "")'
        for source, instance in d.engine_sources.items()
    ]
    return "max by (host, instance) (\n  " + "\n  or\n  ".join(parts) + "\n)" if parts else "vector(0) > 1"


def recording_rules(d: Deployment) -> tuple[Recording, ...]:
    """Every recording rule, from raw metrics only."""
    baselines = [
        f'label_replace({mean_rate(DECODE, HOURLY, off)}, "baseline", "{off}", "", "")'
        for off in DECODE_BASELINE_OFFSETS
    ]
    decode_baseline = "max by (host, instance, lane) (\n  " + "\n  or\n  ".join(baselines) + "\n)"
    rules = [
        Recording(record=f"instance_lane:{TTFT}:p{int(q * 100)}_rate{w}", expr=ttft_quantile(q, w))
        for q, w in TTFT_QUANTILES
    ]
    rules += [Recording(record=f"{SLO_ERRORS}{w}", expr=_slo_errors(d, w)) for w in BURN_WINDOWS]
    rules += [
        Recording(record=DECODE_MEAN, expr=mean_rate(DECODE, RECENT)),
        Recording(record=DECODE_BASELINE, expr=decode_baseline),
        Recording(record=EVICTIONS, expr=f"sum by ({IL}) (rate(spyglass_engine_evictions_total[{RECENT}]))"),
        Recording(
            record=EVICTIONS_BASELINE,
            expr=f"sum by ({IL}) (rate(spyglass_engine_evictions_total[{HOURLY}] offset {RECENT}))",
        ),
        Recording(
            record=SNAPSHOT_SHARE,
            expr="spyglass_engine_cache_used_bytes / clamp_min(spyglass_engine_cache_parked_snapshots, 1)"
            "\n  / (spyglass_engine_cache_budget_bytes > 0)",
        ),
        Recording(
            record=CHECKPOINT_ONLY,
            expr=ratio(
                f"rate(spyglass_engine_long_prompts_checkpoint_only_total[{HOURLY}])",
                f"rate(spyglass_engine_long_prompts_total[{HOURLY}])",
                IL,
            ),
        ),
        Recording(record=LONG_PROMPTS, expr=f"sum by ({IL}) (increase(spyglass_engine_long_prompts_total[{HOURLY}]))"),
        Recording(
            record=THINKING_ONLY,
            expr=ratio(
                f"rate(spyglass_infer_thinking_only_total[{HOURLY}])",
                f"rate(spyglass_infer_requests_total[{HOURLY}])",
                "host, lane",
            ),
        ),
        Recording(
            record=STOPS_REASONING,
            expr=ratio(
                f"rate(spyglass_serve_stops_while_reasoning_total[{HOURLY}])",
                f"rate(spyglass_serve_requests_total[{HOURLY}])",
                "host, instance",
            ),
        ),
        Recording(
            record=ESTIMATE_RATIO,
            expr=ratio(
                f'rate(spyglass_gateway_prompt_tokens_total{{counted_by="gateway_estimate"}}[{HOURLY}])',
                f'rate(spyglass_gateway_prompt_tokens_total{{counted_by="engine"}}[{HOURLY}])',
                "host, lane",
            ),
        ),
        Recording(record=LOG_SILENCE, expr=_silence(d)),
        Recording(
            record=PROGRESS_SILENCE,
            expr="time() - max by (host, instance) (spyglass_engine_last_progress_timestamp_seconds)",
        ),
    ]
    return tuple(rules)


def busy() -> str:
    """Per instance: work waiting or in progress, by the engine's last stats line or the serve's status."""
    return " or ".join(
        f"(max by (host, instance) ({m}) > 0)"
        for m in (
            "spyglass_serve_prefill_queue_depth",
            "spyglass_serve_slots_busy",
            "spyglass_engine_prefill_queue_depth",
            "spyglass_engine_slots_busy",
        )
    )


def since_path_change(condition: str) -> str:
    """Seconds since the model path last changed, where `condition` holds (0 when no change time is known)."""
    return (
        f"(time() - spyglass_model_path_changed_timestamp_seconds and on (host, instance) ({condition}))\n"
        f"  or (0 * ({condition}))"
    )
