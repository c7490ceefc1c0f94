"""The corpus: every incident of both seeds, and days that must stay quiet, as replay windows.

Each window names what the seeds say must be found in it, not what the rules do today:
- `must`: heuristics whose alert must fire (backtest) and whose finding must appear (diagnose);
- `diagnose`: heuristics only the diagnosis must find (a single request the pager rightly ignores);
- `may`: standing conditions that may fire there without being a false alarm;
- `figures`: per heuristic, the seeds' numbers the diagnosis must quote;
- `where`: per heuristic, the instance (or lane) it must name: elsewhere it is a false alarm.
H19's Watchdog fires everywhere by design and is not scored.
Seeds: 000 = the six incidents of chapter 18 (Beijing times in the text, UTC here); 004 = the upgrade article.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from fixtures.incidents import replay
from fixtures.incidents.healthy import write_healthy
from fixtures.incidents.replay import utc

from incidents.traffic import FILES, History
from spyglass.engine.emulator.logsynth import line

MIN = timedelta(minutes=1)
HOUR = timedelta(hours=1)
FIXED_A = {"strata-a": True, "strata-b": False}  # 10-18 06:22 UTC to 10-19 10:58 UTC: only the fast lane's serve
NO_FIX = {"strata-a": False, "strata-b": False}
BOTH_FIXED = {"strata-a": True, "strata-b": True}


@dataclass(frozen=True)
class Window:
    name: str
    seed: str
    what: str
    start: datetime
    end: datetime
    must: frozenset[str] = frozenset()
    diagnose: frozenset[str] = frozenset()
    may: frozenset[str] = frozenset()
    figures: dict[str, tuple[float, ...]] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)  # heuristic -> the instance or lane it must name
    # (heuristic, side) -> why it is still missed; side is backtest, diagnose or figure. Scored as a miss,
    # printed apart, does not fail the window; a known miss that stops missing fails it (the list only shrinks).
    known_misses: dict[tuple[str, str], str] = field(default_factory=dict)
    write: Callable[[Path], Path] | None = None  # folder -> config

    def build(self, folder: Path) -> Path:
        assert self.write is not None
        return self.write(folder)


def everyday(
    h: History, start: datetime, end: datetime, fix: dict[str, bool], *, skip: tuple[str, ...] = (), seed: int = 0
) -> None:
    """Both engines serving, stats, polls and supervisord from an hour before `start` to `end`."""
    begin = start - HOUR
    h.start_all(begin - 20 * MIN)
    for instance, cpus in (("strata-a", "0-15"), ("strata-b", "38-53")):
        h.banner(instance, begin - 20 * MIN + timedelta(seconds=2), cpus)
        if instance not in skip:
            h.everyday(instance, begin, end, seed=seed)
            h.stats(instance, begin, end)
    h.polls(begin, end, escape_fix=fix)


# -- seed 000, incident 1: two engines' expert pools on the same 32 cores ------------------------------
def incident1(folder: Path) -> Path:
    """2026-10-07: one instance per card, both on CPUs 0-31: solo decode 76.8 -> 9.3 tok/s; pinned again
    (A 0-15, B 38-53) at 03:30 UTC: 98-107 tok/s."""
    h, day = History(), utc("2026-10-07 00:00")
    h.start_all(day - 20 * MIN)
    for instance, cpus in (("strata-a", "0-15"), ("strata-b", "38-53")):
        h.banner(instance, day - 20 * MIN, cpus)
        h.everyday(instance, day, day + 2 * HOUR, decode_tps=76.8, seed=1)
    split, pinned = day + 2 * HOUR, day + 3.5 * HOUR
    for n, instance in enumerate(("strata-a", "strata-b")):
        h.restart(instance, split, 3427000 + n)
        h.banner(instance, split + timedelta(seconds=3), "0-31", pid=49000 + n, load_seconds=300)
        h.everyday(instance, split + 6 * MIN, pinned, decode_tps=9.3, seed=2)
        h.restart(instance, pinned, 3427100 + n)
        h.banner(
            instance, pinned + timedelta(seconds=3), "0-15" if n == 0 else "38-53", pid=49100 + n, load_seconds=300
        )
        h.everyday(instance, pinned + 6 * MIN, day + 5 * HOUR, decode_tps=102.0, seed=3)
    for instance in ("strata-a", "strata-b"):
        h.engines[instance].decode_tps = 9.3
        h.stats(instance, day, day + 5 * HOUR)
    h.polls(day, day + 5 * HOUR, escape_fix=NO_FIX)
    pinned_cpus = {"strata-a": "0-15", "strata-b": "38-53"}
    h.samples(day - HOUR, split, pinned_cpus)
    h.samples(split, pinned, {"strata-a": "0-31", "strata-b": "0-31"}, throttled=True)
    h.samples(pinned, day + 5 * HOUR, pinned_cpus)
    return h.write(folder)


# -- seed 000, incident 2: the eviction storm on strata-b ---------------------------------------------
def incident2(folder: Path) -> Path:
    """2026-10-07 15:21-19:40 Beijing: the 1M suite on strata-b, 8 GiB budget, 2508 evictions."""
    h = History()
    start, end = replay.WINDOWS["incident2"]
    h.start_all(start - 2 * HOUR)
    h.banner("strata-a", start - 2 * HOUR + 2 * MIN, "0-15")
    h.everyday("strata-a", start - HOUR, end, seed=4)
    h.stats("strata-a", start - HOUR, end)
    h.engines["strata-b"].lines += replay.eviction_storm()
    h.stats("strata-b", start - 55 * MIN, end, busy=8, queue=6)
    h.polls(start - HOUR, end, escape_fix=NO_FIX, busy={"strata-b": 8}, queue={"strata-b": 6})
    return h.write(folder)


# -- seed 000, incident 3: special-token literals, 58 against 295 -------------------------------------
def incident3(folder: Path) -> Path:
    h = History(unrecorded={"strata-a"})  # the seed's 353 fast-lane rows are that lane's whole infer store
    start, end = replay.WINDOWS["incident3"]
    everyday(h, start, end, NO_FIX, seed=5)
    replay.special_tokens(h.infer)
    return h.write(folder)


# -- seed 000, incidents 4 and 5: plan-then-EOS, the task anchor lost -----------------------------------
def incident4(folder: Path) -> Path:
    h = History()
    everyday(h, utc("2026-10-18 15:30"), utc("2026-10-18 16:30"), FIXED_A, seed=6)
    a: list[bytes] = []
    replay.plan_then_eos(h.infer, h.gateway, a)
    h.engines["strata-a"].lines += [raw for raw in a if raw[:10] == b"2026-10-18"]
    h.infer.rows = [r for r in h.infer.rows if not r["session"].startswith("auto:848a")]
    h.gateway = [(t, raw) for t, raw in h.gateway if b"848a" not in raw]
    return h.write(folder)


def incident5(folder: Path) -> Path:
    h = History()
    everyday(h, utc("2026-10-19 03:30"), utc("2026-10-19 04:30"), FIXED_A, seed=7)
    a: list[bytes] = []
    replay.plan_then_eos(h.infer, h.gateway, a)
    h.engines["strata-a"].lines += [raw for raw in a if raw[:10] == b"2026-10-19"]
    h.infer.rows = [r for r in h.infer.rows if not r["session"].startswith("auto:bd7e")]
    h.gateway = [(t, raw) for t, raw in h.gateway if b"bd7e" not in raw]
    return h.write(folder)


# -- seed 000, incident 6: four counts and blind retries ---------------------------------------------
def incident6(folder: Path) -> Path:
    h = History()
    everyday(h, utc("2026-10-19 04:30"), utc("2026-10-19 06:20"), FIXED_A, seed=8)
    a: list[bytes] = []
    replay.four_counts(h.infer, h.gateway, a)
    h.engines["strata-a"].lines += a
    for n, stamp in enumerate(("05:07:00", "05:56:00")):  # rag-proxy restarts at 13:07 and 13:56 Beijing
        h.restart("rag-proxy", utc(f"2026-10-19 {stamp}"), 3426350 + n)
    return h.write(folder)


# -- seed 000, incident 5's amplifier: 429 model concurrency full -------------------------------------
def burst429(folder: Path) -> Path:
    """10-19 01:33 Beijing: 429 · model concurrency full (limit 2), a burst of ten minutes."""
    h = History()
    start, end = utc("2026-10-18 17:00"), utc("2026-10-18 18:00")
    everyday(h, start, end, FIXED_A, seed=9)
    at, n = utc("2026-10-18 17:30"), 0
    while at < utc("2026-10-18 17:42"):
        n += 1
        h.gateway.append(
            (
                at,
                f"[{at:%H:%M:%S}] reject req={replay.rid(at, 0xAA0000 + n)} status=429"
                f' reason="model concurrency full (limit 2)"'.encode(),
            )
        )
        at += timedelta(seconds=20)
    return h.write(folder)


# -- the upgrade article's restart loop and the seed's rag-proxy restarts ------------------------------
def restarts(folder: Path) -> Path:
    """2026-10-19 06:10-06:21 UTC: strata-b aborts (SIGABRT) within seconds of each start, 4 times, FATAL."""
    h = History()
    dead = utc("2026-10-19 06:20")
    everyday(h, utc("2026-10-19 06:00"), utc("2026-10-19 07:00"), FIXED_A, skip=("strata-b",), seed=10)
    h.everyday("strata-b", utc("2026-10-19 05:00"), dead, seed=17)
    h.stats("strata-b", utc("2026-10-19 05:00"), dead)
    h.supervisord += [raw for raw in replay.supervisord() if b"strata-b" in raw and b"06:20" in raw]
    b = h.engines["strata-b"]
    for n, stamp in enumerate(("06:20:02", "06:20:04", "06:20:07")):
        t = utc(f"2026-10-19 {stamp}").timestamp()
        b.lines += [
            line(t, "I", "main", f"Strata 0.9.3 (build 7f3c2e1) starting pid={3426700 + n}"),
            line(t + 0.3, "E", "main", "GGML_ASSERT(ctx->n_experts > 0) failed: abort"),
        ]
    h.status = [(t, raw) for t, raw in h.status if t < dead or b'"strata-b"' not in raw]  # its polls fail
    return h.write(folder)


def aborts_while_loading(folder: Path) -> Path:
    """strata-a aborts (SIGABRT, then exit 134) 50 s into each load, five times, FATAL; started again 30 min
    later. A crash loop (H13), not a probe killing a load (H14): the cause is an abort, 50 s is far under the
    probe budget."""
    h = History()
    start, crash, back, end = (
        utc("2026-10-24 07:00"),
        utc("2026-10-24 08:00"),
        utc("2026-10-24 08:30"),
        utc("2026-10-24 09:30"),
    )
    everyday(h, start, end, BOTH_FIXED, skip=("strata-a",), seed=18)
    h.everyday("strata-a", start - HOUR, crash, seed=19)
    h.stats("strata-a", start - HOUR, crash)
    h.sup(crash, "WARN", "exited: strata-a (terminated by SIGABRT (core dumped); not expected)")
    a = h.engines["strata-a"]
    for k in range(5):  # supervisord retries; each load dies 50 s in
        spawn = crash + timedelta(seconds=60 * k + 2)
        h.sup(spawn, "INFO", f"spawned: 'strata-a' with pid {3427000 + k}")
        h.banner("strata-a", spawn + timedelta(seconds=1), "0-15", pid=3427000 + k)
        a.lines.pop()  # no `ready`: it dies loading
        a.lines.append(line(spawn.timestamp() + 49, "E", "load", "GGML_ASSERT(n_experts_used <= n_experts) failed"))
        h.sup(spawn + timedelta(seconds=48), "WARN", "exited: strata-a (exit status 134; not expected)")
    h.sup(
        crash + timedelta(seconds=300),
        "INFO",
        "gave up: strata-a entered FATAL state, too many start retries too quickly",
    )
    h.status = [(t, raw) for t, raw in h.status if t < crash or t >= back + 8 * MIN or b'"strata-a"' not in raw]
    h.sup(back, "INFO", "spawned: 'strata-a' with pid 3427100")
    h.sup(
        back + timedelta(seconds=31),
        "INFO",
        "success: strata-a entered RUNNING state, process has stayed up for > than 30 seconds (startsecs)",
    )
    h.banner("strata-a", back + timedelta(seconds=1), "0-15", pid=3427100)
    h.polls(back, back + 8 * MIN, escape_fix=BOTH_FIXED, state={"strata-a": "loading"})
    h.everyday("strata-a", back + 8 * MIN, end, seed=20)
    h.stats("strata-a", back + 8 * MIN, end)
    return h.write(folder)


# -- days that must stay quiet ------------------------------------------------------------------------
def quiet_day(folder: Path) -> Path:
    h = History()
    everyday(h, utc("2026-10-28 00:00"), utc("2026-10-29 00:00"), BOTH_FIXED, seed=11)
    return h.write(folder)


def standing_budget(folder: Path) -> Path:
    """strata-b's 8 GiB budget, never raised: a normal-lane user's two 250k conversations on 10-22 each park
    a 4.7 GB snapshot, so each turn evicts the other's; no suite, no storm."""
    h = History()
    start, end = utc("2026-10-22 02:00"), utc("2026-10-22 06:00")
    everyday(h, start, end, BOTH_FIXED, skip=("strata-b",), seed=12)
    at, n = start - HOUR, 0
    tokens = {"5a5a5a5a5a5a5a5a": 236_000, "6b6b6b6b6b6b6b6b": 238_000}
    while at < end:
        conv = list(tokens)[n % 2]
        tokens[conv] += 1_500
        h.turn("strata-b", at, conv, tokens[conv], tool=True)
        at += 10 * MIN
        n += 1
    h.everyday("strata-b", start - HOUR, end, every=300, conversations=2, seed=13)
    h.stats("strata-b", start - HOUR, end)
    return h.write(folder)


