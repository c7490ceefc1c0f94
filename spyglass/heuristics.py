"""The heuristics catalogue H1-H20: one table that the rule files, the runbooks and the forensic
diagnosis all read, so no two of them can disagree on a number.

Each heuristic names its incident, the symptom, the usual wrong first guess, the one cheap check
that separates the hypotheses (with its exact PromQL, SQL over the store's `events` table, or shell
command), the knobs, its thresholds, and the alerts a metric can express. What needs request
bodies or history beyond metrics is said in `diagnosis` and left to the forensic diagnosis.
Thresholds that depend on the deployment come from the `[alerts]` config section (`Deployment`);
the others are constants in the builder of their heuristic, where the expression uses them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from spyglass.config import AlertsConfig, Config, LaneObjective

Severity = Literal["critical", "warning", "info"]

VALUE = "{{ $value | humanize }}"
PERCENT = "{{ $value | humanizePercentage }}"
SECONDS = "{{ $value | humanizeDuration }}"
BYTES = "{{ $value | humanize1024 }}B"
INSTANCE = "{{ $labels.instance }}"
LANE = "{{ $labels.lane }}"
IL = "host, instance, lane"
BURN_WINDOWS = ("5m", "30m", "1h", "6h", "3d")
DEFAULT_LANE = LaneObjective(ttft_seconds=40.0, objective=0.99)


@dataclass(frozen=True)
class Check:
    """The one discriminating check: what to compare, and the exact query or command for it."""

    text: str
    promql: str = ""
    sql: str = ""
    shell: str = ""


@dataclass(frozen=True)
class Threshold:
    """A number a rule or the diagnosis uses; `setting` names the [alerts] key it comes from."""

    name: str
    value: float
    unit: str
    meaning: str
    setting: str = ""


@dataclass(frozen=True)
class Alert:
    """One Prometheus alerting rule; `description` holds the measured value as a template."""

    name: str
    severity: Severity
    expr: str
    for_: str
    summary: str
    description: str
    keep_firing_for: str = ""
    inhibits_latency: bool = False  # a source of the per-instance inhibition of latency/throughput alerts
    latency: bool = False  # a latency or throughput alert that such a source silences


@dataclass(frozen=True)
class Recording:
    """A recording rule shared by alerts and dashboards; its expression reads raw metrics only, so a
    backtest over backfilled series can inline it."""

    record: str
    expr: str


@dataclass(frozen=True)
class Probe:
    """The forensic diagnosis's check of a heuristic over a stored window (`spyglass diagnose`).

    `sql` is one SELECT over the forensic views (docs/forensics.md) returning one row per finding:
    `instance` and `lane` (either may be NULL), `start_utc` and `end_utc`, and one column per name
    in `figures` (a number, or a JSON object of named numbers). Its conditions are this heuristic's
    thresholds, written in with the same `_n` as the alert expressions, so a finding and an alert
    cannot disagree on a number. `alert` names the alert whose severity the finding carries;
    `summary` is a str.format template over the row's columns."""

    alert: str
    sql: str
    summary: str
    figures: tuple[str, ...]


@dataclass(frozen=True)
class Heuristic:
    id: str
    title: str
    incident: str
    symptom: str
    wrong_guess: str
    check: Check
    knobs: tuple[str, ...]
    thresholds: tuple[Threshold, ...] = ()
    alerts: tuple[Alert, ...] = ()
    diagnosis: str = ""  # what this heuristic needs beyond metrics (bodies, history): the diagnosis does it
    probe: Probe | None = None  # the diagnosis's SQL check over the store; None: metrics only

    def threshold(self, name: str) -> float:
        return next(t.value for t in self.thresholds if t.name == name)


@dataclass(frozen=True)
class Deployment:
    """The deployment facts the rules depend on: [alerts] settings, lanes, and which engine-log
    source belongs to which instance (for silence and hung-engine rules)."""

    settings: AlertsConfig = field(default_factory=AlertsConfig)
    lanes: dict[str, LaneObjective] = field(default_factory=lambda: {"fast": DEFAULT_LANE, "normal": DEFAULT_LANE})
    engine_sources: dict[str, str] = field(default_factory=lambda: {"engine-a": "strata-a", "engine-b": "strata-b"})

    @classmethod
    def of(cls, config: Config) -> Deployment:
        lanes = {lane: config.alerts.lanes.get(lane, DEFAULT_LANE) for lane in config.lanes().values()}
        lanes.update(config.alerts.lanes)
        lanes = lanes or {"": DEFAULT_LANE}  # no lanes: one objective for every series, whose lane label is ""
        engines = {name: o.instance for name, o in config.sources.items()
                   if getattr(o, "kind", "") == "engine_log" and o.instance}
        return cls(config.alerts, dict(sorted(lanes.items())), engines)


def _n(x: float) -> str:
    """A number as PromQL and text show it: 0.144, 3, 1e+10."""
    return f"{x:.6g}"


def _le(seconds: float) -> str:
    """The `le` label value the exposition writes for a bucket bound (prometheus_client style)."""
    return repr(float(seconds))


def ratio(numerator: str, denominator: str, by: str) -> str:
    """A ratio of two sums that is absent, not NaN, when the denominator is 0 (0/0-safe)."""
    return f"sum by ({by}) ({numerator}) / (sum by ({by}) ({denominator}) > 0)"


def per_lane(d: Deployment, build) -> str:
    """One expression per lane (each with its own numbers), joined with `or`."""
    return "\n  or\n".join(f"({build(lane, objective)})" for lane, objective in d.lanes.items())


# ---------------------------------------------------------------------------------------------
# Recording rules: level:metric:operations.
# ---------------------------------------------------------------------------------------------

TTFT = "spyglass_engine_ttft_seconds"
DECODE = "spyglass_engine_request_decode_tokens_per_second"
SLO_ERRORS = "instance_lane:spyglass_engine_ttft_slo_errors:ratio_rate"
DECODE_MEAN = f"instance_lane:{DECODE}:mean_rate10m"
DECODE_BASELINE = f"instance_lane:{DECODE}:baseline_mean_rate1h"
EVICTIONS = "instance_lane:spyglass_engine_evictions:rate10m"
EVICTIONS_BASELINE = "instance_lane:spyglass_engine_evictions:baseline_rate1h"
SNAPSHOT_SHARE = "instance_lane:spyglass_engine_cache_parked_snapshot_per_budget:ratio"
CHECKPOINT_ONLY = "instance_lane:spyglass_engine_long_prompts_checkpoint_only:ratio_rate1h"
LONG_PROMPTS = "instance_lane:spyglass_engine_long_prompts:increase1h"
THINKING_ONLY = "lane:spyglass_infer_thinking_only:ratio_rate1h"
STOPS_REASONING = "instance:spyglass_serve_stops_while_reasoning:ratio_rate1h"
ESTIMATE_RATIO = "lane:spyglass_gateway_prompt_tokens:estimate_ratio_rate1h"
LOG_SILENCE = "instance:spyglass_engine_log_silence:seconds"


def _quantile(q: float, window: str, offset: str = "") -> str:
    off = f" offset {offset}" if offset else ""
    return f"histogram_quantile({q}, sum by ({IL}, le) (rate({TTFT}_bucket[{window}]{off})))"


def _mean(metric: str, window: str, offset: str = "") -> str:
    off = f" offset {offset}" if offset else ""
    return ratio(f"rate({metric}_sum[{window}]{off})", f"rate({metric}_count[{window}]{off})", IL)


def _slo_errors(d: Deployment, window: str) -> str:
    def build(lane: str, o: LaneObjective) -> str:
        total = f'rate({TTFT}_count{{lane="{lane}"}}[{window}])'
        fast = f'rate({TTFT}_bucket{{lane="{lane}", le="{_le(o.ttft_seconds)}"}}[{window}])'
        return (f"(sum by ({IL}) ({total}) - sum by ({IL}) ({fast}))\n"
                f"  / (sum by ({IL}) ({total}) > 0)")

    return per_lane(d, build)


def _silence(d: Deployment) -> str:
    parts = [f'label_replace(time() - spyglass_source_last_event_timestamp_seconds{{source="{source}"}},'
             f' "instance", "{instance}", "", "")' for source, instance in d.engine_sources.items()]
    return "max by (host, instance) (\n  " + "\n  or\n  ".join(parts) + "\n)" if parts else "vector(0) > 1"


