"""JSON from outside, read within a depth and a size bound.

Python's decoder recurses once per level: a line nested 5,000 deep raised RecursionError, which no
caller expected (one such line cost its whole batch), and a body's size is only what its source capped.
Here a text past `max_bytes`, or nested deeper than `max_depth`, is a ValueError like any malformed one,
found before the decoder runs. The depth is counted on the brackets outside strings, and only when the
text has more brackets than `max_depth` at all (what every record of a log or a status body has not).
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_LINE_BYTES = 1 << 20  # a log line: agent.max_line_bytes' default (the tailer cuts longer ones to it)
MAX_DEPTH = 64  # the records read here are at most a few levels deep (journald, docker, /slots, /props)
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(rb"[\[\]{}]")


class TooLarge(ValueError):
    """Past a size or depth bound: a record refused for what it is, not for a typo."""


def depth(text: bytes, most: int) -> int:
    """How deep `text`'s brackets nest outside its strings, counted up to `most` + 1."""
    if text.count(b"[") + text.count(b"{") <= most:
        return 0  # cannot be deeper than most
    level = deepest = 0
    for found in _BRACKETS.finditer(_STRINGS.sub(b'""', text)):
        level += 1 if found.group() in (b"[", b"{") else -1
        if level > deepest:
            deepest = level
            if deepest > most:
                break
    return deepest


def loads(text: bytes | str, max_bytes: int, max_depth: int = MAX_DEPTH) -> Any:
    """`text` decoded; TooLarge past `max_bytes` or `max_depth`, ValueError if it is not JSON."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if len(raw) > max_bytes:
        raise TooLarge(f"over {max_bytes} bytes of JSON")
    if depth(raw, max_depth) > max_depth:
        raise TooLarge(f"JSON nested deeper than {max_depth}")
    try:
        return json.loads(raw)
    except RecursionError:  # a bound above the decoder's own: never with the default
        raise TooLarge("JSON nested too deeply") from None


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
