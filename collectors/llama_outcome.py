"""How a llama-server task ended, from the lines its log has for it (pure).

Outcomes (a closed set): `done` (its timings and its release), `truncated` (released with `truncated = 1`:
the context ran out), `cancelled` (its client went away: `cancel task, id_task = N`; a 2024 build logs no
cancel, and releases an aborted task without its timings), `error` (`send_error: task id = N, error: ...`,
2024's `task error`). An error's reason is one of a closed set, read off llama.cpp's own messages; its HTTP
status is the one llama-server answers for that message (`format_error_response` maps the error type each
`send_error` call passes: invalid request and exceeded context 400, a server error 500), where the message
is one whose call site fixes it. tests/test_llama_real.py holds both against what the client received.
"""

from __future__ import annotations

OUTCOMES = ("done", "error", "cancelled", "truncated")
REASONS = ("none", "context_exceeded", "invalid_request", "internal", "other")

# (words in the message, reason, the status llama-server answers it with; 0: not fixed by the message)
_ERRORS: tuple[tuple[str, str, int], ...] = (
    ("exceeds the available context size", "context_exceeded", 400),  # ERROR_TYPE_EXCEED_CONTEXT_SIZE
    ("is larger than the max context size", "context_exceeded", 400),
    ("Context size has been exceeded", "context_exceeded", 500),  # the KV cache full at n_batch 1: a server error
    ("Input prompt is too big compared to KV size", "context_exceeded", 500),  # 2024
    ("context shift is disabled", "context_exceeded", 500),
    ("Invalid slot ID", "invalid_request", 400),
    ("Prompt contains invalid tokens", "invalid_request", 400),
    ("Failed to format input", "invalid_request", 400),
    ("Cannot run multiple aLoRAs", "invalid_request", 400),
    ("Unable to restore slot", "invalid_request", 400),
    ("Failed to parse", "invalid_request", 400),
    ("got exception", "internal", 500),
    ("Compute error", "internal", 500),
    ("Invalid input batch", "internal", 500),
    ("Unable to save slot", "internal", 500),
    ("context shift cannot be used", "internal", 500),
    ("does not support logits computation", "internal", 500),
)


def error_reason(message: str) -> tuple[str, int | None]:
    """The reason of a `send_error` message and the HTTP status it was answered with (None: not known)."""
    for words, reason, status in _ERRORS:
        if words in message:
            return reason, status or None
    return "other", None


def finish_of(outcome: str) -> str:
    """The finish label of a `done` event: llama-server logs no finish reason for a task that completed."""
    return {"cancelled": "abort", "error": "error"}.get(outcome, "unknown")
