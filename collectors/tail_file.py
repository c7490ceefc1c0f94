"""One open file being tailed: its identity, the offset of its last complete line, line splitting.

Identity is device + inode + a hash of the first bytes (the head); resuming also checks a hash of
the bytes just before the saved offset (the tail marker), so a file truncated and regrown, or a
reused inode, is never mistaken for the one we were reading (log-tailers.md F9, F10, F13).
Offsets always point just past a newline: a partial last line is held, never emitted while live.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from typing import Any

HEAD_BYTES = 1024
TAIL_BYTES = 64
CHUNK_BYTES = 1 << 20


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


@dataclass
class TailStats:
    """Cumulative counters of one source's tailer; persisted with its checkpoint."""

    lines: int = 0
    bytes: int = 0
    long_lines: int = 0
    nul_bytes: int = 0
    lost_files: int = 0
    lost_bytes: int = 0  # proven lost: seen in a file (its size observed) and destroyed before they were read
    rotations: dict[str, int] = field(default_factory=dict)
    possibly_lost: dict[str, int] = field(default_factory=dict)  # by reason: loss that cannot be proven
    refused: dict[str, int] = field(default_factory=dict)  # files found at the path and not opened, by kind

    def rotated(self, kind: str) -> None:
        self.rotations[kind] = self.rotations.get(kind, 0) + 1

    def maybe_lost(self, reason: str) -> None:
        self.possibly_lost[reason] = self.possibly_lost.get(reason, 0) + 1


KINDS = (
    (stat.S_ISFIFO, "fifo"),
    (stat.S_ISCHR, "device"),
    (stat.S_ISBLK, "device"),
    (stat.S_ISDIR, "directory"),
    (stat.S_ISSOCK, "socket"),
)


class NotRegularFile(OSError):
    """The path names a FIFO, a device, a directory or a socket: never read, since reading one can
    block the pipeline forever (a FIFO's open waits for a writer, its read for a line)."""

    def __init__(self, path: str, st: os.stat_result) -> None:
        self.kind = next((name for test, name in KINDS if test(st.st_mode)), "special")
        self.identity = (st.st_dev, st.st_ino)
        super().__init__(f"{path} is a {self.kind}, not a regular file")