def recording_rules(d: Deployment) -> tuple[Recording, ...]:
    """Every recording rule, from raw metrics only."""
    decode_baseline = "max by (host, instance, lane) (\n  " + "\n  or\n  ".join(
        f'label_replace({_mean(DECODE, "1h", off)}, "baseline", "{off}", "", "")' for off in ("1h", "1d")) + "\n)"
    rules = [Recording(f"instance_lane:{TTFT}:p{int(q * 100)}_rate{w}", _quantile(q, w))
             for q, w in ((0.5, "5m"), (0.95, "5m"), (0.99, "5m"), (0.95, "30m"), (0.5, "1h"))]
    rules += [Recording(f"{SLO_ERRORS}{w}", _slo_errors(d, w)) for w in BURN_WINDOWS]
    rules += [
        Recording(DECODE_MEAN, _mean(DECODE, "10m")),
        Recording(DECODE_BASELINE, decode_baseline),
        Recording(EVICTIONS, f"sum by ({IL}) (rate(spyglass_engine_evictions_total[10m]))"),
        Recording(EVICTIONS_BASELINE, f"sum by ({IL}) (rate(spyglass_engine_evictions_total[1h] offset 10m))"),
        Recording(SNAPSHOT_SHARE, "spyglass_engine_cache_used_bytes / clamp_min(spyglass_engine_cache_parked_snapshots, 1)"
                                  "\n  / (spyglass_engine_cache_budget_bytes > 0)"),
        Recording(CHECKPOINT_ONLY, ratio("rate(spyglass_engine_long_prompts_checkpoint_only_total[1h])",
                                         "rate(spyglass_engine_long_prompts_total[1h])", IL)),
        Recording(LONG_PROMPTS, f"sum by ({IL}) (increase(spyglass_engine_long_prompts_total[1h]))"),
        Recording(THINKING_ONLY, ratio("rate(spyglass_infer_thinking_only_total[1h])",
                                       "rate(spyglass_infer_requests_total[1h])", "host, lane")),
        Recording(STOPS_REASONING, ratio("rate(spyglass_serve_stops_while_reasoning_total[1h])",
                                         "rate(spyglass_serve_requests_total[1h])", "host, instance")),
        Recording(ESTIMATE_RATIO, ratio('rate(spyglass_gateway_prompt_tokens_total{counted_by="gateway_estimate"}[1h])',
                                        'rate(spyglass_gateway_prompt_tokens_total{counted_by="engine"}[1h])', "host, lane")),
        Recording(LOG_SILENCE, _silence(d)),
    ]
    return tuple(rules)


# ---------------------------------------------------------------------------------------------
# The heuristics.
# ---------------------------------------------------------------------------------------------

def _busy() -> str:
    """Per instance: work waiting or in progress, by the engine's last stats line or the serve's status."""
    return " or ".join(f"(max by (host, instance) ({m}) > 0)" for m in (
        "spyglass_serve_prefill_queue_depth", "spyglass_serve_slots_busy",
        "spyglass_engine_prefill_queue_depth", "spyglass_engine_slots_busy"))


def _h1(d: Deployment) -> Heuristic:
    drop = 0.25
    return Heuristic(
        "H1", "Throughput collapse against the instance's own baseline", "1 (solo 9.3 tok/s, 2026-10-07)",
        "Decode throughput per request fell by an order of magnitude against the same instance an hour or a day"
        " before (76.8 -> 9.3 tok/s in incident 1).",
        "capacity: the experts do not fit on one card",
        Check("CPU affinity overlap between the engine processes and CFS throttling: pinning (not fewer workers)"
              " separates contention from capacity. A 2-3x loss smells of capacity, 10x of contention.",
              promql="max by (host, instance, other) (spyglass_host_shared_cpus) > 0",
              shell="for p in $(pgrep -f strata); do grep Cpus_allowed_list /proc/$p/status; done"),
        ("taskset / CPU pinning per instance (A 0-15, B 38-53)", "--pool-workers"),
        (Threshold("drop_ratio", drop, "ratio", "current mean decode rate below this share of its baseline"),),
        (Alert("EngineThroughputCollapse", "critical",
               f"{DECODE_MEAN} < {_n(drop)} * {DECODE_BASELINE}", "10m",
               f"{INSTANCE} decodes at a quarter of its own baseline or less.",
               f"{INSTANCE} ({LANE}) decodes {VALUE} tok/s per request, under {_n(drop)}x its rate an hour or a day"
               " before.", latency=True),))


def _h2(d: Deployment) -> Heuristic:
    throttled = 0.25
    return Heuristic(
        "H2", "Engine processes share CPUs, or a cgroup is throttled", "1",
        "Two engine processes' allowed CPU sets overlap, or the cgroup of one is throttled by CFS.",
        "-", Check("The overlap itself, per pair of processes.",
                   promql="spyglass_host_shared_cpus > 0 or spyglass_engine_shared_cpus > 0",
                   sql="SELECT instance, fields->>'cpus' AS cpus, max(ts) AS at FROM events WHERE kind = 'cpus'"
                       " GROUP BY ALL ORDER BY at"),
        ("taskset / cpuset per instance", "cpu.cfs_quota_us of the engine's cgroup"),
        (Threshold("throttled_share", throttled, "ratio", "share of CFS periods throttled"),),
        (Alert("EngineCPUsShared", "warning",
               "(max by (host, instance) (spyglass_host_shared_cpus) > 0) or (max by (host, instance) (spyglass_engine_shared_cpus) > 0)",
               "5m", f"{INSTANCE} shares CPUs with another engine.",
               f"{INSTANCE} may run on {VALUE} CPUs that another engine instance may also run on."),
         Alert("EngineCPUThrottled", "warning",
               ratio("rate(spyglass_host_cgroup_throttled_periods_total[10m])",
                     "rate(spyglass_host_cgroup_periods_total[10m])", "host, instance") + f" > {_n(throttled)}",
               "10m", f"{INSTANCE}'s cgroup is throttled.",
               f"{INSTANCE} was throttled in {PERCENT} of its CFS periods over 10 minutes.")))


