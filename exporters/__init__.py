"""Signals registry: which module turns which source kind's events into metrics.

A signals module declares its catalogue rows and a class that satisfies `Signals` (`apply(event)`),
constructed as `cls(state, settings=SignalsSettings(...))`; subclassing `SignalsBase` gives that
constructor. It is registered with @signals_for(kind, specs), which rejects a class that does not
fit. The agent's own health metrics are declared the same way, with no class.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from collectors.event import Event
from exporters.catalogue import Catalogue, MetricSpec

if TYPE_CHECKING:
    from exporters.state import MetricState


@runtime_checkable
class Signals(Protocol):
    """What the pipeline calls on a signals object: built on the metric state with the keyword
    settings, then it derives metrics from one event of its kind at a time."""

    def __init__(self, state: MetricState, settings: SignalsSettings = ...) -> None: ...

    def apply(self, event: Event) -> None: ...


@dataclass(frozen=True)
class SignalsSettings:
    """What a signals module may need from the configuration, passed by keyword."""

    lanes: Mapping[str, str] = field(default_factory=dict)  # instance -> lane
    long_prompt_tokens: int = 200_000  # a prompt this long is a long prompt (signals.long_prompt_tokens)
    default_prompt_cache_every: int = 16384  # the engine's --prompt-cache-every until its args line says


class SignalsBase:
    """A signals class that keeps the metric state and the settings it was given."""

    def __init__(self, state: MetricState, settings: SignalsSettings = SignalsSettings()) -> None:
        self.state, self.settings = state, settings


@dataclass(frozen=True)
class SignalsRegistration:
    kind: str
    cls: type[Signals] | None
    specs: tuple[MetricSpec, ...]


SIGNALS: dict[str, SignalsRegistration] = {}
SignalsClass = TypeVar("SignalsClass", bound=type)


def check_signals_class(kind: str, cls: type) -> None:
    """ValueError unless `cls(state, settings=...)` can be called and its objects have apply(event)."""
    where = f"signals for {kind!r}: {cls.__qualname__}"
    if not callable(inspect.getattr_static(cls, "apply", None)):
        raise ValueError(f"{where} has no apply(event) method")
    try:
        inspect.signature(cls).bind(object(), settings=SignalsSettings())
    except TypeError as exc:
        raise ValueError(f"{where} must be constructible as cls(state, settings=SignalsSettings(...)) ({exc});"
                         " subclass SignalsBase") from None


def signals_for(kind: str, specs: Iterable[MetricSpec]) -> Callable[[SignalsClass], SignalsClass]:
    """Register the class that derives metrics from events of source kind `kind`."""

    def decorate(cls: SignalsClass) -> SignalsClass:
        check_signals_class(kind, cls)
        SIGNALS[kind] = SignalsRegistration(kind, cls, tuple(specs))
        return cls

    return decorate


def declare_only(kind: str, specs: Iterable[MetricSpec]) -> None:
    """Rows with no event-driven class (the agent's own health metrics)."""
    SIGNALS[kind] = SignalsRegistration(kind, None, tuple(specs))


def load_all() -> dict[str, SignalsRegistration]:
    for module in pkgutil.iter_modules(__path__):
        if module.name.endswith("_signals"):
            importlib.import_module(f"{__name__}.{module.name}")
    return SIGNALS


def full_catalogue() -> Catalogue:
    """Every metric spyglass can export."""
    catalogue = Catalogue()
    for registration in load_all().values():
        catalogue.declare(*registration.specs)
    return catalogue
