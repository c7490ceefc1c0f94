"""The ids that join a request's telemetry: its trace id and span ids, derived from its request id.

Every layer derives the same ids from the request id the logs carry, so a span pushed by the
gateway or the serve, an engine phase rebuilt from the log and an exemplar on `/metrics` all name
the same trace without any of them telling another. The lowest layer holds them, and the one way a request
id is made (`new_request_id`, the only function here that reads the clock: the gateway's ids and the smoke
gate's for its samples).
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime

from spyglass.collectors.clock import BEIJING


def trace_id_for(request_id: str) -> int:
    return int.from_bytes(hashlib.sha256(f"spyglass-trace:{request_id}".encode()).digest()[:16], "big")


def span_id_for(role: str, request_id: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{role}:{request_id}".encode()).digest()[:8], "big")


def new_request_id(now: datetime | None = None) -> str:
    now = (now or datetime.now(UTC)).astimezone(BEIJING)
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
