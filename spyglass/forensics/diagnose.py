"""`spyglass diagnose`: every heuristic of the catalogue with a SQL check, run over a stored window.

Each heuristic's `probe` (spyglass/alerting/heuristics/hNN_*.sql) is one query over the forensic views; each row
it returns is a finding. Severity, summary, wrong first guess, discriminating check and knobs all
come from the catalogue, so a finding and the alert of the same heuristic say the same thing with
the same numbers. Building findings from rows is pure; `diagnose` is the only function that asks
the store (through spyglass.forensics.run.query).
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from spyglass.alerting.heuristics import Deployment, Heuristic, catalogue
from spyglass.config import Config
from spyglass.forensics.run import Query, Window, query, render, session, settings_params, share_rows
from spyglass.forensics.times import utc_text

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
EXIT_STATUS = {"critical": 2, "warning": 1, "info": 0}


@dataclass(frozen=True)
class Finding:
    """One heuristic's hit in the window: where, when, the figures, and what the catalogue says to do."""

    heuristic: str
    title: str
    alert: str
    severity: str
    instance: str | None
    lane: str | None
    start: datetime | None
    end: datetime | None
    summary: str
    figures: dict[str, float | int]
    evidence: str
    wrong_guess: str
    check: str
    knobs: tuple[str, ...]
    trace_request_id: str | None = None  # a request standing for the finding: `spyglass trace ID`

    def as_json(self) -> dict[str, Any]:
        return {
            "heuristic": self.heuristic,
            "title": self.title,
            "alert": self.alert,
            "severity": self.severity,
            "instance": self.instance,
            "lane": self.lane,
            "start": utc_text(self.start) if self.start else None,
            "end": utc_text(self.end) if self.end else None,
            "summary": self.summary,
            "figures": self.figures,
            "evidence": self.evidence,
            "wrong_guess": self.wrong_guess,
            "check": self.check,
            "knobs": list(self.knobs),
            "trace_request_id": self.trace_request_id,
        }


@dataclass
class Diagnosis:
    window: Window
    events: int
    findings: list[Finding] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)  # heuristics with a probe
    unchecked: list[str] = field(default_factory=list)  # metrics only: left to the alerts
    not_checked: dict[str, str] = field(default_factory=dict)  # heuristic -> why its probe could not run here
    not_applicable: dict[str, str] = field(default_factory=dict)  # heuristic -> why no engine here has what it checks
    parquet: str | None = None  # the segments it ran over, when not the store

    def exit_status(self) -> int:
        return max((EXIT_STATUS[f.severity] for f in self.findings), default=0)

    def as_json(self) -> dict[str, Any]:
        w = self.window.params()
        return {
            "window": {"from": utc_text(w["from"]), "to": utc_text(w["to"])},
            "events": self.events,
            "findings": [f.as_json() for f in self.findings],
            "checked": self.checked,
            "not_checked": self.not_checked,
            "not_applicable": self.not_applicable,
            "metrics_only": self.unchecked,
        }


def number(value: Any) -> float | int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value if isinstance(value, (int, float)) else None


def as_object(value: Any) -> dict | None:
    """A JSON object figure (exit causes), as it comes from the file (text) or the agent's API."""
    if isinstance(value, str) and value.startswith("{"):
        value = json.loads(value)
    return value if isinstance(value, dict) else None


def figures_of(names: tuple[str, ...], row: dict[str, Any]) -> dict[str, float | int]:
    """The named figures; a JSON-object figure becomes one figure per key (`exit_causes: exit status 134`)."""
    out: dict[str, float | int] = {}
    for name in names:
        nested = as_object(row.get(name))
        if nested is not None:
            out.update({f"{name}: {k}": value for k, v in nested.items() if (value := number(v)) is not None})
        elif (value := number(row.get(name))) is not None:
            out[name] = value
    return out


class _Summary(string.Formatter):
    """str.format that writes `a x3, b x1` for a JSON object."""

    def format_field(self, value: Any, spec: str) -> str:
        nested = as_object(value)
        if nested is not None:
            return ", ".join(f"{k} x{v}" for k, v in sorted(nested.items(), key=lambda kv: (-kv[1], kv[0])))
        return super().format_field(value if number(value) is None else number(value), spec)


CLAUSE_END = re.compile(r"(?<=[;:.])\s+")  # where a template's clauses end (outside its {fields})


