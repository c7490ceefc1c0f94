"""Issue 21 item 10: lines lost in fast rotation are counted truthfully, on real files.

The attacks of the issue, replayed against the real tailer: copytruncate every 0.5 s (196 of 532
lines lost, nothing counted), renames to names outside the `rotated` patterns (1,980 lost, nothing
counted) and a slow shift (nothing lost, `lost_files` +5). The rule: what can be proven lost is
counted (`lost_bytes`: bytes seen in a file and destroyed before they were read), what cannot be
proven is said with its reason (`possibly_lost`), and loss is never counted where there was none.

No sleeps: the tailer is polled where the agent's step would poll, on a simulated timeline of
0.05 s ticks; each file operation stamps the file's mtime with the simulated time (the tailer
compares mtimes), and the grace period runs on a ManualClock.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from spyglass.collectors.clock import ManualClock
from spyglass.collectors.tailer import Tailer

TICK = 0.05  # seconds of the simulated timeline
EPOCH_NS = 1_800_000_000 * 10**9


def line(i: int) -> bytes:
    return b"%06d the writer's line\n" % i


def gaps(seen: list[int], written: int) -> int:
    """How many runs of consecutive lines are missing from `seen` (of lines 0..written-1)."""
    missing = sorted(set(range(written)) - set(seen))
    return sum(1 for n, i in enumerate(missing) if n == 0 or missing[n - 1] != i - 1)


class Timeline:
    """A log path, the real tailer on it, a writer, and file operations stamped with simulated time."""

    def __init__(self, tmp: Path, **options) -> None:
        self.path = tmp / "engine.log"
        self.clock = ManualClock()
        self.tailer = Tailer(str(self.path), self.clock, **options)
        self.ticks = 0
        self.written = 0
        self.seen: list[int] = []

    def stamp(self, path: Path | str) -> None:
        t = EPOCH_NS + int(self.ticks * TICK * 1e9)
        os.utime(path, ns=(t, t))

    def write(self, n: int = 1) -> None:
        with open(self.path, "ab") as f:
            f.write(b"".join(line(self.written + k) for k in range(n)))
        self.written += n
        self.stamp(self.path)

    def tick(self) -> None:
        self.ticks += 1
        self.clock.advance(TICK)

    def poll(self, budget: int = 8 << 20) -> None:
        self.seen += [int(x.split()[0]) for x in self.tailer.poll(budget)]

    def drain(self) -> None:
        self.poll()
        self.clock.advance(3600)
        self.poll()

    @property
    def lost(self) -> int:
        return self.written - len(set(self.seen))


def copytruncate(tl: Timeline) -> None:
    """logrotate's copytruncate with `rotate 1`: the old copy removed, x.log copied to x.log.1, truncated."""
    rotated = Path(f"{tl.path}.1")
    rotated.unlink(missing_ok=True)
    shutil.copyfile(tl.path, rotated)
    tl.stamp(rotated)
    os.truncate(tl.path, 0)
    tl.stamp(tl.path)


def test_copytruncate_every_half_second_is_read_or_counted(tmp_path):
    """The writer writes 20 lines a second, copytruncate runs every 0.5 s, and the agent polls once a
    second (a step per commit interval): two copytruncates between polls. The first copy, holding
    what followed our offset, is replaced by the second before a poll can read it. The second copy
    is read (it was lost too: 196 of 532 in the attack, uncounted); what only the first copy held is
    lost, and each such truncation is counted as possibly lost, since nothing shows how much the
    writer wrote after the last poll."""
    tl = Timeline(tmp_path)
    polls = []
    for t in range(532):
        tl.write()  # line t
        if t == 0:
            tl.poll()  # the agent follows the file from its first line
        if t % 10 == 9:
            copytruncate(tl)
        if t % 20 == 13:
            tl.poll()
            polls.append(t)
        tl.tick()
    tl.drain()
    assert len(tl.seen) == len(set(tl.seen)) and tl.seen == sorted(tl.seen)  # once each, in order
    # Lost: what was written between a poll and the next copytruncate, whose copy the following one
    # replaced (6 lines a second). Before: the second copy was never read either (16 a second).
    missing = set(range(tl.written)) - set(tl.seen)
    assert missing == {i for p in polls for i in range(p + 1, p + 7)} and len(missing) == 156
    stats = tl.tailer.stats
    assert stats.possibly_lost == {"truncated": gaps(tl.seen, tl.written)} == {"truncated": 26}  # each gap said
    assert stats.lost_files == 0 and stats.lost_bytes == 0  # none of those lines was seen: none proven


