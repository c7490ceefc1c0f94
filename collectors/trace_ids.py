"""The ids that join a request's telemetry: its trace id and span ids, derived from its request id.

Every layer derives the same ids from the request id the logs carry, so a span pushed by the
gateway or the serve, an engine phase rebuilt from the log and an exemplar on `/metrics` all name
the same trace without any of them telling another. Pure functions; the lowest layer holds them.
"""

from __future__ import annotations

import hashlib


def trace_id_for(request_id: str) -> int:
    return int.from_bytes(hashlib.sha256(f"spyglass-trace:{request_id}".encode()).digest()[:16], "big")


def span_id_for(role: str, request_id: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{role}:{request_id}".encode()).digest()[:8], "big")