def clauses(template: str) -> list[str]:
    """The template cut after each `; `, `: ` or `. ` that is not inside a {field}."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(template):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth == 0 and ch == " " and i > 0 and template[i - 1] in ";:." and CLAUSE_END.match(template, i):
            out.append(template[start : i + 1])
            start = i + 1
    return [*out, template[start:]]


def fields_of(template: str) -> set[str]:
    return {name.split(".")[0].split("[")[0] for _, name, _, _ in string.Formatter().parse(template) if name}


def summarise(template: str, row: dict[str, Any], unknown: dict[str, str] | None = None) -> str:
    """The template filled from the row, never with a placeholder for a NULL: each clause naming a figure the
    row lacks is left out, and what is not known is said once at the end, with why (`unknown`: figure -> why,
    the engine's; else that the window's events do not give it)."""
    kept, lacking = [], []
    for clause in clauses(template):
        absent = sorted(f for f in fields_of(clause) if row.get(f) is None)
        if absent:
            lacking += [f for f in absent if f not in lacking]
        else:
            kept.append(clause)
    text = _Summary().format("".join(kept), **row).strip().rstrip(";:,")
    if not lacking:
        return text
    text = text + ("" if text.endswith(".") else ".") if text else ""
    reasons = dict.fromkeys((unknown or {}).get(f, "not in this window's events") for f in lacking)
    names = ", ".join(f.replace("_", " ") for f in lacking)
    return f"{text} Not known: {names} ({'; '.join(reasons)}).".strip()


def instant(value: Any) -> datetime | None:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    return None


def finding_of(h: Heuristic, row: dict[str, Any], evidence: str, d: Deployment | None = None) -> Finding | None:
    """The probe's row of heuristic `h` as a finding in the words of its instance's engine, or None when `h`
    does not apply to that engine (pure)."""
    engine = (d or Deployment()).engine_of(row.get("instance"))
    if not h.applies_to(engine):
        return None
    said = h.speaking(engine)
    probe = said.probe
    assert probe is not None  # only heuristics with a probe are run
    named = row.get("alert") or probe.alert
    if named not in (probe.alert, *probe.also):
        raise ValueError(f"{h.id}'s probe row names {named}, which is not one of its probe's alerts")
    alert = next(a for a in h.alerts if a.name == named)
    return Finding(
        h.id,
        h.title,
        alert.name,
        alert.severity,
        row.get("instance"),
        row.get("lane"),
        instant(row.get("start_utc")),
        instant(row.get("end_utc")),
        summarise(probe.summary, row, h.unknown(engine)),
        figures_of(probe.figures, row),
        evidence,
        said.wrong_guess,
        said.check.text,
        said.knobs,
        trace_request_id=row.get("trace_request_id") or None,
    )


def findings_of(
    h: Heuristic, columns: list[str], rows: list[tuple], evidence: str, d: Deployment | None = None
) -> list[Finding]:
    """The probe's rows of heuristic `h` as findings, each in its engine's words (pure)."""
    found = (finding_of(h, dict(zip(columns, values)), evidence, d) for values in rows)
    return [f for f in found if f is not None]


def not_applicable(h: Heuristic, d: Deployment) -> str:
    """Why `h` applies to none of the deployment's engines ("" when it applies to one)."""
    engines = sorted(d.engines_present())
    if any(h.applies_to(e) for e in engines):
        return ""
    return "; ".join(h.why_not(e) for e in engines)


def probe_query(h: Heuristic, config: Config, w: Window) -> Query:
    assert h.probe is not None  # only heuristics with a probe are run
    return Query(h.probe.sql.strip(), {**w.params(), **settings_params(config)})


def census(config: Config, w: Window, parquet: str | None = None) -> tuple[int, set[str]]:
    """The events of the window, and the collector kinds with at least one of them: one read of the window."""
    _, rows = query(
        config,
        Query(
            "SELECT count(*), list(DISTINCT source_kind) FILTER (WHERE source_kind IS NOT NULL) FROM timeline",
            w.params(),
        ),
        parquet,
    )
    if not rows:
        return 0, set()
    count, kinds = rows[0]
    return int(count), {str(kind) for kind in kinds or ()}


def missing(needs: tuple[str, ...], present: set[str]) -> str:
    """Why a probe needing these source kinds cannot be checked, or "" when it can."""
    absent = [need.replace("|", " or ") for need in needs if not set(need.split("|")) & present]
    return f"no {', '.join(absent)} events in the window" if absent else ""


def diagnose(config: Config, w: Window, parquet: str | None = None) -> Diagnosis:
    """Every probe of the catalogue (with this deployment's thresholds) over the window: of the store,
    or of the Parquet segments `parquet` matches, all on one connection (one query process). A probe
    whose sources wrote nothing in the window is not run: it is listed in `not_checked` with the
    reason, never reported as healthy. A heuristic that applies to none of the deployment's engines (H4's
    checkpoint-only reuse on a llama-server) is not run either: `not_applicable`, with why."""
    with session(config, parquet):
        return _diagnose(config, w, parquet)


def _diagnose(config: Config, w: Window, parquet: str | None) -> Diagnosis:
    events, present = census(config, w, parquet)
    result = Diagnosis(w, events, parquet=parquet)
    if parquet is not None and events:
        share_rows(config, w, parquet)  # the probes' per-request rows, computed once instead of once a probe
    d = Deployment.of(config)
    for h in catalogue(d):
        if why := not_applicable(h, d):
            result.not_applicable[h.id] = why
            continue
        if h.probe is None or all(h.metrics_only(e) for e in d.engines_present()):
            result.unchecked.append(h.id)
            continue
        if not result.events:
            result.checked.append(h.id)
            continue
        if why := missing(h.probe.needs, present):
            result.not_checked[h.id] = why
            continue
        result.checked.append(h.id)
        q = probe_query(h, config, w)
        columns, rows = query(config, q, parquet)
        result.findings += findings_of(h, columns, rows, render(q.sql, q.params), d)
    result.findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], f.start or w.params()["from"], f.heuristic))
    return result
