"""Every relative link in the README, CONTRIBUTING.md and docs/ names a file that exists: the
reference sections moved out of the README, and a moved file must not leave a dead link behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def relative_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```|`[^`\n]*`", "", page.read_text(), flags=re.S)  # code holds no links
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:|#", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path):
    dead = [t for t in relative_links(page) if not (page.parent / t.split("#")[0]).exists()]
    assert not dead, f"{page.relative_to(ROOT)} links to missing files: {dead}"


def test_the_checker_sees_a_dead_link(tmp_path: Path):
    page = tmp_path / "p.md"
    page.write_text("[here](gone.md) and [there](https://example.invalid) and [x](#top)\n")
    assert relative_links(page) == ["gone.md"]