def _h3(d: Deployment) -> Heuristic:
    s = d.settings
    floor, spike = 1.0, 3.0
    share = s.cache_snapshot_budget_share
    # Per eviction: the rate over the 10 minutes before it and over the hour before those (the
    # views read an hour beyond the window, so the first 10 minutes see a shorter baseline), and
    # the mean parked snapshot's share of the budget at that moment, as the rule computes them.
    probe = Probe("EngineEvictionStorm", f"""
WITH cache AS (
  SELECT instance, lane, ts_utc, event, snapshot_bytes, used_bytes, parked, budget_bytes, slots
  FROM cache_events__all WHERE ts_utc < $to
), rate AS (
  SELECT instance, ts_utc,
    count(*) OVER (PARTITION BY instance ORDER BY ts_utc
                   RANGE BETWEEN INTERVAL 10 MINUTE PRECEDING AND CURRENT ROW) / 10 AS per_minute,
    count(*) OVER (PARTITION BY instance ORDER BY ts_utc
                   RANGE BETWEEN INTERVAL 70 MINUTE PRECEDING AND INTERVAL 10 MINUTE PRECEDING) / 60 AS baseline
  FROM cache WHERE event = 'evict'
), share AS (
  SELECT instance, ts_utc, used_bytes / greatest(parked, 1) / budget_bytes AS snapshot_share
  FROM cache WHERE budget_bytes > 0 AND used_bytes IS NOT NULL
), storm AS (
  SELECT r.instance, min(r.ts_utc) AS start_utc, max(r.ts_utc) AS end_utc, max(r.per_minute) AS peak
  FROM rate r ASOF LEFT JOIN share s ON s.instance = r.instance AND r.ts_utc >= s.ts_utc
  WHERE r.ts_utc >= $from AND r.per_minute > {_n(floor)}
    AND (r.per_minute > {_n(spike)} * r.baseline OR s.snapshot_share > {_n(share)})
  GROUP BY r.instance
), in_window AS (
  SELECT instance, any_value(lane) AS lane, count(*) FILTER (WHERE event = 'evict') AS evictions,
    max(snapshot_bytes) AS largest_snapshot_bytes, max(budget_bytes) AS budget_bytes, max(slots) AS stats_slots
  FROM cache WHERE ts_utc >= $from GROUP BY instance
), banner AS (
  SELECT instance, max(slots) AS slots FROM deploys__all WHERE component = 'engine' GROUP BY instance
)
SELECT instance, w.lane, s.start_utc, s.end_utc, w.evictions, round(s.peak, 1) AS evictions_per_minute_peak,
  w.largest_snapshot_bytes, w.budget_bytes, coalesce(b.slots, w.stats_slots) AS slots,
  round(w.largest_snapshot_bytes / w.budget_bytes, 3) AS snapshot_share_of_budget,
  round(w.largest_snapshot_bytes / (w.budget_bytes / coalesce(b.slots, w.stats_slots)), 1) AS snapshot_in_slot_shares
FROM storm s JOIN in_window w USING (instance) LEFT JOIN banner b USING (instance)
ORDER BY instance""",
        "{instance} evicted {evictions:,} conversation snapshots (up to {evictions_per_minute_peak:g} a minute); the"
        " largest parked snapshot, {largest_snapshot_bytes:,} bytes, is {snapshot_share_of_budget:.0%} of the"
        " {budget_bytes:,}-byte budget, {snapshot_in_slot_shares:g} times the share of one of {slots} slots.",
        ("evictions", "evictions_per_minute_peak", "largest_snapshot_bytes", "budget_bytes", "slots",
         "snapshot_share_of_budget", "snapshot_in_slot_shares"))
    return Heuristic(
        "H3", "Eviction storm", "2 (eight-way TTFT ~2 min, 2026-10-07 evening)",
        "Conversation snapshots evicted every minute, at 3x the hourly baseline, or parked snapshots each larger"
        " than a third of the cache budget (one 254k-token snapshot was 4,716,362,992 bytes against 8 GiB;"
        " 2508 evictions that day).",
        "a prefill bug in the engine",
        Check("The same conversation's next turn reusing almost everything (253214 = 251787 reused + 1427 read"
              " in 2.2 s) proves the mechanism works; compare the parked snapshot's bytes with budget/slots.",
              promql=f"{SNAPSHOT_SHARE} and on (host, instance, lane) {EVICTIONS} > 0",
              sql="SELECT instance, count(*) AS evictions, max((fields->>'bytes')::BIGINT) AS largest_snapshot,"
                  " any_value((fields->>'budget')::BIGINT) AS budget FROM events WHERE kind = 'evict'"
                  " GROUP BY instance"),
        ("--conversation-cache-mib", "--prompt-cache-every", "admission (concurrent long sessions per lane)",
         "the gateway's assembly budget (prompt size)"),
        (Threshold("evictions_per_minute", floor, "1/min", "eviction rate floor"),
         Threshold("baseline_factor", spike, "ratio", "eviction rate above this times its hourly baseline"),
         Threshold("snapshot_budget_share", s.cache_snapshot_budget_share, "ratio",
                   "mean parked snapshot above this share of the budget", "alerts.cache_snapshot_budget_share")),
        (Alert("EngineEvictionStorm", "critical",
               f"{EVICTIONS} * 60 > {_n(floor)}\n  and on (host, instance, lane) (\n"
               f"    {EVICTIONS} > {_n(spike)} * {EVICTIONS_BASELINE}\n"
               f"    or on (host, instance, lane) {SNAPSHOT_SHARE} > {_n(s.cache_snapshot_budget_share)}\n  )",
               "5m", f"{INSTANCE} is evicting conversation snapshots every minute.",
               f"{INSTANCE} ({LANE}) evicts {VALUE} snapshots a minute over 10 minutes"
               f" (over {_n(floor)}/min and 3x its hourly baseline, or snapshots over"
               f" {_n(s.cache_snapshot_budget_share)} of the budget)."),
         Alert("EngineSnapshotOverBudget", "warning",
               f"{SNAPSHOT_SHARE} > {_n(s.cache_snapshot_budget_share)}", "15m",
               f"{INSTANCE}'s parked snapshots are each a large share of the cache budget.",
               f"A parked snapshot on {INSTANCE} averages {PERCENT} of the conversation-cache budget: the cache holds"
               " two or three conversations before it evicts.")), probe=probe)


def _h4(d: Deployment) -> Heuristic:
    share, least = 0.5, 10.0
    probe = Probe("EngineLongPromptsCheckpointOnly", f"""
WITH banners AS (
  SELECT instance, ts_utc, prompt_cache_every FROM deploys__all WHERE component = 'engine'
), prompts AS (
  SELECT r.instance, r.lane, r.ts_utc, r.prompt_tokens, r.reused_tokens,
    coalesce(d.prompt_cache_every, $default_every) AS cache_every
  FROM engine_requests r ASOF LEFT JOIN banners d ON d.instance = r.instance AND r.ts_utc >= d.ts_utc
  WHERE r.prompt_tokens >= $long_prompt_tokens
), marked AS (
  SELECT *, reused_tokens > 0 AND reused_tokens % cache_every = 0 AND reused_tokens < prompt_tokens AS checkpoint,
    count(*) OVER (PARTITION BY instance ORDER BY ts_utc
                   RANGE BETWEEN INTERVAL 1 HOUR PRECEDING AND CURRENT ROW) AS in_the_hour
  FROM prompts
)
SELECT instance, any_value(lane) AS lane, min(ts_utc) FILTER (WHERE checkpoint) AS start_utc,
  max(ts_utc) FILTER (WHERE checkpoint) AS end_utc, count(*) AS long_prompts,
  count(*) FILTER (WHERE checkpoint) AS checkpoint_only,
  round(count(*) FILTER (WHERE checkpoint) / count(*), 3) AS checkpoint_only_share,
  max(cache_every) AS prompt_cache_every, max(in_the_hour) AS most_long_prompts_in_an_hour
FROM marked GROUP BY instance
HAVING count(*) FILTER (WHERE checkpoint) / count(*) > {_n(share)} AND max(in_the_hour) >= {_n(least)}
ORDER BY instance""",
        "{checkpoint_only} of {instance}'s {long_prompts} long prompts reused only a checkpoint (a multiple of"
        " --prompt-cache-every {prompt_cache_every}): their parked snapshots had been evicted.",
        ("long_prompts", "checkpoint_only", "checkpoint_only_share", "prompt_cache_every",
         "most_long_prompts_in_an_hour"))
    return Heuristic(
        "H4", "Long prompts restored only from a checkpoint", "2 (123 of 194 prompts >= 200k reused only 16384)",
        "Long prompts (>= signals.long_prompt_tokens) whose reuse is a positive multiple of --prompt-cache-every:"
        " their parked snapshot was evicted and a checkpoint saved only a fraction.",
        "-", Check("Share of long prompts with checkpoint-only reuse, and the reuse values themselves.",
                   promql=CHECKPOINT_ONLY,
                   sql="SELECT instance, (fields->>'reused')::BIGINT AS reused, count(*) AS prompts FROM events"
                       " WHERE kind = 'prompt' AND (fields->>'prompt')::BIGINT >= 200000 GROUP BY ALL ORDER BY prompts DESC"),
        ("--prompt-cache-every", "--conversation-cache-mib"),
        (Threshold("checkpoint_only_share", share, "ratio", "share of long prompts restored only from a checkpoint"),
         Threshold("min_long_prompts", least, "prompts/h", "at least this many long prompts in the hour")),
        (Alert("EngineLongPromptsCheckpointOnly", "warning",
               f"{CHECKPOINT_ONLY} > {_n(share)} and on (host, instance, lane) {LONG_PROMPTS} >= {_n(least)}", "15m",
               f"Long prompts on {INSTANCE} are restored only from checkpoints.",
               f"{PERCENT} of the long prompts on {INSTANCE} ({LANE}) in the last hour reused only a checkpoint"
               " multiple of --prompt-cache-every."),), probe=probe)


