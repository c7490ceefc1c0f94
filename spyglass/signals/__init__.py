"""Signals registry: which module turns which source kind's events into metrics.

A signals module declares its catalogue rows and a class that satisfies `Signals` (`apply(event)`),
constructed as `cls(state, settings=SignalsSettings(...), links=SignalsLinks(...))`; subclassing
`SignalsBase` gives that constructor. It is registered with @signals_for(kind, specs), which rejects
a class that does not fit. The agent's own health metrics are declared the same way, with no class.

What a signals object must remember between events (and across a restart) is its own typed
`checkpoint()` (a pydantic model, `Saved`), saved in the metric state under its source kind and given
back to `restore()` by `attach_signals`. What one signals class learns that another needs (the model
file each engine loaded) is passed explicitly, in `SignalsLinks`.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Protocol, TypeVar, runtime_checkable

from loguru import logger
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spyglass.collectors.event import Event
from spyglass.collectors.grammar import MAX_NUMBER
from spyglass.signals.catalogue import Catalogue, MetricSpec

if TYPE_CHECKING:
    from spyglass.signals.state import MetricState


@runtime_checkable
class Signals(Protocol):
    """What the pipeline calls on a signals object: built on the metric state with the keyword
    settings, then it derives metrics from one event of its kind at a time."""

    def __init__(self, state: MetricState, settings: SignalsSettings = ..., links: SignalsLinks = ...) -> None: ...

    def apply(self, event: Event) -> None: ...


@dataclass(frozen=True)
class SignalsSettings:
    """What a signals module may need from the configuration, passed by keyword."""

    lanes: Mapping[str, str] = field(default_factory=dict)  # instance -> lane
    long_prompt_tokens: int = 200_000  # a prompt this long is a long prompt (signals.long_prompt_tokens)
    default_prompt_cache_every: int = 16384  # the engine's --prompt-cache-every until its args line says


# A number a signals object saved: finite and no larger than a parsed number may be (collectors.grammar).
SavedNumber = Annotated[float, Field(ge=-MAX_NUMBER, le=MAX_NUMBER, allow_inf_nan=False)]


class LoadedModel(BaseModel):
    """The model file an engine process loaded, from its `model` line."""

    model_config = ConfigDict(extra="forbid")

    real: str  # the path the configured one resolved to
    bytes: int | None = None
    ts: float = 0.0


@dataclass
class SignalsLinks:
    """What one signals class learns and another needs, passed to every signals object explicitly.

    `loaded_models` (instance -> LoadedModel): written by the engine log's signals (they save it with
    their checkpoint), read by the model-path watch (H15)."""

    loaded_models: dict[str, LoadedModel] = field(default_factory=dict)


class SignalsBase:
    """A signals class that keeps the metric state, the settings and the links it was given.

    A class that remembers something between events declares `Saved` (a pydantic model) and
    implements `checkpoint() -> Saved` and `restore(Saved)`; `from_memo` reads the untyped memo
    a saved state had before."""

    # Counters that copy a cumulative count the source reports (a serve's own totals,
    # llama-server's /metrics) rather than counting events: they start where the source is, never at 0, or the
    # first report would read as that many increments (see start_known_counters).
    mirrored_counters: frozenset[str] = frozenset()
    # The lane an event without one is counted under, if the class has one: a known lane too.
    no_lane: str | None = None

    Saved: ClassVar[type[BaseModel] | None] = None

    def __init__(
        self, state: MetricState, settings: SignalsSettings = SignalsSettings(), links: SignalsLinks | None = None
    ) -> None:
        self.state, self.settings = state, settings
        self.links = links if links is not None else SignalsLinks()

    def checkpoint(self) -> BaseModel | None:
        """What this object must remember, as its `Saved` model (None: nothing)."""
        return None

    def restore(self, saved: Any) -> None:
        """Take back what `checkpoint` gave (a valid `Saved`)."""

    @staticmethod
    def from_memo(memo: dict[str, Any]) -> dict[str, Any] | None:
        """This class's part of a saved state's untyped memo (the format before `Saved`), as `Saved` data."""
        return None


@dataclass(frozen=True)
class SignalsRegistration:
    kind: str
    cls: type[Signals] | None
    specs: tuple[MetricSpec, ...]


SIGNALS: dict[str, SignalsRegistration] = {}
SignalsClass = TypeVar("SignalsClass", bound=type)


def check_signals_class(kind: str, cls: type) -> None:
    """ValueError unless `cls(state, settings=..., links=...)` can be called and its objects have apply(event)."""
    where = f"signals for {kind!r}: {cls.__qualname__}"
    if not callable(inspect.getattr_static(cls, "apply", None)):
        raise ValueError(f"{where} has no apply(event) method")
    try:
        inspect.signature(cls).bind(object(), settings=SignalsSettings(), links=SignalsLinks())
    except TypeError as exc:
        raise ValueError(
            f"{where} must be constructible as cls(state, settings=SignalsSettings(...),"
            f" links=SignalsLinks(...)) ({exc}); subclass SignalsBase"
        ) from None


def attach_signals(kind: str, signals: Signals, state: MetricState) -> None:
    """Give `signals` its saved state from `state` (its own `Saved`, or its part of a legacy memo) and
    have `state` save its checkpoint from now on. Saved data that does not validate is dropped
    with a warning: the object starts fresh, as on a first run."""
    from spyglass.signals.state import LEGACY_MEMO

    saved_model = getattr(signals, "Saved", None)
    if saved_model is None:
        return
    raw = state.saved_signals.get(kind)
    legacy = state.saved_signals.get(LEGACY_MEMO)
    if raw is None and isinstance(legacy, dict):
        raw = signals.from_memo(legacy)  # type: ignore[attr-defined]
    if raw is not None:
        try:
            signals.restore(saved_model.model_validate(raw))  # type: ignore[attr-defined]
        except ValidationError as exc:
            logger.warning(
                "signals of {}: saved state not valid, starting fresh ({} errors, first: {})",
                kind,
                exc.error_count(),
                exc.errors()[0]["msg"],
            )
    state.checkpointers[kind] = lambda: signals.checkpoint().model_dump(mode="json")  # type: ignore[attr-defined]


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
    """Every registration: imports each module of this package (the ones that hold no signals,
    such as the catalogue and the state, register nothing)."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return SIGNALS


