"""Follows one configured path across rotations and restarts; returns complete lines in order.

Each poll: (1) on the first poll, resume the files named in the checkpoint wherever they now are
(the path, the recorded real path, or a rotated name such as `x.log.1`); (2) if the path now
names another file (rename + create, delete + recreate, a swapped symlink), retire the old one;
(3) if the live file was truncated, adopt the copy a copytruncate left in a rotated name; (4)
read retired files to their end, older content first; (5) read the live file; (6) close retired
files that stayed at their end for the grace period, flushing a last line without a newline.
Cases and names: ../shared/research/log-tailers.md F1-F28.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from loguru import logger

from spyglass.collectors.clock import Clock
from spyglass.collectors.tail_file import NotRegularFile, TailFile, TailStats

COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".lz4", ".zip")


class Tailer:
    """One configured path, followed. Guarantees: lines come out whole and in file order, each once
    across rotations, truncations and restarts (only lines that a lossy operation such as
    copytruncate destroyed before they were read can be missing, and those are counted: proven
    in `stats.lost_bytes`, possible in `stats.possibly_lost` by reason, rotations that outran the
    polls in `stats.lost_files`, unless no poll ever saw the file they were in); a line longer than
    `max_line` is truncated and counted; `checkpoint()` resumes right after the last line returned;
    a path that cannot be opened sets `error` (missing, permission, ...) and is tried again at the
    next poll, never raised."""

    def __init__(
        self,
        path: str,
        clock: Clock,
        *,
        checkpoint: dict[str, Any] | None = None,
        rotated: tuple[str, ...] = ("{path}.1",),
        start_at: str = "beginning",
        max_line: int = 1 << 20,
        grace_seconds: float = 5.0,
        generations: int = 8,
    ) -> None:
        self.path = os.path.expanduser(path)
        self.rotated = rotated_names(self.path, rotated, generations)
        self.clock, self.max_line, self.grace = clock, max_line, grace_seconds
        self.live: TailFile | None = None
        self.draining: list[TailFile] = []
        self.stats, self._pending = _valid_checkpoint(self.path, checkpoint)
        self._first_poll = True
        self._fresh_start_at_end = checkpoint is None and start_at == "end"
        self.error: str | None = None  # why the path cannot be read right now, if it cannot
        self.behind = False  # the last poll stopped at its budget: there is more to read
        self._predecessor: tuple[int, int, int] | None = None  # dev, ino, mtime of the last live file
        self._finished: dict[tuple[int, int], tuple[int, str]] = {}  # closed files: identity -> head
        self._refused_last: tuple[int, int] | None = None  # the last file refused (see _refuse)

    def poll(self, budget: int = 8 << 20) -> list[bytes]:
        """Complete lines that appeared since the last poll, at most about `budget` bytes of them."""
        out: list[bytes] = []
        if self._first_poll:
            self._first_poll = False
            self._resume()
        self._check_rewritten()  # on the descriptors, before the path can retire the live file
        self._follow_path()
        self._fresh_start_at_end = False  # only files present at the first poll start at the end
        for old in self.draining:
            budget -= old.read(budget, out, self.stats)
        if self.live is not None and budget > 0 and not self._draining_unread():
            budget -= self.live.read(budget, out, self.stats)
        self.behind = budget <= 0
        self._close_finished(out)
        return out

    def checkpoint(self) -> dict[str, Any]:
        """The resumable state: every open file (retired first), and the counters."""
        files = list(self._pending) + [f.record() for f in self.draining]  # pending: not yet polled
        if self.live is not None:
            files.append(self.live.record())
        return {"files": files, "stats": asdict(self.stats)}

    def lag_bytes(self) -> int:
        """Bytes written to open files that no complete line has consumed yet."""
        return sum(max(0, f.size() - f.offset) for f in self._open_files())

    def close(self) -> None:
        for f in self._open_files():
            f.close()
        self.live, self.draining = None, []

    def _open_files(self) -> list[TailFile]:
        return self.draining + ([self.live] if self.live is not None else [])

    def _draining_unread(self) -> bool:
        return any(f.size() > f.pos for f in self.draining)

    def _open(self, path: str, offset: int = 0) -> TailFile | None:
        try:
            f = TailFile.open(path, offset, self.max_line)
        except FileNotFoundError:
            self.error = "missing"
            return None
        except PermissionError:
            self.error = "permission"
            return None
        except NotRegularFile as exc:
            self._refuse(exc.kind, exc.identity)
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                self._refuse("symlink_loop", (0, hash(path)))
            else:
                self.error = errno.errorcode.get(exc.errno or 0, "oserror").lower()
            return None
        self.error = None
        return f

    def _refuse(self, kind: str, identity: tuple[int, int]) -> None:
        """A path that is no regular file is this source's problem (`error`), counted once per file
        found there, and looked at again at every poll: it is never read."""
        self.error = f"not a regular file: {kind}" if kind != "symlink_loop" else "a symlink loop"
        if identity != self._refused_last:
            self._refused_last = identity
            self.stats.refused[kind] = self.stats.refused.get(kind, 0) + 1
            logger.error("{}: refused, {}; the source is unread until a regular file is there", self.path, self.error)

    def _resume(self) -> None:
        """Find each checkpointed file again, wherever it now is; count what is gone."""
        unproven = False  # the live file is gone, or found by an inode number alone
        for record in self._pending:
            paths = [record.get("real", ""), self.path] + self.rotated
            found = self._find(record, paths) or self._retired_copy_of(record)
            # Generations written after the checkpoint are strictly newer than its mtime; an equal
            # mtime (timestamps are coarse) is an older generation, which must not be read again.
            self._predecessor = (record["dev"], record["ino"], int(record.get("mtime_ns", -1)) + 1)
            unproven = found is None or record["head_len"] == 0
            if found is not None:
                self._count_if_emptied(record, found)
                found.seek(record["offset"])
                self._keep_draining(found)
            elif (size := max(record.get("size", record["offset"] + 1), record.get("seen", 0))) > record["offset"]:
                self.stats.lost_files += 1
                self.stats.lost_bytes += size - record["offset"]  # its size, seen before the restart
                logger.warning(
                    "{}: a checkpointed file (inode {}) is gone with {} bytes unread",
                    self.path,
                    record["ino"],
                    size - record["offset"],
                )
            reborn = self._reopen_rewritten(record, paths)
            if reborn is not None:  # truncated and rewritten while we were stopped: read it from 0
                self.stats.rotated("truncate")
                self.stats.maybe_lost("truncated")  # what was written after the checkpoint, if anything
                self._keep_draining(reborn)
        if unproven and self._pending and "mtime_ns" in self._pending[-1]:
            # An empty head matches any file that reused the inode, and a file that is gone may
            # have been rotated away with newer generations behind it: look for those now.
            self._find_skipped_generations(by_inode=False)
        self._pending = []

    def _count_if_emptied(self, record: dict[str, Any], found: TailFile) -> None:
        """A file empty at the checkpoint, matched by its inode alone (an empty head proves
        nothing), that is empty now with another mtime: it was written and emptied, or its inode
        was reused by a newer file after it was rotated away and overwritten unread. Either way a
        generation may be lost, so it is counted. (Written and not emptied, it is read whole:
        nothing is lost, and nothing is counted.)"""
        if record["head_len"] or "mtime_ns" not in record or found.size() > 0:
            return
        if os.fstat(found.fd).st_mtime_ns != record["mtime_ns"]:
            self.stats.lost_files += 1
            logger.warning(
                "{}: the file checkpointed empty (inode {}) changed and is empty again; a generation"
                " may have been rotated away unread",
                self.path,
                record["ino"],
            )

    def _keep_draining(self, f: TailFile) -> None:
        f.retired_at = self.clock.monotonic()
        if f not in self.draining:
            self.draining.append(f)

    def _reopen_rewritten(self, record: dict[str, Any], paths: list[str]) -> TailFile | None:
        """The record's own inode, if it is still there but holds other content now."""
        seen = {(f.dev, f.ino) for f in self._open_files()}
        for path in dict.fromkeys(p for p in paths if p):
            try:
                st = os.stat(path)
            except OSError:
                continue
            identity = (st.st_dev, st.st_ino)
            if identity == (record["dev"], record["ino"]) and identity not in seen:
                return self._open(path)
        return None

    def _find(self, record: dict[str, Any], paths: list[str]) -> TailFile | None:
        """The file `record` describes: its own inode first, else a copy holding its content.

        A copy (copytruncate) can only be recognised by content, so a record of an empty file,
        whose head proves nothing, is matched by inode alone.
        """
        seen = {(f.dev, f.ino) for f in self._open_files()}
        same_inode: list[Any] = []
        copies: list[Any] = []
        for path in dict.fromkeys(p for p in paths if p):
            try:
                st = os.stat(path)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            own = (st.st_dev, st.st_ino) == (record["dev"], record["ino"])
            (same_inode if own else copies).append(path)
        for path in same_inode + (copies if record["head_len"] > 0 else []):
            f = self._open(path)
            if f is not None and f.matches(record):
                return f
            if f is not None:
                f.close()
        return None

    def _follow_path(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.error = "missing"
            self._retire_live("deleted")
            self._find_skipped_generations()
            return
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                self._refuse("symlink_loop", (0, hash(self.path)))
            else:
                self.error = errno.errorcode.get(exc.errno or 0, "oserror").lower()
            return
        identity = (st.st_dev, st.st_ino)
        if self.live is not None and (self.live.dev, self.live.ino) == identity:
            self.error = None
            return
        self._retire_live("renamed")
        for old in self.draining:
            if (old.dev, old.ino) == identity:  # resumed from the checkpoint, or a link swapped back
                self.draining.remove(old)
                old.retired_at, self.live = None, old
                return
        self._adopt_new_file()

    def _adopt_new_file(self) -> None:
        self._find_skipped_generations()
        f = self._open(self.path)
        if f is None:
            return
        if self._fresh_start_at_end:
            f.seek(_after_last_newline(f))
        self.live = f

    def _find_skipped_generations(self, by_inode: bool = True) -> None:
        """Generations that came and went between two polls (rotated faster than we poll).

        Every file a rotated name holds that is newer than the last live file and not already
        read is read, older first. If the last live file is at none of the rotated names any
        more (overwritten, or shifted past the last one) while newer ones are, generations
        between may have been deleted unread: that is counted as a lost file, never silent.
        Without `by_inode` (after a restart, when the last file was not found by its content)
        an inode number proves nothing: a new file may have reused it.
        """
        if self._predecessor is None:
            return
        dev, ino, mtime = self._predecessor
        held = {(f.dev, f.ino) for f in self._open_files()}
        found, named = [], False
        for order, path, st, identity in self._rotated_stats():
            itself = by_inode and identity == (dev, ino)
            named = named or itself
            if itself or identity in held or st.st_mtime_ns < mtime:
                continue
            f = self._open(path)
            if f is not None and self._finished.get(identity) == (f.head_len, f.head_hash):
                f.close()  # read to its end already and closed
            elif f is not None:
                found.append((st.st_mtime_ns, -order, f))
        if found and not named and not self._alive_unwatched(dev, ino):
            self.stats.lost_files += 1
            logger.warning("{}: rotated faster than it was polled; generations between may be lost", self.path)
        for _, _, f in sorted(found, key=lambda item: item[:2]):
            self._keep_draining(f)
            self.stats.rotated("renamed")

    def _rotated_stats(self) -> Iterator[tuple[int, str, os.stat_result, tuple[int, int]]]:
        """(order, path, stat, (dev, ino)) of each rotated name that exists now, in the order of `rotated`."""
        for order, path in enumerate(self.rotated):
            try:
                st = os.stat(path)
            except OSError:
                continue
            yield order, path, st, (st.st_dev, st.st_ino)

    def _alive_unwatched(self, dev: int, ino: int) -> bool:
        """Whether the file (dev, ino) is one we hold, still linked under a name we do not watch: then
        it was renamed away, not deleted, and `possibly_lost{renamed}` said so when it was retired."""
        return any((f.dev, f.ino) == (dev, ino) and os.fstat(f.fd).st_nlink > 0 for f in self._open_files())

    def _retire_live(self, kind: str) -> None:
        if self.live is None:
            return
        self._predecessor = (self.live.dev, self.live.ino, os.fstat(self.live.fd).st_mtime_ns)
        self.stats.rotated(kind)
        self.live.retired_at = self.clock.monotonic()
        self.draining.append(self.live)
        if self._unwatched_name(self.live):
            # We hold it and read it to its end; but a rotation to names we do not watch hides
            # every generation renamed away (or linked and unlinked) between two polls, uncountably.
            relinked = os.path.islink(self.path)
            self.stats.maybe_lost("relinked" if relinked else "renamed")
            logger.warning(
                "{}: the followed file is now {}, which no `rotated` pattern names ({}): generations"
                " between two polls go unseen",
                self.path,
                _current_name(self.live),
                "the symlink was pointed elsewhere" if relinked else "renamed",
            )
        self.live = None

    def _unwatched_name(self, f: TailFile) -> bool:
        """Whether `f` still has a name, and neither the path nor any rotated name is it."""
        if os.fstat(f.fd).st_nlink == 0:
            return False  # deleted, or overwritten by a rename
        for path in [self.path, *self.rotated]:
            try:
                st = os.stat(path)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == (f.dev, f.ino):
                return False
        return True

    def _check_rewritten(self) -> None:
        for old in [f for f in self.draining if f.rewritten()]:
            # A retired file whose bytes were replaced (`cp x.log x.log.1` reuses the inode)
            # now holds someone else's content, most likely the copy of the live file.
            self.stats.rotated("overwritten")
            old.close()
            self.draining.remove(old)
        if self.live is not None and self.live.rewritten():
            self._on_truncate(self.live)

    def _on_truncate(self, live: TailFile) -> None:
        """The live file lost what we read. A copytruncate leaves the rest in a rotated copy.

        Without one, what followed our offset is gone: the bytes we saw (a held line, a backlog
        past the read budget) are proven lost (`lost_bytes`); what was written after our last look
        may be, which cannot be proven (`possibly_lost{reason="truncated"}`). A rotated file written
        after that look with other content is a later generation (copied before a second
        truncation, as copytruncate every half second does between two polls): it is read."""
        copy = self._retired_copy_of(live.record()) or self._find(live.record(), self.rotated)
        if copy is not None:
            copy.seek(live.offset)
            copy.retired_at = self.clock.monotonic()
            if copy not in self.draining:
                self.draining.append(copy)
            self.stats.rotated("copytruncate")
        else:
            self.stats.rotated("truncate")  # a held fragment went with the truncated bytes
            unread = max(0, live.seen_size - live.offset)
            self.stats.lost_bytes += unread
            self.stats.maybe_lost("truncated")
            later = self._later_copies(live)
            logger.warning(
                "{}: truncated with no copy of what followed offset {}: {} bytes seen unread are lost,"
                " and what was written after the last poll may be; {} later copies found",
                self.path,
                live.offset,
                unread,
                len(later),
            )
            for f in later:
                self._keep_draining(f)
                self.stats.rotated("copytruncate")
        live.restart()

    def _later_copies(self, live: TailFile) -> list[TailFile]:
        """Files at rotated names modified after our last look at `live`, with another head, not held
        and not read before: generations written after that look, older first."""
        held = {(f.dev, f.ino) for f in self._open_files()}
        found = []
        for order, path, st, identity in self._rotated_stats():
            if identity in held or st.st_mtime_ns <= live.seen_mtime_ns:
                continue
            f = self._open(path)
            if f is None:
                continue
            if (f.head_len, f.head_hash) in ((live.head_len, live.head_hash), self._finished.get(identity)):
                f.close()  # a copy of what we read (that failed to match), or read already: no guess
            else:
                found.append((st.st_mtime_ns, -order, f))
        return [f for _, _, f in sorted(found, key=lambda item: item[:2])]

    def _retired_copy_of(self, record: dict[str, Any]) -> TailFile | None:
        """A retired file we hold open whose inode the copy was written into (`cp` reuses it)."""
        if record["head_len"] == 0:  # an empty file's content matches anything: no evidence
            return None
        for path in self.rotated:
            try:
                st = os.stat(path)
            except OSError:
                continue
            for old in self.draining:
                if (old.dev, old.ino) == (st.st_dev, st.st_ino) and old.matches(record):
                    return old
        return None

    def _close_finished(self, out: list[bytes]) -> None:
        now = self.clock.monotonic()
        for old in list(self.draining):
            idle = old.retired_at is not None and now - old.retired_at >= self.grace
            if idle and old.size() <= old.pos:
                old.flush(out, self.stats)
                old.close()
                self.draining.remove(old)
                self._finished[(old.dev, old.ino)] = (old.head_len, old.head_hash)
                if len(self._finished) > 4 * len(self.rotated) + 16:
                    del self._finished[next(iter(self._finished))]


def rotated_names(path: str, patterns: tuple[str, ...], generations: int) -> list[str]:
    """The rotated names the patterns stand for: '{path}' expands, '{n}' counts 1..generations."""
    names = []
    for pattern in patterns:
        if pattern.endswith(COMPRESSED):
            continue
        numbers = range(1, generations + 1) if "{n}" in pattern else (0,)
        names += [pattern.format(path=path, n=n) for n in numbers]
    return list(dict.fromkeys(names))


RECORD_KEYS = {
    "dev": int,
    "ino": int,
    "head_len": int,
    "head_hash": str,
    "offset": int,
    "tail_len": int,
    "tail_hash": str,
}


def _valid_checkpoint(path: str, checkpoint: dict[str, Any] | None) -> tuple[TailStats, list[dict[str, Any]]]:
    """Counters and file records of a checkpoint; a malformed one is reported and dropped whole."""
    if not checkpoint:
        return TailStats(), []
    try:
        stats = TailStats(**checkpoint.get("stats", {}))
        counters = [
            stats.lines,
            stats.bytes,
            stats.long_lines,
            stats.nul_bytes,
            stats.lost_files,
            stats.lost_bytes,
            *stats.rotations.values(),
            *stats.possibly_lost.values(),
            *stats.refused.values(),
        ]
        if not all(isinstance(n, int) for n in counters):
            raise TypeError(f"counters {counters!r}")
        records = list(checkpoint.get("files", []))
        for record in records:
            for key, kind in RECORD_KEYS.items():
                if not isinstance(record[key], kind):
                    raise TypeError(f"{key} is {record[key]!r}")
        return stats, records
    except (TypeError, KeyError, AttributeError) as exc:
        logger.error("{}: checkpoint is malformed ({!r}); reading starts over by the start_at policy", path, exc)
        return TailStats(), []


def _current_name(f: TailFile) -> str:
    """Where an open file is now (Linux's /proc knows a renamed file's new name), for the log."""
    try:
        return os.readlink(f"/proc/self/fd/{f.fd}")
    except OSError:
        return "a name unknown"


def _after_last_newline(f: TailFile) -> int:
    """Offset just past the last complete line, so a line still being written is read whole."""
    size = f.size()
    window = os.pread(f.fd, min(size, f.max_line), size - min(size, f.max_line))
    return size - len(window) + window.rfind(b"\n") + 1
