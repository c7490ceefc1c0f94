"""The preview's look: Grafana's dark theme, its units (`fmt`), legends, and each panel's field config
(defaults and overrides, thresholds, value mappings) as Grafana merges them."""

from __future__ import annotations

import math
import re
import time
from typing import Any

# Grafana's dark theme: its named colours, and the palette it gives series without one of their own.
COLORS = {
    "green": "#56a64b",
    "orange": "#ff9830",
    "red": "#e02f44",
    "blue": "#3274d9",
    "text": "#464c54",
    "purple": "#a352cc",
    "yellow": "#e0b400",
}
BACKGROUND, PANEL, TEXT, MUTED, BORDER = "#111217", "#181b1f", "#ccccdc", "#8e8e8e", "#2c3235"
LINE_COLORS = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#fade2a"]


def _si(value: float, base: float = 1000, units: tuple[str, ...] = ("", "k", "M", "G", "T", "P")) -> str:
    i = 0
    while abs(value) >= base and i < len(units) - 1:
        value, i = value / base, i + 1
    return f"{value:.3g}{units[i]}"


def _ago(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def fmt(value: float, unit: str, now: float | None = None) -> str:
    """The value as Grafana's unit shows it; `dateTimeFromNow` reads epoch milliseconds against `now`."""
    if value is None or math.isnan(value):
        return "—"
    if math.isinf(value):
        return "∞"
    if unit == "dateTimeFromNow":
        return _ago(max(0.0, (time.time() if now is None else now) - value / 1000))
    if unit == "s":
        if abs(value) >= 3600:
            return f"{value / 3600:.3g} h"
        if abs(value) >= 60:
            return f"{value / 60:.3g} min"
        return f"{value * 1000:.3g} ms" if 0 < abs(value) < 1 else f"{value:.3g} s"
    if unit in ("bytes", "Bps"):
        text = _si(value, 1024, ("B", "KiB", "MiB", "GiB", "TiB", "PiB"))
        return text + ("/s" if unit == "Bps" else "")
    if unit == "percentunit":
        return f"{value * 100:.3g}%"
    if unit == "x":
        return f"{value:.3g}x"
    if unit == "reqps":
        return _si(value) + " req/s"
    if unit == "ops":
        return _si(value) + " ops/s"
    if unit.startswith("suffix:"):
        return _si(value) + unit.removeprefix("suffix:")
    return _si(value)


def legend(fmt_: str, labels: dict[str, str]) -> str:
    if not fmt_ or fmt_ == "__auto":
        return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt_)


def color(name: str) -> str:
    return COLORS.get(name, name)


def _field(panel: dict[str, Any], ref: str = "", name: str = "") -> dict[str, Any]:
    """The panel's field config for one query (`ref`) or one column (`name`): defaults and the
    overrides that match it, as Grafana merges them."""
    config = dict(panel.get("fieldConfig", {}).get("defaults", {}))
    for override in panel.get("fieldConfig", {}).get("overrides", []):
        matcher = override.get("matcher", {})
        if (matcher.get("id") == "byFrameRefID" and matcher.get("options") == ref and ref) or (
            matcher.get("id") == "byName" and matcher.get("options") == name and name
        ):
            for prop in override.get("properties", []):
                config[prop["id"]] = prop.get("value")
    return config


def _steps(config: dict[str, Any]) -> list[tuple[float, str]]:
    steps = (config.get("thresholds") or {}).get("steps") or []
    return [(-math.inf if s.get("value") is None else s["value"], s.get("color", "green")) for s in steps]


def color_for(config: dict[str, Any], value: float) -> str:
    chosen = "green"
    for bound, c in _steps(config):
        if not math.isnan(value) and value >= bound:
            chosen = c
    return color(chosen)


def mapped(config: dict[str, Any], value: float | str) -> tuple[str, str] | None:
    """(text, colour) of the value mapping that matches `value`, if one does."""
    for mapping in config.get("mappings") or []:
        for key, result in (mapping.get("options") or {}).items():
            hit = key == value if isinstance(value, str) else _number(key) == value
            if mapping.get("type") == "value" and hit:
                return result.get("text", key), color(result.get("color", MUTED))
    return None


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
