"""Budgets of what the push receivers take (/v1/traces, /api/smoke; /api/alerts has its own,
spyglass.agent.alert_webhook.AlertBudget, of the same design): a size per item, and token buckets of
a burst and a rate, so the store grows by at most burst + rate x seconds of each kind, however much
is sent, and a flood of one kind takes neither memory nor the SQL API from the others.

Past a budget a body is refused whole, nothing taken: 413 for an item too large (not retryable),
429 with Retry-After past a rate, 503 with Retry-After while the store cannot commit (back-pressure:
what is not taken is not buffered). Every refusal is counted in
`spyglass_received_refused_total{receiver,reason}`.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

# Smoke results: a deploy gate sends one per run. An item is its stored fields as JSON.
SMOKE_MAX_BYTES = 64 << 10
SMOKE_BURST_BYTES = 1 << 20
SMOKE_BYTES_PER_SECOND = 4 << 10


class Refused(Exception):
    """A body refused by a budget, nothing taken: `status` (413, 429, 503), `reason` (the metric's label),
    and for a retryable one the seconds to wait (`retry_after`)."""

    def __init__(self, status: int, reason: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status, self.reason, self.retry_after = status, reason, retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(max(1, math.ceil(self.retry_after)))} if self.retry_after is not None else {}


@dataclass
class Bucket:
    """A token bucket: `burst` tokens, `rate` more a second. Thread-safe; the caller gives the time."""

    burst: float
    rate: float
    _tokens: float | None = None
    _when: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, amount: float, now: float) -> float:
        """0 once `amount` tokens are taken; else the seconds until they could be (nothing taken)."""
        with self._lock:
            tokens = (
                self.burst if self._tokens is None else min(self.burst, self._tokens + (now - self._when) * self.rate)
            )
            self._when = now
            if amount <= tokens:
                self._tokens = tokens - amount
                return 0.0
            self._tokens = tokens
            return (min(amount, self.burst) - tokens) / self.rate if self.rate > 0 else math.inf

    def refund(self, amount: float) -> None:
        with self._lock:
            self._tokens = min(self.burst, (self._tokens or 0.0) + amount)


@dataclass
class ReceiverBudget:
    """One receiver's budget: at most `max_item` per item, and buckets of `unit`s (spans, bytes)."""

    receiver: str
    buckets: dict[str, Bucket]  # unit -> its bucket
    max_item: int | None = None  # in the first unit

    def admit(self, amounts: dict[str, float], now: float) -> None:
        """Charge each bucket its amount, or raise Refused (413 past `max_item`, 429 past a rate)."""
        first = next(iter(self.buckets))
        if self.max_item is not None and amounts.get(first, 0) > self.max_item:
            raise Refused(
                413,
                "too_large",
                f"{self.receiver}: {amounts[first]:,.0f} {first} in one item; at most {self.max_item:,} are taken",
            )
        taken: list[tuple[Bucket, float]] = []
        for unit, bucket in self.buckets.items():
            wait = bucket.take(amounts.get(unit, 0), now)
            if not wait:
                taken.append((bucket, amounts.get(unit, 0)))
            else:
                for earlier, amount in taken:  # refused whole: nothing charged
                    earlier.refund(amount)
                if wait == math.inf or amounts.get(unit, 0) > bucket.burst:
                    raise Refused(
                        413,
                        "too_large",
                        f"{self.receiver}: {amounts[unit]:,.0f} {unit} at once is over the"
                        f" budget of {bucket.burst:,.0f}",
                    )
                raise Refused(
                    429,
                    "rate",
                    f"{self.receiver}: over the budget of {bucket.rate:,.0f} {unit} a second"
                    f" (burst {bucket.burst:,.0f}); nothing was taken, retry",
                    wait,
                )


def spans_budget(
    spans_per_second: float, burst_spans: int, bytes_per_second: float, burst_bytes: int
) -> ReceiverBudget:
    return ReceiverBudget(
        "/v1/traces", {"spans": Bucket(burst_spans, spans_per_second), "bytes": Bucket(burst_bytes, bytes_per_second)}
    )


def smoke_budget() -> ReceiverBudget:
    return ReceiverBudget(
        "/api/smoke", {"bytes": Bucket(SMOKE_BURST_BYTES, SMOKE_BYTES_PER_SECOND)}, max_item=SMOKE_MAX_BYTES
    )
