"""Source registry and the contracts of a source. Each module here registers its kind with @register.

Adding a source is one module here (options model, pure parser, source class) plus a fixture.
A source class is constructed as `cls(name, options, host=...)` and is one of two kinds:

- a `LineSource` (subclass `LineSourceBase`): the pipeline tails `options.path` and hands it
  complete lines, `handle_lines(lines) -> (events, miss counts, last unmatched line)`;
- a `PolledSource` (subclass `PolledSourceBase`): the pipeline calls `poll(now) -> PollResult`
  on its own thread when `poll_policy()` says it is due; the source never schedules itself.

Both have `checkpoint() -> dict | None` and `restore(dict)` (state kept across lines or polls,
committed with the tailer's offsets) and `close()`; the base classes give them as no-ops, and
@register rejects a class that does not satisfy its protocol. A kind may register one class of
each (serve_status polls a URL or replays a file): a source whose options name a `path` is tailed.
"""

from __future__ import annotations

if __name__ != "spyglass.collectors":  # an editable install puts the checkout's root on sys.path too
    raise ImportError(
        f"import spyglass.collectors, not {__name__}: spyglass is one package, and a second copy of "
        "its modules would register every source and metric twice"
    )

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from spyglass.collectors.event import Event
from spyglass.collectors.fields import SourceFields, extend


class SourceOptions(BaseModel):
    """Keys every source has. A kind's own model adds its keys; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    path: Path | None = Field(None, description="File to tail (file sources).")
    instance: str = Field("", description="Instance label: strata-a, strata-b, rag-proxy.")
    tz: str = Field("UTC", description="IANA zone of the source's naive timestamps.")
    start_at: str = Field(
        "beginning", pattern="^(beginning|end)$", description="Where a first-ever read of an existing file starts."
    )
    rotated: list[str] = Field(
        default_factory=lambda: ["{path}.1"],
        description="Where rotated generations of the file may be found; '{path}' expands, '{n}'"
        " counts 1..agent.rotated_generations (logrotate's x.log.1, x.log.2...).",
    )

    def instances_named(self) -> set[str]:
        """The instances these options name: its `instance` (a kind whose options name more adds them)."""
        return {self.instance} if self.instance else set()

    def request_id_zone(self) -> str | None:
        """The zone of the time inside the request ids this source's events carry (None: it makes none), so
        `timeline --request ID` looks where the request's events lie."""
        return None

    def complete(self, others: list[SourceOptions]) -> None:
        """Fill in, once every source of the config is valid, what this one takes from the others (the
        config's other sources' options); nothing unless the kind says."""


class PolledOptions(SourceOptions):
    """Keys every polled source has: @register refuses a polled class whose options are not these."""

    interval_seconds: float = Field(5.0, gt=0, description="Seconds between polls.")


LineBatch = tuple[list[Event], dict[str, int], bytes]  # events, miss counts by outcome, last unmatched line


@dataclass(frozen=True)
class PollResult:
    """One poll's events, and whether the source answered (up, and the next poll after the interval)
    or not (up = 0, and the next poll backs off)."""

    events: list[Event] = field(default_factory=list)
    ok: bool = True


@dataclass(frozen=True)
class PollPolicy:
    """How the pipeline schedules a polled source: every `interval_seconds` while it answers; after
    n failures in a row, interval * 2**n, at most `max_backoff_seconds` (None: no backoff)."""

    interval_seconds: float
    max_backoff_seconds: float | None = None


