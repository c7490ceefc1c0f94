"""The Strata engine log's one writer (sources.md §1), and a small mechanistic model of one engine
that writes it without a server.

Each line kind is one function returning (level, component, message); `line` stamps it. The
emulated serve (spyglass.engine.emulator.serve), the model below and bench/ all write through them, so the
format the parsers are tested on is the one format.

Conversations grow turn by turn; each turn parks a snapshot sized by its tokens; the cache
evicts least-recently-used snapshots when over its byte budget; the next turn restores from the
parked snapshot, else from the last checkpoint (a multiple of prompt-cache-every), else reads it
all. With the seed's numbers (8 GiB budget, ~4.7 GB snapshots of 250k-token conversations) an
eviction storm and checkpoint-only reuse emerge; with a large budget they do not.
The model is used by bench/ and the kill-loop test; the emulator logs the same lines as requests happen.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime

from spyglass.engine.emulator.mechanism import ConversationCache

PREFILL_TOKENS_PER_MS = 2.0  # 238k tokens re-read in about two minutes (incident 2)
WINDOW = 262_144
NOISE = (
    b"D [sched] tick busy=%d/20 prefill_queue=2 decode_batch=8 kv_used_mib=91234 experts_hot=212/512 lat_us=1843",
    b"D [http] keepalive conn=%d peer=127.0.0.1:51234 idle_ms=1200 bytes_in=512 bytes_out=20480 streams=1",
    b"D [pool] worker %d expert=341 layer=44 tokens=8 took_us=912 queue=3 numa=1 arena_hit=1 stolen=0",
)


BUILD = "Strata 0.9.3 (build 7f3c2e1)"
Record = tuple[str, str, str]  # level, component, message


def starting(pid: int) -> Record:
    return "I", "main", f"{BUILD} starting pid={pid}"


def args(port: int, slots: int, ctx: int, pool_workers: int, cache_mib: int, every: int) -> Record:
    return (
        "I",
        "main",
        (
            f"args: --model /home/cloud/models/current.gguf --port {port} --slots {slots} --ctx {ctx}"
            f" --pool-workers {pool_workers} --conversation-cache-mib {cache_mib}"
            f" --prompt-cache-every {every}"
        ),
    )


def model_path() -> Record:
    return (
        "I",
        "main",
        (
            "model path=/home/cloud/models/current.gguf real=/data/models/v7/qwen3.5-397b-a17b-"
            "iq3_xxs.gguf bytes=163208757248 md5=5d41402abc4b2a76b9719d911017c592"
        ),
    )


def cpus(allowed: str, pool_workers: int) -> Record:
    return "I", "main", f"cpus allowed={allowed} pool_workers={pool_workers}"


def loaded(seconds: float) -> Record:
    return "I", "load", f"experts resident=256/512 arena_mib=98304 loaded in {seconds:.1f} s"


def ready(seconds: float) -> Record:
    return "I", "main", f"ready in {seconds:.1f} s"


def stats(
    busy: int, slots: int, queue: int, decode_tps: float, parked: int, used: int, budget: int, evictions: int
) -> Record:
    return (
        "I",
        "stats",
        (
            f"busy={busy}/{slots} prefill_queue={queue} decode_tps={decode_tps:.1f} parked={parked}"
            f" used={used} budget={budget} evictions={evictions}"
        ),
    )


def rejected(task: int, prompt: int, window: int) -> Record:
    return "W", "http", f"task {task} rejected 400 #545 prompt too long: {prompt} > {window}"


def queued(task: int, req: str, conv: str, depth: int) -> Record:
    return "I", "http", f"task {task} req={req} conv={conv} queued prefill_depth={depth}"


def restored(conv: str, origin: str, tokens: int) -> Record:
    return "I", "cache", f"restore conv={conv} from={origin} tokens={tokens}"


def rebuild(shape: str, took_ms: int) -> Record:
    return "I", "graph", f"rebuild shape={shape} reason=new_shape took_ms={took_ms}"


def prompt_read(slot: str, task: int, prompt: int, reused: int, read_ms: int) -> Record:
    return "I", slot, f"task {task} prompt {prompt} = {reused} reused + {prompt - reused} read in {read_ms} ms"


def thinking(slot: str, task: int, tokens: int, budget: int, cause: str) -> Record:
    return "I", slot, f"task {task} thinking: {tokens} of max {budget} \u2192 done ({cause})"


def tool_call(slot: str, task: int) -> Record:
    return "I", slot, f"task {task} writing a tool call"


def done(slot: str, task: int, finish: str, prompt: int, completion: int, ttft_ms: int, decode_tps: float) -> Record:
    return (
        "I",
        slot,
        (
            f"task {task} done finish={finish} prompt={prompt} completion={completion}"
            f" ttft_ms={ttft_ms} decode_tps={decode_tps:.1f}"
        ),
    )


def evict(conv: str, size: int, parked: int, used: int, budget: int, evictions: int) -> Record:
    return (
        "I",
        "cache",
        (
            f"evict conv={conv} bytes={size} reason=budget parked={parked} used={used}"
            f" budget={budget} evictions={evictions}"
        ),
    )


def park(conv: str, parked: int, size: int, used: int, budget: int, evictions: int) -> Record:
    return (
        "I",
        "cache",
        f"park conv={conv} parked={parked} bytes={size} used={used} budget={budget} evictions={evictions}",
    )


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
        self.convs = [
            Conversation(f"{self.rng.getrandbits(64):016x}", self.start_tokens + self.rng.randrange(0, 60_000))
            for _ in range(self.conversations)
        ]
        self.cache = ConversationCache(self.budget_bytes, self.every)

    def start_lines(self, ts: float) -> list[bytes]:
        records = [
            starting(48211),
            args(self.instance_port, self.slots, WINDOW, 24, self.budget_bytes >> 20, self.every),
            model_path(),
            cpus("38-53", 24),
        ]
        return [line(ts, *record) for record in records] + [line(ts + 0.5, *ready(435.0))]

    def turn(self, ts: float) -> list[bytes]:
        """The lines of one request: a random conversation takes its next turn at `ts`."""
        c = self.rng.choice(self.convs)
        self.task += 1
        task, grown = self.task, self.rng.randrange(800, 4000)
        if c.tokens + grown + 4000 > WINDOW:  # the client starts the conversation over
            self.cache.parked.pop(c.conv, None)
            c.conv, c.tokens = f"{self.rng.getrandbits(64):016x}", self.rng.randrange(2000, 20000)
        prompt = c.tokens + grown
        req = (
            datetime.fromtimestamp(ts + 8 * 3600, tz=UTC).strftime("%Y%m%d-%H%M%S-") + f"{self.rng.getrandbits(24):06x}"
        )
        out = [line(ts, *queued(task, req, c.conv, self.rng.randrange(0, 4)))]
        reused, origin = self.cache.restore(c.conv, prompt)
        if origin != "none":
            out.append(line(ts + 0.01, *restored(c.conv, origin, reused)))
        read_ms = 300 + int((prompt - reused) / PREFILL_TOKENS_PER_MS)
        slot = f"slot {task % self.slots}"
        t = ts + read_ms / 1000
        out.append(line(t, *prompt_read(slot, task, prompt, reused, read_ms)))
        thought = self.rng.randrange(200, 4000)
        completion = thought + self.rng.randrange(20, 600)
        t += completion / self.decode_tps
        out.append(line(t, *thinking(slot, task, thought, 32000, "stop")))
        tool = self.rng.random() < 0.6
        if tool:
            out.append(line(t, *tool_call(slot, task)))
        out.append(
            line(
                t + 0.05,
                *done(slot, task, "tool_calls" if tool else "stop", prompt, completion, read_ms + 15, self.decode_tps),
            )
        )
        c.tokens = prompt + completion
        out += self._park(c, t + 0.1)
        return out

    def stats_line(self, ts: float) -> bytes:
        cache = self.cache
        return line(
            ts,
            *stats(
                self.rng.randrange(0, 4),
                self.slots,
                self.rng.randrange(0, 3),
                self.decode_tps,
                len(cache.parked),
                cache.used_bytes(),
                self.budget_bytes,
                cache.evictions,
            ),
        )

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
        out.append(line(ts, *evict(victim, victim_bytes, left, used, cache.budget_bytes, n)))
    out.append(
        line(
            ts,
            *park(
                conv,
                len(cache.parked),
                tokens * cache.bytes_per_token,
                cache.used_bytes(),
                cache.budget_bytes,
                cache.evictions,
            ),
        )
    )
    return out


def stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def line(ts: float, level: str, component: str, message: str) -> bytes:
    return f"{stamp(ts)} {level} [{component}] {message}".encode()


def line_raw(ts: float, message: bytes) -> bytes:
    return stamp(ts).encode() + b" " + message
