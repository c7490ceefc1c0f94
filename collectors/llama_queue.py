"""How long a llama-server task waited for a slot, from its log (pure: the times of its lines in, a wait out).

llama.cpp numbers a task when its request arrives and gives it a slot at `launch_slot_`; a task that finds
every slot busy is deferred and launched, in arrival order, when a slot is released. Where the build prints
the arrival (`que post: new task, id = N` at debug verbosity, `-v`), the wait is launch minus arrival
(basis `arrival`). At the default verbosity no arrival is printed, so the wait of a deferred task is bounded
(basis `slots_full`): it arrived while every slot was busy (else it had a slot at once), during the run of
full slots that its launch ends, and after the last task numbered before it that had a slot at once; its
wait is taken from the later of the two. For a burst (requests arriving together) that is its wait to the
millisecond; a request that arrived later in a long run of full slots waited less than this says, by at most
the time between that run's start and its arrival. A task launched with a slot free waited nothing (basis
`none`). The slot count is the log's `n_slots = N`; without it no wait is reported, nor where the log stamps whole
seconds (2024's JSON log): there a release and a launch in one second look alike, deferred or not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Seconds from a release to the launch of a deferred task (the server's next loop: 0.2 to 2 ms in the recorded and live
# burst). A task launched later than this after a release is taken as one that arrived to a free slot; a new
# request arriving within it is taken as deferred (its client's next request right after an answer can).
FOLLOWS = 0.004


def whole_seconds(launch: float, freed: float | None) -> bool:
    """The stamps are whole seconds (a finer stamp falls on a whole second about once in a million lines)."""
    return launch.is_integer() and (freed is None or freed.is_integer())


@dataclass
class QueueWatch:
    """The slots of one llama-server process as its log shows them."""

    slots: int | None = None
    busy: dict[int, int] = field(default_factory=dict)  # slot -> task
    full_since: float | None = None  # when the last slot was taken, while all are
    freed: float | None = None  # when a full set of slots last released one
    freed_from: float | None = None  # the start of the run of full slots that release ended
    at_once: tuple[int, float] | None = None  # (task, launch) of the latest task that had a slot at once
    arrivals: dict[int, float] = field(default_factory=dict)  # task -> arrival, where the build prints it

    def arrived(self, task: int, ts: float) -> None:
        self.arrivals[task] = ts
        while len(self.arrivals) > 4096:
            self.arrivals.pop(next(iter(self.arrivals)))

    def launched(self, task: int, slot: int, ts: float) -> tuple[int, str] | None:
        """The task's wait for a slot in milliseconds and its basis, or None (the slot count is unknown)."""
        arrival = self.arrivals.pop(task, None)
        deferred = self.freed is not None and ts - self.freed <= FOLLOWS and self.freed_from is not None
        floor = self.freed_from if deferred else None
        if deferred and self.at_once is not None and self.at_once[0] < task and floor is not None:
            floor = max(floor, self.at_once[1])
        self.busy[slot] = task
        if not deferred:
            self.at_once = (task, ts)
            self.freed_from = None  # a newcomer found a slot free: the run of full slots is over
        if self.slots is not None and len(self.busy) >= self.slots and self.full_since is None:
            # A deferred task taking the slot just freed continues the run: no newcomer found a slot free.
            self.full_since = self.freed_from if deferred else ts
        if arrival is not None:
            return max(round((ts - arrival) * 1000), 0), "arrival"
        if self.slots is None or whole_seconds(ts, self.freed):
            return None
        if floor is None:
            return 0, "none"
        return max(round((ts - floor) * 1000), 0), "slots_full"

    def released(self, slot: int, ts: float) -> None:
        if self.slots is not None and self.full_since is not None and len(self.busy) >= self.slots:
            self.freed_from = self.full_since
        if self.freed_from is not None:  # each release of a run of full slots may launch a deferred task
            self.freed = ts
        self.busy.pop(slot, None)
        if self.slots is None or len(self.busy) < self.slots:
            self.full_since = None

    def saved(self) -> dict[str, Any]:
        return {
            "slots": self.slots,
            "busy": {str(k): v for k, v in self.busy.items()},
            "full_since": self.full_since,
            "freed": self.freed,
            "freed_from": self.freed_from,
            "at_once": list(self.at_once) if self.at_once else None,
        }

    @classmethod
    def restored(cls, saved: Any) -> QueueWatch:
        """From `saved()`; anything unreadable starts afresh (a wait is then not bounded until the next full run)."""
        try:
            at_once = saved.get("at_once")
            return cls(
                slots=None if saved.get("slots") is None else int(saved["slots"]),
                busy={int(k): int(v) for k, v in dict(saved.get("busy", {})).items()},
                full_since=_opt(saved.get("full_since")),
                freed=_opt(saved.get("freed")),
                freed_from=_opt(saved.get("freed_from")),
                at_once=(int(at_once[0]), float(at_once[1])) if at_once else None,
            )
        except (AttributeError, TypeError, ValueError, IndexError):
            return cls()


def _opt(value: Any) -> float | None:
    return None if value is None else float(value)
