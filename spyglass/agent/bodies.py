"""Request bodies of the agent's POST endpoints: what every one of them checks first."""

from __future__ import annotations

import json
from typing import Any


def json_object(body: bytes, what: str) -> dict[str, Any]:
    """`body` as one JSON object; ValueError saying why it is not (`what` names the expected thing)."""
    try:
        message = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    except RecursionError:  # '[' * 1000 and its closing brackets: 2 KB deep
        raise ValueError("not JSON this agent reads: nested too deeply") from None
    if not isinstance(message, dict):
        raise ValueError(f"not {what}: expected a JSON object")
    return message
