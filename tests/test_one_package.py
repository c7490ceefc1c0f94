"""spyglass is one installed package (issue 36): the rooms that live at the checkout's root (collectors/, ...) are
spyglass.collectors and so on. An editable install puts the root on sys.path as well, so `import collectors` would
load a second copy of every module, whose registries then refuse the first; it fails at once, saying what to import."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("room", ["collectors", "exporters", "engine", "dashboards"])
def test_a_room_imported_by_its_top_level_name_says_what_to_import(room, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    with pytest.raises(ImportError, match=rf"^import spyglass\.{room}, not {room}: "):
        importlib.import_module(room)
    assert room not in sys.modules
    assert importlib.import_module(f"spyglass.{room}").__name__ == f"spyglass.{room}"
