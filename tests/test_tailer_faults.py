"""The single-host fault cases F1-F28 of ../shared/research/log-tailers.md, on real files.

No sleeps: the tailer is polled directly and the grace period runs on a ManualClock.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from spyglass.collectors.clock import ManualClock
from spyglass.collectors.tailer import Tailer


class Harness:
    """A log path, a tailer on it, and helpers to write, rotate and restart."""

    def __init__(self, tmp: Path, **options) -> None:
        self.path = tmp / "engine.log"
        self.clock = ManualClock()
        self.options = options
        self.tailer = Tailer(str(self.path), self.clock, **options)
        self.seen: list[bytes] = []

    def write(self, data: bytes, path: Path | None = None) -> None:
        with open(path or self.path, "ab") as f:
            f.write(data)

    def poll(self) -> list[bytes]:
        lines = self.tailer.poll()
        self.seen.extend(lines)
        return lines

    def drain(self, grace: bool = True) -> list[bytes]:
        """Poll until nothing new, letting the grace period of retired files pass."""
        got = self.poll()
        if grace:
            self.clock.advance(3600)
            got += self.poll()
        return got

    def restart(self, checkpoint: dict | None = "current") -> None:
        saved = self.tailer.checkpoint() if checkpoint == "current" else checkpoint
        self.tailer.close()
        saved = json.loads(json.dumps(saved)) if saved is not None else None  # as stored
        self.tailer = Tailer(str(self.path), self.clock, checkpoint=saved, **self.options)


def lines(prefix: str, n: int, start: int = 0) -> bytes:
    return b"".join(f"{prefix}{i}\n".encode() for i in range(start, start + n))


def names(prefix: str, n: int, start: int = 0) -> list[bytes]:
    return lines(prefix, n, start).splitlines()


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


def test_f1_plain_append_many_lines_in_one_write_and_empty_lines(h):
    h.write(lines("a", 1000) + b"\n\n")
    assert h.poll() == names("a", 1000) + [b"", b""]
    assert h.poll() == []


def test_f2_partial_line_is_held_until_its_newline(h):
    h.write(b"one\ntw")
    assert h.poll() == [b"one"]
    assert h.tailer.checkpoint()["files"][0]["offset"] == 4
    h.write(b"o\n")
    assert h.poll() == [b"two"]


def test_f2_partial_line_across_restart_is_completed_once(h):
    h.write(b"one\ntw")
    h.poll()
    h.restart()
    h.write(b"o\nthree\n")
    assert h.poll() == [b"two", b"three"]
    assert h.seen == [b"one", b"two", b"three"]


def test_f3_restart_resumes_exactly_at_checkpoint(h):
    h.write(lines("a", 10))
    h.poll()
    h.restart()
    h.write(lines("a", 10, 10))
    h.poll()
    assert h.seen == names("a", 20)


def test_f5_rename_create_rotation_reads_old_before_new(h):
    h.write(lines("a", 5))
    h.poll()
    h.write(lines("a", 3, 5))
    os.rename(h.path, f"{h.path}.1")
    h.write(lines("b", 4))
    h.drain()
    assert h.seen == names("a", 8) + names("b", 4)
    assert h.tailer.stats.rotations == {"renamed": 1}


def test_f6_writer_keeps_writing_to_renamed_file_within_grace(h):
    h.write(lines("a", 2))
    h.poll()
    os.rename(h.path, f"{h.path}.1")
    h.write(lines("b", 1))
    h.poll()
    h.write(b"late\n", Path(f"{h.path}.1"))
    h.clock.advance(1)
    h.poll()
    assert b"late" in h.seen
    h.clock.advance(10)
    h.poll()  # grace over at EOF: the old file is closed
    assert len(h.tailer.draining) == 0


def test_f7_rotation_while_stopped_finishes_old_file_then_new(h):
    h.write(lines("a", 3))
    h.poll()
    saved = h.tailer.checkpoint()
    h.tailer.close()
    h.write(lines("a", 2, 3))
    os.rename(h.path, f"{h.path}.1")
    h.write(lines("b", 2))
    h.restart(saved)
    h.drain()
    assert h.seen == names("a", 5) + names("b", 2)


def test_f8_copytruncate_adopts_the_copy_tail(h):
    h.write(lines("a", 3))
    h.poll()
    h.write(lines("a", 2, 3))  # written after our last read, before the copy
    Path(f"{h.path}.1").write_bytes(h.path.read_bytes())
    os.truncate(h.path, 0)
    h.write(lines("b", 2))
    h.drain()
    assert h.seen == names("a", 5) + names("b", 2)
    assert h.tailer.stats.rotations == {"copytruncate": 1}


def test_f8_copy_written_in_place_over_the_rotated_file_we_hold(h):
    """`cp x.log x.log.1 && : > x.log` reuses the inode of an older rotation we still drain."""
    h.write(lines("a", 2))
    h.poll()
    os.rename(h.path, f"{h.path}.1")
    h.write(lines("b", 2))
    h.poll()  # a-file retired (fully read), b-file live
    h.write(lines("b", 1, 2))
    with open(f"{h.path}.1", "r+b") as rotated:  # cp writes into the existing inode
        rotated.truncate(0)
        rotated.write(h.path.read_bytes())
    os.truncate(h.path, 0)
    h.write(lines("c", 1))
    h.drain()
    assert h.seen == names("a", 2) + names("b", 3) + names("c", 1)


def test_f9_truncate_and_regrow_past_the_old_offset_is_read_from_zero(h):
    h.write(lines("a", 3))
    h.poll()
    with open(h.path, "r+b") as f:  # rewritten in place, longer than before
        f.truncate(0)
        f.write(lines("new-generation-", 5))
    os.utime(h.path, ns=(1, 1))  # a different mtime, as any write would leave
    h.poll()
    assert h.seen == names("a", 3) + names("new-generation-", 5)
    assert h.tailer.stats.rotations == {"truncate": 1}


def test_f10_replaced_while_stopped_reads_new_content_only(h):
    h.write(lines("a", 3))
    h.poll()
    saved = h.tailer.checkpoint()
    h.tailer.close()
    h.path.write_bytes(lines("z", 6))  # same inode, other content, longer
    h.restart(saved)
    h.drain()
    assert h.seen == names("a", 3) + names("z", 6)


def test_f11_nul_run_at_the_head_is_skipped_and_counted(h):
    h.write(b"\0" * 4096 + b"after-hole\n")
    assert h.poll() == [b"after-hole"]
    assert h.tailer.stats.nul_bytes == 4096


def test_f12_delete_and_recreate_reads_both_generations(h):
    h.write(lines("a", 2))
    h.poll()
    h.write(lines("a", 1, 2))
    os.unlink(h.path)
    h.poll()
    h.write(lines("b", 2))
    h.drain()
    assert h.seen == names("a", 3) + names("b", 2)


def test_f13_reused_inode_with_other_content_is_a_new_file(h):
    h.write(lines("old", 5))
    h.poll()
    saved = h.tailer.checkpoint()
    h.tailer.close()
    os.unlink(h.path)
    h.path.write_bytes(lines("new", 8))  # may or may not get the old inode; either way
    h.restart(saved)
    h.drain()
    assert h.seen == names("old", 5) + names("new", 8)


def test_f14_two_files_with_the_same_head_are_not_merged(tmp_path):
    same = b"2026-10-19 04:00:00.000 I [main] identical header line\n"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = Harness(tmp_path / "a"), Harness(tmp_path / "b")
    a.write(same + b"only-a\n")
    b.write(same + b"only-b\n")
    a.poll(), b.poll()
    assert (a.seen, b.seen) == ([same[:-1], b"only-a"], [same[:-1], b"only-b"])


def test_f15_symlink_target_swap_drains_old_target_then_reads_new(tmp_path):
    h = Harness(tmp_path)
    day1, day2 = tmp_path / "day1.log", tmp_path / "day2.log"
    h.write(lines("d1-", 2), day1)
    os.symlink(day1, h.path)
    h.poll()
    h.write(lines("d1-", 1, 2), day1)
    h.write(lines("d2-", 2), day2)
    tmp_link = tmp_path / "link.tmp"
    os.symlink(day2, tmp_link)
    os.replace(tmp_link, h.path)
    h.drain()
    assert h.seen == names("d1-", 3) + names("d2-", 2)
    # Nothing lost, none claimed; that a target swapped twice between polls would go unseen is said.
    assert (h.tailer.stats.lost_files, h.tailer.stats.lost_bytes, h.tailer.stats.possibly_lost) == (
        0,
        0,
        {"relinked": 1},
    )


def test_f16_compressed_rotations_are_never_candidates(tmp_path):
    t = Tailer(str(tmp_path / "x.log"), ManualClock(), rotated=("{path}.1.gz", "{path}.1"))
    assert t.rotated == [str(tmp_path / "x.log.1")]


def test_f17_long_line_is_truncated_counted_and_the_file_goes_on(tmp_path):
    h = Harness(tmp_path, max_line=100)
    h.write(b"short\n" + b"x" * 5000 + b"\nafter\n")
    h.drain()
    assert h.seen == [b"short", b"x" * 100, b"after"]
    assert h.tailer.stats.long_lines == 1


def test_f17_long_line_arriving_in_pieces_keeps_memory_bounded(tmp_path):
    h = Harness(tmp_path, max_line=100)
    for _ in range(50):
        h.write(b"y" * 1000)
        h.poll()
        assert len(h.tailer.live.partial) <= 100
    h.write(b"\nnext\n")
    h.poll()
    assert h.seen == [b"y" * 100, b"next"]


def test_f18_invalid_utf8_passes_through_as_bytes(h):
    h.write(b"\xff\xfe bad \xc3\x28\nok\n")
    assert h.poll() == [b"\xff\xfe bad \xc3\x28", b"ok"]


def test_f20_crlf_loses_exactly_one_cr(h):
    h.write(b"a\r\nb\r\r\n")
    assert h.poll() == [b"a", b"b\r"]


def test_f21_large_backlog_is_read_in_bounded_polls(h):
    h.write(lines("bulk-line-", 200_000))
    first = h.tailer.poll(budget=1 << 20)
    assert 0 < len(first) < 200_000
    rest = []
    while batch := h.tailer.poll(budget=1 << 20):
        rest += batch
    assert first + rest == names("bulk-line-", 200_000)


def test_f23_file_missing_at_start_is_read_from_zero_when_it_appears(tmp_path):
    h = Harness(tmp_path, start_at="end")
    assert h.poll() == [] and h.tailer.error == "missing"
    h.write(lines("a", 3))
    assert h.poll() == names("a", 3)


def _as_unprivileged(body) -> str:
    """Run `body()` in a child process that cannot bypass file modes; its error text, or ''."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_end)
        try:
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            body()
            message = b""
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            message = repr(exc).encode() or b"failed"
        os.write(write_end, message)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        report = pipe.read().decode()
    os.waitpid(pid, 0)
    return report


