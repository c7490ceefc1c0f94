"""Current values of every series: what the exporters read and the checkpoint persists.

Plain dicts keyed by label-value tuples, so the hot path costs a dict update per signal (about
0.1 us, against 6 us for an OpenTelemetry SDK `add`; see docs/benchmarks.md). The pipeline holds
`lock` while it applies a batch; exporters hold it while they copy a snapshot.
"""
from __future__ import annotations

import copy
import functools
import operator
import threading
from bisect import bisect_left
from collections.abc import Callable
from typing import Any

from loguru import logger

from signals.catalogue import Catalogue

Key = tuple[str, ...]
# An observation's exemplar: the request id it came from and its time (epoch seconds). The trace id
# is derived from the request id when /metrics is rendered, so the hot path never hashes.
Exemplar = tuple[str, float]
HistogramHook = Callable[[str, Key, float], None]
NUMBER = (int, float)  # exact classes: a bool, a str, None or a numpy scalar is refused
MAX_VALUE = float(2 ** 63)  # counters of bytes reach 2^50 in a year; beyond this is a bug or forgery
MAX_SERIES = 2000  # per metric: far above what bounded labels give, far below a memory problem
DROPPED = "spyglass_state_dropped_series_total"
MAX_INFO_LABEL = 200  # characters of a free-text info label (a build, a model file name)
# C0 controls and DEL as visible escapes: a NUL or an escape sequence never reaches a label value
CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}


def printable_label(value: str) -> str:
    """A free-text label value as data: control characters escaped (\\x00), at most MAX_INFO_LABEL."""
    return value.translate(CONTROLS)[:MAX_INFO_LABEL]