def hung_engine(folder: Path) -> Path:
    """2026-10-25: strata-a stops finishing anything at 02:40 UTC while requests keep arriving (61 queued
    lines in 22 minutes, no done, no [stats]); /health and /v1/status say ready; restarted at 03:02."""
    h = History()
    start, hang, back, end = (
        utc("2026-10-25 02:00"),
        utc("2026-10-25 02:40"),
        utc("2026-10-25 03:02"),
        utc("2026-10-25 04:00"),
    )
    everyday(h, start, end, BOTH_FIXED, skip=("strata-a",), seed=14)
    h.everyday("strata-a", start - HOUR, hang, seed=15)
    h.stats("strata-a", start - HOUR, hang)
    a, at = h.engines["strata-a"], hang + timedelta(seconds=5)
    for k in range(61):
        task = a.next_task()
        req = replay.rid(at, task)
        a.lines.append(
            line(at.timestamp(), "I", "http", f"task {task} req={req} conv=c{task:x} queued prefill_depth={k + 1}")
        )
        h.gateway.append(
            (
                at,
                f"[{at:%H:%M:%S}] req={req} session=auto:c{task:x} lane=fast mode=assembled"
                f" client_msgs=3 sent_msgs=3 chars=9000 cjk=0.900 est_tokens=9000"
                f" max_tokens=32000".encode(),
            )
        )
        at += (back - hang - 10 * timedelta(seconds=1)) / 61
    h.status = [(t, raw) for t, raw in h.status if not (b'"strata-a"' in raw and hang <= t < back + 8 * MIN)]
    h.polls(hang, back, escape_fix=BOTH_FIXED, busy={"strata-a": 20}, queue={"strata-a": 41})
    h.restart("strata-a", back, 3428000)
    h.banner("strata-a", back + timedelta(seconds=3), "0-15", pid=49500)
    h.polls(back, back + 8 * MIN, escape_fix=BOTH_FIXED, state={"strata-a": "loading"})
    h.everyday("strata-a", back + 8 * MIN, end, seed=16)
    h.stats("strata-a", back + 8 * MIN, end)
    return h.write(folder)


