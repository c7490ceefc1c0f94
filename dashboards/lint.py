"""A dashboard linter in the spirit of Grafana's dashboard-linter (a Go tool not installable here),
plus the pieces the preview and the tests share: every expression of a dashboard, the metric names
an expression reads, and the template variables substituted as Grafana would.

Pure functions over the generated JSON; `problems(dashboards, catalogue, rules)` lists every rule
broken, as `uid: panel: what`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

RANGE_FUNCTIONS = {"rate", "irate", "increase"}
INTERVAL_FUNCTIONS = {"rate", "irate"}  # increase() may count over a stated window ("spawns in 15m")
KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_TOKEN = re.compile(r"\[[^\]]*\]|\{[^}]*\}|[A-Za-z_:][A-Za-z0-9_:]*|\(|\)|\$\w+|\S")
_UID = re.compile(r"^[a-z0-9-]{1,40}$")
PROMETHEUS_SERIES = {"ALERTS", "ALERTS_FOR_STATE", "up"}


@dataclass(frozen=True)
class Expr:
    """One PromQL expression of a dashboard, and where it is."""

    uid: str
    where: str  # panel title, or "annotation NAME", or "variable NAME"
    expr: str
    promql: bool = True  # False for a variable's label_values(...)


def panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows and nested row panels included."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def expressions(dashboard: Mapping[str, Any]) -> list[Expr]:
    uid = dashboard["uid"]
    found = [Expr(uid, p.get("title", ""), t["expr"]) for p in panels(dashboard) for t in p.get("targets", [])]
    found += [
        Expr(uid, f"annotation {a['name']}", a["expr"])
        for a in dashboard.get("annotations", {}).get("list", [])
        if a.get("expr")
    ]
    found += [
        Expr(uid, f"variable {v['name']}", v["query"], promql=False)
        for v in dashboard.get("templating", {}).get("list", [])
        if v.get("type") == "query"
    ]
    return found


def _tokens(expr: str) -> list[str]:
    return _TOKEN.findall(_STRING.sub('""', expr))


def _strip_label_lists(tokens: list[str]) -> list[str]:
    """Drop `by (a, b)`-style label lists, which name labels, not series."""
    out, i = [], 0
    while i < len(tokens):
        if (
            tokens[i] in {"by", "without", "on", "ignoring", "group_left", "group_right"}
            and i + 1 < len(tokens)
            and tokens[i + 1] == "("
        ):
            depth, i = 0, i + 1
            while i < len(tokens):
                depth += {"(": 1, ")": -1}.get(tokens[i], 0)
                i += 1
                if depth == 0:
                    break
            continue
        out.append(tokens[i])
        i += 1
    return out


_LABEL_LIST = re.compile(r"\b(by|on)\s*\(([^()]*)\)")


def _host_blind_lists(expr: str) -> list[str]:
    """`by (...)` and `on (...)` lists that leave out `host` (a `by (le)` of a heatmap aside): an
    instance name is unique on its host only, so with Host = All they would merge two hosts."""
    out = []
    for keyword, labels in _LABEL_LIST.findall(_STRING.sub('""', expr)):
        names = {name.strip() for name in labels.split(",") if name.strip()}
        if names and names != {"le"} and "host" not in names:
            out.append(f"{keyword} ({labels}) leaves out host")
    return out


def _walk(expr: str) -> Iterator[tuple[str, str, str]]:
    """(series name, innermost enclosing function, the range after it or "") for every series read."""
    tokens = _strip_label_lists(_tokens(expr))
    stack: list[str] = []
    for i, tok in enumerate(tokens):
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        if tok == "(":
            stack.append(
                tokens[i - 1]
                if i and re.fullmatch(r"[A-Za-z_]\w*", tokens[i - 1]) and tokens[i - 1] not in KEYWORDS
                else ""
            )
        elif tok == ")":
            if stack:
                stack.pop()
        elif re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", tok) and nxt != "(" and tok.lower() not in KEYWORDS:
            window = ""
            j = i + 1
            if j < len(tokens) and tokens[j].startswith("{"):
                j += 1
            if j < len(tokens) and tokens[j].startswith("["):
                window = tokens[j][1:-1]
            yield tok, next((f for f in reversed(stack) if f), ""), window


def series(expr: str) -> set[str]:
    """The series names an expression reads (label_values(metric{...}, label) reads `metric`)."""
    return {name for name, _, _ in _walk(expr)}


def _histogram_part(name: str, histograms: set[str]) -> bool:
    return any(name == h + suffix for h in histograms for suffix in ("_bucket", "_sum", "_count"))


def expr_problems(e: Expr, types: Mapping[str, str], rules: set[str]) -> list[str]:
    """What is wrong with one expression: unknown series, a counter outside rate/increase, a rate
    window other than $__rate_interval, a `by` or `on` list without host."""
    histograms = {n for n, t in types.items() if t == "histogram"}
    out, variable = [], not e.promql
    if variable:  # label_values(metric{...}, label): only the metric is a series
        inner = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", e.expr, re.S)
        if not inner:
            return [f"variable query {e.expr!r} is not label_values(series, label)"]
        e = Expr(e.uid, e.where, f"count({inner.group(1)})")
    out += _host_blind_lists(e.expr)
    for name, function, window in _walk(e.expr):
        known = name in types or name in rules or name in PROMETHEUS_SERIES or _histogram_part(name, histograms)
        if not known:
            out.append(f"{name} is neither in the metric catalogue nor a recording rule")
        cumulative = types.get(name) == "counter" or _histogram_part(name, histograms)
        if variable:
            continue
        if cumulative and function not in RANGE_FUNCTIONS:
            out.append(f"counter {name} outside rate/increase (in {function or 'nothing'})")
        if function in INTERVAL_FUNCTIONS and window and window != "$__rate_interval":
            out.append(f"{function}() of {name} over [{window}], not [$__rate_interval]")
    return out


def problems(dashboards: Mapping[str, Mapping[str, Any]], types: Mapping[str, str], rules: set[str]) -> list[str]:
    """Every lint rule broken, over all dashboards."""
    out: list[str] = []
    seen_uids: dict[str, str | None] = {}
    for uid, d in dashboards.items():
        if not _UID.match(uid) or d.get("uid") != uid:
            out.append(f"{uid}: uid must be lowercase a-z0-9- and at most 40 characters, and match the file")
        if d.get("title") in seen_uids.values():
            out.append(f"{uid}: title {d.get('title')!r} used twice")
        seen_uids[uid] = d.get("title")
        for v in d.get("templating", {}).get("list", []):
            ds = v.get("datasource")
            if v.get("type") == "query" and (not isinstance(ds, dict) or not ds.get("uid", "").startswith("$")):
                out.append(f"{uid}: variable {v['name']}: datasource is not a variable")
        ids = [p.get("id") for p in panels(d)]
        if len(ids) != len(set(ids)) or None in ids:
            out.append(f"{uid}: panel ids missing or not unique")
        for p in panels(d):
            where = f"{uid}: {p.get('title') or 'panel ' + str(p.get('id'))}"
            if not p.get("title"):
                out.append(f"{where}: no title")
            if p.get("type") == "row":
                continue
            if not p.get("fieldConfig", {}).get("defaults", {}).get("unit"):
                out.append(f"{where}: no unit")
            for holder in [p, *p.get("targets", [])]:
                ds = holder.get("datasource")
                if not isinstance(ds, dict) or not str(ds.get("uid", "")).startswith("$"):
                    out.append(f"{where}: datasource is not a variable")
        out += [f"{e.uid}: {e.where}: {msg}" for e in expressions(d) for msg in expr_problems(e, types, rules)]
    return out


# ---------------------------------------------------------------------------------------------
# Template variables, as Grafana substitutes them.
# ---------------------------------------------------------------------------------------------


def rate_interval(step_seconds: float, scrape_seconds: float) -> float:
    """Grafana's $__rate_interval: max($__interval + scrape interval, 4 * scrape interval)."""
    return max(step_seconds + scrape_seconds, 4 * scrape_seconds)


def substitute(
    expr: str,
    *,
    step_seconds: float,
    scrape_seconds: float,
    range_seconds: float,
    values: Mapping[str, str] | None = None,
) -> str:
    """The expression as Grafana sends it: $__rate_interval, $__interval, $__range, and the
    dashboard variables (All is `.*`, as the variables' allValue says)."""
    values = {"host": ".*", "instance": ".*", "lane": ".*", **(values or {})}
    out = expr.replace("$__rate_interval", f"{int(rate_interval(step_seconds, scrape_seconds))}s")
    out = out.replace("$__interval", f"{int(step_seconds)}s").replace("$__range", f"{int(range_seconds)}s")
    for name, value in sorted(values.items(), key=lambda kv: -len(kv[0])):
        out = out.replace(f"${{{name}}}", value).replace(f"${name}", value)
    return out
