"""Canned reports: each one SQL file in spyglass/forensics/reports/, over the views.

A report's leading `--` comment is its docstring: the first line its title, then which incident
table it reproduces and the parameters it takes. Parameters every report may use: `$from`,
`$to` (the window), `$request` (one request id, or NULL for all), and those of run.settings_params:
`$long_prompt_tokens`, `$default_every` (signals.long_prompt_tokens and
signals.default_prompt_cache_every) and `$checkpoint_only` (the checkpoint-only rule as a condition).
"""

from __future__ import annotations

from dataclasses import dataclass

from spyglass import resources
from spyglass.config import Config
from spyglass.forensics.run import Query, Window, settings_params


@dataclass(frozen=True)
class Report:
    name: str
    title: str
    doc: str  # the docstring after the title
    sql: str

    @property
    def when_empty(self) -> str:
        """What to check when the report finds nothing: its docstring's `When empty:` line, or ''."""
        return next(
            (
                line.removeprefix("When empty:").strip()
                for line in self.doc.splitlines()
                if line.startswith("When empty:")
            ),
            "",
        )

    @property
    def takes_request(self) -> bool:
        """Whether the report reads `$request` (one request id); the others cover the whole window."""
        return "$request" in self.sql

    def query(self, config: Config, window: Window, request: str | None = None) -> Query:
        return Query(self.sql, {**window.params(), "request": request, **settings_params(config)})


def parse(name: str, text: str) -> Report:
    lines = text.splitlines()
    head = []
    for line in lines:
        if not line.startswith("--"):
            break
        head.append(line[2:].strip())
    if not head:
        raise ValueError(f"report {name}: its SQL file must start with a -- docstring")
    return Report(name, head[0], "\n".join(head[1:]).strip(), text)


def load_all() -> dict[str, Report]:
    found = [f for f in resources.folder("spyglass.forensics", "reports").iterdir() if f.name.endswith(".sql")]
    return {f.name[:-4]: parse(f.name[:-4], f.read_text(encoding="utf-8")) for f in sorted(found, key=lambda f: f.name)}


def listing(known: dict[str, Report]) -> str:
    """One line a report: its name and title."""
    return "\n".join(f"  {n:<16} {r.title}" for n, r in known.items())


class UnknownReport(LookupError):
    def __init__(self, name: str, known: dict[str, Report]) -> None:
        super().__init__(f"no report named {name!r}; the reports are:\n{listing(known)}")


def get(name: str) -> Report:
    known = load_all()
    if name not in known:
        raise UnknownReport(name, known)
    return known[name]