def healthy_hour(folder: Path) -> Path:
    """The fixture of tests/test_diagnose.py, plus the `[stats]` line each engine writes every 10 s (the
    fixture has none: its engines would look silent between requests)."""
    config = write_healthy(folder)
    for name in ("strata-iq3_xxs-a.log", "strata-iq3_xxs-b.log"):
        path = folder / name
        lines = path.read_bytes().splitlines()
        t = utc("2026-11-02 01:45").timestamp()
        while t < utc("2026-11-02 03:00").timestamp():
            lines.append(
                line(
                    t,
                    "I",
                    "stats",
                    "busy=1/20 prefill_queue=0 decode_tps=77.1 parked=8 used=2147483648 budget=8589934592 evictions=0",
                )
            )
            t += 10
        path.write_bytes(b"\n".join(sorted(lines, key=lambda raw: raw[:23])) + b"\n")
    return config


# -- seed 004: the upgrade day ------------------------------------------------------------------------
def upgrade_day(folder: Path) -> Path:
    """The four turns of tests/test_upgrades_seed.py on strata-b; on strata-a, a probe that gives up at the
    configured budget (900 s) kills each of three loads that need 1,000 s (SIGKILL 905 s after the spawn)."""
    import test_upgrades_seed as up

    folder.mkdir(parents=True, exist_ok=True)
    supervisord = [raw for raw in up.supervisord() if b"strata-a" not in raw]
    engine_a: list[bytes] = []
    for n in range(3):
        spawn = utc("2026-11-02 06:00") + n * timedelta(seconds=910)
        supervisord.append(f"{spawn:%Y-%m-%d %H:%M:%S},000 INFO spawned: 'strata-a' with pid {49000 + n}".encode())
        engine_a += [
            line(spawn.timestamp() + 1, "I", "main", f"Strata 0.9.4 (build {up.NEW}) starting pid={49000 + n}"),
            line(spawn.timestamp() + 1, "I", "main", f"args: {up.BASE_ARGS}"),
        ]
        killed = spawn + timedelta(seconds=905)
        supervisord.append(
            f"{killed:%Y-%m-%d %H:%M:%S},000 WARN exited: strata-a (terminated by SIGKILL; not expected)".encode()
        )
    files = {
        "engine-b.log": sorted(up.engine_b(), key=lambda raw: raw[:23]),
        "engine-a.log": engine_a,
        "supervisord.log": sorted(supervisord),
        "status.jsonl": up.status(),
        "switch-engine.log": up.switch_log(),
    }
    for name, lines in files.items():
        (folder / name).write_bytes(b"\n".join(lines) + b"\n")
    config = folder / "spyglass.toml"
    config.write_text(up.CONFIG.format(d=folder))
    return config


