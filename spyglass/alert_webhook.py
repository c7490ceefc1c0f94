"""Alertmanager webhook notifications (POST /api/alerts) as `alert` events for the store.

Alertmanager's webhook body (version 4) carries the alerts of one group, firing and resolved;
each becomes one event (kind `alert`, source `alertmanager`) stamped when it started firing or
when it resolved, so the forensic timeline shows when each page rang and when it stopped.
Annotation texts are not kept (they are templates of the rules, not measurements). Decoding is
pure; a body that is not Alertmanager's JSON is a ValueError saying why.
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from datetime import datetime
from typing import Any

from collectors import timebounds
from collectors.event import Event
from spyglass.bodies import json_object

MAX_ALERTS = 1000  # Alertmanager's default max_alerts is 0 (all); a group of 1000 is already a flood
MAX_LABELS = 32
MAX_LABEL_CHARS = 256
STATUSES = ("firing", "resolved")


def _timestamp(text: Any, where: str, now: float) -> float | None:
    """RFC 3339 seconds since the epoch, between 2000 and a day past `now`; None for Alertmanager's
    zero time (an alert with no end)."""
    if not isinstance(text, str):
        raise ValueError(f"{where}: expected an RFC 3339 time, got {type(text).__name__}")
    if text.startswith("0001-01-01"):
        return None
    stamp = text.replace("Z", "+00:00")
    head, dot, rest = stamp.partition(".")
    if dot:  # Go writes nanoseconds; Python reads at most microseconds
        digits = len(rest) - len(rest.lstrip("0123456789"))
        stamp = f"{head}.{rest[:min(digits, 6)]}{rest[digits:]}"
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        raise ValueError(f"{where}: not an RFC 3339 time: {text[:40]!r}") from None
    if moment.tzinfo is None:
        raise ValueError(f"{where}: time without an offset: {text[:40]!r}")
    return timebounds.check(moment.timestamp(), now, where)


def _labels(raw: Any, where: str) -> dict[str, str]:
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise ValueError(f"{where}: expected an object of string labels")
    if len(raw) > MAX_LABELS:
        raise ValueError(f"{where}: {len(raw)} labels, at most {MAX_LABELS}")
    return {k[:MAX_LABEL_CHARS]: v[:MAX_LABEL_CHARS] for k, v in sorted(raw.items())}


def _event(alert: Any, where: str, host: str, now: float) -> Event:
    if not isinstance(alert, dict):
        raise ValueError(f"{where}: expected an object")
    status = alert.get("status")
    if status not in STATUSES:
        raise ValueError(f"{where}.status: expected firing or resolved, got {str(status)[:20]!r}")
    labels = _labels(alert.get("labels"), f"{where}.labels")
    if "alertname" not in labels:
        raise ValueError(f"{where}.labels: no alertname")
    starts = _timestamp(alert.get("startsAt"), f"{where}.startsAt", now)
    ends = _timestamp(alert.get("endsAt", "0001-01-01T00:00:00Z"), f"{where}.endsAt", now)
    if starts is None:
        raise ValueError(f"{where}.startsAt: the zero time")
    if status == "resolved" and ends is None:
        raise ValueError(f"{where}.endsAt: a resolved alert needs its end")
    fingerprint = alert.get("fingerprint", "")
    if not isinstance(fingerprint, str):
        raise ValueError(f"{where}.fingerprint: expected a string")
    fields = {"alertname": labels["alertname"], "status": status, "labels": labels,
              "severity": labels.get("severity"), "heuristic": labels.get("heuristic"),
              "instance": labels.get("instance"), "startsAt": starts, "endsAt": ends,
              "fingerprint": fingerprint[:64]}
    ts = ends if status == "resolved" and ends is not None else starts  # a resolved one has its end (checked above)
    return Event(ts, "alertmanager", "alert", labels.get("instance", ""), fields, None, host)


def decode_notification(body: bytes, host: str = "", *, now: float) -> list[Event]:
    """One event per alert of an Alertmanager webhook notification; ValueError if it is not one
    (or a time in it lies outside 2000 to a day past `now`)."""
    message = json_object(body, "an Alertmanager notification")
    if message.get("version") != "4":
        raise ValueError(f"not an Alertmanager webhook notification: version {message.get('version')!r:.20},"
                         " expected \"4\"")
    alerts = message.get("alerts")
    if not isinstance(alerts, list):
        raise ValueError("alerts: expected a list")
    if len(alerts) > MAX_ALERTS:
        raise ValueError(f"alerts: {len(alerts)} alerts, at most {MAX_ALERTS}")
    return [_event(alert, f"alerts[{n}]", host, now) for n, alert in enumerate(alerts)]


class Replays:
    """The alerts already taken, by (fingerprint, labels, status, startsAt, endsAt), the last `size`
    of them: Alertmanager repeats a notification every `repeat_interval` and after its own restarts,
    and a replay must not be stored twice. Thread-safe.

    Each key maps to the commit event of the submission that stores it (set once committed), so a
    duplicate that arrives while the first is still being stored waits for that same commit
    instead of being answered at once: a 200 means stored, whoever stored it. The key holds the
    labels, not only the sender's fingerprint: two alerts that share a fingerprint (a 16-bit one
    of another sender, or a forged one) are both stored."""

    def __init__(self, size: int = 100_000) -> None:
        self.size = size
        self._seen: OrderedDict[bytes, threading.Event] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._seen)

    @staticmethod
    def key(event: Event) -> bytes:
        f = event.fields
        identity = (f["fingerprint"], sorted(f["labels"].items()), f["status"], f["startsAt"], f["endsAt"])
        return hashlib.blake2b(repr(identity).encode(), digest_size=16).digest()  # 16 bytes, however long the labels

    def claim(self, events: list[Event], stored: threading.Event) -> tuple[list[Event], list[threading.Event]]:
        """The events not taken before (nor twice in `events`), now marked as stored by `stored` (the
        commit event of their submission, which the caller must make at once), and the commit events
        of the others (set, or still to be set by the request storing them)."""
        fresh: list[Event] = []
        others: dict[int, threading.Event] = {}
        with self._lock:
            for event in events:
                key = self.key(event)
                holder = self._seen.get(key)
                if holder is None:
                    self._seen[key] = stored
                    fresh.append(event)
                elif holder is not stored and not holder.is_set():
                    others[id(holder)] = holder
            while len(self._seen) > self.size:
                self._seen.popitem(last=False)
        return fresh, list(others.values())

    def settle(self, events: list[Event]) -> None:
        """Mark committed events with one shared set event, so a committed request's own event is freed."""
        with self._lock:
            for event in events:
                key = self.key(event)
                if key in self._seen:
                    self._seen[key] = _COMMITTED

    def forget(self, events: list[Event]) -> None:
        """Unmark events that were never submitted: the sender's retry (or a duplicate's) must store them."""
        with self._lock:
            for event in events:
                self._seen.pop(self.key(event), None)


_COMMITTED = threading.Event()
_COMMITTED.set()
