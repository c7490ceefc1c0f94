"""A small mechanistic model of one Strata engine that writes its log lines (sources.md §1).

Conversations grow turn by turn; each turn parks a snapshot sized by its tokens; the cache
evicts least-recently-used snapshots when over its byte budget; the next turn restores from the
parked snapshot, else from the last checkpoint (a multiple of prompt-cache-every), else reads it
all. With the seed's numbers (8 GiB budget, ~4.7 GB snapshots of 250k-token conversations) an
eviction storm and checkpoint-only reuse emerge; with a large budget they do not.
Used by bench/ and the kill-loop test; the emulator (engine.emulator.serve) logs the same lines as requests happen.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timezone

from engine.emulator.mechanism import ConversationCache

PREFILL_TOKENS_PER_MS = 2.0  # 238k tokens re-read in about two minutes (incident 2)
WINDOW = 262_144
NOISE = (b"D [sched] tick busy=%d/20 prefill_queue=2 decode_batch=8 kv_used_mib=91234 experts_hot=212/512 lat_us=1843",
         b"D [http] keepalive conn=%d peer=127.0.0.1:51234 idle_ms=1200 bytes_in=512 bytes_out=20480 streams=1",
         b"D [pool] worker %d expert=341 layer=44 tokens=8 took_us=912 queue=3 numa=1 arena_hit=1 stolen=0")


@dataclass
class Conversation:
    conv: str
    tokens: int


@dataclass
class EngineModel:
    instance_port: int = 8082
    budget_bytes: int = 8192 << 20
    every: int = 16384
    slots: int = 20
    decode_tps: float = 90.0
    seed: int = 7
    conversations: int = 8
    start_tokens: int = 180_000
    rng: random.Random = field(init=False)
    convs: list[Conversation] = field(init=False)
    cache: ConversationCache = field(init=False)
    task: int = 18000

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.convs = [Conversation(f"{self.rng.getrandbits(64):016x}",
                                   self.start_tokens + self.rng.randrange(0, 60_000))
                      for _ in range(self.conversations)]
        self.cache = ConversationCache(self.budget_bytes, self.every)

    def start_lines(self, ts: float) -> list[bytes]:
        return [
            line(ts, "I", "main", "Strata 0.9.3 (build 7f3c2e1) starting pid=48211"),
            line(ts, "I", "main", f"args: --model /home/cloud/models/current.gguf --port {self.instance_port}"
                                  f" --slots {self.slots} --ctx 262144 --pool-workers 24"
                                  f" --conversation-cache-mib {self.budget_bytes >> 20} --prompt-cache-every {self.every}"),
            line(ts, "I", "main", "model path=/home/cloud/models/current.gguf real=/data/models/v7/"
                                  "qwen3.5-397b-a17b-iq3_xxs.gguf bytes=163208757248 md5=5d41402abc4b2a76b9719d911017c592"),
            line(ts, "I", "main", "cpus allowed=38-53 pool_workers=24"),
            line(ts + 0.5, "I", "main", "ready in 435.0 s"),
        ]

    def turn(self, ts: float) -> list[bytes]:
        """The lines of one request: a random conversation takes its next turn at `ts`."""
        c = self.rng.choice(self.convs)
        self.task += 1
        task, grown = self.task, self.rng.randrange(800, 4000)
        if c.tokens + grown + 4000 > WINDOW:  # the client starts the conversation over
            self.cache.parked.pop(c.conv, None)
            c.conv, c.tokens = f"{self.rng.getrandbits(64):016x}", self.rng.randrange(2000, 20000)
        prompt = c.tokens + grown
        req = datetime.fromtimestamp(ts + 8 * 3600, tz=timezone.utc).strftime("%Y%m%d-%H%M%S-") + \
            f"{self.rng.getrandbits(24):06x}"
        out = [line(ts, "I", "http", f"task {task} req={req} conv={c.conv} queued prefill_depth={self.rng.randrange(0, 4)}")]
        reused, origin = self.cache.restore(c.conv, prompt)
        if origin != "none":
            out.append(line(ts + 0.01, "I", "cache", f"restore conv={c.conv} from={origin} tokens={reused}"))
        read = prompt - reused
        read_ms = 300 + int(read / PREFILL_TOKENS_PER_MS)
        slot = f"slot {task % self.slots}"
        t = ts + read_ms / 1000
        out.append(line(t, "I", slot, f"task {task} prompt {prompt} = {reused} reused + {read} read in {read_ms} ms"))
        thinking = self.rng.randrange(200, 4000)
        completion = thinking + self.rng.randrange(20, 600)
        t += completion / self.decode_tps
        out.append(line(t, "I", slot, f"task {task} thinking: {thinking} of max 32000 \u2192 done (stop)"))
        tool = self.rng.random() < 0.6
        if tool:
            out.append(line(t, "I", slot, f"task {task} writing a tool call"))
        out.append(line(t + 0.05, "I", slot,
                        f"task {task} done finish={'tool_calls' if tool else 'stop'} prompt={prompt}"
                        f" completion={completion} ttft_ms={read_ms + 15} decode_tps={self.decode_tps:.1f}"))
        c.tokens = prompt + completion
        out += self._park(c, t + 0.1)
        return out

    def stats_line(self, ts: float) -> bytes:
        cache = self.cache
        return line(ts, "I", "stats", f"busy={self.rng.randrange(0, 4)}/{self.slots} prefill_queue="
                                      f"{self.rng.randrange(0, 3)} decode_tps={self.decode_tps:.1f} parked="
                                      f"{len(cache.parked)} used={cache.used_bytes()} budget={self.budget_bytes}"
                                      f" evictions={cache.evictions}")

    def noise(self, ts: float) -> bytes:
        return line_raw(ts, self.rng.choice(NOISE) % self.rng.randrange(0, 64))

    def _park(self, c: Conversation, ts: float) -> list[bytes]:
        return park_lines(self.cache, c.conv, c.tokens, ts)


def park_lines(cache: ConversationCache, conv: str, tokens: int, ts: float) -> list[bytes]:
    """The evict lines and the park line of parking one conversation's snapshot."""
    out = []
    evicted = cache.park(conv, tokens)
    left = len(cache.parked) - 1 + len(evicted)  # parked before the new snapshot, minus each eviction
    used = cache.used_bytes() - tokens * cache.bytes_per_token + sum(size for _, size in evicted)
    for n, (victim, victim_bytes) in enumerate(evicted, start=cache.evictions - len(evicted) + 1):
        left, used = left - 1, used - victim_bytes
        out.append(line(ts, "I", "cache", f"evict conv={victim} bytes={victim_bytes} reason=budget"
                                          f" parked={left} used={used} budget={cache.budget_bytes} evictions={n}"))
    out.append(line(ts, "I", "cache", f"park conv={conv} parked={len(cache.parked)}"
                                      f" bytes={tokens * cache.bytes_per_token} used={cache.used_bytes()}"
                                      f" budget={cache.budget_bytes} evictions={cache.evictions}"))
    return out


def stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def line(ts: float, level: str, component: str, message: str) -> bytes:
    return f"{stamp(ts)} {level} [{component}] {message}".encode()


def line_raw(ts: float, message: bytes) -> bytes:
    return stamp(ts).encode() + b" " + message