def start_known_counters(
    state: MetricState,
    instances: Mapping[str, Iterable[str]],
    lanes: Iterable[str],
    lane_of: Mapping[str, str],
    engine_of: Mapping[str, str] | None = None,
) -> None:
    """Create at 0 every counter series whose labels are all known before any event arrives: per
    source kind, counters labelled (instance, lane), (instance) or (lane), for the configured
    instances of that kind (`instances`: kind -> names) and the deployment's `lanes` (`lane_of`:
    instance -> lane), with the class's `no_lane` among them (a SignalsBase's; other classes have none).
    A series that exists is left as it is.

    Why: a counter first exported above 0 is invisible to rate() and increase(), which need a sample
    before the first increment, so the first model checksum mismatch or lost task anchor since the
    agent started would page no one; a histogram likewise (its buckets are counters: a first TTFT batch
    read in one commit would leave its p95 rule NaN). Counters with another label (status, finish, reason) are left
    to their first event (their values are open), and so are a class's `mirrored_counters`. A counter only some
    engines give (MetricSpec.engines) starts only for the instances `engine_of` says run one of them: a
    llama-server's thinking tokens are absent, not 0."""
    for kind, registration in load_all().items():
        if kind not in instances:
            continue
        names = sorted({name for name in instances[kind] if name})
        base = registration.cls if registration.cls and issubclass(registration.cls, SignalsBase) else None
        no_lane = base.no_lane if base else None
        kind_lanes = sorted({*lanes, *([no_lane] if no_lane else [])})
        keys_of: dict[tuple[str, ...], list[tuple[str, ...]]] = {
            ("instance", "lane"): [(name, lane_of.get(name, "")) for name in names],
            ("instance",): [(name,) for name in names],
            ("lane",): [(lane,) for lane in kind_lanes],
        }
        mirrored = base.mirrored_counters if base else frozenset()
        for spec in registration.specs:
            if spec.type not in ("counter", "histogram") or spec.name in mirrored:
                continue
            for key in keys_of.get(spec.labels, ()):
                if (
                    spec.engines
                    and spec.labels[0] == "instance"
                    and (engine_of or {}).get(key[0], "") not in spec.engines
                ):
                    continue
                if spec.type == "histogram":
                    state.start_histogram(spec.name, key)
                else:
                    state.inc(spec.name, key, 0.0)


def full_catalogue() -> Catalogue:
    """Every metric spyglass can export."""
    catalogue = Catalogue()
    for registration in load_all().values():
        catalogue.declare(*registration.specs)
    return catalogue
