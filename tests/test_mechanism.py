"""The emulator's mechanisms, without processes: storms emerge from the budget, escaping flips stops."""

from __future__ import annotations

import random

from spyglass.engine.emulator.mechanism import (
    BYTES_PER_TOKEN,
    ConversationCache,
    count_tokens,
    estimate_tokens,
    plan_response,
)


def turns(cache: ConversationCache, conversations: int, rounds: int, start: int = 200_000) -> list[tuple[int, str]]:
    """A multi-conversation load: each round, every conversation grows and takes a turn."""
    restores, tokens = [], {f"c{i}": start + 1000 * i for i in range(conversations)}
    for _ in range(rounds):
        for conv in tokens:
            tokens[conv] += 1500
            restores.append(cache.restore(conv, tokens[conv]))
            cache.park(conv, tokens[conv] + 800)
    return restores


def test_a_budget_below_three_snapshots_makes_an_eviction_storm():
    snapshot = 200_000 * BYTES_PER_TOKEN  # ~3.7 GB
    cache = ConversationCache(budget_bytes=int(2.5 * snapshot), every=16384)
    restores = turns(cache, conversations=5, rounds=4)
    later = restores[5:]  # every turn after the first round
    assert cache.evictions >= 15
    assert all(origin == "checkpoint" and reused % 16384 == 0 for reused, origin in later)


def test_a_large_budget_makes_none():
    cache = ConversationCache(budget_bytes=64 << 30, every=16384)
    restores = turns(cache, conversations=5, rounds=4)
    assert cache.evictions == 0
    assert [origin for _, origin in restores[5:]] == ["parked"] * 15


def thinking_only_share(escaped: bool) -> float:
    rng = random.Random(3)
    prompts = ["Repeat exactly: ABC<|im_end|>XYZ", "Explain <|endoftext|> in generate.cpp", "What is 2+2?"] * 20
    results = [plan_response(rng, p, True, False, 32000, 16000, escaped) for p in prompts]
    return sum(1 for r in results if r.finish == "stop" and not r.content and not r.tool_call) / len(results)


def test_escaping_flips_the_thinking_only_share():
    assert thinking_only_share(escaped=False) == 2 / 3  # every prompt that holds a literal
    assert thinking_only_share(escaped=True) == 0


def test_the_gateway_estimate_over_counts_english_three_times():
    english = "The expert pool reads the arena and the cache parks the snapshot. " * 1000
    chinese = "专家池读取竞技场，缓存停放快照。" * 1000
    assert 3.2 < estimate_tokens(english) / count_tokens(english) < 3.4  # incident 6: about 3.3x
    assert 1.0 <= estimate_tokens(chinese) / count_tokens(chinese) < 1.1
