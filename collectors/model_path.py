"""Model path watch (heuristic H15): resolve an instance's configured model path every interval.

The upgrade seed's second turn: a blue/green cleanup deleted the file a symlink pointed at before
the switch finished, so the path the engine reads became a dangling link. Each poll emits one
`model_path` event (does the path resolve, to what file, its size and inode, whether it is a
link) and, when the answer differs from the previous poll, a `model_path_changed` event with
before and after. Whether the file now differs from what the running process loaded is decided
in spyglass/signals/model_path.py, which also sees the engine's `model` events.
`resolve` does the file-system I/O; `compare` is pure.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from spyglass.collectors import PolledOptions, PolledSourceBase, PollPolicy, PollResult, register
from spyglass.collectors.event import Event
from spyglass.collectors.fields import declare


class ModelPathOptions(PolledOptions):
    kind: Literal["model_path"] = "model_path"
    path: Path = Field(..., description="The instance's configured model path (usually a symlink) to resolve.")
    interval_seconds: float = Field(30.0, gt=0, description="Seconds between resolutions of the path.")


@dataclass(frozen=True)
class Resolution:
    """What one path resolved to: `real` is None when it does not resolve (missing, or a dangling link)."""

    real: str | None
    link: bool
    bytes: int | None = None
    inode: int | None = None
    link_mtime: float | None = None  # when a symlink was last (re)pointed: the switch time

    @property
    def identity(self) -> tuple[str | None, int | None]:
        return self.real, self.inode


def resolve(path: Path) -> Resolution:
    """The path as the engine would open it now (follows every link)."""
    try:
        own = os.lstat(path)
    except OSError:
        return Resolution(None, False)
    link = os.path.islink(path)
    try:
        target = os.stat(path)
    except OSError:
        return Resolution(None, link, link_mtime=own.st_mtime if link else None)
    return Resolution(os.path.realpath(path), link, target.st_size, target.st_ino, own.st_mtime if link else None)


def compare(before: Resolution | None, now: Resolution) -> bool:
    """Whether `now` is a change from the previous poll (the first poll is no change)."""
    return before is not None and before.identity != now.identity


declare(
    "model_path",
    {
        "model_path": {
            "path": "text",
            "resolves": "bool",
            "dangling": "bool",
            "real": "text",
            "link": "bool",
            "bytes": "int",
            "inode": "int",
            "changed_ts": "float",
        },
        "model_path_changed": {"path": "text", "before": "text", "after": "text", "resolves": "bool"},
    },
)


@register("model_path", ModelPathOptions)
class ModelPathSource(PolledSourceBase):
    """Resolves one model path per poll; answers even when the path does not resolve (that is the finding)."""

    def __init__(self, name: str, options: ModelPathOptions, host: str = "") -> None:
        self.name, self.options, self.host = name, options, host
        self.instance = options.instance or name
        self.last: Resolution | None = None
        self.changed_ts: float | None = None

    def poll_policy(self) -> PollPolicy:
        return PollPolicy(self.options.interval_seconds)

    def poll(self, now: float) -> PollResult:
        path = str(self.options.path)
        res = resolve(self.options.path)
        events = []
        if compare(self.last, res):
            self.changed_ts = now
            before = self.last
            events.append(
                self._event(
                    now,
                    "model_path_changed",
                    {
                        "path": path,
                        "before": before.real if before else None,
                        "after": res.real,
                        "resolves": res.real is not None,
                    },
                )
            )
        elif self.changed_ts is None:
            self.changed_ts = res.link_mtime  # not seen changing: the link's own mtime is its last switch
        self.last = res
        fields: dict[str, Any] = {
            "path": path,
            "resolves": res.real is not None,
            "dangling": res.link and res.real is None,
            **{k: v for k, v in asdict(res).items() if k != "link_mtime"},
        }
        if self.changed_ts is not None:
            fields["changed_ts"] = self.changed_ts
        events.append(self._event(now, "model_path", fields))
        return PollResult(events)

    def _event(self, now: float, kind: str, fields: dict[str, Any]) -> Event:
        return Event(now, self.name, kind, self.instance, fields, None, self.host)

    def checkpoint(self) -> dict[str, Any] | None:
        if self.last is None:
            return None
        return {"last": asdict(self.last), "changed_ts": self.changed_ts}

    def restore(self, saved: dict[str, Any]) -> None:
        last = saved.get("last") if isinstance(saved, dict) else None
        try:
            self.last = Resolution(**last) if isinstance(last, dict) else None
        except TypeError:  # a checkpoint from another version: start over
            self.last = None
        changed = saved.get("changed_ts") if isinstance(saved, dict) else None
        self.changed_ts = float(changed) if isinstance(changed, (int, float)) else None