def _f(*numbers: float) -> tuple[float, ...]:
    return numbers


WINDOWS: list[Window] = [
    Window(
        "incident1",
        "000 §18.2",
        "both engines' expert pools on CPUs 0-31: 76.8 -> 9.3 tok/s",
        utc("2026-10-07 01:00"),
        utc("2026-10-07 05:00"),
        must=frozenset({"H1", "H2"}),
        may=frozenset({"H13", "H18"}),
        figures={"H1": _f(9.3, 76.8)},
        write=incident1,
    ),
    Window(
        "incident2",
        "000 §18.3",
        "eviction storm on strata-b: 4.7 GB snapshots in 8 GiB, 2508 evictions",
        *replay.WINDOWS["incident2"],
        must=frozenset({"H3", "H4", "H5"}),
        figures={"H3": _f(2508, 4.7e9), "H4": _f(123, 194)},
        where=dict.fromkeys(("H3", "H4", "H5"), "strata-b"),
        write=incident2,
    ),
    Window(
        "incident3",
        "000 §18.4",
        "special-token literals: 16 thinking-only of 58, 0 of 295",
        *replay.WINDOWS["incident3"],
        must=frozenset({"H6"}),
        figures={"H6": _f(58, 16, 295)},
        write=incident3,
    ),
    Window(
        "incident4",
        "000 §18.5",
        "bd7e62ed: a 67-character plan, then EOS",
        utc("2026-10-18 15:30"),
        utc("2026-10-18 16:30"),
        must=frozenset({"H7"}),
        diagnose=frozenset({"H8"}),
        figures={"H8": _f(67, 740)},
        write=incident4,
    ),
    Window(
        "burst429",
        "000 §18.6",
        "429 model concurrency full (limit 2) at 01:33 Beijing",
        utc("2026-10-18 17:00"),
        utc("2026-10-18 18:00"),
        must=frozenset({"H7", "H12"}),
        write=burst429,
    ),
    Window(
        "incident5",
        "000 §18.6",
        "848a12ed: 315 -> 147 messages, the task anchor lost, plan-then-EOS x4",
        utc("2026-10-19 03:30"),
        utc("2026-10-19 04:30"),
        must=frozenset({"H7", "H8", "H9"}),
        figures={"H8": _f(3240, 267), "H9": _f(315, 147)},
        write=incident5,
    ),
    Window(
        "incident6",
        "000 §18.7",
        "1,075,447 chars, 154,796 engine tokens, 516,561 estimated; blind retries",
        utc("2026-10-19 04:30"),
        utc("2026-10-19 06:20"),
        must=frozenset({"H7", "H11"}),
        diagnose=frozenset({"H10"}),
        figures={"H10": _f(1075447, 154796, 516561, 3.34), "H11": _f(398890, 372066)},
        write=incident6,
    ),
    Window(
        "restarts",
        "004 (restart loop)",
        "strata-b aborts four times in 8 s and goes FATAL",
        utc("2026-10-19 06:00"),
        utc("2026-10-19 07:00"),
        must=frozenset({"H13"}),
        may=frozenset({"H7"}),
        where={"H13": "strata-b"},
        write=restarts,
    ),
    Window(
        "aborts-loading",
        "004 (restart loop)",
        "strata-a aborts 50 s into each load, five times, FATAL",
        utc("2026-10-24 07:30"),
        utc("2026-10-24 09:30"),
        must=frozenset({"H13"}),
        where={"H13": "strata-a"},
        write=aborts_while_loading,
    ),
    Window(
        "upgrade-day",
        "004",
        "dependency drift loop, dangling link, rebuild storm, probe kills a load",
        utc("2026-11-02 01:00"),
        utc("2026-11-02 07:00"),
        must=frozenset({"H13", "H14", "H15", "H16", "H18"}),
        may=frozenset({"H5", "H19"}),
        where={"H14": "strata-a", "H15": "strata-b", "H16": "strata-b", "H18": "strata-b"},
        write=upgrade_day,
    ),
    Window(
        "quiet-day",
        "-",
        "both lanes healthy for 24 h",
        utc("2026-10-28 00:00"),
        utc("2026-10-29 00:00"),
        write=quiet_day,
    ),
    Window(
        "healthy-hour",
        "-",
        "an hour of CJK conversations that fit the cache",
        utc("2026-11-02 02:00"),
        utc("2026-11-02 03:00"),
        write=healthy_hour,
    ),
    Window(
        "standing-budget",
        "000 §18.3 (never fixed)",
        "strata-b's 8 GiB budget with two 250k conversations",
        utc("2026-10-22 02:00"),
        utc("2026-10-22 06:00"),
        may=frozenset({"H3", "H4"}),
        write=standing_budget,
    ),
    Window(
        "hung-engine",
        "H20",
        "strata-a queues 61 requests in 22 minutes and finishes none",
        utc("2026-10-25 02:00"),
        utc("2026-10-25 04:00"),
        must=frozenset({"H20"}),
        may=frozenset({"H5"}),
        figures={"H20": _f(61)},
        where={"H20": "strata-a"},
        write=hung_engine,
    ),
]
BY_NAME = {w.name: w for w in WINDOWS}
assert FILES  # the engine log names every window but the upgrade day uses
