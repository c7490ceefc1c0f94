"""Current values of every series: what the exporters read and the checkpoint persists.

Plain dicts keyed by label-value tuples, so the hot path costs a dict update per signal (about
0.1 us, against 6 us for an OpenTelemetry SDK `add`; see docs/benchmarks.md). The pipeline holds
`lock` while it applies a batch; exporters hold it while they copy a snapshot.
"""

from __future__ import annotations

import copy
import functools
import threading
from bisect import bisect_left
from collections.abc import Callable, Container
from typing import Any

from loguru import logger

from spyglass.signals.catalogue import Catalogue

Key = tuple[str, ...]
# An observation's exemplar: the request id it came from and its time (epoch seconds). The trace id
# is derived from the request id when /metrics is rendered, so the hot path never hashes.
Exemplar = tuple[str, float]
HistogramHook = Callable[[str, Key, float], None]
NUMBER = (int, float)  # exact classes: a bool, a str, None or a numpy scalar is refused
MAX_VALUE = float(2**63)  # counters of bytes reach 2^50 in a year; beyond this is a bug or forgery
MAX_SERIES = 2000  # per metric: far above what bounded labels give, far below a memory problem
DROPPED = "spyglass_state_dropped_series_total"
MAX_INFO_LABEL = 200  # characters of a free-text info label (a build, a model file name)
# C0 controls and DEL as visible escapes: a NUL or an escape sequence never reaches a label value
CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}
OTHER = "other"  # the label value of anything outside its closed set
UNLISTED = "spyglass_source_unlisted_labels_total"
# A saved state written before signals had typed checkpoints: one untyped `memo` for all of them,
# kept under this name until each signals object has taken its part (signals.attach_signals).
LEGACY_MEMO = "memo"


def printable_label(value: str) -> str:
    """A free-text label value as data: control characters escaped (\\x00), at most MAX_INFO_LABEL."""
    return value.translate(CONTROLS)[:MAX_INFO_LABEL]


