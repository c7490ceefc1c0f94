"""The heuristics catalogue H1-H22: one table that the rule files, the runbooks and the forensic
diagnosis all read, so no two of them can disagree on a number.

One module a heuristic (`hNN_name.py`, found by a glob as the forensic reports are: adding a
heuristic is adding its module), each with a `build(d: Deployment) -> Heuristic` and, where the
diagnosis checks it over the store, its probe beside it as `hNN_name.sql`. Each heuristic names
its incident, the symptom, the usual wrong first guess, the one cheap check that separates the
hypotheses (with its exact PromQL, SQL over the store's `events` table, or shell command), the
knobs, its thresholds, and the alerts a metric can express. What needs request bodies or history
beyond metrics is said in `diagnosis` and left to the forensic diagnosis. Thresholds that depend
on the deployment come from the `[alerts]` config section (`Deployment`); the others are
constants in the builder of their heuristic, where the expression uses them.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable

from spyglass.alerting.heuristics.model import (
    BURN_WINDOWS,
    BYTES,
    DEFAULT_LANE,
    IL,
    INSTANCE,
    LANE,
    PERCENT,
    SECONDS,
    VALUE,
    Alert,
    Check,
    Deployment,
    Evidence,
    Heuristic,
    Probe,
    Recording,
    Severity,
    Threshold,
    Words,
)
from spyglass.alerting.heuristics.promql import (
    CHECKPOINT_ONLY,
    DECODE,
    DECODE_BASELINE,
    DECODE_MEAN,
    ESTIMATE_RATIO,
    EVICTIONS,
    EVICTIONS_BASELINE,
    LOG_SILENCE,
    LONG_PROMPTS,
    SLO_ERRORS,
    SNAPSHOT_SHARE,
    STOPS_REASONING,
    THINKING_ONLY,
    TTFT,
    per_lane,
    ratio,
    recording_rules,
)

__all__ = [
    "BURN_WINDOWS",
    "BYTES",
    "CHECKPOINT_ONLY",
    "DECODE",
    "DECODE_BASELINE",
    "DECODE_MEAN",
    "DEFAULT_LANE",
    "ESTIMATE_RATIO",
    "EVICTIONS",
    "EVICTIONS_BASELINE",
    "IL",
    "INSTANCE",
    "LANE",
    "LOG_SILENCE",
    "LONG_PROMPTS",
    "PERCENT",
    "SECONDS",
    "SLO_ERRORS",
    "SNAPSHOT_SHARE",
    "STOPS_REASONING",
    "THINKING_ONLY",
    "TTFT",
    "VALUE",
    "Alert",
    "Check",
    "Deployment",
    "Evidence",
    "Heuristic",
    "Probe",
    "Recording",
    "Severity",
    "Threshold",
    "Words",
    "BUILDERS",
    "by_id",
    "catalogue",
    "per_lane",
    "ratio",
    "recording_rules",
]

HEURISTIC_MODULE = re.compile(r"h\d\d_\w+")


def _builders() -> tuple[Callable[[Deployment], Heuristic], ...]:
    """Every `hNN_*` module's `build`, in the order of its number (found as the import system finds
    modules, so an installed wheel lists the same ones as a checkout)."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if HEURISTIC_MODULE.fullmatch(m.name))
    return tuple(importlib.import_module(f"{__name__}.{name}").build for name in names)


BUILDERS = _builders()


def catalogue(d: Deployment | None = None) -> tuple[Heuristic, ...]:
    """H1-H20 with this deployment's thresholds (the defaults when none is given)."""
    d = d or Deployment()
    return tuple(build(d) for build in BUILDERS)


def by_id(d: Deployment | None = None) -> dict[str, Heuristic]:
    return {h.id: h for h in catalogue(d)}