def _h5(d: Deployment) -> Heuristic:
    fast, slow = (14.4, "1h", "5m"), (6.0, "6h", "30m")

    def burn(factor: float, long: str, short: str):
        return lambda lane, o: (f'{SLO_ERRORS}{long}{{lane="{lane}"}} > {_n(factor * (1 - o.objective))}\n'
                                f'  and on (host, instance, lane) {SLO_ERRORS}{short}{{lane="{lane}"}}'
                                f' > {_n(factor * (1 - o.objective))}')

    def spike(lane: str, o: LaneObjective) -> str:
        return (f'instance_lane:{TTFT}:p95_rate5m{{lane="{lane}"}} > {_n(o.ttft_seconds)}\n'
                f'  and on (host, instance, lane) instance_lane:{TTFT}:p95_rate30m{{lane="{lane}"}} > {_n(o.ttft_seconds)}')

    objectives = ", ".join(f"('{lane}', {_n(o.ttft_seconds)}, {_n(1 - o.objective)})" for lane, o in d.lanes.items())
    # Either alert's condition over the window: p95 above the objective (the spike), or a share of
    # late first tokens above the fast burn's factor times the budget (the page). Not the same test on
    # few requests: p95 of 21 s and 40.5 s is 39.5 s, under a 40 s objective, yet half of them are late.
    probe = Probe("EngineTTFTSpike", f"""
WITH objectives AS (SELECT * FROM (VALUES {objectives}) AS t(lane, objective_seconds, budget)), ttft AS (
  SELECT r.instance, r.lane, r.ts_utc, r.ttft_ms / 1000 AS ttft_seconds, o.objective_seconds, o.budget
  FROM engine_requests r JOIN objectives o USING (lane) WHERE r.ttft_ms IS NOT NULL
)
SELECT instance, lane, min(ts_utc) FILTER (WHERE ttft_seconds > objective_seconds) AS start_utc,
  max(ts_utc) FILTER (WHERE ttft_seconds > objective_seconds) AS end_utc, count(*) AS requests,
  count(*) FILTER (WHERE ttft_seconds > objective_seconds) AS over_objective,
  round(quantile_cont(ttft_seconds, 0.95), 1) AS p95_ttft_seconds, round(max(ttft_seconds), 1) AS slowest_ttft_seconds,
  any_value(objective_seconds) AS objective_seconds
FROM ttft GROUP BY instance, lane
HAVING quantile_cont(ttft_seconds, 0.95) > any_value(objective_seconds)
  OR count(*) FILTER (WHERE ttft_seconds > objective_seconds) > {_n(fast[0])} * any_value(budget) * count(*)
ORDER BY instance, lane""",
        "p95 time to first token on {instance} (lane {lane}) was {p95_ttft_seconds:g} s against the lane's"
        " {objective_seconds:g} s objective; {over_objective} of {requests} requests were later, the slowest"
        " {slowest_ttft_seconds:g} s.",
        ("requests", "over_objective", "p95_ttft_seconds", "slowest_ttft_seconds", "objective_seconds"))
    lanes = tuple(Threshold(f"ttft_seconds.{lane}", o.ttft_seconds, "s", f"TTFT objective of lane {lane}",
                            f"alerts.lanes.{lane}.ttft_seconds") for lane, o in d.lanes.items())
    lanes += tuple(Threshold(f"objective.{lane}", o.objective, "ratio", f"share of lane {lane} within it",
                             f"alerts.lanes.{lane}.objective") for lane, o in d.lanes.items())
    return Heuristic(
        "H5", "TTFT SLO burn and TTFT spike, per lane", "2",
        "The share of first tokens later than the lane's objective burns the error budget (SRE workbook pairs:"
        " 1h and 5m over 14.4x, 6h and 30m over 6x page; 3d and 6h over 1x ticket), or p95 TTFT over 5m and 30m"
        " is above the objective while the prefill queue backs up.",
        "an engine bug",
        Check("Is load-test traffic on the same lane as real users? Compare requests received per lane and mode,"
              " and the prefill queue.",
              promql="sum by (host, lane, mode) (rate(spyglass_gateway_requests_received_total[30m]))",
              sql="SELECT instance, max((fields->>'prefill_queue')::INT) AS deepest_queue, count(*) AS stats_lines"
                  " FROM events WHERE kind = 'stats' AND ts >= now() - INTERVAL 1 HOUR GROUP BY instance"),
        ("lane routing of load tests", "admission per lane", "alerts.lanes.<lane>.ttft_seconds"),
        (Threshold("fast_burn_1h_5m", fast[0], "x budget", "page"), Threshold("fast_burn_6h_30m", slow[0], "x budget", "page"),
         Threshold("slow_burn_3d_6h", 1.0, "x budget", "ticket")) + lanes,
        (Alert("EngineTTFTBudgetFastBurn", "critical",
               per_lane(d, lambda lane, o: f"({burn(*fast)(lane, o)})\n  or on (host, instance, lane)\n  ({burn(*slow)(lane, o)})"),
               "2m", f"{INSTANCE} ({LANE}) burns its TTFT error budget fast.",
               f"{PERCENT} of first tokens on {INSTANCE} ({LANE}) came later than the lane's objective over the"
               " long window (14.4x the budget over 1h and 5m, or 6x over 6h and 30m).", latency=True),
         Alert("EngineTTFTBudgetSlowBurn", "warning", per_lane(d, burn(1.0, "3d", "6h")), "1h",
               f"{INSTANCE} ({LANE}) is spending its TTFT error budget.",
               f"{PERCENT} of first tokens on {INSTANCE} ({LANE}) over 3 days came later than the lane's objective,"
               " above its error budget (and over the last 6h too).", latency=True),
         Alert("EngineTTFTSpike", "warning", per_lane(d, spike), "5m",
               f"{INSTANCE} ({LANE}) p95 TTFT is above the lane's objective.",
               f"p95 time to first token on {INSTANCE} ({LANE}) is {SECONDS} over 5 minutes and above the objective"
               " over 30 minutes too.", latency=True)), probe=probe)


def _h6(d: Deployment) -> Heuristic:
    share = 0.05

    def counts(prefix: str, condition: str) -> str:
        return (f"count(*) FILTER (WHERE {condition}) AS {prefix}_requests,"
                f" count(*) FILTER (WHERE {condition} AND thinking_only) AS {prefix}_thinking_only,\n"
                f"  count(*) FILTER (WHERE {condition} AND invalid_tool_json > 0) AS {prefix}_broken_tool_json,"
                f" count(*) FILTER (WHERE {condition} AND coalesce(body_content_chars, content_chars) > 0)"
                f" AS {prefix}_visible_content")
    # Beyond the metric: the share among prompts with special-token literals (the 58 / 295 split).
    probe = Probe("ThinkingOnlyResponses", f"""
SELECT NULL AS instance, lane, min(ts_utc) FILTER (WHERE thinking_only) AS start_utc,
  max(ts_utc) FILTER (WHERE thinking_only) AS end_utc,
  {counts("with_literals", "special_literals > 0")},
  {counts("without_literals", "coalesce(special_literals, 0) = 0")},
  count(*) FILTER (WHERE thinking_only) AS thinking_only, count(*) AS requests
FROM infer_requests WHERE has_body
GROUP BY lane
HAVING count(*) FILTER (WHERE thinking_only) / count(*) > {_n(share)}
    OR count(*) FILTER (WHERE special_literals > 0 AND thinking_only)
       / greatest(count(*) FILTER (WHERE special_literals > 0), 1) > {_n(share)}
ORDER BY lane""",
        "On lane {lane}, {with_literals_thinking_only} of {with_literals_requests} responses to prompts with"
        " special-token literals were thinking-only, against {without_literals_thinking_only} of"
        " {without_literals_requests} without; visible text {with_literals_visible_content} against"
        " {without_literals_visible_content}.",
        tuple(f"{p}_{c}" for p in ("with_literals", "without_literals")
              for c in ("requests", "thinking_only", "broken_tool_json", "visible_content"))
        + ("thinking_only", "requests"))
    return Heuristic(
        "H6", "Responses that stop inside reasoning or are thinking-only", "3 (special-token early stop, 2026-10-17)",
        "A share of responses have reasoning but no visible text and no tool call, or stopped while reasoning.",
        "long context breaks it",
        Check("Same day, same lane: requests with special-token literals against those without (58 thinking-only"
              " against 0 of 295).",
              sql="SELECT fields->>'lane' AS lane, (fields->>'special_literals')::INT > 0 AS special_tokens,"
                  " count(*) AS requests, count(*) FILTER ((fields->>'thinking_only')::BOOLEAN) AS thinking_only"
                  " FROM events WHERE kind = 'request_body' GROUP BY ALL ORDER BY ALL"),
        ("the serve's prompt_escapes fix", "lane routing to a fixed serve build"),
        (Threshold("thinking_only_share", share, "ratio", "share of responses that are thinking-only"),),
        (Alert("ThinkingOnlyResponses", "warning", f"{THINKING_ONLY} > {_n(share)}", "15m",
               f"Lane {LANE} answers with reasoning only.",
               f"{PERCENT} of lane {LANE}'s responses in the last hour had reasoning but no text and no tool call."),
         Alert("StopsWhileReasoning", "warning", f"{STOPS_REASONING} > {_n(share)}", "15m",
               f"{INSTANCE} stops responses inside reasoning.",
               f"{PERCENT} of {INSTANCE}'s responses in the last hour stopped while reasoning.")),
        diagnosis="The 58/295 split needs the sent prompts' special-token literals: request_body events.",
        probe=probe)


