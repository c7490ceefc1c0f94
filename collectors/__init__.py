"""Source registry. Each module in this package registers its source kind with @register.

Adding a source is one module here (options model, pure parser, source class) plus a fixture.
A source class takes (name, options, host=...) and has `handle(line: bytes) -> Event | Miss` and
`handle_lines(lines) -> (events, miss counts, last unmatched line)` for the hot path;
if it keeps state across lines it also has `checkpoint() -> dict` and `restore(dict)`, and that
state is committed with the tailer's offsets.
"""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class SourceOptions(BaseModel):
    """Keys every source has. A kind's own model adds its keys; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    path: Path | None = Field(None, description="File to tail (file sources).")
    instance: str = Field("", description="Instance label: strata-a, strata-b, rag-proxy.")
    tz: str = Field("UTC", description="IANA zone of the source's naive timestamps.")
    start_at: str = Field("beginning", pattern="^(beginning|end)$",
                          description="Where a first-ever read of an existing file starts.")
    rotated: list[str] = Field(default_factory=lambda: ["{path}.1"],
                               description="Where rotated generations of the file may be found; '{path}' expands, '{n}'"
                                           " counts 1..agent.rotated_generations (logrotate's x.log.1, x.log.2...).")


@dataclass(frozen=True)
class Registration:
    kind: str
    cls: type
    options: type[SourceOptions]


REGISTRY: dict[str, Registration] = {}


def register(kind: str, options: type[SourceOptions]) -> Callable[[type], type]:
    """Register a source class under `kind`, with the pydantic model of its options."""

    def decorate(cls: type) -> type:
        if kind in REGISTRY and REGISTRY[kind].cls is not cls:
            raise ValueError(f"source kind {kind!r} registered twice")
        REGISTRY[kind] = Registration(kind, cls, options)
        return cls

    return decorate


def load_all() -> dict[str, Registration]:
    """Import every module in this package so that its @register call runs."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return REGISTRY