def test_f23_unreadable_file_is_retried_until_readable(spawns):
    shared = Path(tempfile.mkdtemp(prefix="spyglass-perm-"))  # pytest's tmp base is root-only
    shared.chmod(0o777)

    def body():
        h = Harness(shared)
        h.write(lines("a", 2))
        h.path.chmod(0)
        assert h.poll() == [] and h.tailer.error == "permission", h.tailer.error
        h.path.chmod(0o644)
        assert h.poll() == names("a", 2)

    try:
        assert _as_unprivileged(body) == ""
    finally:
        shutil.rmtree(shared)


def test_f24_start_at_end_skips_history_but_completes_the_line_in_progress(tmp_path):
    h = Harness(tmp_path, start_at="end")
    h.write(lines("old", 3) + b"in-progr")
    h.poll()
    h.write(b"ess\nnew\n")
    h.poll()
    assert h.seen == [b"in-progress", b"new"]


def test_f24_checkpoint_wins_over_start_at_end(tmp_path):
    h = Harness(tmp_path, start_at="end")
    h.write(lines("a", 2))
    h.restart({"files": [], "stats": {}})  # a checkpoint exists: the file was born after it
    h.poll()
    assert h.seen == names("a", 2)


def test_f26_counters_survive_a_restart_with_the_checkpoint(h):
    h.write(b"\0\0x\n" + lines("a", 2))
    h.poll()
    h.restart()
    h.write(lines("a", 1, 2))
    h.poll()
    assert (h.tailer.stats.lines, h.tailer.stats.nul_bytes) == (4, 2)


