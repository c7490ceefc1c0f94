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
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from spyglass.alerting.backfill import (
    OPENMETRICS_FILE,
    BackfillError,
    BackfillResult,
    UsageError,
    iso,
    parse_duration,
    replay,
)
from spyglass.alerting.backtest_cleanup import die_with_parent, make_workdir, sweep_orphans, unwind_on_signals
from spyglass.config import Config
from spyglass.engine.emulator.ports import free_port

MAX_POINTS = 10_000  # Prometheus refuses a query_range of more than 11,000 points per series
MAX_RULE_FILE_BYTES = 4 << 20  # the generated rules are about 60 kB
MIN_STEP = 1.0  # seconds between replayed samples, at least
MAX_WINDOW = 31 * 86400.0  # --from to --to, at most
MAX_LOOKBACK = 7 * 86400.0
MAX_SAMPLE_TIMES = 200_000  # (window + lookback) / step: 31 days at 15 s is 178,560
NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!=|!~|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')


class BacktestError(BackfillError):
    """A backtest that cannot run: a rule that cannot be inlined, a Prometheus that failed."""


@dataclass(frozen=True)
class AlertRule:
    name: str
    expr: str
    interval: float
    hold: float  # for:
    keep_firing: float  # keep_firing_for:
    labels: dict[str, str]


@dataclass
class Firing:
    """One firing episode of one alert (one label set): fired at `start`, resolved at `end` (None:
    still firing when the window ended)."""

    alert: str
    heuristic: str | None
    severity: str | None
    labels: dict[str, str]
    start: str
    end: str | None
    active_since: str = field(default="", repr=False)  # when it became pending


class NoAliasLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses anchors' aliases: a rule file never needs them, and a few hundred
    bytes of nested aliases expand to gigabytes (the "billion laughs")."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, f"an alias (*{event.anchor}) is not allowed in a rule file", event.start_mark
            )
        return super().compose_node(parent, index)


def read_rule_file(file: Path) -> Any:
    """The YAML document of one rule file, refused when larger than MAX_RULE_FILE_BYTES or holding aliases."""
    try:
        size = file.stat().st_size
        if size > MAX_RULE_FILE_BYTES:
            raise BacktestError(
                f"{file}: {size:,} bytes, more than a rule file may have"
                f" ({MAX_RULE_FILE_BYTES:,}); is it the right file?"
            )
        with open(file, "rb") as handle:
            text = handle.read(MAX_RULE_FILE_BYTES + 1)
        return yaml.load(text, Loader=NoAliasLoader) or {}  # noqa: S506 - a SafeLoader that also refuses aliases
    except (OSError, yaml.YAMLError) as exc:
        raise BacktestError(f"{file}: not a readable rule file: {exc}") from None
    except RecursionError:  # `[[[[...`: the YAML composer recurses once per level
        raise BacktestError(f"{file}: not a rule file: nested too deeply") from None


def load_rules(path: Path, default_interval: float) -> tuple[dict[str, str], list[AlertRule]]:
    """The recording rules (name -> expression) and alerting rules of a file or of every *.yml in a folder."""
    files = sorted(p for p in path.glob("*.y*ml")) if path.is_dir() else [path]
    if not files:
        raise BacktestError(f"no rule files (*.yml) in {path}")
    records: dict[str, str] = {}
    alerts: list[AlertRule] = []
    for file in files:
        document = read_rule_file(file)
        if not isinstance(document, dict) or not isinstance(document.get("groups"), list):
            continue  # e.g. alertmanager.yml beside the rules
        more_records, more_alerts = rules_of(document, default_interval, str(file))
        records.update(more_records)
        alerts += more_alerts
    if not alerts:
        raise BacktestError(f"no alerting rules in {path}")
    return records, alerts


def rules_of(document: dict[str, Any], default_interval: float, origin: str) -> tuple[dict[str, str], list[AlertRule]]:
    """Recording and alerting rules of one rule document ({"groups": [...]})."""
    records: dict[str, str] = {}
    alerts: list[AlertRule] = []
    try:
        for group in document["groups"]:
            interval = parse_duration(group["interval"]) if group.get("interval") else default_interval
            for rule in group.get("rules", []):
                if "record" in rule:
                    records[rule["record"]] = str(rule["expr"])
                else:
                    alerts.append(
                        AlertRule(
                            rule["alert"],
                            str(rule["expr"]),
                            interval,
                            parse_duration(rule["for"]) if rule.get("for") else 0.0,
                            parse_duration(rule["keep_firing_for"]) if rule.get("keep_firing_for") else 0.0,
                            {k: str(v) for k, v in (rule.get("labels") or {}).items()},
                        )
                    )
    except (KeyError, TypeError, AttributeError) as exc:
        raise BacktestError(f"{origin}: not a Prometheus rule file (missing or malformed {exc})") from None
    return records, alerts


def config_rules(config: Config) -> tuple[dict[str, str], list[AlertRule]]:
    """The rules `spyglass rules --config` would write for this config, generated in memory."""
    from spyglass.alerting.heuristics import Deployment
    from spyglass.alerting.rules import rule_groups

    return rules_of(rule_groups(Deployment.of(config)), config.alerts.evaluation_interval_seconds, "--config")


def _skip_string(expr: str, i: int) -> int:
    quote, i = expr[i], i + 1
    while i < len(expr) and expr[i] != quote:
        i += 2 if expr[i] == "\\" else 1
    return i + 1


