"""Signals registry: which module turns which source kind's events into metrics.

A signals module declares its catalogue rows and a class with `apply(event)`, registered with
@signals_for(kind, specs). The agent's own health metrics are declared the same way.
"""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from exporters.catalogue import Catalogue, MetricSpec


@dataclass(frozen=True)
class SignalsRegistration:
    kind: str
    cls: type | None
    specs: tuple[MetricSpec, ...]


SIGNALS: dict[str, SignalsRegistration] = {}


def signals_for(kind: str, specs: Iterable[MetricSpec]) -> Callable[[type], type]:
    """Register the class that derives metrics from events of source kind `kind`."""

    def decorate(cls: type) -> type:
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
