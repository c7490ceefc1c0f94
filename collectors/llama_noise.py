"""llama.cpp's lines that carry no signal, as a catalogue of exact shapes (pure; the shapes themselves are
collectors/llama_shapes.py, built from real output by `spyglass shapes FILE`).

A line's shape is its message with what varies from run to run abstracted: a JSON value `{…}` (to the line's end), a quoted
string `'…'`/`"…"`, a hex number `<x>` (`0x7f3a…`, a commit `c6bc7395`), a URL `<url>`, a path `<p>`, a number `<n>` (an
integer, a decimal, a dotted version or address), runs of blanks as one blank. A known line's shape is a
catalogue entry, whole: nothing is known by its start alone. An entry may hold a value slot where a
model or a machine names something of its own (a loader's metadata key and value, a tensor, a device):
`<w>` one word, `<*>` any text; it matches that there, and nothing more around it. What a signal pattern's literal is in, no shape can
hide (the guard, collectors/llama_grammar.py): a line that says something new is unreadable, never noise.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

_TOKENS = re.compile(
    rb"(?:(?![A-Za-z_])|(?<![A-Za-z_]))"  # no token starts within a word's letters: skip those positions at once
    rb"(?:(?P<json>\{[\"\[{].*|\{\})"
    rb"|(?P<sq>'[^']*')"
    rb'|(?P<dq>"[^"]*")'
    rb"|(?P<hex>[-+]?0x[0-9a-fA-F]+\b|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b)"
    rb"|(?P<url>\b(?:https?|wss?|ftp|file|unix|tcp|rpc)://[^\s'\",)]+)"
    rb"|(?P<path>(?<![\w.])(?:[A-Za-z]:\\|~?\.{0,2}/)[\w.+@~/\\-]*[\w/])"
    rb"|(?P<num>[-+]?\d+(?:[.:,]\d+)*(?:e[-+]?\d+)?)"
    rb"|(?P<dots>\.{3,})"
    rb"|(?P<blank>\s{2,}|[\t\n\r\f\v]))"  # a single blank stays as it is
)
_REPLACE = {
    "json": b"{\xe2\x80\xa6}",
    "sq": b"'\xe2\x80\xa6'",
    "dq": b'"\xe2\x80\xa6"',
    "hex": b"<x>",
    "url": b"<url>",
    "path": b"<p>",
    "num": b"<n>",
    "dots": b"...",
    "blank": b" ",
}
LEAD = re.compile(rb"\d{1,9}\.\d\d\.\d{3}\.\d{3} (?:[DIWE](?: |$))?")  # llama.cpp's stamp and level letter
GLUED = re.compile(rb"\d{1,9}\.\d\d\.\d{3}\.\d{3} [DIWE] ")  # a stamp and level within a line
SLOTS = re.compile(r"(<\*>|<w>)")  # value slots: any text, one word
SLOT_REGEX = {"<*>": ".+?", "<w>": r"\S+"}
SIGNAL_MARK = "(a signal's words) "  # an unread shape that holds a signal pattern's literal: reworded, never noise
# Wordings (in shapes) that are becoming signals (send_error, cancels, KV cache exhaustion, the prompt cache's
# inventory): never catalogued as noise, whether or not their pattern has landed yet.
RESERVED = (
    "send_error",
    "cancel task",
    "failed to find",
    "state_read",
    "failed to restore",
    "- prompt <x>:",
    "tokens, checkpoints",
)
MAX_SHAPE = 400  # bytes of a shape kept: a longer line is read by its first 400 (a prompt echoed at debug level)


def _token(found: re.Match[bytes]) -> bytes:
    return _REPLACE[found.lastgroup or "blank"]


def shape(message: bytes) -> str:
    """The shape of a line's message (its stamp, level and wrappers already taken off). Where llama.cpp wrote
    two messages on one line (a message without its new line, then the next one's stamp), the first one's:
    the second cannot hide a signal, the guard reads the whole line."""
    glued = GLUED.search(message, 1, MAX_SHAPE)
    message = message[: glued.start() if glued is not None else MAX_SHAPE]
    return _TOKENS.sub(_token, message.strip()).decode("utf-8", "replace")


class Catalogue:
    """The known shapes: a set for the exact ones, one regex for those with a value slot."""

    def __init__(self, shapes: Iterable[str]) -> None:
        exact, slotted = set(), []
        for entry in shapes:
            parts = SLOTS.split(entry)
            if len(parts) > 1:
                slotted.append("".join(SLOT_REGEX.get(part, re.escape(part)) for part in parts))
            else:
                exact.add(entry)
        self.exact = frozenset(exact)
        self.slotted = re.compile("|".join(f"(?:{body})" for body in slotted)) if slotted else None

    def knows(self, message: bytes) -> bool:
        found = shape(message)
        if found in self.exact:
            return True
        return self.slotted is not None and self.slotted.fullmatch(found) is not None


def opens_block(payload: bytes) -> bool:
    """Whether lines of no shape after this one are its message's continuation: a message that ends with a
    colon (`sampler params:`, `generated parser:`), opens a quote it does not close (`chat_example:
    '<|im_start|>system`), or is empty after its stamp (a message that begins with a new line)."""
    stamp = LEAD.match(payload)
    body = payload[stamp.end() :].rstrip() if stamp is not None else payload.rstrip()
    return (stamp is not None and not body) or body.endswith(b":") or body.count(b"'") % 2 == 1


@functools.cache
def catalogue() -> Catalogue:
    from spyglass.collectors.llama_shapes import SHAPES

    return Catalogue(entry for entries in SHAPES.values() for entry in entries)
