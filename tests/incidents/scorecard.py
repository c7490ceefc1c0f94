"""The scorecard: the real `spyglass ingest`, `backtest` and `diagnose` over every window of the corpus,
judged against what the seeds say must be found, and written as docs/detection.md.

A heuristic *fires* in a window when the backtest fires one of its alerts (Watchdog excluded: it
fires everywhere by design) or, for the diagnosis, when a finding names it. Per heuristic and tool:
a hit is a required heuristic that fired, a miss one that did not, a false alarm one that fired
although the window neither requires nor allows it. Precision = hits / (hits + false alarms),
recall = hits / (hits + misses). A figure is quoted when a finding of its heuristic carries the
number, to the seed's precision, among its figures or in its summary.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from typer.testing import CliRunner

from incidents.windows import WINDOWS, Window
from spyglass.cli.app import app

NOT_SCORED = {"Watchdog"}
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
HEURISTICS = [f"H{n}" for n in range(1, 21)]


@dataclass
class Outcome:
    window: Window
    alerts: list[dict] = field(default_factory=list)
    pending: list[dict] = field(default_factory=list)
    findings: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def _placed(self, h: str, where: str) -> bool:
        return self.window.where.get(h, where) == where

    def fired(self) -> set[str]:
        return {
            a["heuristic"]
            for a in self.alerts
            if a["alert"] not in NOT_SCORED and a["heuristic"] and self._placed(a["heuristic"], _where(a["labels"]))
        }

    def found(self) -> set[str]:
        return {f["heuristic"] for f in self.findings if self._placed(f["heuristic"], _found_where(f))}

    def misplaced(self) -> dict[str, set[str]]:
        """Heuristics that fired on another instance or lane than the one the window names for them."""
        return {
            "backtest": {
                a["heuristic"]
                for a in self.alerts
                if a["alert"] not in NOT_SCORED
                and a["heuristic"]
                and not self._placed(a["heuristic"], _where(a["labels"]))
            },
            "diagnose": {f["heuristic"] for f in self.findings if not self._placed(f["heuristic"], _found_where(f))},
        }

    def misses(self) -> dict[str, set[str]]:
        w = self.window
        return {"backtest": set(w.must) - self.fired(), "diagnose": (w.must | w.diagnose) - self.found()}

    def false_alarms(self) -> dict[str, set[str]]:
        w, misplaced = self.window, self.misplaced()
        return {
            "backtest": (self.fired() - w.must - w.diagnose - w.may) | misplaced["backtest"],
            "diagnose": (self.found() - w.must - w.diagnose - w.may) | misplaced["diagnose"],
        }

    def unquoted(self) -> list[tuple[str, float]]:
        return [
            (h, x)
            for h, numbers in self.window.figures.items()
            for x in numbers
            if not quoted(x, [f for f in self.findings if f["heuristic"] == h])
        ]

    def _shortfalls(self) -> list[tuple[tuple[str, str], str]]:
        """Each miss and unquoted figure, keyed (heuristic, side) as `Window.known_misses` names them."""
        out = [((h, tool), f"{tool} missed {h}") for tool, hs in self.misses().items() for h in sorted(hs, key=order)]
        return out + [((h, "figure"), f"diagnose did not quote {h}'s {x:,.12g}") for h, x in self.unquoted()]

    def known(self) -> list[str]:
        """The shortfalls the window declares as known misses: scored, printed, not failing."""
        return [text for key, text in self._shortfalls() if key in self.window.known_misses]

    def known_of(self, h: str) -> list[str]:
        """The known misses of heuristic `h` in this window."""
        return [text for key, text in self._shortfalls() if key[0] == h and key in self.window.known_misses]

    def problems(self) -> list[str]:
        out = list(self.errors)
        shortfalls = self._shortfalls()
        out += [text for key, text in shortfalls if key not in self.window.known_misses and "missed" in text]
        for tool, hs in self.false_alarms().items():
            out += [
                f"{tool} false alarm {h}"
                + (f" (elsewhere than {self.window.where[h]})" if h in self.misplaced()[tool] else "")
                for h in sorted(hs, key=order)
            ]
        out += [text for key, text in shortfalls if key not in self.window.known_misses and "missed" not in text]
        missing = {key for key, _ in shortfalls}
        out += [
            f"known miss {h} ({side}) no longer misses: remove it from known_misses"
            for h, side in self.window.known_misses
            if (h, side) not in missing
        ]
        return out


def order(h: str) -> int:
    return int(h[1:]) if h[1:].isdigit() else 99


def numbers_of(finding: dict) -> list[float]:
    values = [float(v) for v in finding.get("figures", {}).values() if isinstance(v, int | float)]
    values += [float(m.replace(",", "")) for m in NUMBER.findall(finding.get("summary", ""))]
    return values


def significant(x: float) -> int:
    """Significant digits the seed wrote: 4.7e9 has 2, 2508 has 4, 3.34 has 3."""
    digits = f"{x:.12g}".split("e")[0].replace("-", "").replace(".", "").strip("0")
    return max(1, len(digits))


def quoted(x: float, findings: list[dict]) -> bool:
    """A finding carries `x` to the precision the seed gave it (4.7e9 is quoted by 4,716,474,084)."""
    n = significant(x)
    return any(float(f"{v:.{n}g}") == float(f"{x:.{n}g}") for f in findings for v in numbers_of(f))


def run_window(window: Window, folder: Path) -> Outcome:
    """Build, ingest, backtest and diagnose one window with the real commands."""
    outcome = Outcome(window)
    runner = CliRunner()
    config = str(window.build(folder))
    ingested = runner.invoke(app, ["ingest", "--config", config])
    if ingested.exit_code != 0:
        outcome.errors.append(f"ingest exited {ingested.exit_code}: {ingested.output[-500:]}")
        return outcome
    span = ["--from", window.start.isoformat(), "--to", window.end.isoformat()]
    step = ["--step", "60s"] if (window.end - window.start).total_seconds() > 12 * 3600 else []
    tested = runner.invoke(app, ["backtest", "--config", config, *span, *step, "--json"])
    if tested.exit_code == 0:
        answer = json.loads(tested.stdout)
        outcome.alerts, outcome.pending = answer["alerts"], answer.get("pending", [])
    else:
        outcome.errors.append(f"backtest exited {tested.exit_code}: {tested.output[-500:]}")
    diagnosed = runner.invoke(app, ["diagnose", "--config", config, *span, "--json"])
    if diagnosed.exit_code in (0, 1, 2) and diagnosed.stdout.lstrip().startswith("{"):
        outcome.findings = json.loads(diagnosed.stdout)["findings"]
    else:
        outcome.errors.append(f"diagnose exited {diagnosed.exit_code}: {diagnosed.output[-500:]}")
    return outcome


def _run_named(name: str, root: str) -> Outcome:
    from incidents.windows import BY_NAME

    return run_window(BY_NAME[name], Path(root) / name)


def run_corpus(root: Path, workers: int = 1) -> list[Outcome]:
    """Every window, in corpus order; with workers > 1, in that many fresh processes (spawned: the
    commands swap sys.stdout, so windows never share a process at once)."""
    if workers <= 1:
        return [run_window(w, root / w.name) for w in WINDOWS]
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    tests = str(Path(__file__).resolve().parents[1])
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH")) if p)
    longest_first = sorted(WINDOWS, key=lambda w: w.start - w.end)  # the quiet day does not run alone at the end
    import signal

    from spyglass.alerting.backtest_cleanup import die_with_parent

    # A worker gets SIGTERM when the test process dies: its backtest then stops its Prometheus itself.
    with ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=die_with_parent,
        initargs=(signal.SIGTERM,),
    ) as pool:
        done = dict(
            zip(
                [w.name for w in longest_first],
                pool.map(_run_named, [w.name for w in longest_first], [str(root)] * len(WINDOWS)),
            )
        )
    return [done[w.name] for w in WINDOWS]


# -- docs/detection.md ------------------------------------------------------------------------------
def _ratio(a: int, b: int) -> str:
    return f"{a / b:.2f}" if b else "-"


def _counts(outcomes: list[Outcome], tool: str, h: str) -> tuple[int, int, int]:
    hits = misses = false = 0
    for o in outcomes:
        required = o.window.must if tool == "backtest" else o.window.must | o.window.diagnose
        got = o.fired() if tool == "backtest" else o.found()
        hits += h in required and h in got
        misses += h in o.misses()[tool]
        false += h in o.false_alarms()[tool]
    return hits, misses, false


def _where(labels: dict) -> str:
    """The instance an alert names, else its lane, else its program."""
    return labels.get("instance") or labels.get("lane") or labels.get("program", "")


def _found_where(finding: dict) -> str:
    return finding.get("instance") or finding.get("lane") or ""


def render(outcomes: list[Outcome]) -> str:
    lines = [
        "# Detection scorecard",
        "",
        "Generated by `tests/test_detection.py` from the corpus in `tests/incidents/` (regenerate:",
        "`scripts/generate`, or `scripts/test tests/test_detection.py --update-golden`). Each window",
        "replays an incident of the seeds (or a day that must stay quiet) through every source, then",
        "runs the real `spyglass backtest` (rules generated from the window's config) and `spyglass",
        "diagnose` over it. A window requires some heuristics (`must`; `diagnose only` for a single",
        "request the pager rightly ignores), allows standing conditions (`may`), and may name the",
        "instance a heuristic must fire on (elsewhere it is a false alarm). Watchdog (H19) fires",
        "everywhere by design and is not scored. A known miss (a window's `known_misses`: what could",
        "not yet be fixed, with why) counts as a miss in precision and recall and is listed apart; it does",
        "not fail the test, and one that stops missing does.",
        "",
        "## Per heuristic, over the whole corpus",
        "",
        "| heuristic | backtest hits | misses | false alarms | precision | recall |"
        " diagnose hits | misses | false alarms | precision | recall | figures quoted | known misses |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for h in HEURISTICS:
        b, d = _counts(outcomes, "backtest", h), _counts(outcomes, "diagnose", h)
        figures = [(o, x) for o in outcomes for x in o.window.figures.get(h, ())]
        unquoted = sum((h, x) in o.unquoted() for o, x in figures)
        lines.append(
            f"| {h} | {b[0]} | {b[1]} | {b[2]} | {_ratio(b[0], b[0] + b[2])} | {_ratio(b[0], b[0] + b[1])}"
            f" | {d[0]} | {d[1]} | {d[2]} | {_ratio(d[0], d[0] + d[2])} | {_ratio(d[0], d[0] + d[1])}"
            f" | {len(figures) - unquoted} of {len(figures)} | {sum(len(o.known_of(h)) for o in outcomes)} |"
        )
    exact = sum(not o.problems() and not o.known() for o in outcomes)
    known = [
        (o, text, o.window.known_misses[key])
        for o in outcomes
        for key, text in o._shortfalls()
        if key in o.window.known_misses
    ]
    lines += [
        "",
        f"{exact} of {len(outcomes)} windows exact (no miss, no false alarm, every figure quoted);"
        f" {sum(not o.problems() and bool(o.known()) for o in outcomes)} pass with known misses only.",
        "",
        "## Known misses",
        "",
    ]
    lines += [f"- {o.window.name}: {text}. {reason}" for o, text, reason in known] or ["None."]
    lines += ["", "## Per window", ""]
    for o in outcomes:
        lines += _window_section(o)
    return "\n".join(lines).rstrip() + "\n"


def _window_section(o: Outcome) -> list[str]:
    w = o.window
    names = lambda hs: ", ".join(sorted(hs, key=order)) or "none"  # noqa: E731
    lines = [
        f"### {w.name}: {w.what}",
        "",
        f"Seed {w.seed}; {w.start:%Y-%m-%d %H:%M}-{w.end:%Y-%m-%d %H:%M} UTC. Must: {names(w.must)};"
        f" diagnose only: {names(w.diagnose)}; may: {names(w.may)}.",
        "",
    ]
    alerts = [a for a in o.alerts if a["alert"] not in NOT_SCORED]
    if alerts:
        lines += ["| alert | heuristic | where | fired | resolved |", "|---|---|---|---|---|"]
        lines += [
            f"| {a['alert']} | {a['heuristic']} | {_where(a['labels'])} | {a['start']} | {a['end'] or 'still firing'} |"
            for a in alerts
        ]
    else:
        lines.append("No alert fired (but Watchdog).")
    held = [p for p in o.pending if p["alert"] not in NOT_SCORED]
    if held:
        lines += [
            "",
            "Pending, never fired: "
            + "; ".join(f"{p['alert']} {_where(p['labels'])} {p['text']} from {p['since']}" for p in held)
            + ".",
        ]
    lines += [
        "",
        "Diagnosis: "
        + (
            "; ".join(
                f"{f['heuristic']} {f['alert']} ({f.get('instance') or f.get('lane') or 'window'})" for f in o.findings
            )
            or "no finding"
        )
        + ".",
    ]
    problems, known = o.problems(), o.known()
    verdict = (
        "; ".join(problems) + "."
        if problems
        else "exact."
        if not known
        else "known misses only: " + "; ".join(known) + "."
    )
    lines += ["", "Verdict: " + verdict, ""]
    return lines
