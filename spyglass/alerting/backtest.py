"""Would the pager have rung? Alert rules evaluated over replayed history by a real Prometheus.

`spyglass backtest` replays the stored events of a window (spyglass.alerting.backfill), turns the
OpenMetrics into TSDB blocks with `promtool tsdb create-blocks-from openmetrics`, starts Debian's
`prometheus` on them on 127.0.0.1 (a free port, a temporary storage folder, no scraping), and asks
it for every alerting rule's expression over the window at its group's evaluation interval
(`query_range`). Recorded names in an expression are replaced by their recording rule's expression
(the rules read raw metrics only, with offsets only on raw selectors), so nothing has to be
recorded first. `for:` and `keep_firing_for:` are then applied as Prometheus 2.42's rule manager
does (rules/alerting.go), which gives each alert's firing episodes: when it would have fired and
when it would have resolved.

Evaluation starts at `--from`: an alert whose condition already held before it is pending from
there. The replay starts `lookback` earlier so that windows and baselines have their history.

The rules are read and inlined in spyglass.alerting.backtest_rules; what was found, and its printing,
is in spyglass.alerting.backtest_report.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from spyglass.alerting.backfill import OPENMETRICS_FILE, UsageError, iso, replay
from spyglass.alerting.backtest_cleanup import die_with_parent, make_workdir, sweep_orphans, unwind_on_signals
from spyglass.alerting.backtest_report import BacktestResult, Firing, Pending, duration_text
from spyglass.alerting.backtest_rules import AlertRule, BacktestError, config_rules, inline, load_rules
from spyglass.config import Config
from spyglass.ports import free_port

MAX_POINTS = 10_000  # Prometheus refuses a query_range of more than 11,000 points per series
MIN_STEP = 1.0  # seconds between replayed samples, at least
MAX_WINDOW = 31 * 86400.0  # --from to --to, at most
MAX_LOOKBACK = 7 * 86400.0
MAX_SAMPLE_TIMES = 200_000  # (window + lookback) / step: 31 days at 15 s is 178,560


class Prometheus:
    """Debian's prometheus serving TSDB blocks from `data` on a free 127.0.0.1 port, no scraping.
    Guarantees: `start` returns once it answers /-/ready, or raises with its log; `stop` ends the
    process it started (and only that one)."""

    def __init__(self, data: Path, binary: str = "prometheus", retention_days: int = 36500) -> None:
        self.data, self.binary, self.retention_days = data, binary, retention_days
        self.process: subprocess.Popen | None = None
        self.url = ""

    def start(self, timeout: float = 60.0) -> Prometheus:
        port = free_port()
        config = self.data.parent / "prometheus.yml"
        config.write_text("global:\n  evaluation_interval: 1h\n")
        self.log = open(self.data.parent / "prometheus.log", "wb")  # noqa: SIM115 - closed with the process
        self.process = subprocess.Popen(
            [
                self.binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.data}",
                f"--storage.tsdb.retention.time={self.retention_days}d",
                f"--web.listen-address=127.0.0.1:{port}",
                "--query.max-samples=1000000000",
                "--query.timeout=10m",
                "--log.level=warn",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - prctl only
            start_new_session=True,
        )
        self.url = f"http://127.0.0.1:{port}"
        try:
            return self._wait_ready(timeout)
        except BaseException:  # a signal's SystemExit included: never leave it running
            self.stop()
            raise

    def _wait_ready(self, timeout: float) -> Prometheus:
        assert self.process is not None
        pause, deadline = threading.Event(), time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BacktestError(f"prometheus exited with {self.process.returncode}: {self._log_tail()}")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            pause.wait(0.1)
        raise BacktestError(f"prometheus did not become ready in {timeout:.0f} s: {self._log_tail()}")

    def _log_tail(self) -> str:
        self.log.flush()
        return (self.data.parent / "prometheus.log").read_text(errors="replace")[-1500:]

    def query_range(self, client: httpx.Client, expr: str, start: float, end: float, step: float) -> Iterator[dict]:
        """The matrix of `expr` at start, start + step, ... <= end, in pieces Prometheus accepts."""
        piece = step * (MAX_POINTS - 1)
        while start <= end:
            stop = min(end, start + piece)
            answer = client.post(
                f"{self.url}/api/v1/query_range",
                data={"query": expr, "start": f"{start:.3f}", "end": f"{stop:.3f}", "step": f"{step:g}"},
            )
            body = answer.json()
            if body.get("status") != "success":
                raise BacktestError(f"prometheus refused the query ({body.get('errorType')}: {body.get('error')})")
            yield from body["data"]["result"]
            start = stop + step

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if hasattr(self, "log"):
            self.log.close()


def episodes(
    rule: AlertRule,
    presence: dict[tuple[tuple[str, str], ...], set[float]],
    times: list[float],
    pending: list[Pending] | None = None,
) -> list[Firing]:
    """Firing episodes of `rule` given at which evaluation times each label set was in the result.

    As Prometheus 2.42's AlertingRule.Eval: a new label set is pending from the evaluation it first
    appears at and fires once it has been present `for:` long; one missing from a result is dropped
    if pending, else resolved, unless it is firing and missing for less than `keep_firing_for:`.
    A label set that never fired is added to `pending` (if given) with its longest hold."""
    found: list[Firing] = []
    for labelset, present in presence.items():
        labels = {**dict(labelset), **rule.labels}
        labels.pop("alertname", None)
        active_at = fired_at = missing_since = last_present = None
        longest: tuple[float, float] | None = None  # (held, since)
        fired_once = False
        for t in times:
            if t in present:
                missing_since, last_present = None, t
                if active_at is None:
                    active_at = t
            elif active_at is not None:
                if fired_at is not None and rule.keep_firing:
                    missing_since = t if missing_since is None else missing_since
                    if t - missing_since < rule.keep_firing:
                        continue
                if fired_at is not None:
                    found.append(_firing(rule, labels, active_at, fired_at, t))
                elif last_present is not None and (longest is None or last_present - active_at > longest[0]):
                    longest = (last_present - active_at, active_at)
                active_at = fired_at = missing_since = None
                continue
            else:
                continue
            if fired_at is None and t - active_at >= rule.hold:
                fired_at, fired_once = t, True
        if fired_at is not None and active_at is not None:
            found.append(_firing(rule, labels, active_at, fired_at, None))
        elif (
            active_at is not None
            and last_present is not None
            and (longest is None or last_present - active_at > longest[0])
        ):
            longest = (last_present - active_at, active_at)
        if pending is not None and longest is not None and not fired_once:
            pending.append(Pending(rule.name, labels.get("heuristic"), labels, iso(longest[1]), longest[0], rule.hold))
    return found


def _firing(rule: AlertRule, labels: dict[str, str], active_at: float, fired_at: float, end: float | None) -> Firing:
    return Firing(
        rule.name,
        labels.get("heuristic"),
        labels.get("severity"),
        labels,
        iso(fired_at),
        iso(end) if end is not None else None,
        iso(active_at),
    )


def evaluate(
    prometheus: Prometheus, rule: AlertRule, records: dict[str, str], start: float, end: float, client: httpx.Client
) -> tuple[list[Firing], list[Pending]]:
    first = math.ceil(start / rule.interval) * rule.interval
    times = [first + k * rule.interval for k in range(int((end - first) // rule.interval) + 1)]
    if not times:
        return [], []
    expr = inline(rule.expr, records, rule.interval)
    presence: dict[tuple[tuple[str, str], ...], set[float]] = {}
    try:
        for series in prometheus.query_range(client, expr, times[0], times[-1], rule.interval):
            labels = tuple(sorted((k, v) for k, v in series["metric"].items() if k != "__name__"))
            presence.setdefault(labels, set()).update(float(t) for t, _ in series["values"])
    except BacktestError as exc:
        raise BacktestError(f"alert {rule.name}: {exc}") from None
    pending: list[Pending] = []
    return episodes(rule, presence, times, pending), pending


def build_blocks(om_file: Path, data: Path, span: float, promtool: str = "promtool") -> None:
    """TSDB blocks as long as the span allows: promtool reads the whole file once per block."""
    hours = max(2, math.ceil(span / 3600))
    result = subprocess.run(
        [
            promtool,
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            f"--max-block-duration={hours}h",
            str(om_file),
            str(data),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        preexec_fn=die_with_parent,
        start_new_session=True,
    )  # noqa: PLW1509 - prctl only
    if result.returncode != 0:
        raise BacktestError(f"promtool refused the backfill: {(result.stderr or result.stdout)[-1500:]}")


def check_bounds(start: float, end: float, step: float, lookback: float) -> None:
    """UsageError unless MIN_STEP <= step, end > start, end - start <= MAX_WINDOW, lookback <= MAX_LOOKBACK
    and the replay has at most MAX_SAMPLE_TIMES sample times."""
    if end <= start:
        raise UsageError(f"--to ({iso(end)}) must be after --from ({iso(start)})")
    if step < MIN_STEP:
        raise UsageError(f"--step {step:g}s is below the smallest step a backtest takes ({MIN_STEP:g}s)")
    if end - start > MAX_WINDOW:
        raise UsageError(
            f"a window of {duration_text(end - start)} is longer than a backtest takes"
            f" ({duration_text(MAX_WINDOW)}): split it"
        )
    if lookback > MAX_LOOKBACK:
        raise UsageError(f"--lookback {duration_text(lookback)} is longer than {duration_text(MAX_LOOKBACK)}")
    times = (end - start + lookback) / step
    if times > MAX_SAMPLE_TIMES:
        raise UsageError(
            f"{times:,.0f} sample times ((window + lookback) / step) are more than"
            f" {MAX_SAMPLE_TIMES:,}: raise --step or shorten the window"
        )


def backtest(
    config: Config,
    start: float,
    end: float,
    rules: Path | None = None,
    step: float = 15.0,
    lookback: float = 7200.0,
    workers: int = 2,
) -> BacktestResult:
    """Replay [start - lookback, end], and which alerts of `rules` (default: those `spyglass rules` makes of
    `config`, in memory) would have fired in [start, end]."""
    check_bounds(start, end, step, lookback)
    for binary in ("promtool", "prometheus"):
        if shutil.which(binary) is None:
            raise BacktestError(f"{binary} not found: install Debian's prometheus package (scripts/setup)")
    if rules is None:
        records, alert_rules = config_rules(config)
    else:
        records, alert_rules = load_rules(rules, config.alerts.evaluation_interval_seconds)
    seconds: dict[str, float] = {}
    clock = time.monotonic()

    def phase(name: str) -> None:
        nonlocal clock
        now = time.monotonic()
        seconds[name], clock = now - clock, now

    sweep_orphans()
    with unwind_on_signals():
        work = make_workdir()
        try:
            backfilled = replay(config, start - lookback, end, step, work / OPENMETRICS_FILE, window=(start, end))
            phase("replay")
            build_blocks(work / OPENMETRICS_FILE, work / "data", end - start + lookback)
            (work / OPENMETRICS_FILE).unlink()
            phase("blocks")
            prometheus = Prometheus(work / "data").start()
            phase("prometheus")
            pool = ThreadPoolExecutor(workers)
            try:
                with httpx.Client(timeout=600) as client:
                    found = list(pool.map(lambda r: evaluate(prometheus, r, records, start, end, client), alert_rules))
            finally:  # on a signal: no query waits for the others, and the one in flight fails with its server
                pool.shutdown(wait=False, cancel_futures=True)
                prometheus.stop()
            phase("queries")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    firings = sorted(
        (f for group, _ in found for f in group), key=lambda f: (f.start, f.alert, sorted(f.labels.items()))
    )
    pending = sorted((p for _, group in found for p in group), key=lambda p: (p.since, p.alert))
    return BacktestResult(
        firings,
        backfilled,
        len(alert_rules),
        seconds,
        pending,
        str(rules) if rules is not None else "generated from --config",
    )
