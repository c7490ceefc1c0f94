"""The rules a backtest evaluates: read from rule files (safely: no aliases, bounded size) or generated
from a config in memory, and recorded names inlined so that nothing has to be recorded first."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from spyglass.alerting.backfill import BackfillError, parse_duration
from spyglass.config import Config

MAX_RULE_FILE_BYTES = 4 << 20  # the generated rules are about 60 kB
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