def open_regular(path: str) -> int:
    """A descriptor of the regular file at `path`; NotRegularFile for anything else.

    The open itself is non-blocking (a FIFO's would wait for a writer), and the type is checked on
    the descriptor, so a file swapped in between a stat and the open is refused as well."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path, st)
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


class TailFile:
    """An open file descriptor, read with pread from `pos`; `offset` is the resumable position."""

    def __init__(self, fd: int, path: str, offset: int, max_line: int) -> None:
        st = os.fstat(fd)
        self.fd, self.path, self.real = fd, path, os.path.realpath(path)
        self.dev, self.ino, self.mtime_ns = st.st_dev, st.st_ino, st.st_mtime_ns
        self.offset = self.pos = offset
        self.max_line = max_line
        self.partial = b""
        self.overflow = False  # inside a line longer than max_line: drop bytes until its newline
        self.retired_at: float | None = None  # monotonic time it stopped being the live file
        # The size and mtime at the last look that found the file intact: bytes up to `seen_size`
        # existed, and a rotated file modified after `seen_mtime_ns` was written after that look.
        self.seen_size, self.seen_mtime_ns = st.st_size, st.st_mtime_ns
        self.head_len, self.head_hash = self._head()
        self.tail_len, self.tail_hash = self._marker(offset)

    @classmethod
    def open(cls, path: str, offset: int = 0, max_line: int = 1 << 20) -> TailFile:
        fd = open_regular(path)
        try:
            return cls(fd, path, offset, max_line)
        except BaseException:
            os.close(fd)
            raise

    def close(self) -> None:
        os.close(self.fd)

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def _head(self) -> tuple[int, str]:
        data = os.pread(self.fd, HEAD_BYTES, 0)
        return len(data), digest(data)

    def _grow_head(self) -> None:
        """Take in bytes written past a short head since it was read, if the head is still there.

        A file checkpointed before anything of it was read would otherwise be recorded with an
        empty head, and an empty head matches any file that reuses its inode after a restart."""
        if self.head_len >= HEAD_BYTES or self.size() <= self.head_len:
            return
        if digest(os.pread(self.fd, self.head_len, 0)) == self.head_hash:
            self.head_len, self.head_hash = self._head()

    def _marker(self, offset: int) -> tuple[int, str]:
        n = min(TAIL_BYTES, offset)
        return n, digest(os.pread(self.fd, n, offset - n))

    def matches(self, record: dict[str, Any]) -> bool:
        """Whether this file holds the content `record` describes, up to its offset."""
        head_len, offset = record["head_len"], record["offset"]
        if self.size() < max(offset, head_len):
            return False
        if digest(os.pread(self.fd, head_len, 0)) != record["head_hash"]:
            return False
        return self._marker(offset) == (record["tail_len"], record["tail_hash"])

    def rewritten(self) -> bool:
        """True when the bytes we consumed are gone: truncated, or rewritten in place."""
        st = os.fstat(self.fd)
        if st.st_size < self.pos:
            return True
        if st.st_mtime_ns == self.mtime_ns:
            self._seen(st)
            return False
        self.mtime_ns = st.st_mtime_ns
        held = self.partial[:TAIL_BYTES]
        gone = (
            self._marker(self.offset) != (self.tail_len, self.tail_hash)
            or digest(os.pread(self.fd, self.head_len, 0)) != self.head_hash
            or os.pread(self.fd, len(held), self.offset) != held
        )
        if not gone:
            self._grow_head()  # so a truncation is seen even while this file waits unread
            self._seen(st)
        return gone

    def _seen(self, st: os.stat_result) -> None:
        self.seen_size, self.seen_mtime_ns = max(self.seen_size, st.st_size), st.st_mtime_ns

    def record(self) -> dict[str, Any]:
        """What a checkpoint keeps of this file."""
        self._grow_head()
        return {
            "dev": self.dev,
            "ino": self.ino,
            "path": self.path,
            "real": self.real,
            "head_len": self.head_len,
            "head_hash": self.head_hash,
            "offset": self.offset,
            "tail_len": self.tail_len,
            "tail_hash": self.tail_hash,
            "size": self.size(),
            "seen": self.seen_size,
            "mtime_ns": os.fstat(self.fd).st_mtime_ns,
        }

    def seek(self, offset: int) -> None:
        """Continue from `offset`, which must be just past a newline (or 0)."""
        self.offset = self.pos = offset
        self.partial, self.overflow = b"", False
        self.tail_len, self.tail_hash = self._marker(offset)

    def restart(self) -> None:
        """Read the file again from its first byte (after a truncation)."""
        self.seek(0)
        self.head_len, self.head_hash = self._head()
        st = os.fstat(self.fd)
        self.mtime_ns, self.seen_size, self.seen_mtime_ns = st.st_mtime_ns, st.st_size, st.st_mtime_ns

    def read(self, budget: int, out: list[bytes], stats: TailStats) -> int:
        """Append the complete lines from `pos` to `out`, reading at most `budget` bytes."""
        total, before = 0, self.offset
        while total < budget:
            chunk = os.pread(self.fd, min(CHUNK_BYTES, budget - total), self.pos)
            if not chunk:
                break
            self.pos += len(chunk)
            total += len(chunk)
            self._split(chunk, out, stats)
        self.seen_size = max(self.seen_size, self.pos)
        if self.offset != before:
            stats.bytes += self.offset - before
            self.tail_len, self.tail_hash = self._marker(self.offset)
        if total and self.head_len < HEAD_BYTES:
            self.head_len, self.head_hash = self._head()
        return total

    def flush(self, out: list[bytes], stats: TailStats) -> None:
        """The file is finished: its last line counts even without a newline."""
        if self.partial:
            self._emit(self.partial, out, stats, self.overflow)
            stats.bytes += self.pos - self.offset
            self.offset = self.pos
        self.partial = b""

    def _split(self, chunk: bytes, out: list[bytes], stats: TailStats) -> None:
        if self.overflow:
            newline = chunk.find(b"\n")
            if newline < 0:
                return  # still inside the over-long line
            self._emit(self.partial, out, stats, True)
            self.partial, self.overflow = b"", False
            self.offset = self.pos - len(chunk) + newline + 1
            chunk = chunk[newline + 1 :]
        data = self.partial + chunk if self.partial else chunk
        cut = data.rfind(b"\n")
        if cut >= 0:
            self._emit(data[:cut], out, stats, False)
            self.offset = self.pos - len(data) + cut + 1
            data = data[cut + 1 :]
        self.partial = data
        if len(data) > self.max_line:
            self.partial, self.overflow = data[: self.max_line], True

    def _emit(self, block: bytes, out: list[bytes], stats: TailStats, long: bool) -> None:
        """Split a block of complete lines; strip one CR, leading NULs, and cap the length."""
        lines = block.split(b"\n")
        if b"\r" in block:
            lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
        if b"\0" in block:
            lines = [self._strip_nul(line, stats) for line in lines]
        if long:
            stats.long_lines += 1
        elif len(block) > self.max_line and max(map(len, lines)) > self.max_line:
            stats.long_lines += sum(1 for line in lines if len(line) > self.max_line)
            lines = [line[: self.max_line] for line in lines]
        stats.lines += len(lines)
        out.extend(lines)

    @staticmethod
    def _strip_nul(line: bytes, stats: TailStats) -> bytes:
        # A writer without O_APPEND keeps its old offset after copytruncate and leaves a hole of
        # NULs at the head of the file (Fluent Bit tail_file.c); they are not log content.
        stripped = line.lstrip(b"\0")
        stats.nul_bytes += len(line) - len(stripped)
        return stripped
