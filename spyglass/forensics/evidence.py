"""The evidence page of one alert: the figures that prove or refute it, one click from the notification.

For an alert and its identifying labels, over the window of its latest notification (from when it started
firing, minus its rule's lookback, to its end or now) or the window ending at `at`: its heuristic's probe
run as `spyglass diagnose` runs it (the same findings, the same numbers), the discriminating comparison
the catalogue declares (spyglass.alerting.heuristics.model.Evidence), a chart of the alert's signal with
its threshold, the request ids behind the figures (each a link to its trace page), what could not be
checked and why, and the runbook. Every query goes through spyglass.forensics.run.query, read-only.
Building the page asks the store; rendering it (HTML, text) is pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from spyglass.alerting.heuristics import Alert, Deployment, Heuristic
from spyglass.alerting.heuristics.model import ENGINE_NAMES
from spyglass.config import Config
from spyglass.forensics.charts import Chart, Series
from spyglass.forensics.diagnose import Finding, census, finding_of, missing, probe_query, summarise
from spyglass.forensics.output import records
from spyglass.forensics.page import BUCKET, instant
from spyglass.forensics.run import EARLIEST, LATEST, Query, Window, query, render, session
from spyglass.query.bounded import NotFound, QueryError

ALERT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,199}$")
LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
MAX_LABELS = 32
MAX_LABEL_CHARS = 256
MAX_REQUESTS = 10  # request ids listed a page
BUCKETS = 60
HOUR = timedelta(hours=1)
SHORTEST = timedelta(minutes=1)  # a window shorter than this is widened at its start
LONGEST = timedelta(days=2)  # the longest window a page reads (an alert firing for a week shows its last two days)


@dataclass(frozen=True)
class Signal:
    """A chart's series: one value a bucket ($bucket seconds) per `by` (instance, lane or program), and the
    requests behind it (`requests`: a WHERE-and-ORDER over `view`, the worst first)."""

    title: str
    unit: str
    by: str
    sql: str
    view: str = ""
    requests: str = ""


SERIES = {
    "decode": Signal(
        "Decode rate per request, mean a bucket",
        "tok/s",
        "instance",
        f"SELECT {BUCKET} AS t, instance AS name, avg(decode_tps) AS v FROM engine_requests"
        " WHERE decode_tps IS NOT NULL GROUP BY ALL ORDER BY t",
        "engine_requests",
        "decode_tps IS NOT NULL ORDER BY decode_tps",
    ),
    "ttft": Signal(
        "Time to first token, p95 a bucket",
        "s",
        "instance",
        f"SELECT {BUCKET} AS t, instance AS name, quantile_cont(ttft_ms, 0.95) / 1000 AS v FROM engine_requests"
        " WHERE ttft_ms IS NOT NULL GROUP BY ALL ORDER BY t",
        "engine_requests",
        "ttft_ms IS NOT NULL ORDER BY ttft_ms DESC",
    ),
    "evictions": Signal(
        "Evictions a minute",
        "1/min",
        "instance",
        f"SELECT {BUCKET} AS t, instance AS name, count(*) * 60 / $bucket AS v FROM cache_events"
        " WHERE event = 'evict' GROUP BY ALL ORDER BY t",
        "engine_requests",
        "conv IN (SELECT conv FROM cache_events WHERE event = 'evict') ORDER BY ttft_ms DESC NULLS LAST",
    ),
    "thinking_only": Signal(
        "Thinking-only responses a bucket",
        "responses",
        "lane",
        f"SELECT {BUCKET} AS t, lane AS name, count(*) FILTER (WHERE thinking_only) AS v"
        " FROM infer_requests WHERE has_body GROUP BY ALL ORDER BY t",
        "infer_requests",
        "thinking_only ORDER BY coalesce(special_literals, 0) DESC, ts_utc",
    ),
    "rejected": Signal(
        "Requests answered 4xx/5xx a bucket",
        "requests",
        "lane",
        f"SELECT {BUCKET} AS t, lane AS name, count(*) FILTER (WHERE status >= 400) AS v"
        " FROM gateway_requests GROUP BY ALL ORDER BY t",
        "gateway_requests",
        "status >= 400 ORDER BY ts_utc",
    ),
    "requests": Signal(
        "Requests a bucket",
        "requests",
        "lane",
        f"SELECT {BUCKET} AS t, lane AS name, count(*) AS v FROM gateway_requests GROUP BY ALL ORDER BY t",
        "gateway_requests",
        "true ORDER BY ts_utc",
    ),
    "failed": Signal(
        "Requests ended by an error or a cancel a bucket",
        "requests",
        "instance",
        f"SELECT {BUCKET} AS t, instance AS name, count(*) FILTER (WHERE outcome IN ('error', 'cancelled')) AS v"
        " FROM engine_requests GROUP BY ALL ORDER BY t",
        "engine_requests",
        "outcome IN ('error', 'cancelled') ORDER BY ts_utc",
    ),
    "kv_pressure": Signal(
        "KV-full lines a bucket (memory slot, batch retry, refused decode)",
        "lines",
        "instance",
        f"SELECT {BUCKET} AS t, instance AS name, count(*) AS v FROM timeline"
        " WHERE source_kind = 'engine_log' AND kind IN ('kv_no_slot', 'kv_retry', 'decode_failed') GROUP BY ALL ORDER BY t",
        "engine_requests",
        "outcome = 'error' ORDER BY ts_utc",
    ),
    "spawns": Signal(
        "Spawns a bucket",
        "spawns",
        "program",
        f"SELECT {BUCKET} AS t, program AS name, count(*) FILTER (WHERE event = 'spawned') AS v"
        " FROM process_events WHERE program IS NOT NULL GROUP BY ALL ORDER BY t",
    ),
    "events": Signal(
        "Stored events a bucket",
        "events",
        "instance",
        f"SELECT {BUCKET} AS t, coalesce(instance, source) AS name, count(*) AS v FROM timeline"
        " GROUP BY ALL ORDER BY t",
    ),
}
LABEL_OF = {"instance": "instance", "program": "instance", "lane": "lane"}  # the alert label a series' `by` is


@dataclass
class Notification:
    status: str
    starts: datetime
    ends: datetime | None
    labels: dict[str, str]


@dataclass
class EvidencePage:
    alert: Alert
    heuristic: Heuristic
    labels: dict[str, str]
    window: Window
    runbook: str
    notification: Notification | None = None
    events: int = 0
    findings: list[Finding] = field(default_factory=list)
    others: int = 0  # findings of the probe in the window for other labels than these
    comparison: list[tuple[str, str]] = field(default_factory=list)  # (what, measured)
    chart: Chart | None = None
    threshold: float | None = None
    request_ids: list[str] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)
    evidence_sql: str = ""
    engine: str = "strata"  # the engine of the labels' instance: the page speaks its words

    def why_not(self) -> str:
        """Why this alert's heuristic or rule does not apply to the instance's engine ("" when it does)."""
        if not self.heuristic.applies_to(self.engine):
            return f"{self.heuristic.id} does not apply to {ENGINE_NAMES[self.engine]}: {self.heuristic.why_not(self.engine)}"
        if not self.alert.watches(self.engine):
            return f"{self.alert.name} reads metrics {ENGINE_NAMES[self.engine]} has none of"
        return ""

    @property
    def start(self) -> datetime:
        return self.window.params()["from"]

    @property
    def end(self) -> datetime:
        return self.window.params()["to"]


def checked_labels(alertname: str, labels: dict[str, str]) -> dict[str, str]:
    """The alert's name and labels as given (an empty value is no label, as in Prometheus), or a QueryError
    saying which one is refused."""
    if not ALERT_NAME.match(alertname):
        raise QueryError(f"not an alert name: {alertname[:80]!r}")
    if len(labels) > MAX_LABELS:
        raise QueryError(f"{len(labels)} labels, at most {MAX_LABELS}")
    for name, value in labels.items():
        if not LABEL_NAME.match(name):
            raise QueryError(f"not a label name: {name[:80]!r}")
        if len(value) > MAX_LABEL_CHARS or any(ord(c) < 32 for c in value):
            raise QueryError(f"label {name}: a value of at most {MAX_LABEL_CHARS} printable characters")
    return dict(sorted((k, v) for k, v in labels.items() if v))


def rule_of(d: Deployment, alertname: str) -> tuple[Heuristic, Alert]:
    from spyglass.alerting.rules import alerts

    for h, a in alerts(d):
        if a.name == alertname:
            return h, a
    raise NotFound(f"no alert {alertname} in the catalogue")


DURATION = re.compile(r"(?<!offset )\[(\d+)(ms|[smhd])(?::[^]]*)?]")


def lookback(d: Deployment, a: Alert) -> timedelta:
    """How far before it started firing an alert's rule looked: its longest range window plus its `for:`,
    as the generated rule has them (alerts.time_scale applied), the recording rules it reads included."""
    from spyglass.alerting.heuristics import recording_rules
    from spyglass.alerting.rules import UNITS, scaled, scaled_expr

    expr = a.expr + "".join(r.expr for r in recording_rules(d) if re.search(rf"{re.escape(r.record)}\b", a.expr))
    windows = [int(n) * UNITS[unit] for n, unit in DURATION.findall(scaled_expr(d, expr))]
    hold = re.fullmatch(r"(\d+)(ms|[smhd])", scaled(d, a.for_) or "0s")
    held = int(hold.group(1)) * UNITS[hold.group(2)] if hold else 0
    return timedelta(seconds=max(windows, default=0) + held)


def latest_notification(config: Config, alertname: str, labels: dict[str, str]) -> Notification | None:
    """The last notification Alertmanager sent the agent for this alert whose labels include `labels`."""
    q = Query(
        "SELECT status, starts_utc, ends_utc, labels::VARCHAR AS labels FROM alerts__all WHERE alertname = $name"
        " ORDER BY ts_utc DESC, starts_utc DESC LIMIT 1000",
        {"from": EARLIEST, "to": LATEST, "name": alertname},
    )
    import json

    for status, starts, ends, text in query(config, q)[1]:
        got = json.loads(text) if isinstance(text, str) else (text or {})
        if all(got.get(k) == v for k, v in labels.items()):
            return Notification(status, instant(starts), instant(ends) if ends else None, got)
    return None


def the_window(
    config: Config,
    d: Deployment,
    a: Alert,
    labels: dict[str, str],
    at: datetime | None,
    start: datetime | None,
    now: datetime,
) -> tuple[Window, Notification | None]:
    """[start of firing - lookback, end or now) of the latest notification; or the window ending at `at`."""
    back = max(lookback(d, a), SHORTEST)
    if at is not None:
        first = start or at - back
        if not first < at:
            raise QueryError("the window's start must come before its end")
        return Window(max(first, at - LONGEST), at), None
    note = latest_notification(config, a.name, labels)
    if note is None:
        raise NotFound(
            f"no notification of {a.name} with {labels or 'any labels'} reached this agent;"
            " give `at` (RFC 3339) for the window ending there"
        )
    end = note.ends if note.status == "resolved" and note.ends else now
    return Window(max(note.starts - back, end - LONGEST), end), note


def matches(row: dict[str, Any], labels: dict[str, str]) -> bool:
    """A probe's row is this alert's when its instance and lane (where it has them) are the labels'."""
    return all(row.get(k) in (None, "") or k not in labels or str(row[k]) == labels[k] for k in ("instance", "lane"))