def _h7(d: Deployment) -> Heuristic:
    return Heuristic(
        "H7", "Serve build skew between lanes", "3 (the normal lane got the fix only at 10-19 18:58)",
        "One lane runs a serve build without the escape fix (no prompt_escapes in its status) while another has it.",
        "-", Check("Build and version per lane, side by side.",
                   promql="spyglass_serve_info or spyglass_serve_measures_escapes",
                   shell="curl -s http://127.0.0.1:8081/v1/status; curl -s http://127.0.0.1:8082/v1/status"),
        ("deploy the fixed serve build to every lane",),
        (),
        (Alert("ServeBuildSkew", "warning",
               "spyglass_serve_measures_escapes == 0 and on (host) (max by (host) (spyglass_serve_measures_escapes) == 1)", "30m",
               f"{INSTANCE} runs a serve build without the special-token escape fix.",
               f"{INSTANCE}'s serve does not report prompt_escapes while another lane's does."),))


def _h8(d: Deployment) -> Heuristic:
    least = 3.0
    probe = Probe("PlanThenStop", f"""
WITH stops AS (
  SELECT lane, session, ts_utc, count(*) OVER (PARTITION BY lane ORDER BY ts_utc
                                             RANGE BETWEEN INTERVAL 1 HOUR PRECEDING AND CURRENT ROW) AS in_the_hour
  FROM requests WHERE plan_then_stop
)
SELECT NULL AS instance, lane, min(ts_utc) AS start_utc, max(ts_utc) AS end_utc, count(*) AS plan_then_stop,
  count(DISTINCT session) AS sessions, max(in_the_hour) AS most_in_an_hour
FROM stops GROUP BY lane HAVING max(in_the_hour) >= {_n(least)}
ORDER BY lane""",
        "{plan_then_stop} responses on lane {lane} ({sessions} sessions) ended the turn after a short plan, tools"
        " offered and none called (up to {most_in_an_hour} in an hour).",
        ("plan_then_stop", "sessions", "most_in_an_hour"))
    return Heuristic(
        "H8", "Plan, then end of turn", "4, 5 (session bd7e62ed)",
        "Responses with finish=stop, no tool call and a short visible text, on requests that offered tools.",
        "truncation / max_tokens",
        Check("The raw record: prompt grew, finish_reason, tool_calls, completion far below max_tokens.",
              sql="SELECT ts, request_id, fields->>'finish' AS finish, fields->>'tool_calls' AS tool_calls,"
                  " fields->>'content_chars' AS content_chars FROM events WHERE kind = 'request_body'"
                  " AND (fields->>'plan_then_stop')::BOOLEAN ORDER BY ts DESC LIMIT 20"),
        ("the client's stop handling", "the model's tool-call prompt template"),
        (Threshold("per_hour", least, "responses/h", "plan-then-stop responses in an hour"),),
        (Alert("PlanThenStop", "warning",
               f"sum by (host, lane) (increase(spyglass_infer_plan_then_stop_total[1h])) >= {_n(least)}", "5m",
               f"Lane {LANE} ends turns after a plan, without the tool call.",
               f"{VALUE} responses on lane {LANE} in the last hour stopped with a short text and no tool call although"
               " tools were offered."),),
        diagnosis="Whether the prompt grew across the session's turns needs the session's request bodies.",
        probe=probe)


def _h9(d: Deployment) -> Heuristic:
    probe = Probe("AssemblyLostTaskAnchor", """
SELECT NULL AS instance, lane, min(ts_utc) AS start_utc, max(ts_utc) AS end_utc, count(*) AS anchor_lost,
  count(DISTINCT session) AS sessions, max(client_msgs) AS most_client_msgs, max(dropped_msgs) AS most_dropped_msgs
FROM requests WHERE anchor_survived = false
GROUP BY lane ORDER BY lane""",
        "{anchor_lost} requests on lane {lane} ({sessions} sessions) were sent without the client's first user"
        " message; assembly dropped up to {most_dropped_msgs} of {most_client_msgs} messages.",
        ("anchor_lost", "sessions", "most_client_msgs", "most_dropped_msgs"))
    return Heuristic(
        "H9", "Assembly dropped the task anchor", "5",
        "RAG assembly dropped most client messages, and the client's first user message is gone from the sent request.",
        "the tool schema got lost",
        Check("Is the client's first user message in the sent request?",
              sql="SELECT ts, request_id, fields->>'lane' AS lane FROM events WHERE kind = 'request_body'"
                  " AND (fields->>'anchor_survived')::BOOLEAN = false ORDER BY ts DESC LIMIT 20"),
        ("the gateway's assembly budget", "pin the first user message in assembly"),
        (),
        (Alert("AssemblyLostTaskAnchor", "warning",
               "sum by (host, lane) (increase(spyglass_infer_anchor_lost_total[1h])) > 0", "5m",
               f"Assembly on lane {LANE} drops the client's first user message.",
               f"{VALUE} requests on lane {LANE} in the last hour were sent without the client's task anchor."),),
        diagnosis="Which messages were dropped needs the client and sent message lists of the request body.",
        probe=probe)


def _h10(d: Deployment) -> Heuristic:
    high, low = 2.0, 0.5
    probe = Probe("GatewayEstimateSkew", f"""
WITH counted AS (
  SELECT lane, ts_utc, chars, tokens_gateway_estimate AS estimated,
    coalesce(tokens_engine, tokens_engine_via_gateway, tokens_infer_store) AS engine
  FROM requests WHERE tokens_gateway_estimate IS NOT NULL
)
SELECT NULL AS instance, lane, min(ts_utc) AS start_utc, max(ts_utc) AS end_utc, count(*) AS requests,
  sum(chars) AS characters, sum(engine) AS engine_tokens, sum(estimated) AS estimated_tokens,
  round(sum(estimated) / sum(engine), 3) AS ratio
FROM counted WHERE engine > 0 GROUP BY lane
HAVING sum(estimated) / sum(engine) > {_n(high)} OR sum(estimated) / sum(engine) < {_n(low)}
ORDER BY lane""",
        "On lane {lane} the gateway estimated {estimated_tokens:,} tokens for {characters:,} characters that the"
        " engine counted as {engine_tokens:,}: {ratio:g}x ({requests} requests).",
        ("requests", "characters", "engine_tokens", "estimated_tokens", "ratio"))
    return Heuristic(
        "H10", "Gateway token estimate far from the engine's count", "6 (four counts: 516,561 estimated, 154,796 counted)",
        "Gateway estimate / engine count of the same prompts far from 1 (English runs about 3.3x).",
        "the relay miscounts",
        Check("Every count names who counted; the engine count is the authority.",
              promql=ESTIMATE_RATIO,
              sql="SELECT request_id, fields->>'chars' AS chars, fields->>'est_tokens' AS estimated,"
                  " fields->>'count_tokens' AS counted FROM events WHERE source = 'gateway' AND kind IN"
                  " ('request', 'precheck') ORDER BY ts DESC LIMIT 20"),
        ("the gateway's per-script token ratios (CJK 1.05 / other 0.70)", "use the engine's count_tokens"),
        (Threshold("ratio_high", high, "ratio", "estimate above this times the count"),
         Threshold("ratio_low", low, "ratio", "estimate below this times the count")),
        (Alert("GatewayEstimateSkew", "warning", f"{ESTIMATE_RATIO} > {_n(high)} or {ESTIMATE_RATIO} < {_n(low)}", "30m",
               f"The gateway's token estimate on lane {LANE} is far from the engine's count.",
               f"On lane {LANE} the gateway estimates {VALUE}x the tokens the engine counts for the same prompts."),),
        probe=probe)


def _h11(d: Deployment) -> Heuristic:
    probe = Probe("GatewayBlindRetries", """
SELECT NULL AS instance, lane, min(ts_utc) AS start_utc, max(ts_utc) AS end_utc, count(*) AS blind_retries,
  sum(overfits) AS overfits, max(overfit_prompt) AS relayed_prompt_tokens, max(overfit_max) AS relayed_window,
  max(upstream_prompt) AS engine_prompt_tokens, max(upstream_window) AS engine_window
FROM gateway_requests WHERE retried
GROUP BY lane ORDER BY lane""",
        "{blind_retries} requests on lane {lane} were retried after a 400 overfit with only max_tokens clamped; the"
        " relay said {relayed_prompt_tokens:,} > {relayed_window:,}, the engine {engine_prompt_tokens:,} >"
        " {engine_window:,}.",
        ("blind_retries", "overfits", "relayed_prompt_tokens", "relayed_window", "engine_prompt_tokens", "engine_window"))
    return Heuristic(
        "H11", "Blind retry after an overfit 400", "6 (three 400s at 14:14:58, 14:15:04, 14:15:10)",
        "A retry after a 400 that only clamps max_tokens; bursts of 400 overfit.",
        "-", Check("The 400's own text and the precheck.",
                   sql="SELECT ts, request_id, fields->>'prompt' AS prompt, fields->>'upstream' AS upstream FROM events"
                       " WHERE source = 'gateway' AND kind IN ('overfit', 'retry_on_overfit') ORDER BY ts"),
        ("the gateway's precheck with the engine's count", "shrink the prompt, not max_tokens"),
        (),
        (Alert("GatewayBlindRetries", "warning",
               "sum by (host, lane) (increase(spyglass_gateway_blind_retries_total[15m])) > 0", "0m",
               f"The gateway retries overfits on lane {LANE} blindly.",
               f"{VALUE} retries on lane {LANE} in 15 minutes followed a 400 overfit and only clamped max_tokens."),),
        probe=probe)


