"""The checkpoint-only rule, stated once: a prompt reused only a checkpoint when the tokens it
reused are a positive multiple of the engine's --prompt-cache-every and fewer than the prompt.
Its parked snapshot was evicted, and a periodic checkpoint saved a fraction (incident 2: 123 of
194 prompts of 200k tokens or more reused exactly 16384).

In Python for the engine signals (spyglass/signals/engine_log.py imports it), and as the SQL condition H4's
probe and the cache report use as `$checkpoint_only` (spyglass.forensics.run renders it), over
the columns prompt_tokens, reused_tokens and cache_every. tests/test_checkpoint_reuse.py holds
the two to the same answers.
"""

from __future__ import annotations


def checkpoint_only(prompt: int, reused: int, every: int) -> bool:
    """Whether a prompt of `prompt` tokens that reused `reused` reused only a checkpoint taken every
    `every` tokens (never, for an engine that takes none: `every` <= 0)."""
    return reused > 0 and every > 0 and reused % every == 0 and reused < prompt


def checkpoint_only_sql(
    prompt: str = "prompt_tokens", reused: str = "reused_tokens", every: str = "cache_every"
) -> str:
    """The same rule as an SQL condition over the named columns (NULL where one of them is NULL)."""
    return f"({reused} > 0 AND {every} > 0 AND {reused} % {every} = 0 AND {reused} < {prompt})"