def _selector_suffix(expr: str, i: int, name: str) -> tuple[list[tuple[str, str]], str, int]:
    """After a recorded name at `i`: its `{label="value"}` matchers, its `[range]`, and where it ends."""
    j = len(expr) - len(expr[i:].lstrip())
    matchers: list[tuple[str, str]] = []
    if expr[j : j + 1] == "{":
        end = expr.index("}", j)
        body, k = expr[j + 1 : end], 0
        while k < len(body.strip()):
            m = MATCHER.match(body, k)
            if not m:
                raise BacktestError(f"cannot read the matchers of {name}: {body!r}")
            if m.group(2) != "=":
                raise BacktestError(f"{name}{{{body}}}: only = matchers on a recorded name can be inlined")
            matchers.append((m.group(1), m.group(3)))
            k = m.end()
        i = j = end + 1
        j = len(expr) - len(expr[i:].lstrip())
    window = ""
    if expr[j : j + 1] == "[":
        end = expr.index("]", j)
        window, i = expr[j + 1 : end].strip(), end + 1
    if re.match(r"\s*offset\b", expr[i:]):
        raise BacktestError(f"{name} offset ...: an offset on a recorded name cannot be inlined")
    return matchers, window, i


def inline(expr: str, records: dict[str, str], interval: float, depth: int = 0) -> str:
    """`expr` with every recorded name replaced by its rule's expression, in parentheses.

    `name{l="v"}` keeps only the series with l="v" (`and on (l)` a vector labelled so); `name[5m]`
    becomes a subquery at the evaluation interval, what the recorded series would have held."""
    if depth > 8:
        raise BacktestError("recording rules refer to each other too deeply")
    out, i = [], 0
    while i < len(expr):
        c = expr[i]
        if c in "\"'`":
            j = _skip_string(expr, i)
            out.append(expr[i:j])
            i = j
            continue
        m = (
            NAME.match(expr, i)
            if (c.isalpha() or c in "_:") and (i == 0 or not (expr[i - 1].isalnum() or expr[i - 1] in "_:"))
            else None
        )
        if not m:
            out.append(c)
            i += 1
            continue
        name = m.group(0)
        if name not in records:
            out.append(name)
            i = m.end()
            continue
        matchers, window, i = _selector_suffix(expr, m.end(), name)
        inner = f"({inline(records[name], records, interval, depth + 1)})"
        for label, value in matchers:
            inner = f'({inner} and on ({label}) label_replace(vector(1), "{label}", "{value}", "", ""))'
        if window:
            inner = f"{inner}[{window}:{int(interval)}s]"
        out.append(inner)
    return "".join(out)


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


@dataclass
class Pending:
    """An alert (one label set) that was pending in the window and never fired there: the longest hold."""

    alert: str
    heuristic: str | None
    labels: dict[str, str]
    since: str
    held: float  # seconds its condition held, from `since`
    hold: float  # the rule's for:

    def text(self) -> str:
        return f"held {duration_text(self.held)} of for: {duration_text(self.hold)}"


def duration_text(seconds: float) -> str:
    """Prometheus-style: 0s, 45s, 3m, 1h30m, 31d."""
    seconds = int(round(seconds))
    parts = [(seconds // 86400, "d"), (seconds % 86400 // 3600, "h"), (seconds % 3600 // 60, "m"), (seconds % 60, "s")]
    return "".join(f"{n}{unit}" for n, unit in parts if n) or "0s"


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


@dataclass
class BacktestResult:
    alerts: list[Firing]
    backfill: BackfillResult
    rules: int
    seconds: dict[str, float] = field(default_factory=dict)  # wall time per phase
    pending: list[Pending] = field(default_factory=list)  # pending in the window, never fired there
    rules_from: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "alerts": [{k: v for k, v in asdict(a).items() if k != "active_since"} for a in self.alerts],
            "pending": [{**asdict(p), "text": p.text()} for p in self.pending],
        }


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


def _rest(labels: dict[str, str]) -> str:
    return " ".join(
        f"{k}={v}" for k, v in sorted(labels.items()) if k not in ("severity", "heuristic", "instance", "job")
    )


def show(result: BacktestResult, start: float, end: float, out: Any = None) -> None:
    """The firings, then the alerts that were pending but never fired, then a summary; laid out as every table
    (spyglass.cli.layout: the alert, instance and times whole), to a pipe at full width."""
    from rich.text import Text

    from spyglass.cli.console import console_for
    from spyglass.forensics.output import print_table  # labels are data: a `[/x]` in one prints as written

    print_table(
        ["alert", "severity", "heuristic", "instance", "labels", "fired_utc", "resolved_utc"],
        [
            [
                a.alert,
                a.severity or "",
                a.heuristic or "",
                a.labels.get("instance", ""),
                _rest(a.labels),
                a.start,
                a.end or "(still firing)",
            ]
            for a in result.alerts
        ],
        Text(f"alerts that would have fired between {iso(start)} and {iso(end)}"),
        out,
    )
    if result.pending:
        print_table(
            ["alert", "heuristic", "instance", "labels", "pending_since_utc", "held"],
            [
                [p.alert, p.heuristic or "", p.labels.get("instance", ""), _rest(p.labels), p.since, p.text()]
                for p in result.pending
            ],
            Text("pending in the window, never fired there"),
            out,
        )
    b = result.backfill
    summary = Text(
        f"{len(result.alerts)} firings of {result.rules} alert rules ({result.rules_from}); replayed"
        f" {b.events} events ({b.events_in_window} in the window) into {b.samples} samples at"
        f" {b.times} times; " + ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items())
    )
    console_for(out).print(summary, soft_wrap=True)


def dumps(result: BacktestResult) -> str:
    return json.dumps(result.as_json(), indent=2)
