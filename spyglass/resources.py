"""The data files the installed package reads at run time (probes' and reports' SQL, the runbooks, the
dashboards' JSON), found through importlib.resources: in a wheel, a zip or a checkout alike, never by
walking up from a module's file to a checkout that an installed spyglass does not have.

Every such file is declared as package data in pyproject.toml, and tests/test_wheel.py installs the built
wheel outside the checkout and runs the commands that read them.
"""

from __future__ import annotations

from importlib.resources import as_file, files
from importlib.resources.abc import Traversable
from pathlib import Path

__all__ = ["as_file", "beside", "folder", "runbooks", "text"]


def folder(package: str, *parts: str) -> Traversable:
    """A folder of data inside `package` (dotted name), e.g. folder("spyglass.forensics", "reports")."""
    return files(package).joinpath(*parts)


def text(package: str, *parts: str) -> str:
    return folder(package, *parts).read_text(encoding="utf-8")


def beside(module: str, suffix: str) -> str:
    """The text of the data file named as a module (dotted `__name__`) with another suffix:
    beside("spyglass.alerting.heuristics.h03_eviction_storm", ".sql") reads h03_eviction_storm.sql."""
    if "/" in module or "\\" in module:
        raise ValueError(f"resources.beside takes a module's dotted __name__, not a path: {module}")
    package, _, stem = module.rpartition(".")
    return text(package, stem + suffix)


def runbooks() -> Path:
    """The runbooks folder shipped in the package (spyglass/alerts/runbooks): the default target of a
    rule's runbook_url when neither alerts.runbook_base_url nor `rules --out` names another."""
    return Path(str(files("spyglass").joinpath("alerts", "runbooks")))