class MetricState:
    """Every series of every declared metric, with the guarantees the exposition relies on.

    Only metrics of its catalogue exist (an undeclared name is a KeyError, never a silent new
    series), and a histogram observation lands in exactly one bucket of the catalogue's bounds.
    Only finite numbers of magnitude at most MAX_VALUE are ever held: `inc`, `set` and `observe`
    raise ValueError naming the metric for anything else (a str, NaN, inf, None), and change
    nothing. No metric holds more than `max_series` series: a new series past the cap is dropped
    and counted in spyglass_state_dropped_series_total{metric}. `to_json`/`load_json` round-trip
    every series, so a restarted agent continues its counters; `load_json` restores only what
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
        self.histogram_hooks: list[HistogramHook] = []
        # What a signals module must remember to derive a value (the last raw counters of a
        # serve, the engine's last plausible evictions=): saved and restored with the series, so
        # a restart derives exactly what one pass would. Its owner validates what it reads back.
        self.memo: dict[str, Any] = {}

    def series(self, name: str) -> dict[Key, float]:
        """The live dict of one counter, gauge or info metric (read it; write through the methods)."""
        return self.values[name]

    def inc(self, name: str, key: Key, amount: float = 1.0) -> None:
        if amount.__class__ not in NUMBER or not -MAX_VALUE <= amount <= MAX_VALUE:
            raise ValueError(f"{name}: not a finite number: {amount!r:.40}")
        values = self.values[name]
        old = values.get(key)
        if old is None:
            if len(values) >= self.max_series and self._full(name):
                return
            old = 0.0
        values[key] = old + amount

    def set(self, name: str, key: Key, value: float) -> None:
        if value.__class__ not in NUMBER or not -MAX_VALUE <= value <= MAX_VALUE:
            raise ValueError(f"{name}: not a finite number: {value!r:.40}")
        values = self.values[name]
        if key not in values and len(values) >= self.max_series and self._full(name):
            return
        values[key] = value

    def drop(self, name: str, prefix: Key) -> None:
        """Remove every series of `name` whose labels start with `prefix` (a target gone stale)."""
        values = self.values[name]
        for key in [k for k in values if k[:len(prefix)] == prefix]:
            del values[key]

    def _full(self, name: str, times: int = 1) -> bool:
        """Count a series refused by the cap, `times` refusals (the counter itself is bounded by
        the catalogue)."""
        if name == DROPPED:
            return False
        dropped = self.values.get(DROPPED)
        if dropped is not None:
            dropped[(name,)] = functools.reduce(operator.add, [1.0] * times, dropped.get((name,), 0.0))
        return True

    def set_info(self, name: str, key: Key, identity: int) -> None:
        """Make `key` the one info series of its first `identity` labels (a build replaces the last).
        The other labels are free text from a log or a body: written as `printable_label`."""
        key = key[:identity] + tuple(printable_label(v) for v in key[identity:])
        values = self.values[name]
        for old in [k for k in values if k[:identity] == key[:identity] and k != key]:
            del values[old]
        if key not in values and len(values) >= self.max_series and self._full(name):
            return
        values[key] = 1.0

    def set_one_hot(self, name: str, key: Key, states: tuple[str, ...], current: str) -> None:
        """1 for `current` (the last label) and 0 for every other state of `key`."""
        values = self.values[name]
        for state in dict.fromkeys((*states, current)):
            if state:
                full = key + (state,)
                if full not in values and len(values) >= self.max_series and self._full(name):
                    continue
                values[full] = 1.0 if state == current else 0.0

    def total(self, name: str, /, **labels: str) -> float:
        """The sum of a metric's series whose labels match `labels` (observations, for a histogram)."""
        names = self.catalogue[name].labels
        series = self.values.get(name) or {k: sum(c) for k, (c, _) in self.hists.get(name, {}).items()}
        return sum(v for key, v in series.items() if all(dict(zip(names, key)).get(k) == w for k, w in labels.items()))

    def observe(self, name: str, key: Key, value: float, exemplar: Exemplar | None = None) -> None:
        """Count `value` in its bucket; with `exemplar` (request id, epoch seconds) it becomes that
        bucket's exemplar, replacing the one before."""
        if value.__class__ not in NUMBER or not -MAX_VALUE <= value <= MAX_VALUE:
            raise ValueError(f"{name}: not a finite number: {value!r:.40}")
        series = self.hists[name]
        bucket = series.get(key)
        if bucket is None:
            if len(series) >= self.max_series and self._full(name):
                return
            bucket = series[key] = [[0] * (len(self.bounds[name]) + 1), 0.0]
        index = bisect_left(self.bounds[name], value)
        bucket[0][index] += 1
        bucket[1] += value
        if exemplar is not None:
            exemplars = self.exemplars.get(name)
            if exemplars is None:
                exemplars = self.exemplars[name] = {}
            exemplars[key, index] = (exemplar[0], value, exemplar[1])
        for hook in self.histogram_hooks:
            hook(name, key, value)

    def copy_exemplars(self) -> dict[str, dict[tuple[Key, int], tuple[str, float, float]]]:
        """A copy of every exemplar; call with `lock` held, with `to_json`, so the two agree."""
        return {name: dict(exemplars) for name, exemplars in self.exemplars.items()}

    # Many calls at once, for a signals class that applies a batch column-wise: each leaves the
    # state exactly as the same calls one by one would (the same float additions in the same
    # order, the same series cap and dropped counts). The values must already be checked
    # (finite numbers of magnitude at most MAX_VALUE): these do not check them again.

    def inc_each(self, name: str, key: Key, amounts: list[float]) -> None:
        """`inc(name, key, amount)` for each amount, in order."""
        values = self.values[name]
        old = values.get(key)
        if old is None:
            if len(values) >= self.max_series and self._full(name, len(amounts)):
                return
            old = 0.0
        values[key] = functools.reduce(operator.add, amounts, old)

    def set_last(self, name: str, key: Key, value: float, calls: int) -> None:
        """`calls` calls of `set(name, key, ...)` of which `value` was the last."""
        values = self.values[name]
        if key not in values and len(values) >= self.max_series and self._full(name, calls):
            return
        values[key] = value

    def observe_each(self, name: str, key: Key, observed: list[float],
                     exemplars: list[Exemplar | None] | None = None) -> None:
        """`observe(name, key, value, exemplar)` for each value (and exemplar), in order."""
        series = self.hists[name]
        bucket = series.get(key)
        if bucket is None:
            if len(series) >= self.max_series and self._full(name, len(observed)):
                return
            bucket = series[key] = [[0] * (len(self.bounds[name]) + 1), 0.0]
        counts, bounds = bucket[0], self.bounds[name]
        indices = list(map(functools.partial(bisect_left, bounds), observed))
        for index in indices:
            counts[index] += 1
        bucket[1] = functools.reduce(operator.add, observed, bucket[1])
        for index, value, exemplar in zip(indices, observed, exemplars or ()):
            if exemplar is not None:
                self.exemplars.setdefault(name, {})[key, index] = (exemplar[0], value, exemplar[1])
        for value in observed if self.histogram_hooks else ():
            for hook in self.histogram_hooks:
                hook(name, key, value)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready copy; call with `lock` held."""
        return {
            "values": {n: [[list(k), v] for k, v in s.items()] for n, s in self.values.items() if s},
            "hists": {n: [[list(k), list(c), total] for k, (c, total) in s.items()]
                      for n, s in self.hists.items() if s},
            **({"memo": copy.deepcopy(self.memo)} if self.memo else {}),
        }

    def load_json(self, saved: Any) -> None:
        """Restore what `to_json` wrote, keeping only what is valid; never raises on bad data.

        Series of metrics no longer declared are dropped quietly; a damaged series (a value that
        is not a finite number, labels of the wrong count or type, bucket counts that do not fit)
        is dropped loudly, and the rest is restored."""
        damaged = 0
        values = saved.get("values") if isinstance(saved, dict) else None
        for name, rows in (values if isinstance(values, dict) else {}).items():
            if name in self.values:
                restored, bad = self._rows(name, rows, self._value)
                self.values[name], damaged = restored, damaged + bad
        hists = saved.get("hists") if isinstance(saved, dict) else None
        for name, rows in (hists if isinstance(hists, dict) else {}).items():
            if name not in self.hists:
                continue
            width = len(self.bounds[name]) + 1
            if isinstance(rows, list) and rows and all(isinstance(r, list) and len(r) == 3 and isinstance(r[1], list)
                                                       and len(r[1]) != width for r in rows):
                logger.warning("{}: bucket bounds changed since the checkpoint; its counts restart", name)
                continue
            restored, bad = self._rows(name, rows, functools.partial(self._histogram, width))
            self.hists[name], damaged = restored, damaged + bad
        memo = saved.get("memo") if isinstance(saved, dict) else None
        self.memo = {k: v for k, v in memo.items() if isinstance(v, dict)} if isinstance(memo, dict) else {}
        if damaged or not isinstance(values, (dict, type(None))) or not isinstance(hists, (dict, type(None))):
            logger.error("the saved metric state was damaged: {} series dropped, the valid ones restored;"
                         " counters of the dropped series restart from 0", damaged)

    def _rows(self, name: str, rows: Any, parse: Callable[[list[Any]], Any]) -> tuple[dict[Key, Any], int]:
        arity, bad = len(self.catalogue[name].labels), 0
        restored: dict[Key, Any] = {}
        for row in rows if isinstance(rows, list) else [None]:
            key = row[0] if isinstance(row, list) and row else None
            value = parse(row[1:]) if isinstance(row, list) and isinstance(key, list) else None
            if value is None or not isinstance(key, list) or len(key) != arity \
                    or not all(isinstance(k, str) for k in key) or len(restored) >= self.max_series:
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
        if not all(c.__class__ is int and 0 <= c <= MAX_VALUE for c in counts) \
                or total.__class__ not in NUMBER or not -MAX_VALUE <= total <= MAX_VALUE:
            return None
        return [list(counts), float(total)]