def probe_rows(
    config: Config, h: Heuristic, w: Window, labels: dict[str, str]
) -> tuple[list[tuple[Finding, dict[str, Any]]], int, str]:
    """The probe's findings (with their rows) for these labels, how many it found for others, and its SQL."""
    q = probe_query(h, config, w)
    columns, rows = query(config, q)
    text = render(q.sql, q.params)
    d = Deployment.of(config)
    found = ((finding_of(h, row, text, d), row) for row in (dict(zip(columns, r)) for r in rows))
    pairs = [(f, row) for f, row in found if f is not None]
    mine = [(f, r) for f, r in pairs if matches(r, labels)]
    return mine, len(pairs) - len(mine), text


def filled(template: str, row: dict[str, Any], unknown: dict[str, str] | None = None) -> str:
    return summarise(template, row, unknown)


def build(
    config: Config,
    alertname: str,
    labels: dict[str, str],
    at: datetime | None = None,
    start: datetime | None = None,
    now: datetime | None = None,
    window: Window | None = None,
) -> EvidencePage:
    """The page's content. `window` (a test's, or the CLI's) overrides the notification's."""
    from spyglass.alerting.rules import runbook_url

    labels = checked_labels(alertname, labels)
    d = Deployment.of(config)
    h, a = rule_of(d, alertname)
    engine = d.engine_of(labels.get("instance"))
    with session(config):
        if window is None:
            window, note = the_window(config, d, a, labels, at, start, now or datetime.now(UTC))
        else:
            note = None
        page = EvidencePage(a, h.speaking(engine), labels, window, runbook_url(d, a.name), note, engine=engine)
        fill(config, page)
    return page


