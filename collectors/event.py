"""The one event type that crosses every boundary downstream of the collectors.

A timestamp is seconds since the Unix epoch (UTC by definition): floats are cheap on the hot
path and exact to the microsecond for the dates we see. `utc` gives the aware datetime.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


@dataclass(slots=True)
class Event:
    ts: float  # seconds since the Unix epoch, UTC
    source: str  # the configured source name, e.g. "engine-b"
    kind: str  # e.g. "park", "done", "rejected"
    instance: str  # "strata-a", "strata-b", "rag-proxy"
    fields: dict[str, Any] = field(default_factory=dict)
    request_id: str | None = None
    host: str = ""

    @property
    def utc(self) -> datetime:
        return datetime.fromtimestamp(self.ts, tz=UTC)