def test_truncation_after_a_poll_at_its_budget_proves_the_unread_bytes_lost(tmp_path):
    """Bytes the tailer saw (the file's size at its last look, a held half line) and had not read when
    the file was truncated are proven lost: counted exactly, in bytes."""
    tl = Timeline(tmp_path)
    tl.write(100)
    with open(tl.path, "ab") as f:
        f.write(b"000100 half a li")
    tl.poll(budget=50 * len(line(0)))  # half read: the tailer has seen the whole size
    read_to = 50 * len(line(0))
    size = tl.path.stat().st_size
    os.truncate(tl.path, 0)  # a truncation in place, no copy
    tl.write(3)  # lines 100-102 (the half line was 100)
    tl.drain()
    assert tl.seen == [*range(50), 100, 101, 102]
    stats = tl.tailer.stats
    assert stats.lost_bytes == size - read_to
    assert stats.possibly_lost == {"truncated": 1}
    assert stats.lost_files == 0


def test_renames_to_unwatched_names_faster_than_polls_are_said(tmp_path):
    """The rotation renames to names no `rotated` pattern gives (x.log.old-N), three per poll: the file
    we hold is read to its end, the generations between are unseen (1,980 lines in the attack, uncounted).
    Each rename away is counted as possibly lost with its reason; nothing is counted as proven lost."""
    tl = Timeline(tmp_path)
    tl.write()
    tl.poll()  # the agent follows the file from its first line
    renames = 0
    for t in range(600):
        tl.write()
        if t % 7 == 6:
            os.rename(tl.path, f"{tl.path}.old-{t}")
            renames += 1
            tl.write()
        if t % 20 == 19:
            tl.poll()
        tl.tick()
    tl.drain()
    stats = tl.tailer.stats
    assert len(tl.seen) == len(set(tl.seen)) and tl.seen == sorted(tl.seen)
    assert tl.lost > 0
    polls_after_a_rename = 600 // 20
    assert stats.possibly_lost == {"renamed": polls_after_a_rename}  # once per rotation seen
    assert polls_after_a_rename < renames  # several renames between two polls count once: what a poll can see
    assert gaps(tl.seen, tl.written) <= stats.possibly_lost["renamed"]
    assert (stats.lost_files, stats.lost_bytes) == (0, 0)


def shift(path: Path, depth: int) -> None:
    """logrotate's numbered shift: x.log.n -> x.log.(n+1) from the oldest, then x.log -> x.log.1."""
    for n in range(depth - 1, 0, -1):
        if Path(f"{path}.{n}").exists():
            os.rename(f"{path}.{n}", f"{path}.{n + 1}")
    os.rename(path, f"{path}.1")


def test_a_shift_past_the_watched_name_with_nothing_lost_counts_no_loss(tmp_path):
    """With the default `rotated` ({path}.1), two numbered shifts between polls move the followed file
    to x.log.2 and its successor to x.log.1. Both are read: nothing is lost, yet `lost_files` counted
    one per rotation (+5 in the attack). Now no loss is counted; that the followed file went to a name
    no pattern gives is said (`possibly_lost{renamed}`), since a third shift would hide a generation."""
    tl = Timeline(tmp_path)
    tl.write(3)
    tl.poll()
    for _ in range(5):
        tl.write(3)
        shift(tl.path, 5)
        tl.write(3)
        tl.tick()
        shift(tl.path, 5)
        tl.write(3)
        tl.tick()
        tl.poll()
    tl.drain()
    stats = tl.tailer.stats
    assert tl.seen == list(range(tl.written))  # all, once, in order
    assert (stats.lost_files, stats.lost_bytes) == (0, 0)
    assert stats.possibly_lost == {"renamed": 5}


def test_a_slow_shift_with_polls_between_its_renames_counts_nothing(tmp_path):
    """logrotate's shift of five generations with polls between every rename: no loss, no count."""
    tl = Timeline(tmp_path, rotated=("{path}.{n}",), generations=8)
    for _ in range(6):
        tl.write(4)
        tl.poll()
        for n in range(4, 0, -1):
            if Path(f"{tl.path}.{n}").exists():
                os.rename(f"{tl.path}.{n}", f"{tl.path}.{n + 1}")
                tl.write()
                tl.poll()
        os.rename(tl.path, f"{tl.path}.1")
        tl.poll()
        tl.write()
        tl.poll()
        tl.tick()
    tl.drain()
    stats = tl.tailer.stats
    assert tl.seen == list(range(tl.written))
    assert (stats.lost_files, stats.lost_bytes, stats.possibly_lost) == (0, 0, {})
