"""Model-based test of the tailer (Vector's quickcheck interpreter, as a hypothesis state machine):
write, half-line, rename, copytruncate, truncate, delete, restart and the clock.

Invariants after a final drain: no line is seen twice, lines come in the order written, and every
line that no lossy operation could have destroyed is seen. A line is at risk only when it was
written since the last poll and then truncated in place, or overwritten in `x.log.1` before any
poll (or restart) could open it: the bounds OpenTelemetry and Vector test with. Lines lost to
renames faster than the polls (a generation replaced in `x.log.1` before it was read) must be
counted in `lost_files`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from spyglass.collectors.clock import ManualClock
from spyglass.collectors.tailer import Tailer


def line_of(i: int) -> bytes:
    """A line that starts differently from its neighbours, as timestamped log lines do."""
    return b"%04x-L%06d\n" % ((i * 40503) & 0xFFFF, i)


def id_of(line: bytes) -> int:
    return int(line.split(b"-L")[1])


class TailerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="spyglass-model-"))
        self.path = self.dir / "x.log"
        self.rotated = Path(f"{self.path}.1")
        self.clock = ManualClock()
        self.tailer = Tailer(str(self.path), self.clock)
        self.next_id = 0
        self.files: dict[Path, list[int]] = {self.path: []}  # line ids held by each name
        self.unpolled: set[int] = set()  # written since the last poll
        self.at_risk: set[int] = set()
        self.partial: int | None = None  # id whose line is half written
        self.opened = False  # whether any poll has opened the file now at x.log
        self.consumed = False  # whether any poll read a byte of the file now at x.log
        self.deleted: set[int] = set()  # lines of deleted files: readable only through an open fd
        self.held = False  # whether the running tailer has polled since it started (holds fds)
        self.seen: list[bytes] = []
        self.overwritten: set[int] = set()  # unread lines of a rotated generation a later rename replaced
        self.followed = False  # whether the tailer has followed a file at x.log (it knows a predecessor)
        self.copy_in_rotated = False  # x.log.1 was made by copytruncate, not by a rename
        # Lines destroyed where the tailer could not have known them: a file no poll opened, an
        # unread file truncated (no offset or marker can show it), a copy of such a file. Every
        # other line lost must be counted (lost_files, lost_bytes or possibly_lost).
        self.silent: set[int] = set()
        self.rotated_known = False  # whether a poll opened (a rename) or read from (a copy) x.log.1's source

    def teardown(self) -> None:
        try:
            self.final_check()
        finally:
            self.tailer.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def _append(self, data: bytes) -> None:
        with open(self.path, "ab") as f:
            f.write(data)

    @precondition(lambda self: self.partial is None)
    @rule(n=st.integers(1, 40))
    def write(self, n: int) -> None:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        self._append(b"".join(line_of(i) for i in ids))
        self.files.setdefault(self.path, []).extend(ids)
        self.unpolled.update(ids)

    @precondition(lambda self: self.partial is None)
    @rule()
    def write_half_a_line(self) -> None:
        self.partial = self.next_id
        self.next_id += 1
        self._append(line_of(self.partial)[:6])

    @precondition(lambda self: self.partial is not None)
    @rule()
    def finish_the_line(self) -> None:
        self._append(line_of(self.partial)[6:])
        self.files.setdefault(self.path, []).append(self.partial)
        self.unpolled.add(self.partial)
        self.partial = None

    @rule(budget=st.sampled_from([64, 4096, 8 << 20]))
    def poll(self, budget: int) -> None:
        self.seen += self.tailer.poll(budget)
        self.opened = self.opened or self.path.exists()
        self.followed = self.followed or self.path.exists()
        self.held = True
        self.consumed = self.consumed or (self.path.exists() and self.path.stat().st_size > 0)
        if budget == 8 << 20:
            self.unpolled.clear()

    def _move_to_rotated(self) -> None:
        """x.log's lines move to x.log.1, replacing what was there."""
        replaced = set(self.files.get(self.rotated, [])) & self.unpolled
        self.at_risk.update(replaced)
        if not self.rotated_known:
            self.silent.update(replaced)
        if not self.opened:  # never seen by any poll: a first start reads only the path
            self.at_risk.update(self.files.get(self.path, []))
            self.silent.update(self.files.get(self.path, []))

    @precondition(lambda self: self.partial is None)
    @rule()
    def rotate_by_rename(self) -> None:
        if self.path.exists():
            if self.followed and not self.copy_in_rotated:  # a renamed generation replaced unread
                self.overwritten.update(set(self.files.get(self.rotated, [])) & self.unpolled - self.at_risk)
            self._move_to_rotated()
            os.rename(self.path, self.rotated)
            self.copy_in_rotated = False
            self.rotated_known = self.opened
            self.files[self.rotated] = self.files.pop(self.path, [])
        self.path.touch()
        self.files[self.path] = []
        self.opened = self.consumed = False

    @precondition(lambda self: self.partial is None and self.path.exists())
    @rule()
    def copytruncate(self) -> None:
        self._move_to_rotated()
        if not self.consumed:  # nothing read yet: no size or marker can show the truncation
            self.at_risk.update(set(self.files.get(self.path, [])) & self.unpolled)
            self.silent.update(set(self.files.get(self.path, [])) & self.unpolled)
        self.rotated.unlink(missing_ok=True)  # logrotate creates the copy as a new file
        shutil.copyfile(self.path, self.rotated)
        self.copy_in_rotated = True
        self.rotated_known = self.consumed
        os.truncate(self.path, 0)
        self.consumed = False
        self.files[self.rotated], self.files[self.path] = self.files.get(self.path, []), []

    @precondition(lambda self: self.partial is None and self.path.exists())
    @rule()
    def truncate_in_place(self) -> None:
        self.at_risk.update(set(self.files.get(self.path, [])) & self.unpolled)
        if not self.consumed:
            self.silent.update(set(self.files.get(self.path, [])) & self.unpolled)
        os.truncate(self.path, 0)
        self.files[self.path] = []
        self.consumed = False

    @precondition(lambda self: self.partial is None and self.path.exists())
    @rule()
    def delete(self) -> None:
        if not (self.opened and self.held):  # no descriptor on it: deleting it deletes what was unread
            self.at_risk.update(set(self.files.get(self.path, [])) & self.unpolled)
            self.silent.update(set(self.files.get(self.path, [])) & self.unpolled)
        os.unlink(self.path)
        self.deleted.update(self.files.pop(self.path, []))
        self.opened = self.consumed = False

    @rule()
    def restart(self) -> None:
        self.at_risk.update(self.deleted & self.unpolled)  # the fd closes; the file is gone
        self.held = False
        saved = json.loads(json.dumps(self.tailer.checkpoint()))
        self.tailer.close()
        self.tailer = Tailer(str(self.path), self.clock, checkpoint=saved)

    @rule(seconds=st.sampled_from([1.0, 10.0]))
    def advance_clock(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @invariant()
    def no_duplicates_and_in_order(self) -> None:
        ids = [id_of(line) for line in self.seen]
        assert len(ids) == len(set(ids)), "a line was emitted twice"
        assert ids == sorted(ids), "lines out of order"

    def final_check(self) -> None:
        """Drain everything, then check the loss bounds."""
        if self.partial is not None:
            self.finish_the_line()
        for _ in range(3):
            self.poll(8 << 20)
            self.clock.advance(3600)
        self.no_duplicates_and_in_order()
        unseen = set(range(self.next_id)) - {id_of(line) for line in self.seen}
        missing = unseen - self.at_risk
        assert not missing, f"lost lines that no lossy operation touched: {sorted(missing)[:10]}"
        if unseen & self.overwritten:  # rotated faster than polled: lost, but never silently
            assert self.tailer.stats.lost_files > 0, f"lines lost unseen and uncounted: {sorted(unseen)[:10]}"
        stats = self.tailer.stats
        said = stats.lost_files + sum(stats.possibly_lost.values())  # losses said, each a run of lines
        runs = [run for run in _runs(unseen) if not run <= self.silent]  # lost where the tailer could know
        assert len(runs) <= said, f"{len(runs)} runs of lines lost, {said} said: {[sorted(r)[:3] for r in runs]}"
        if not unseen:  # and no loss is claimed where there was none
            assert stats.lost_bytes == 0, f"{stats.lost_bytes} bytes counted lost, none was"


def _runs(ids: set[int]) -> list[set[int]]:
    """`ids` as runs of consecutive numbers."""
    runs: list[set[int]] = []
    for i in sorted(ids):
        if runs and i - 1 in runs[-1]:
            runs[-1].add(i)
        else:
            runs.append({i})
    return runs


TestTailerModel = TailerMachine.TestCase
# Randomized (the profile sets how many examples; CI draws from a fixed --hypothesis-seed, and any
# other seed explores). It ran derandomized while random runs found, about one time in ten, a
# sequence that lost a line uncounted: now the regression test below the others.
TestTailerModel.settings = settings(settings.default, stateful_step_count=40, deadline=None)


def test_a_rename_over_an_unread_generation_after_a_restart_is_counted():
    """Found by the model: the file checkpointed before any of it was read had an empty head, and
    after two renames the new x.log reused its inode, so the resume took it for the old file."""
    state = TailerMachine()
    state.write_half_a_line()
    state.finish_the_line()
    state.copytruncate()
    state.poll(budget=64)
    state.write_half_a_line()
    state.finish_the_line()
    state.restart()
    state.rotate_by_rename()
    state.rotate_by_rename()
    state.teardown()


def test_a_file_grown_and_rotated_away_while_stopped_is_counted():
    """Found by the model: the followed file was empty at the checkpoint, then written and renamed
    away twice before the restart's first poll; nothing names it any more, newer generations do."""
    state = TailerMachine()
    state.rotate_by_rename()
    state.poll(budget=64)
    state.restart()
    state.write(n=1)
    state.rotate_by_rename()
    state.rotate_by_rename()
    state.teardown()


def test_three_renames_within_one_clock_tick_after_a_restart_on_an_empty_file_are_counted():
    """Found by the model, randomized (issue 22 item 6): the checkpointed file was empty, then written
    and renamed away, and overwritten in x.log.1 by a later rename, all within one tick of the
    filesystem's coarse clock. The new x.log reused its inode (an empty head proves nothing) and
    every remaining generation had the same mtime as the checkpointed one, so none looked newer:
    the lost line went uncounted."""
    state = TailerMachine()
    state.rotate_by_rename()
    state.poll(budget=64)
    state.restart()
    state.write(n=1)
    state.rotate_by_rename()
    state.rotate_by_rename()
    state.rotate_by_rename()
    state.teardown()


def test_a_held_half_line_truncated_away_before_a_restart_is_counted():
    """Found by the model once it asserted the accounting (issue 21 item 10): the tailer had read half a
    line, then two copytruncates and a delete emptied the file before any poll, and the restart's
    checkpoint recorded its size as 0. The size it had seen (6 bytes past the offset) is now in the
    checkpoint, so the loss is counted: lost_files and the 6 bytes proven lost."""
    state = TailerMachine()
    state.write_half_a_line()
    state.poll(budget=64)
    state.finish_the_line()
    state.copytruncate()
    state.copytruncate()
    state.delete()
    state.restart()
    state.restart()
    state.teardown()
    assert (state.tailer.stats.lost_files, state.tailer.stats.lost_bytes) == (1, 6)