def test_f26_a_malformed_checkpoint_is_dropped_not_fatal(h):
    h.write(lines("a", 2))
    h.restart({"files": [{"dev": "x", "offset": 3}], "stats": {"lines": "many"}})
    h.poll()
    assert h.seen == names("a", 2)


def test_f27_closed_rotations_leave_the_checkpoint(h):
    for generation in range(5):
        h.write(lines(f"g{generation}-", 2))
        h.poll()
        os.rename(h.path, f"{h.path}.1")
        h.drain()
    assert len(h.tailer.checkpoint()["files"]) <= 1


def test_lost_rotation_while_stopped_is_counted_not_duplicated(h):
    h.write(lines("a", 2))
    h.poll()
    h.write(lines("a", 2, 2))
    saved = h.tailer.checkpoint()
    h.tailer.close()
    os.unlink(h.path)  # rotated away and deleted while we were down
    h.write(lines("b", 1))
    h.restart(saved)
    h.drain()
    assert h.seen == names("a", 2) + names("b", 1)
    assert h.tailer.stats.lost_files == 1


def shift_rotate(path: Path, depth: int) -> None:
    """logrotate's numbered scheme: x.log.(depth) is deleted, x.log.n -> x.log.(n+1), x.log -> x.log.1."""
    Path(f"{path}.{depth}").unlink(missing_ok=True)
    for n in range(depth - 1, 0, -1):
        if Path(f"{path}.{n}").exists():
            os.rename(f"{path}.{n}", f"{path}.{n + 1}")
    os.rename(path, f"{path}.1")