def fill(config: Config, page: EvidencePage) -> None:
    h, w = page.heuristic, page.window
    page.events, present = census(config, w)
    if why := page.why_not():
        page.not_checked.append(why)
        return
    if h.probe is None or h.evidence is None or h.metrics_only(page.engine):
        why = h.metrics_only(page.engine) or h.diagnosis
        page.not_checked.append(
            f"{h.id} has no probe over the store for {ENGINE_NAMES[page.engine]} (metrics only): its evidence is"
            f" the alert's own PromQL in Prometheus{': ' + why if why else ''}"
        )
        return
    if not page.events:
        page.not_checked.append("nothing is stored in this window: no figure, comparison or chart can be computed")
        return
    if why := missing(h.probe.needs, present):
        page.not_checked.append(f"{h.id}'s probe: {why}")
    else:
        found, page.others, page.evidence_sql = probe_rows(config, h, w, page.labels)
        page.findings = [f for f, _ in found]
        rows = [r for _, r in found]
        compare(config, page, rows)
        if rows and isinstance(h.evidence.threshold, str) and (value := rows[0].get(h.evidence.threshold)) is not None:
            page.threshold = float(value) * h.evidence.threshold_factor
        page.request_ids = [f.trace_request_id for f in page.findings if f.trace_request_id]
    if isinstance(h.evidence.threshold, (int, float)):
        page.threshold = float(h.evidence.threshold) * h.evidence.threshold_factor
    signal = SERIES[h.evidence.series]
    page.chart = chart(config, page, signal)
    page.request_ids = list(dict.fromkeys(page.request_ids + behind(config, page, signal)))[:MAX_REQUESTS]
    if not any(s.points for s in (page.chart.series if page.chart else [])):
        page.not_checked.append(f"the chart: no {signal.title.lower()} of {who(page, signal) or 'any'} in the window")