def _h12(d: Deployment) -> Heuristic:
    share = 0.05
    probe = Probe("GatewayConcurrencyFull", f"""
SELECT NULL AS instance, lane, min(ts_utc) FILTER (WHERE status = 429) AS start_utc,
  max(ts_utc) FILTER (WHERE status = 429) AS end_utc, count(*) AS requests,
  count(*) FILTER (WHERE status = 429) AS rejected, round(count(*) FILTER (WHERE status = 429) / count(*), 3) AS share
FROM gateway_requests
GROUP BY lane HAVING count(*) FILTER (WHERE status = 429) / count(*) > {_n(share)}
ORDER BY lane""",
        "{rejected} of {requests} requests (lane {lane}) were answered 429: the model's concurrency was full.",
        ("requests", "rejected", "share"))
    return Heuristic(
        "H12", "Model concurrency full (429)", "5",
        "Requests rejected with 429 because the model's concurrency limit is full.",
        "-", Check("Concurrency limit against demand per lane (the gateway's reject line names no lane: the store's"
                   " infer rows do).",
                   promql="sum by (host, lane) (rate(spyglass_gateway_requests_received_total[10m]))",
                   sql="SELECT lane, count(*) AS requests, count(*) FILTER (WHERE status = 429) AS rejected"
                       " FROM gateway_requests GROUP BY lane ORDER BY lane"),
        ("the model's concurrency limit", "--slots", "client retry back-off"),
        (Threshold("rejected_share", share, "ratio", "share of requests answered 429"),),
        # The gateway writes its reject line with no lane and no request line before it, so the 429s are
        # exported under lane "unknown": the ratio is the gateway's, over every lane, of the requests it
        # answered (a 429 is one of them), never one lane's 429s against the same lane's requests.
        (Alert("GatewayConcurrencyFull", "warning",
               "sum without (lane) (rate(spyglass_gateway_concurrency_rejections_total[10m]))\n"
               "  / (sum without (lane, status) (rate(spyglass_gateway_requests_total[10m])) > 0)"
               f" > {_n(share)}", "5m",
               "The gateway turns requests away: model concurrency full.",
               f"{PERCENT} of the gateway's answers over 10 minutes were 429: model concurrency full."),),
        probe=probe)


def _h13(d: Deployment) -> Heuristic:
    s = d.settings
    window = f"{s.crash_loop_window_minutes}m"
    planned = 900  # seconds after an announced restart during which its latency alerts are expected
    probe = Probe("ProgramCrashLoop", f"""
WITH spawns AS (
  SELECT program, count(*) OVER (PARTITION BY program ORDER BY ts_utc
    RANGE BETWEEN INTERVAL {s.crash_loop_window_minutes} MINUTE PRECEDING AND CURRENT ROW) AS in_window
  FROM process_events WHERE event = 'spawned'
), loops AS (
  SELECT program, max(in_window) AS most FROM spawns GROUP BY program HAVING max(in_window) >= {s.crash_loop_spawns}
  UNION ALL
  SELECT program, NULL FROM process_events WHERE event = 'fatal'
), causes AS (
  SELECT program, json_group_object(cause, n) AS exit_causes
  FROM (SELECT program, cause, count(*) AS n FROM process_events WHERE event = 'exited' AND cause IS NOT NULL
        GROUP BY ALL)
  GROUP BY program
)
SELECT program AS instance, NULL AS lane, min(p.ts_utc) AS start_utc, max(p.ts_utc) AS end_utc,
  count(*) FILTER (WHERE event = 'spawned') AS spawns,
  count(*) FILTER (WHERE event = 'spawned') - CASE WHEN arg_min(event, p.ts_utc) = 'spawned' THEN 1 ELSE 0 END
    AS restarts,
  count(*) FILTER (WHERE event = 'exited' AND NOT expected) AS unexpected_exits,
  count(*) FILTER (WHERE event = 'exited' AND core_dumped) AS core_dumps, count(*) FILTER (WHERE event = 'fatal') AS fatal,
  coalesce(max(l.most), 0) AS most_spawns_in_window, any_value(c.exit_causes) AS exit_causes
FROM process_events p JOIN (SELECT program, max(most) AS most FROM loops GROUP BY program) l USING (program)
LEFT JOIN causes c USING (program)
WHERE event IN ('spawned', 'exited', 'fatal')
GROUP BY program ORDER BY program""",
        "supervisord spawned {instance} {spawns} times ({restarts} restarts, {most_spawns_in_window} within"
        f" {window}); {{unexpected_exits}} unexpected exits ({{exit_causes}}); FATAL: {{fatal}}.",
        ("spawns", "restarts", "unexpected_exits", "core_dumps", "fatal", "most_spawns_in_window", "exit_causes"))
    spawns = (f"max_over_time(spyglass_supervisord_spawns_total[{window}]) - min_over_time(spyglass_supervisord_spawns_total[{window}])"
              )
    return Heuristic(
        "H13", "Restart loop", "upgrade (crashes within minutes; rolling back seemed to fix it)",
        f"A program is spawned {s.crash_loop_spawns}+ times in {window}, or enters FATAL.",
        "the new model is broken",
        Check("2x2 old/new model x old/new environment; the exit reason and the last log lines before it.",
              sql="SELECT ts, fields->>'program' AS program, kind, fields->>'status' AS status, fields->>'signal' AS signal"
                  " FROM events WHERE source = 'supervisord' AND kind IN ('spawned', 'exited', 'fatal') ORDER BY ts DESC LIMIT 30",
              shell="tail -n 200 ~/Strata/strata-iq3_xxs-b.log"),
        ("supervisord startretries / startsecs", "the environment (image, libraries) pinned with the model"),
        (Threshold("spawns", s.crash_loop_spawns, "spawns", "spawns in the window", "alerts.crash_loop_spawns"),
         Threshold("window_minutes", s.crash_loop_window_minutes, "min", "crash-loop window",
                   "alerts.crash_loop_window_minutes"),
         Threshold("planned_restart_seconds", planned, "s", "an announced restart silences latency alerts this long")),
        (Alert("ProgramCrashLoop", "critical",
               f'label_replace({spawns}, "instance", "$1", "program", "(.*)") >= {s.crash_loop_spawns}', "0m",
               f"{INSTANCE} is restarting in a loop.",
               f"supervisord spawned {INSTANCE} {VALUE} times in {window}.", keep_firing_for="10m",
               inhibits_latency=True),
         Alert("ProgramFatal", "critical",
               'label_replace(spyglass_supervisord_process_state{state="FATAL"}, "instance", "$1", "program", "(.*)") == 1',
               "0m", f"{INSTANCE} entered FATAL: supervisord gave up restarting it.",
               f"{INSTANCE} is FATAL: it exited too quickly too many times.", inhibits_latency=True),
         Alert("EnginePlannedRestart", "info",
               f"time() - spyglass_switch_last_change_timestamp_seconds < {planned}", "0m",
               f"{INSTANCE} was switched or restarted by an operator (switch log).",
               f"The switch log announced a switch or restart of {INSTANCE} {SECONDS} ago; its latency and"
               " throughput alerts are silenced meanwhile.", inhibits_latency=True)), probe=probe)


