"""The mechanisms the incidents turned on, without I/O: the emulator and the log synthesizer share them.

- `count_tokens`: the engine's count (the authority); `estimate_tokens`: the gateway's upper-bound
  rule (CJK 1.05, other 0.70 a character), which over-counts English about 3.3x (incident 6).
- `ConversationCache`: whole-conversation snapshots parked after each turn, sized by tokens,
  evicted least-recently-used over a byte budget; a turn restores from its parked snapshot, else
  from the last checkpoint (every `every` tokens), else reads everything. A budget smaller than
  a few snapshots makes an eviction storm on its own (incident 2).
- `plan_response`: how a request ends: a special-token literal the model is asked to repeat stops
  it inside reasoning unless the serve escapes literals (incident 3); a request with tools but no
  task anchor gets a plan and EOS (incidents 4, 5); otherwise a tool call or an answer.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from dataclasses import dataclass, field

BYTES_PER_TOKEN = 18_732  # 4716362992 bytes parked for 251787 tokens (incident 2)
ASCII_CHARS_PER_TOKEN = 4.7  # so the gateway's 0.70 a character over-counts English 3.3x (incident 6)
SPECIAL_LITERALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
ANCHOR = "Task:"  # how the emulated client marks the message that states the task


def cjk_chars(text: str) -> int:
    """Characters outside ASCII, cheaply: each takes 2-3 more bytes in UTF-8 (CJK takes 2 more)."""
    return (len(text.encode("utf-8")) - len(text)) // 2


def count_tokens(text: str) -> int:
    """The engine's count: one token a CJK character, 4.7 characters a token otherwise."""
    cjk = cjk_chars(text)
    return cjk + math.ceil((len(text) - cjk) / ASCII_CHARS_PER_TOKEN)


def estimate_tokens(text: str) -> int:
    """The gateway's estimate (an upper bound): CJK 1.05 a character, everything else 0.70."""
    cjk = cjk_chars(text)
    return math.ceil(cjk * 1.05 + (len(text) - cjk) * 0.70)


@dataclass
class ConversationCache:
    budget_bytes: int
    every: int
    bytes_per_token: int = BYTES_PER_TOKEN
    parked: OrderedDict[str, int] = field(default_factory=OrderedDict)  # conv -> tokens, LRU first
    checkpoints: dict[str, int] = field(default_factory=dict)  # conv -> tokens saved at checkpoints
    evictions: int = 0

    def used_bytes(self) -> int:
        return sum(tokens * self.bytes_per_token for tokens in self.parked.values())

    def restore(self, conv: str, prompt: int) -> tuple[int, str]:
        """(tokens reused, origin): parked, checkpoint or none."""
        if conv in self.parked:
            self.parked.move_to_end(conv)
            return min(self.parked[conv], prompt), "parked"
        saved = min(self.checkpoints.get(conv, 0), (prompt // self.every) * self.every)
        return (saved, "checkpoint") if saved else (0, "none")

    def park(self, conv: str, tokens: int) -> list[tuple[str, int]]:
        """Park the conversation's snapshot; returns the (conv, bytes) evicted to make room."""
        self.parked.pop(conv, None)
        self.checkpoints[conv] = (tokens // self.every) * self.every
        size, evicted = tokens * self.bytes_per_token, []
        while self.parked and self.used_bytes() + size > self.budget_bytes:
            victim, victim_tokens = self.parked.popitem(last=False)
            self.evictions += 1
            evicted.append((victim, victim_tokens * self.bytes_per_token))
        self.parked[conv] = tokens
        return evicted


@dataclass
class Response:
    thinking: int
    thinking_cause: str  # stop, budget
    content: str
    tool_call: bool
    finish: str  # stop, tool_calls, length
    completion: int


def has_special_literal(text: str) -> bool:
    return any(literal in text for literal in SPECIAL_LITERALS)


def plan_response(
    rng: random.Random,
    last_user: str,
    anchored: bool,
    tools: bool,
    max_tokens: int,
    thinking_budget: int,
    escaped: bool,
) -> Response:
    """How the emulated model answers one request."""
    thinking = min(rng.randrange(200, 3000), thinking_budget)
    cause = "budget" if thinking >= thinking_budget else "stop"
    if has_special_literal(last_user) and not escaped:
        # The model repeats the literal inside its reasoning; encoded as a real special token it
        # is an EOS, and the turn ends there: reasoning, no text, no tool call (incident 3).
        return Response(thinking, "stop", "", False, "stop", thinking)
    if tools and not anchored:
        content = "I'll start by looking at the files, then write the section."
        return Response(thinking, cause, content, False, "stop", thinking + 16)  # plan, then EOS
    if tools:
        return Response(thinking, cause, "", True, "tool_calls", thinking + rng.randrange(30, 300))
    words = min(max_tokens - thinking, rng.randrange(20, 400))
    if words <= 0:
        return Response(thinking, cause, "", False, "length", max(thinking, max_tokens))
    return Response(thinking, cause, "ok " * words, False, "stop", thinking + words)
