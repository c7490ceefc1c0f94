"""Would the pager have rung? Alert rules evaluated over replayed history by a real Prometheus.

`spyglass backtest` replays the stored events of a window (spyglass.backfill), turns the
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
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from engine.emulator.ports import free_port
from spyglass.backfill import OPENMETRICS_FILE, BackfillError, BackfillResult, iso, parse_duration, replay
from spyglass.config import Config

MAX_POINTS = 10_000  # Prometheus refuses a query_range of more than 11,000 points per series
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


def load_rules(path: Path, default_interval: float) -> tuple[dict[str, str], list[AlertRule]]:
    """The recording rules (name -> expression) and alerting rules of a file or of every *.yml in a folder."""
    files = sorted(p for p in path.glob("*.y*ml")) if path.is_dir() else [path]
    if not files:
        raise BacktestError(f"no rule files (*.yml) in {path}")
    records: dict[str, str] = {}
    alerts: list[AlertRule] = []
    for file in files:
        try:
            document = yaml.safe_load(file.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise BacktestError(f"{file}: not a readable rule file: {exc}") from None
        if not isinstance(document.get("groups"), list):
            continue  # e.g. alertmanager.yml beside the rules
        for group in document["groups"]:
            interval = parse_duration(group["interval"]) if group.get("interval") else default_interval
            for rule in group.get("rules", []):
                if "record" in rule:
                    records[rule["record"]] = str(rule["expr"])
                else:
                    alerts.append(AlertRule(rule["alert"], str(rule["expr"]), interval,
                                            parse_duration(rule["for"]) if rule.get("for") else 0.0,
                                            parse_duration(rule["keep_firing_for"]) if rule.get("keep_firing_for") else 0.0,
                                            {k: str(v) for k, v in (rule.get("labels") or {}).items()}))
    if not alerts:
        raise BacktestError(f"no alerting rules in {path}")
    return records, alerts


def _skip_string(expr: str, i: int) -> int:
    quote, i = expr[i], i + 1
    while i < len(expr) and expr[i] != quote:
        i += 2 if expr[i] == "\\" else 1
    return i + 1


def _selector_suffix(expr: str, i: int, name: str) -> tuple[list[tuple[str, str]], str, int]:
    """After a recorded name at `i`: its `{label="value"}` matchers, its `[range]`, and where it ends."""
    j = len(expr) - len(expr[i:].lstrip())
    matchers: list[tuple[str, str]] = []
    if expr[j:j + 1] == "{":
        end = expr.index("}", j)
        body, k = expr[j + 1:end], 0
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
    if expr[j:j + 1] == "[":
        end = expr.index("]", j)
        window, i = expr[j + 1:end].strip(), end + 1
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
        m = NAME.match(expr, i) if (c.isalpha() or c in "_:") and (i == 0 or not (expr[i - 1].isalnum() or expr[i - 1] in "_:")) else None
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
            [self.binary, f"--config.file={config}", f"--storage.tsdb.path={self.data}",
             f"--storage.tsdb.retention.time={self.retention_days}d", f"--web.listen-address=127.0.0.1:{port}",
             "--query.max-samples=1000000000", "--query.timeout=10m", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{port}"
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
        self.stop()
        raise BacktestError(f"prometheus did not become ready in {timeout:.0f} s: {self._log_tail()}")

    def _log_tail(self) -> str:
        self.log.flush()
        return (self.data.parent / "prometheus.log").read_text(errors="replace")[-1500:]

    def query_range(self, client: httpx.Client, expr: str, start: float, end: float, step: float) -> Iterator[dict]:
        """The matrix of `expr` at start, start + step, ... <= end, in pieces Prometheus accepts."""
        piece = step * (MAX_POINTS - 1)
        while start <= end:
            stop = min(end, start + piece)
            answer = client.post(f"{self.url}/api/v1/query_range",
                                 data={"query": expr, "start": f"{start:.3f}", "end": f"{stop:.3f}", "step": f"{step:g}"})
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


def episodes(rule: AlertRule, presence: dict[tuple[tuple[str, str], ...], set[float]],
             times: list[float]) -> list[Firing]:
    """Firing episodes of `rule` given at which evaluation times each label set was in the result.

    As Prometheus 2.42's AlertingRule.Eval: a new label set is pending from the evaluation it first
    appears at and fires once it has been present `for:` long; one missing from a result is dropped
    if pending, else resolved, unless it is firing and missing for less than `keep_firing_for:`."""
    found: list[Firing] = []
    for labelset, present in presence.items():
        labels = {**dict(labelset), **rule.labels}
        labels.pop("alertname", None)
        active_at = fired_at = missing_since = None
        for t in times:
            if t in present:
                missing_since = None
                if active_at is None:
                    active_at = t
            elif active_at is not None:
                if fired_at is not None and rule.keep_firing:
                    missing_since = t if missing_since is None else missing_since
                    if t - missing_since < rule.keep_firing:
                        continue
                if fired_at is not None:
                    found.append(_firing(rule, labels, active_at, fired_at, t))
                active_at = fired_at = missing_since = None
                continue
            else:
                continue
            if fired_at is None and t - active_at >= rule.hold:
                fired_at = t
        if fired_at is not None and active_at is not None:
            found.append(_firing(rule, labels, active_at, fired_at, None))
    return found


def _firing(rule: AlertRule, labels: dict[str, str], active_at: float, fired_at: float, end: float | None) -> Firing:
    return Firing(rule.name, labels.get("heuristic"), labels.get("severity"), labels, iso(fired_at),
                  iso(end) if end is not None else None, iso(active_at))


def evaluate(prometheus: Prometheus, rule: AlertRule, records: dict[str, str], start: float, end: float,
             client: httpx.Client) -> list[Firing]:
    first = math.ceil(start / rule.interval) * rule.interval
    times = [first + k * rule.interval for k in range(int((end - first) // rule.interval) + 1)]
    if not times:
        return []
    expr = inline(rule.expr, records, rule.interval)
    presence: dict[tuple[tuple[str, str], ...], set[float]] = {}
    try:
        for series in prometheus.query_range(client, expr, times[0], times[-1], rule.interval):
            labels = tuple(sorted((k, v) for k, v in series["metric"].items() if k != "__name__"))
            presence.setdefault(labels, set()).update(float(t) for t, _ in series["values"])
    except BacktestError as exc:
        raise BacktestError(f"alert {rule.name}: {exc}") from None
    return episodes(rule, presence, times)


@dataclass
class BacktestResult:
    alerts: list[Firing]
    backfill: BackfillResult
    rules: int
    seconds: dict[str, float] = field(default_factory=dict)  # wall time per phase

    def as_json(self) -> dict[str, Any]:
        return {"alerts": [{k: v for k, v in asdict(a).items() if k != "active_since"} for a in self.alerts]}


def build_blocks(om_file: Path, data: Path, span: float, promtool: str = "promtool") -> None:
    """TSDB blocks as long as the span allows: promtool reads the whole file once per block."""
    hours = max(2, math.ceil(span / 3600))
    result = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", f"--max-block-duration={hours}h",
                             str(om_file), str(data)], capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise BacktestError(f"promtool refused the backfill: {(result.stderr or result.stdout)[-1500:]}")


def backtest(config: Config, start: float, end: float, rules: Path, step: float = 15.0,
             lookback: float = 7200.0, workers: int = 2) -> BacktestResult:
    """Replay [start - lookback, end], and which alerts of `rules` would have fired in [start, end]."""
    for binary in ("promtool", "prometheus"):
        if shutil.which(binary) is None:
            raise BacktestError(f"{binary} not found: install Debian's prometheus package (scripts/setup)")
    records, alert_rules = load_rules(rules, config.alerts.evaluation_interval_seconds)
    seconds: dict[str, float] = {}
    clock = time.monotonic()

    def phase(name: str) -> None:
        nonlocal clock
        now = time.monotonic()
        seconds[name], clock = now - clock, now

    with tempfile.TemporaryDirectory(prefix="spyglass-backtest-") as folder:
        work = Path(folder)
        backfilled = replay(config, start - lookback, end, step, work / OPENMETRICS_FILE, window=(start, end))
        phase("replay")
        build_blocks(work / OPENMETRICS_FILE, work / "data", end - start + lookback)
        (work / OPENMETRICS_FILE).unlink()
        phase("blocks")
        prometheus = Prometheus(work / "data").start()
        phase("prometheus")
        try:
            with httpx.Client(timeout=600) as client, ThreadPoolExecutor(workers) as pool:
                found = list(pool.map(lambda r: evaluate(prometheus, r, records, start, end, client), alert_rules))
        finally:
            prometheus.stop()
        phase("queries")
    firings = sorted((f for group in found for f in group), key=lambda f: (f.start, f.alert, sorted(f.labels.items())))
    return BacktestResult(firings, backfilled, len(alert_rules), seconds)


def show(result: BacktestResult, start: float, end: float) -> None:
    from rich.console import Console
    from rich.table import Table

    from spyglass.console import plain  # labels are data: a `[/x]` in one prints as written

    table = Table("alert", "severity", "heuristic", "instance", "labels", "fired", "resolved",
                  title=f"alerts that would have fired between {iso(start)} and {iso(end)}")
    for a in result.alerts:
        rest = {k: v for k, v in a.labels.items() if k not in ("severity", "heuristic", "instance", "job")}
        table.add_row(*(plain(v) for v in (a.alert, a.severity or "", a.heuristic or "", a.labels.get("instance", ""),
                      " ".join(f"{k}={v}" for k, v in sorted(rest.items())), a.start, a.end or "(still firing)")))
    console = Console()
    console.print(table)
    b = result.backfill
    console.print(f"{len(result.alerts)} firings of {result.rules} alert rules; replayed {b.events} events"
                  f" ({b.events_in_window} in the window) into {b.samples} samples at {b.times} times; "
                  + ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items()))


def dumps(result: BacktestResult) -> str:
    return json.dumps(result.as_json(), indent=2)