def _h14(d: Deployment) -> Heuristic:
    budget = d.settings.probe_budget_seconds
    window = f"{max(30, int(budget * 3 // 60))}m"  # three loads' worth of time
    spawns = f"max_over_time(spyglass_supervisord_spawns_total[{window}]) - min_over_time(spyglass_supervisord_spawns_total[{window}])"
    probe = Probe("EngineLoadOverProbeBudget", f"""
SELECT instance, lane, ts_utc AS start_utc, ready_utc AS end_utc, ready_seconds, {_n(budget)} AS probe_budget_seconds
FROM deploys WHERE component = 'engine' AND ready_seconds > {_n(budget)}
ORDER BY ts_utc""",
        "{instance} took {ready_seconds:g} s to become ready; its probe gives up after {probe_budget_seconds:g} s.",
        ("ready_seconds", "probe_budget_seconds"))
    return Heuristic(
        "H14", "Engine not ready past its probe budget", "upgrade (a 40 s load against a 10 s probe)",
        "The engine is still loading when its probe budget is spent, or its last load took longer than the budget.",
        "the model is broken",
        Check("Load duration against the probe timeout; a startup phase.",
              promql="spyglass_engine_load_duration_seconds",
              sql="SELECT ts, instance, kind, fields->>'seconds' AS seconds FROM events WHERE kind IN ('start', 'ready')"
                  " ORDER BY ts DESC LIMIT 20"),
        ("the probe's startup budget (alerts.probe_budget_seconds must match it)", "a startup phase that answers 503"),
        (Threshold("probe_budget_seconds", budget, "s", "longest load the probe waits for", "alerts.probe_budget_seconds"),),
        (Alert("EngineNotReady", "critical",
               f"(time() - spyglass_engine_start_time_seconds > {_n(budget)}) and on (host, instance, lane)"
               " (spyglass_engine_ready == 0)\n  and on (host, instance) (spyglass_host_process_up == 1)", "0m",
               f"{INSTANCE} has been loading longer than its probe budget.",
               f"{INSTANCE} ({LANE}) started {SECONDS} ago and is not ready (probe budget {_n(budget)} s).",
               inhibits_latency=True),
         Alert("EngineLoadOverProbeBudget", "warning", f"spyglass_engine_load_duration_seconds > {_n(budget)}", "0m",
               f"{INSTANCE}'s last load took longer than the probe budget.",
               f"{INSTANCE} ({LANE}) took {SECONDS} to become ready; the probe gives up after {_n(budget)} s."),
         Alert("EngineRestartedWhileLoading", "critical",
               f'label_replace({spawns}, "instance", "$1", "program", "(.*)") >= 2\n'
               f"  and on (host, instance) (max by (host, instance) (max_over_time(spyglass_engine_ready[{window}])) == 0)", "0m",
               f"{INSTANCE} is restarted before it ever becomes ready: a probe killing a slow load?",
               f"supervisord spawned {INSTANCE} {VALUE} times in {window} and no start reached ready; compare the"
               f" load time with the probe budget ({_n(budget)} s).", inhibits_latency=True)),
        diagnosis="Load duration per start, and how long a start that never got ready had been loading when it"
                  " ended: `spyglass changes` (load_seconds, ended_loading_after) and `spyglass crashes`.",
        probe=probe)


def _since_path_change(condition: str) -> str:
    """Seconds since the model path last changed, where `condition` holds (0 when no change time is known)."""
    return (f"(time() - spyglass_model_path_changed_timestamp_seconds and on (host, instance) ({condition}))\n"
            f"  or (0 * ({condition}))")


def _h15(d: Deployment) -> Heuristic:
    probe = Probe("EngineModelChecksumMismatch", """
SELECT instance, NULL AS lane, min(ts_utc) AS start_utc, max(ts_utc) AS end_utc, count(*) AS checksum_mismatches
FROM timeline WHERE kind = 'checksum_mismatch' AND source_kind = 'engine_log'
GROUP BY instance ORDER BY instance""",
        "{instance} logged {checksum_mismatches} model checksum mismatches.", ("checksum_mismatches",))
    return Heuristic(
        "H15", "Dangling model link", "upgrade (md5 matched, the link pointed at a deleted file)",
        "The configured model path no longer resolves, or resolves elsewhere than at start; a checksum mismatch.",
        "the weights are corrupted",
        Check("Print the path actually read; the blue/green cleanup timing.",
              sql="SELECT ts, instance, fields->>'path' AS path, fields->>'real' AS real, fields->>'md5' AS md5"
                  " FROM events WHERE kind IN ('model', 'checksum_mismatch') ORDER BY ts DESC LIMIT 10",
              shell="readlink -f ~/Strata/current-model.gguf; ls -l ~/Strata/"),
        ("atomic switch: upload, verify, switch the link, clean up only after a rollback period",),
        (),
        (Alert("EngineModelChecksumMismatch", "warning",
               "sum by (host, instance, lane) (increase(spyglass_engine_model_checksum_mismatches_total[1h])) > 0", "0m",
               f"{INSTANCE} read a model file whose md5 does not match.",
               f"{INSTANCE} ({LANE}) logged {VALUE} checksum mismatches in the last hour."),
         Alert("EngineModelPathDangling", "critical", _since_path_change("spyglass_model_path_resolves == 0"), "1m",
               f"{INSTANCE}'s model path no longer resolves: the next start cannot load.",
               f"The configured model path of {INSTANCE} is a dangling link or a missing file; it last changed"
               f" {SECONDS} ago (0: never seen changing). A blue/green cleanup may have raced the switch."),
         Alert("EngineModelPathMismatch", "warning", _since_path_change("spyglass_model_path_mismatch == 1"), "10m",
               f"{INSTANCE}'s model path names another file than the running process loaded.",
               f"The model path of {INSTANCE} changed {SECONDS} ago and resolves to a different file (path or size)"
               " than the one its running engine loaded; a restart would load another model.")),
        diagnosis="`spyglass changes` lists the model path, real file and md5 of every start; the model_path"
                  " events hold each resolution over time.", probe=probe)


def _h16(d: Deployment) -> Heuristic:
    per_minute = 2.0
    probe = Probe("EngineRecompileStorm", f"""
WITH rebuilds AS (
  SELECT instance, ts_utc, count(*) OVER (PARTITION BY instance ORDER BY ts_utc
                                        RANGE BETWEEN INTERVAL 10 MINUTE PRECEDING AND CURRENT ROW) / 10 AS per_minute
  FROM timeline WHERE kind = 'graph_rebuild' AND source_kind = 'engine_log'
)
SELECT instance, NULL AS lane, min(ts_utc) FILTER (WHERE per_minute > {_n(per_minute)}) AS start_utc,
  max(ts_utc) FILTER (WHERE per_minute > {_n(per_minute)}) AS end_utc, count(*) AS rebuilds,
  round(max(per_minute), 1) AS rebuilds_per_minute_peak
FROM rebuilds GROUP BY instance HAVING max(per_minute) > {_n(per_minute)}
ORDER BY instance""",
        "{instance} rebuilt {rebuilds} compute graphs, up to {rebuilds_per_minute_peak:g} a minute.",
        ("rebuilds", "rebuilds_per_minute_peak"))
    return Heuristic(
        "H16", "Recompile storm", "upgrade (p99 20 ms -> 800 ms, CPU busy, GPU idle)",
        "Compute-graph rebuilds every minute, with the CPU busy and the accelerator idle.",
        "the new model is slower",
        Check("The shapes seen; warm-up; bounded shapes.",
              sql="SELECT fields->>'shape' AS shape, count(*) AS rebuilds FROM events WHERE kind = 'graph_rebuild'"
                  " GROUP BY ALL ORDER BY rebuilds DESC"),
        ("bounded request shapes (batch, sequence length)", "a warm-up of the known shapes at start"),
        (Threshold("rebuilds_per_minute", per_minute, "1/min", "graph rebuilds a minute"),),
        (Alert("EngineRecompileStorm", "warning",
               f"sum by (host, instance, lane) (rate(spyglass_engine_graph_rebuilds_total[10m])) * 60 > {_n(per_minute)}",
               "10m", f"{INSTANCE} rebuilds compute graphs every minute.",
               f"{INSTANCE} ({LANE}) rebuilds {VALUE} compute graphs a minute.", latency=True),), probe=probe)


def _h17(d: Deployment) -> Heuristic:
    limit, horizon = d.settings.memory_limit_bytes, 4 * 3600
    return Heuristic(
        "H17", "Memory growth toward the limit", "upgrade",
        "Resident memory of an engine rising toward the limit.",
        "-", Check("Time to the limit by linear prediction.",
                   promql=f"predict_linear(spyglass_host_process_resident_bytes[1h], {horizon})"),
        ("the preprocessing cache", "log buffers", "alerts.memory_limit_bytes"),
        (Threshold("memory_limit_bytes", limit, "bytes", "the limit", "alerts.memory_limit_bytes"),
         Threshold("horizon_seconds", horizon, "s", "how far ahead the prediction looks")),
        (Alert("EngineMemoryGrowth", "warning",
               f"predict_linear(spyglass_host_process_resident_bytes[1h], {horizon}) > {_n(limit)}", "15m",
               f"{INSTANCE}'s memory will reach the limit within 4 hours.",
               f"{INSTANCE}'s resident memory is on course for {BYTES} in 4 hours (limit {_n(limit)} bytes)."),))