class MetricState:
    """Every series of every declared metric, with the guarantees the exposition relies on.

    Only metrics of its catalogue exist (an undeclared name is a KeyError, never a silent new
    series), and a histogram observation lands in exactly one bucket of the catalogue's bounds.
    Only finite numbers of magnitude at most MAX_VALUE are ever held: `inc`, `set` and `observe`
    raise ValueError naming the metric for anything else (a str, NaN, inf, None), and change
    nothing. A new series must have one value per label of its metric (ValueError naming the
    metric otherwise; checked when the series is made, not on each update). No metric holds more
    than `max_series` series: a new series past the cap is dropped and counted in
    spyglass_state_dropped_series_total{metric}. `to_json`/`load_json` round-trip every series, so
    a restarted agent continues its counters; `load_json` restores only what
    passes the same checks. It never locks by itself (hold `lock` to change or copy it from more
    than one thread).
    """

    def __init__(self, catalogue: Catalogue, max_series: int = MAX_SERIES) -> None:
        self.catalogue = catalogue
        self.max_series = max_series
        self.lock = threading.RLock()
        self.values: dict[str, dict[Key, float]] = {}
        self.hists: dict[str, dict[Key, list[Any]]] = {}  # key -> [per-bucket counts (+Inf last), sum]
        self.bounds: dict[str, tuple[float, ...]] = {}
        self.arity = {spec.name: len(spec.labels) for spec in catalogue}
        for spec in catalogue:
            if spec.type == "histogram":
                self.hists[spec.name] = {}
                self.bounds[spec.name] = spec.buckets
            else:
                self.values[spec.name] = {}
        # The latest exemplar of each bucket of a series, for the histograms fed one: name ->
        # (key, bucket index) -> (request id, observed value, epoch seconds). In memory only
        # (`to_json` leaves it out): after a restart each bucket shows none until its next observation.
        self.exemplars: dict[str, dict[tuple[Key, int], tuple[str, float, float]]] = {}
        self.with_exemplars = frozenset(spec.name for spec in catalogue if spec.exemplars)
        self.histogram_hooks: list[HistogramHook] = []
        # What each signals object must remember to derive a value (the last raw counters of a
        # serve, the start banners waiting for their sequence), by its source kind: saved with the series
        # (`checkpointers` give the current ones; `saved_signals` holds what was loaded, for a
        # signals object to restore), so a restart derives exactly what one pass would. Its owner
        # validates what it reads back (signals.attach_signals).
        self.saved_signals: dict[str, Any] = {}
        self.checkpointers: dict[str, Callable[[], Any]] = {}

    def listed(self, source: str, label: str, value: str, allowed: Container[str]) -> str:
        """`value` if it is in its closed set `allowed`; else OTHER, counted in
        spyglass_source_unlisted_labels_total{source, label}: no label value from a source is unbounded."""
        if value in allowed:
            return value
        self.inc(UNLISTED, (source, label))
        return OTHER

    def series(self, name: str) -> dict[Key, float]:
        """The live dict of one counter, gauge or info metric (read it; write through the methods)."""
        return self.values[name]

    def inc(self, name: str, key: Key, amount: float = 1.0) -> None:
        if amount.__class__ not in NUMBER or not -MAX_VALUE <= amount <= MAX_VALUE:
            raise ValueError(f"{name}: not a finite number: {amount!r:.40}")
        values = self.values[name]
        old = values.get(key)
        if old is None:
            if not self._admit(name, key, values):
                return
            old = 0.0
        values[key] = old + amount

    def set(self, name: str, key: Key, value: float) -> None:
        if value.__class__ not in NUMBER or not -MAX_VALUE <= value <= MAX_VALUE:
            raise ValueError(f"{name}: not a finite number: {value!r:.40}")
        values = self.values[name]
        if key not in values and not self._admit(name, key, values):
            return
        values[key] = value

    def drop(self, name: str, prefix: Key) -> None:
        """Remove every series of `name` whose labels start with `prefix` (a target gone stale)."""
        values = self.values[name]
        for key in [k for k in values if k[: len(prefix)] == prefix]:
            del values[key]

    def _admit(self, name: str, key: Key, series: dict[Key, Any]) -> bool:
        """Whether a new series `key` of `name` may be made: ValueError for a key that is not one value
        per label (a short key would render a partial label set, a long one be cut); False past the cap."""
        if len(key) != self.arity[name]:
            raise ValueError(
                f"{name}: {len(key)} label values {key!r:.80} for its {self.arity[name]} labels"
                f" {', '.join(self.catalogue[name].labels) or '(none)'}"
            )
        return len(series) < self.max_series or not self._full(name)

    def _full(self, name: str) -> bool:
        """Count a series refused by the cap (the counter itself is bounded by the catalogue)."""
        if name == DROPPED:
            return False
        dropped = self.values.get(DROPPED)
        if dropped is not None:
            dropped[(name,)] = dropped.get((name,), 0.0) + 1.0
        return True

    def set_info(self, name: str, key: Key, identity: int) -> None:
        """Make `key` the one info series of its first `identity` labels (a build replaces the last).
        The other labels are free text from a log or a body: written as `printable_label`."""
        key = key[:identity] + tuple(printable_label(v) for v in key[identity:])
        values = self.values[name]
        for old in [k for k in values if k[:identity] == key[:identity] and k != key]:
            del values[old]
        if key not in values and not self._admit(name, key, values):
            return
        values[key] = 1.0

    def set_one_hot(self, name: str, key: Key, states: tuple[str, ...], current: str) -> None:
        """1 for `current` (the last label) and 0 for every other state of `key`."""
        values = self.values[name]
        for state in dict.fromkeys((*states, current)):
            if state:
                full = key + (state,)
                if full not in values and not self._admit(name, full, values):
                    continue
                values[full] = 1.0 if state == current else 0.0

    def total(self, name: str, /, **labels: str) -> float:
        """The sum of a metric's series whose labels match `labels` (observations, for a histogram)."""
        names = self.catalogue[name].labels
        series = self.values.get(name) or {k: sum(c) for k, (c, _) in self.hists.get(name, {}).items()}
        return sum(v for key, v in series.items() if all(dict(zip(names, key)).get(k) == w for k, w in labels.items()))

    def start_histogram(self, name: str, key: Key) -> None:
        """The series at 0 in every bucket, unless it exists: its first observations then count in rate()."""
        series = self.hists[name]
        if key not in series and self._admit(name, key, series):
            series[key] = [[0] * (len(self.bounds[name]) + 1), 0.0]

    def observe(self, name: str, key: Key, value: float, exemplar: Exemplar | None = None) -> None:
        """Count `value` in its bucket; with `exemplar` (request id, epoch seconds), for a histogram the
        catalogue declares with exemplars, it becomes that bucket's exemplar, replacing the one before."""
        if value.__class__ not in NUMBER or not -MAX_VALUE <= value <= MAX_VALUE:
            raise ValueError(f"{name}: not a finite number: {value!r:.40}")
        series = self.hists[name]
        bucket = series.get(key)
        if bucket is None:
            if not self._admit(name, key, series):
                return
            bucket = series[key] = [[0] * (len(self.bounds[name]) + 1), 0.0]
        index = bisect_left(self.bounds[name], value)
        bucket[0][index] += 1
        bucket[1] += value
        if exemplar is not None and name in self.with_exemplars:
            exemplars = self.exemplars.get(name)
            if exemplars is None:
                exemplars = self.exemplars[name] = {}
            exemplars[key, index] = (exemplar[0], value, exemplar[1])
        for hook in self.histogram_hooks:
            hook(name, key, value)

    def copy_exemplars(self) -> dict[str, dict[tuple[Key, int], tuple[str, float, float]]]:
        """A copy of every exemplar; call with `lock` held, with `to_json`, so the two agree."""
        return {name: dict(exemplars) for name, exemplars in self.exemplars.items()}

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready copy; call with `lock` held."""
        return {
            "values": {n: [[list(k), v] for k, v in s.items()] for n, s in self.values.items() if s},
            "hists": {
                n: [[list(k), list(c), total] for k, (c, total) in s.items()] for n, s in self.hists.items() if s
            },
            **({"signals": signals} if (signals := self.signals_json()) else {}),
        }

    def signals_json(self) -> dict[str, Any]:
        """The signals objects' saved state by source kind: each attached one's checkpoint, and what
        was loaded for a kind with none attached (kept, not lost, while its source is not configured).
        A legacy memo is read once, at load, and not written back."""
        saved = {kind: copy.deepcopy(value) for kind, value in self.saved_signals.items() if kind != LEGACY_MEMO}
        for kind, checkpoint in self.checkpointers.items():
            saved[kind] = checkpoint()
        return {kind: value for kind, value in saved.items() if value}

    def load_json(self, saved: Any) -> None:
        """Restore what `to_json` wrote, keeping only what is valid; never raises on bad data.

        Series of metrics no longer declared are dropped quietly; a damaged series (a value that
        is not a finite number, labels of the wrong count or type, bucket counts that do not fit)
        is dropped loudly, and the rest is restored."""
        saved = saved if isinstance(saved, dict) else {}
        values, hists = saved.get("values"), saved.get("hists")
        damaged = self._load_values(values) + self._load_hists(hists)
        self.saved_signals = loaded_signals(saved)
        if damaged or not isinstance(values, (dict, type(None))) or not isinstance(hists, (dict, type(None))):
            logger.error(
                "the saved metric state was damaged: {} series dropped, the valid ones restored;"
                " counters of the dropped series restart from 0",
                damaged,
            )

    def _load_values(self, values: Any) -> int:
        """The saved series of the counters and gauges still declared, restored: how many were damaged."""
        damaged = 0
        for name, rows in (values if isinstance(values, dict) else {}).items():
            if name in self.values:
                self.values[name], bad = self._rows(name, rows, self._value)
                damaged += bad
        return damaged

    def _load_hists(self, hists: Any) -> int:
        """The saved series of the histograms still declared with the same buckets, restored: how many were
        damaged. A histogram whose bounds changed since restarts its counts."""
        damaged = 0
        for name, rows in (hists if isinstance(hists, dict) else {}).items():
            if name not in self.hists:
                continue
            width = len(self.bounds[name]) + 1
            if rebucketed(rows, width):
                logger.warning("{}: bucket bounds changed since the checkpoint; its counts restart", name)
                continue
            self.hists[name], bad = self._rows(name, rows, functools.partial(self._histogram, width))
            damaged += bad
        return damaged

    def _rows(self, name: str, rows: Any, parse: Callable[[list[Any]], Any]) -> tuple[dict[Key, Any], int]:
        arity, bad = len(self.catalogue[name].labels), 0
        restored: dict[Key, Any] = {}
        for row in rows if isinstance(rows, list) else [None]:
            key = row[0] if isinstance(row, list) and row else None
            value = parse(row[1:]) if isinstance(row, list) and isinstance(key, list) else None
            if (
                value is None
                or not isinstance(key, list)
                or len(key) != arity
                or not all(isinstance(k, str) for k in key)
                or len(restored) >= self.max_series
            ):
                bad += 1
                continue
            restored[tuple(key)] = value
        return restored, bad

    @staticmethod
    def _value(rest: list[Any]) -> float | None:
        ok = len(rest) == 1 and rest[0].__class__ in NUMBER and -MAX_VALUE <= rest[0] <= MAX_VALUE
        return float(rest[0]) if ok else None

    @staticmethod
    def _histogram(width: int, rest: list[Any]) -> list[Any] | None:
        if len(rest) != 2 or not isinstance(rest[0], list) or len(rest[0]) != width:
            return None
        counts, total = rest
        if (
            not all(c.__class__ is int and 0 <= c <= MAX_VALUE for c in counts)
            or total.__class__ not in NUMBER
            or not -MAX_VALUE <= total <= MAX_VALUE
        ):
            return None
        return [list(counts), float(total)]


def rebucketed(rows: Any, width: int) -> bool:
    """Whether a histogram's saved rows all hold bucket counts of another number of buckets than `width`."""
    return (
        isinstance(rows, list)
        and bool(rows)
        and all(isinstance(r, list) and len(r) == 3 and isinstance(r[1], list) and len(r[1]) != width for r in rows)
    )


def loaded_signals(saved: dict[str, Any]) -> dict[str, Any]:
    """The signals objects' saved state by source kind (the format before typed checkpoints: one memo)."""
    signals, memo = saved.get("signals"), saved.get("memo")
    if not isinstance(signals, dict) and isinstance(memo, dict):
        signals = {LEGACY_MEMO: memo}
    return {k: v for k, v in signals.items() if isinstance(v, dict)} if isinstance(signals, dict) else {}
