"""Knowledge stated once: the Beijing zone is named in collectors/clock.py and nowhere else in the
code (help texts may say "e.g. Asia/Shanghai"; a quoted zone name is a second definition)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUOTED_ZONE = re.compile(r"""["']Asia/Shanghai["']""")


def definitions_of_the_zone(root: Path) -> list[str]:
    return [
        str(path.relative_to(root))
        for package in ("collectors", "signals", "exporters", "engine", "spyglass", "dashboards")
        for path in sorted((root / package).rglob("*.py"))
        if QUOTED_ZONE.search(path.read_text())
    ]


def test_the_local_zone_is_named_once():
    assert definitions_of_the_zone(ROOT) == ["collectors/clock.py"]


def test_the_rule_sees_a_second_definition(tmp_path):
    (tmp_path / "spyglass").mkdir()
    (tmp_path / "spyglass" / "views.py").write_text("BEIJING = 'Asia/Shanghai'\n")
    assert definitions_of_the_zone(tmp_path) == ["spyglass/views.py"]
