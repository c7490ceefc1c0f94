"""docs/metrics.md and docs/config.md are generated from the code and must not drift from it."""

from __future__ import annotations

from spyglass.docs import generated


def test_generated_docs_are_current():
    stale = [str(path) for path, text in generated().items() if not path.exists() or path.read_text() != text]
    assert not stale, f"regenerate with `python -m spyglass.docs`: {stale}"