def compare(config: Config, page: EvidencePage, rows: list[dict[str, Any]]) -> None:
    """The catalogue's comparison for this window: from the probe's row, or the probe over the hour before."""
    e = page.heuristic.evidence
    assert e is not None
    if not rows:
        page.not_checked.append(f"the comparison ({e.control}): the probe found nothing here to compare")
        return
    unknown = page.heuristic.unknown(page.engine)
    for row in rows:
        page.comparison.append(("this window", filled(e.this, row, unknown)))
        if e.other:
            page.comparison.append((e.control, filled(e.other, row, unknown)))
    if not e.other:
        before = Window(page.start - HOUR, page.start)
        earlier, _, _ = probe_rows(config, page.heuristic, before, page.labels)
        page.comparison.append(
            (
                "the hour before",
                "; ".join(filled(e.this, r, unknown) for _, r in earlier)
                or "no finding: the probe is quiet over the hour before the window",
            )
        )


def who(page: EvidencePage, signal: Signal) -> str | None:
    return page.labels.get(LABEL_OF[signal.by])


def chart(config: Config, page: EvidencePage, signal: Signal) -> Chart:
    bucket = max((page.end - page.start).total_seconds() / BUCKETS, 1.0)
    rows = records(*query(config, Query(signal.sql, {**page.window.params(), "bucket": bucket})))
    name = who(page, signal)
    points: dict[str, list[tuple[datetime, float]]] = {}
    for r in rows:
        if r["v"] is not None and (name is None or r["name"] == name):
            points.setdefault(str(r["name"] or "?"), []).append((instant(r["t"]), float(r["v"])))
    series = [Series(n, p) for n, p in sorted(points.items())]
    if page.threshold is not None:
        series.append(
            Series(
                f"threshold {page.threshold:g}",
                [(page.start, page.threshold), (page.end, page.threshold)],
                dashed=True,
                color="#d62728",
            )
        )
    spans = [(f.start, f.end, f.summary) for f in page.findings if f.start and f.end]
    return Chart(f"{page.alert.name}: {signal.title}", signal.unit, series, [], spans)


def behind(config: Config, page: EvidencePage, signal: Signal) -> list[str]:
    """The request ids behind the chart's figures, the worst first."""
    if not signal.view:
        return []
    name = who(page, signal)
    where, order = signal.requests.split(" ORDER BY ")
    sql = (
        f"SELECT request_id FROM {signal.view} WHERE request_id IS NOT NULL AND ({where})"
        f"{f' AND {signal.by} = $name' if name else ''} ORDER BY {order} LIMIT {MAX_REQUESTS}"
    )
    return [str(r[0]) for r in query(config, Query(sql, {**page.window.params(), "name": name or ""}))[1]]