def _h18(d: Deployment) -> Heuristic:
    factor = 2.0
    baseline = _quantile(0.5, "1h", "1d")
    return Heuristic(
        "H18", "Regression against the baseline after a change", "upgrade (no errors, so fine)",
        "After an engine restart (a build or model change), median TTFT is worse than the same hour a day before.",
        "no errors, so it is fine",
        Check("The baseline snapshot itself: the same quantile a day before.",
              promql=f"instance_lane:{TTFT}:p50_rate1h / {baseline}"),
        ("roll back the build; compare builds on the same traffic",),
        (Threshold("factor", factor, "ratio", "median TTFT above this times the day-before median"),),
        (Alert("EngineRegressionAfterRestart", "warning",
               f"instance_lane:{TTFT}:p50_rate1h > {_n(factor)} * {baseline}\n"
               "  and on (host, instance, lane) changes(spyglass_engine_start_time_seconds[6h]) > 0", "30m",
               f"{INSTANCE} got slower after its restart.",
               f"Median TTFT on {INSTANCE} ({LANE}) is {SECONDS} over the last hour, over twice the same hour"
               " yesterday, since a restart in the last 6 hours.", latency=True),),
        diagnosis="Throughput, p99, queue, rebuilds and memory against the previous steady state need the store's"
                  " history: `spyglass baseline --instance X [--deploy N]`.")


def _h19(d: Deployment) -> Heuristic:
    s = d.settings
    silent, unmatched, ahead = s.source_silent_minutes * 60, 0.05, 300
    lines = "spyglass_source_lines_total"
    return Heuristic(
        "H19", "spyglass's own blind spots", "§6.2 of the seed: evictions= were only in the engine log",
        "spyglass's target is down; a source went silent while its process runs; lines stop parsing (format drift);"
        " a status endpoint is down; a source's clock runs ahead.",
        "-", Check("spyglass's own per-source health.",
                   promql="spyglass_source_up or spyglass_source_last_event_timestamp_seconds",
                   shell="curl -s http://127.0.0.1:9464/debug/sources"),
        ("sources.<name>.path / tz", "sources.<name>.patterns (after an upgrade)"),
        (Threshold("silent_seconds", silent, "s", "engine log without a line", "alerts.source_silent_minutes"),
         Threshold("unmatched_share", unmatched, "ratio", "share of lines no pattern matched"),
         Threshold("ahead_seconds", ahead, "s", "newest event this far in the future")),
        (Alert("SpyglassTargetDown", "critical",
               f'up{{job="{s.job}"}} == 0 or absent(up{{job="{s.job}"}})', "2m",
               "spyglass's /metrics cannot be scraped: the pager is blind.",
               "Prometheus has not scraped spyglass (job {{ $labels.job }}) for 2 minutes."),
         Alert("SpyglassSourceDown", "warning", "spyglass_source_up == 0", "5m",
               "A spyglass source cannot be read.",
               "Source {{ $labels.source }} could not be read (file) or did not answer (endpoint) for 5 minutes."),
         Alert("SpyglassSourceSilent", "warning",
               f"{LOG_SILENCE} > {_n(silent)}\n  and on (host, instance) (spyglass_host_process_up == 1)\n"
               f"  unless on (host, instance) ({_busy()})", "2m",
               f"{INSTANCE}'s engine log is silent while its process runs.",
               f"No line from {INSTANCE}'s engine log for {SECONDS} (stats come every 10 s) while the process runs."),
         Alert("SpyglassUnparsedLines", "warning",
               ratio(f'rate({lines}{{outcome="unmatched"}}[15m])', f"rate({lines}[15m])", "host, source") + f" > {_n(unmatched)}",
               "15m", "Lines of a source stopped parsing: format drift.",
               "{{ $value | humanizePercentage }} of source {{ $labels.source }}'s lines matched no pattern over 15 minutes."),
         Alert("SpyglassSourceClockAhead", "warning",
               f"spyglass_source_last_event_timestamp_seconds - time() > {ahead}", "5m",
               "A source's timestamps are in the future: its time zone is wrong.",
               "Source {{ $labels.source }}'s newest event is {{ $value | humanizeDuration }} ahead of Prometheus's clock."),
         Alert("Watchdog", "info", "vector(1)", "0m", "The alerting pipeline works (always firing).",
               "Always fires; the heartbeat receiver alarms when it stops arriving (a dead man's switch).")),
        diagnosis="Two sources' clocks disagreeing while both are active needs their events side by side in the store.")


def _h20(d: Deployment) -> Heuristic:
    minutes = d.settings.hung_minutes
    # Each poll where the serve said ready with work queued or slots busy, against the engine log's last
    # line before it: a hung engine writes nothing (no done, no [stats]) while its serve still answers.
    probe = Probe("EngineHung", f"""
WITH engine AS (
  SELECT instance, ts_utc FROM timeline__all WHERE source_kind = 'engine_log' AND ts_utc < $to
), waiting AS (
  SELECT instance, ts_utc, prefill_queue, slots_busy FROM status_snapshots
  WHERE up AND state = 'ready' AND (prefill_queue > 0 OR slots_busy > 0)
), hung AS (
  SELECT w.instance, w.ts_utc, w.prefill_queue, w.slots_busy, e.ts_utc AS last_line_utc
  FROM waiting w ASOF JOIN engine e ON e.instance = w.instance AND w.ts_utc >= e.ts_utc
  WHERE w.ts_utc - e.ts_utc > INTERVAL {minutes} MINUTE
)
SELECT instance, NULL AS lane, min(last_line_utc) AS start_utc, max(ts_utc) AS end_utc,
  round(epoch(max(ts_utc) - min(last_line_utc)) / 60, 1) AS silent_minutes,
  coalesce(max(prefill_queue), 0) AS queued, coalesce(max(slots_busy), 0) AS busy
FROM hung GROUP BY instance ORDER BY instance""",
        "{instance} wrote no engine-log line for {silent_minutes:g} minutes while its serve said ready with"
        " {queued} queued and {busy} slots busy.", ("silent_minutes", "queued", "busy"))
    return Heuristic(
        "H20", "Engine hung while /health answers", "vLLM 39863: a proxy kept a hung backend in rotation for 85 minutes",
        f"Requests queued or slots busy, but no request finished and no [stats] line for {minutes} minutes, while the"
        " process runs and the serve says ready.",
        "just slow: long prompts",
        Check("The engine log's last [stats] and done times against the queue; a prompt far from the window"
              " limit; the process CPU time (flat = hung, rising = working).",
              promql="rate(spyglass_host_process_cpu_seconds_total[5m])",
              shell="tail -n 5 ~/Strata/strata-iq3_xxs-b.log; grep -E 'State|ctxt' /proc/$(pgrep -f 'port 8082')/status"),
        ("restart the instance (take it out of rotation first)", "a liveness probe on the stats heartbeat"),
        (Threshold("hung_minutes", minutes, "min", "no finished request and no log line", "alerts.hung_minutes"),),
        (Alert("EngineHung", "critical",
               f"{LOG_SILENCE} > {minutes * 60}\n  and on (host, instance) ({_busy()})\n"
               "  and on (host, instance) (spyglass_host_process_up == 1)\n"
               '  and on (host, instance) (spyglass_serve_state{state="ready"} == 1)\n'
               "  unless on (host, instance)"
               f" (sum by (host, instance) (increase(spyglass_engine_requests_finished_total[{minutes}m])) > 0)",
               "0m", f"{INSTANCE} is hung: work waiting, nothing finishing, no log line.",
               f"{INSTANCE} has written no line for {SECONDS} with requests queued or slots busy, while its process runs"
               " and its serve says ready."),), probe=probe)


BUILDERS = (_h1, _h2, _h3, _h4, _h5, _h6, _h7, _h8, _h9, _h10, _h11, _h12, _h13, _h14, _h15, _h16, _h17, _h18,
            _h19, _h20)


def catalogue(d: Deployment | None = None) -> tuple[Heuristic, ...]:
    """H1-H20 with this deployment's thresholds (the defaults when none is given)."""
    d = d or Deployment()
    return tuple(build(d) for build in BUILDERS)


def by_id(d: Deployment | None = None) -> dict[str, Heuristic]:
    return {h.id: h for h in catalogue(d)}
