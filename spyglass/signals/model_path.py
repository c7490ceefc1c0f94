"""Model-path watch events turned into metrics (H15): does the path resolve, when did it last change,
and does it still name the file the running engine loaded.

The engine's loaded file comes from its last `model` banner line, which signals/engine_log.py
records in the links every signals object is given (`SignalsLinks.loaded_models`: instance ->
LoadedModel). A mismatch is left unset while that is unknown: not measured is not 0.
"""

from __future__ import annotations

from spyglass.collectors.event import Event
from spyglass.signals import LoadedModel, SignalsBase, signals_for
from spyglass.signals.catalogue import spec_maker

spec = spec_maker("model_path", ("instance",))
SPECS = [
    spec(
        "spyglass_model_path_resolves",
        "gauge",
        "1 when the instance's configured model path resolves to a file, 0 when it does not (a dangling link).",
    ),
    spec(
        "spyglass_model_path_changed_timestamp_seconds",
        "gauge",
        "Unix time the model path last changed what it resolves to (seen by a poll, else the link's mtime).",
        unit="seconds",
    ),
    spec("spyglass_model_path_changes_total", "counter", "Changes of what the model path resolves to, between polls."),
    spec(
        "spyglass_model_path_mismatch",
        "gauge",
        "1 when the model path resolves to another file (path or size) than the running engine loaded, else 0;"
        " absent until the engine's model line is read.",
    ),
]


def mismatch(loaded: LoadedModel | None, real: str | None, size: int | None) -> float | None:
    """1.0 when the path now names another file than `loaded`; None when either side is unknown."""
    if loaded is None or real is None or not loaded.real:
        return None
    same = loaded.real == real and (loaded.bytes is None or size is None or loaded.bytes == size)
    return 0.0 if same else 1.0


@signals_for("model_path", SPECS)
class ModelPathSignals(SignalsBase):
    def apply(self, e: Event) -> None:
        key = (e.instance,)
        if e.kind == "model_path_changed":
            self.state.inc("spyglass_model_path_changes_total", key)
            return
        if e.kind != "model_path":
            return
        resolves = bool(e.fields.get("resolves"))
        self.state.set("spyglass_model_path_resolves", key, 1.0 if resolves else 0.0)
        changed = e.fields.get("changed_ts")
        if isinstance(changed, (int, float)):
            self.state.set("spyglass_model_path_changed_timestamp_seconds", key, float(changed))
        loaded = self.links.loaded_models.get(e.instance)
        value = mismatch(loaded, e.fields.get("real"), e.fields.get("bytes"))
        if value is not None:
            self.state.set("spyglass_model_path_mismatch", key, value)
        elif not resolves:
            self.state.drop("spyglass_model_path_mismatch", key)