@runtime_checkable
class LineSource(Protocol):
    """What the pipeline calls on a tailed source."""

    def handle_lines(self, lines: list[bytes]) -> LineBatch: ...

    def file_mtime(self, mtime: float) -> None: ...  # the live file's mtime: a date for date-less lines

    def checkpoint(self) -> dict[str, Any] | None: ...

    def restore(self, saved: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class PolledSource(Protocol):
    """What the pipeline calls on a polled source."""

    def poll(self, now: float) -> PollResult: ...

    def poll_policy(self) -> PollPolicy: ...

    def checkpoint(self) -> dict[str, Any] | None: ...

    def restore(self, saved: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class NotesItsParser(Protocol):
    """A line source that says which path parses its lines, and why (for /debug/sources); one
    that does not is parsed per line."""

    @property
    def parse_note(self) -> str: ...


@runtime_checkable
class SaysWhatItSamples(Protocol):
    """A polled source that says whether a poll describes the present (True, the default of
    PolledSourceBase) or imports history, each record stamped with its own time."""

    samples_present: bool


class _SourceBase:
    def checkpoint(self) -> dict[str, Any] | None:
        """State to commit with the events (None: the source keeps none)."""
        return None

    def restore(self, saved: dict[str, Any]) -> None:
        """Take back what `checkpoint` returned before a restart."""

    def close(self) -> None:
        """Release connections and files."""


class LineSourceBase(_SourceBase):
    """Defaults of a line source: no state across lines, no use for the file's mtime."""

    def file_mtime(self, mtime: float) -> None:
        """Told before each batch of lines read from the live file."""


class PolledSourceBase(_SourceBase):
    """Defaults of a polled source: no state across polls."""

    # What a poll returns describes the moment of the poll (an endpoint's state, /proc, a path): a poll
    # made after the fact records the present, not the past (`spyglass ingest` polls it only when asked).
    # False for a source whose polls import history, each record stamped with its own time.
    samples_present: bool = True


@dataclass(frozen=True)
class Registration:
    """A source kind: its options model and its class (or one of each mode)."""

    kind: str
    options: type[SourceOptions]
    tailed: Callable[..., LineSource] | None = None  # constructed as cls(name, options, host=...)
    polled: Callable[..., PolledSource] | None = None
    presets: dict[str, Callable[..., LineSource]] = field(default_factory=dict)  # options.preset -> its line source

    @property
    def cls(self) -> type:
        """The kind's main class (its docstring describes the kind): the polled one if it has one."""
        main = self.polled or self.tailed
        assert isinstance(main, type), "a registration holds at least one class"
        return main

    @property
    def polls_the_present(self) -> bool:
        """The kind is polled and a poll describes the moment of the poll (not history it imports): its
        series count as current only while its polls keep coming (the replay lets them go stale)."""
        return self.polled is not None and getattr(self.polled, "samples_present", True) is True

    def is_polled(self, options: SourceOptions) -> bool:
        """Whether a source with these options is polled; a kind with both classes is tailed when
        its options name a path."""
        return self.polled is not None and (self.tailed is None or options.path is None)

    def build(self, name: str, options: SourceOptions, host: str = "") -> LineSource | PolledSource:
        """The source object for these options (a bad pattern raises ValueError, naming its key)."""
        return (
            self.build_polled(name, options, host)
            if self.is_polled(options)
            else self.build_tailed(name, options, host)
        )

    def build_tailed(self, name: str, options: SourceOptions, host: str = "") -> LineSource:
        """The kind's line source for these options; ValueError if the kind has none."""
        tailed = self.presets.get(getattr(options, "preset", ""), self.tailed)
        if tailed is None:
            raise ValueError(f"source kind {self.kind!r} is not read from a file")
        return tailed(name, options, host=host)

    def build_polled(self, name: str, options: SourceOptions, host: str = "") -> PolledSource:
        """The kind's polled source for these options; ValueError if the kind has none."""
        if self.polled is None:
            raise ValueError(f"source kind {self.kind!r} is not polled")
        return self.polled(name, options, host=host)


REGISTRY: dict[str, Registration] = {}
SourceClass = TypeVar("SourceClass", bound=type)


def _members(protocol: type) -> list[str]:
    return sorted(name for name in dir(protocol) if not name.startswith("_"))


def _missing(cls: type, protocol: type) -> list[str]:
    return [name for name in _members(protocol) if not callable(inspect.getattr_static(cls, name, None))]


def check_source_class(kind: str, cls: type) -> str:
    """'tailed' or 'polled'; ValueError naming what `cls` lacks to be a line or a polled source."""
    where = f"source kind {kind!r}: {cls.__qualname__}"
    try:
        inspect.signature(cls).bind("name", SourceOptions(kind=kind), host="")
    except TypeError as exc:
        raise ValueError(f"{where} must be constructible as cls(name, options, host=...) ({exc})") from None
    line, polled = _missing(cls, LineSource), _missing(cls, PolledSource)
    if not line and not polled:
        raise ValueError(f"{where} is both a line source and a polled source; register one class of each")
    if line and polled:
        raise ValueError(
            f"{where} is neither a line source (lacks {', '.join(line)}) nor a polled source "
            f"(lacks {', '.join(polled)}); subclass LineSourceBase or PolledSourceBase"
        )
    return "polled" if not polled else "tailed"


def register(kind: str, options: type[SourceOptions]) -> Callable[[SourceClass], SourceClass]:
    """Register a source class under `kind`, with the pydantic model of its options."""

    def decorate(cls: SourceClass) -> SourceClass:
        slot = check_source_class(kind, cls)
        if slot == "polled" and not issubclass(options, PolledOptions):
            raise ValueError(
                f"source kind {kind!r}: the options of a polled source subclass PolledOptions"
                f" (interval_seconds); {options.__qualname__} does not"
            )
        current = REGISTRY.get(kind) or Registration(kind, options)
        if current.options is not options:
            raise ValueError(f"source kind {kind!r} registered with two options models")
        taken = current.polled if slot == "polled" else current.tailed
        if taken not in (None, cls):
            raise ValueError(f"source kind {kind!r} registered twice")
        REGISTRY[kind] = replace(current, polled=cls) if slot == "polled" else replace(current, tailed=cls)
        return cls

    return decorate


def register_preset(
    kind: str, preset: str, *, fields: SourceFields | None = None
) -> Callable[[SourceClass], SourceClass]:
    """Register the line source of one preset of `kind` (options.preset == `preset`): another grammar and
    clock for the same events, options and signals (the engine log's strata and llama_server presets), in the
    preset's own module. `fields` are the event kinds and fields it writes beyond the kind's own (declared into
    the kind's table); the class says what the engine writes while idle (`idle_lines`, None: nothing). The
    options' accepted names, the CLI's choices and check-log's list come from here (`preset_names`)."""

    def decorate(cls: SourceClass) -> SourceClass:
        if check_source_class(kind, cls) != "tailed":
            raise ValueError(f"source kind {kind!r}: preset {preset!r} must be a line source")
        if not hasattr(cls, "idle_lines"):
            raise ValueError(f"source kind {kind!r}: preset {preset!r} must say what it writes while idle (idle_lines)")
        current = REGISTRY.get(kind)
        if current is None:
            raise ValueError(f"source kind {kind!r}: register the kind before its preset {preset!r}")
        if current.presets.get(preset) not in (None, cls):
            raise ValueError(f"source kind {kind!r}: preset {preset!r} registered twice")
        if fields:
            extend(kind, fields)
        REGISTRY[kind] = replace(current, presets={**current.presets, preset: cls})
        return cls

    return decorate


def preset_names(kind: str) -> tuple[str, ...]:
    """Every preset registered for `kind` (every module of this package loaded), sorted."""
    registration = load_all().get(kind)
    return tuple(sorted(registration.presets)) if registration else ()


def preset_source(kind: str, preset: str) -> Callable[..., LineSource]:
    """The line source class of one preset; ValueError naming the registered ones."""
    presets = load_all()[kind].presets
    if preset not in presets:
        raise ValueError(f"no preset {preset!r} of {kind}; the presets are: {', '.join(preset_names(kind))}")
    return presets[preset]


def reports_unread(options: SourceOptions) -> bool:
    """Whether the source these options build stores `unread` events (its running count of the lines it read and
    could not use): its preset's class says so (`reports_unread`)."""
    preset = getattr(options, "preset", None)
    return preset is not None and bool(getattr(preset_source(options.kind, preset), "reports_unread", False))


# Support modules that register no source and import a heavy library (pyarrow: ~100 MiB); the
# engine log source imports this one only when its columnar path is configured.
ON_DEMAND = frozenset({"columnar"})


_LOADED: list[bool] = []  # set once every module is imported: a config of 10,000 sources lists the package once


def load_all() -> dict[str, Registration]:
    """Import every module in this package (but the ON_DEMAND ones) so that its @register call runs."""
    if not _LOADED:
        for module in pkgutil.iter_modules(__path__):
            if module.name not in ON_DEMAND:
                importlib.import_module(f"{__name__}.{module.name}")
        _LOADED.append(True)
    return REGISTRY
