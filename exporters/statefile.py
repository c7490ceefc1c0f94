"""The metrics-only store: tailer checkpoints and the metric state in one JSON file.

Written tmp -> fsync -> rename -> fsync(dir), so the file on disk is always a whole commit; a torn
or corrupt file (an OOM kill mid-write on a filesystem that lies) is moved aside, loudly. Also
the Store protocol every store follows.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from loguru import logger

from spyglass.collectors.event import Event


@dataclass
class SavedState:
    checkpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    metrics: dict[str, Any] | None = None


class Store(Protocol):
    """Where the pipeline commits: `commit` is atomic, and `load` returns the last whole commit."""

    keeps_events: bool
    rows_behind: bool  # events stored but not yet folded into their requests' rows (a later commit with fold)

    def load(self) -> SavedState: ...

    def commit(
        self, events: list[Event], checkpoints: dict[str, dict[str, Any]], metrics: dict[str, Any], *, fold: bool = True
    ) -> list[Event]:
        """Commit all in one step (with `fold`, the per-request rows caught up too); returns the events set
        aside as unstorable (never raised for)."""

    def close(self) -> None: ...


class StateFile:
    """Checkpoints and metric state in one JSON file; events are not kept (store disabled).
    Guarantees: the file on disk is always one whole commit (tmp, fsync, rename, fsync of the
    folder); an unreadable file is moved aside, logged, and loads as empty, never a crash."""

    keeps_events = False
    rows_behind = False

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path

    def load(self) -> SavedState:
        try:
            saved = json.loads(self.path.read_text())
            return SavedState(dict(saved["checkpoints"]), saved.get("metrics"))
        except FileNotFoundError:
            return SavedState()
        except (ValueError, KeyError, TypeError) as exc:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            os.replace(self.path, aside)
            logger.error(
                "state file {} is unreadable ({}); moved to {}; sources start over by their start_at policy",
                self.path,
                exc,
                aside,
            )
            return SavedState()

    def commit(
        self, events: list[Event], checkpoints: dict[str, dict[str, Any]], metrics: dict[str, Any], *, fold: bool = True
    ) -> list[Event]:
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            with open(tmp, "w") as f:
                f.write(
                    json.dumps({"checkpoints": checkpoints, "metrics": metrics})
                )  # dumps: C; dump to a file: Python
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)  # a half-written tmp (disk full) would hold the space the retry needs
            raise
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return []  # events are not kept here

    def close(self) -> None:
        pass