def test_f5_hundred_back_to_back_numbered_rotations_lose_nothing(tmp_path):
    """Finding 9 of issue 9: 100 rotations between two polls. Every generation the numbered
    rotated names still hold is read, in order, once."""
    h = Harness(tmp_path, rotated=("{path}.{n}",), generations=128)
    h.write(b"start\n")
    h.poll()
    for generation in range(100):
        h.write(lines(f"g{generation}-", 100))
        shift_rotate(h.path, 128)
    h.write(b"end\n")
    h.drain()
    expected = [b"start"] + [line for g in range(100) for line in names(f"g{g}-", 100)] + [b"end"]
    assert h.seen == expected and len(h.seen) == 10_002
    assert h.tailer.stats.lost_files == 0


def test_f5_rotations_past_the_bound_are_counted_as_lost(tmp_path):
    """More rotations between two polls than the rotated names hold: what is left is read in
    order, and the generations deleted unread are counted, not silent."""
    h = Harness(tmp_path, rotated=("{path}.{n}",), generations=3)
    h.write(b"start\n")
    h.poll()
    for generation in range(10):
        h.write(lines(f"g{generation}-", 10))
        shift_rotate(h.path, 3)
    h.write(b"end\n")
    h.drain()
    # The file we held (start, then g0 written into it) is read through its descriptor; g7-g9
    # are what the three names still hold; g1-g6 were deleted before any poll.
    assert h.seen == [b"start"] + names("g0-", 10) + [x for g in (7, 8, 9) for x in names(f"g{g}-", 10)] + [b"end"]
    assert h.tailer.stats.lost_files == 1


def test_f5_renames_over_one_rotated_name_faster_than_a_poll_are_counted(h):
    """The reproduction of finding 9: `mv x.log x.log.1` 100 times back to back. Generations
    overwritten before a poll are gone; the tailer says so and reads what remains once."""
    h.write(b"start\n")
    h.poll()
    for generation in range(100):
        h.write(lines(f"g{generation}-", 100))
        os.rename(h.path, f"{h.path}.1")
    h.write(b"end\n")
    h.drain()
    assert h.seen == [b"start"] + names("g0-", 100) + names("g99-", 100) + [b"end"]
    assert h.tailer.stats.lost_files == 1


def test_f5_old_rotated_generations_are_not_read_again(tmp_path):
    """Generations older than the file we follow (an earlier run read them) stay unread."""
    h = Harness(tmp_path, rotated=("{path}.{n}",), generations=5)
    for generation in range(3):
        h.write(lines(f"old{generation}-", 2))
        shift_rotate(h.path, 5)
    os.utime(f"{h.path}.1", ns=(1, 1))
    os.utime(f"{h.path}.2", ns=(1, 1))
    os.utime(f"{h.path}.3", ns=(1, 1))
    h.write(lines("a", 2))
    h.poll()
    h.write(lines("a", 1, 2))
    shift_rotate(h.path, 5)
    h.write(lines("b", 2))
    h.drain()
    assert h.seen == names("a", 3) + names("b", 2)
    assert h.tailer.stats.lost_files == 0


def test_f5_a_rotated_file_read_and_closed_is_not_read_again(tmp_path):
    h = Harness(tmp_path, rotated=("{path}.{n}",), generations=5)
    h.write(lines("a", 2))
    h.poll()
    shift_rotate(h.path, 5)
    h.write(lines("b", 2))
    h.drain()  # a is read and closed after the grace period; b is live
    shift_rotate(h.path, 5)  # a -> .2, b -> .1
    h.write(lines("c", 2))
    h.drain()
    assert h.seen == names("a", 2) + names("b", 2) + names("c", 2)
