"""The one place a forensic query leaves for the store.

A command builds SQL that names views, plus parameters (`$from`, `$to`, ...); `query` puts the
views in front (views.with_views) and runs it read-only: on the file when no agent holds it,
else through the agent's read-only query path. That path takes one statement and no
parameters today, so parameters are rendered as SQL literals here (`render`), and nowhere else.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from spyglass.config import Config
from spyglass.forensics.views import literal, with_views
from spyglass.query import QueryError, agent_api, run_readonly

Result = tuple[list[str], list[tuple[Any, ...]]]

EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 12, 31, tzinfo=UTC)
PARAMETER = re.compile(r"\$([a-z_][a-z0-9_]*)\b")


@dataclass(frozen=True)
class Window:
    """A half-open window [start, end) of UTC instants; either end may be open."""
    start: datetime | None = None
    end: datetime | None = None

    def params(self) -> dict[str, datetime]:
        return {"from": self.start or EARLIEST, "to": self.end or LATEST}


@dataclass
class Query:
    """SQL over the views, its parameters, and the full text that ran (the evidence)."""
    sql: str
    params: dict[str, Any] = field(default_factory=dict)

    def text(self, config: Config) -> str:
        return render(with_views(self.sql, config.sources), self.params)


def sql_value(value: Any) -> str:
    if isinstance(value, datetime):
        utc = value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
        return f"TIMESTAMPTZ '{utc:%Y-%m-%d %H:%M:%S.%f}+00'"
    return literal(value)


def render(sql: str, params: dict[str, Any]) -> str:
    """`sql` with each `$name` replaced by its value as a literal; an unknown name is an error."""
    def one(found: re.Match[str]) -> str:
        name = found.group(1)
        if name not in params:
            raise QueryError(f"query parameter ${name} has no value")
        return sql_value(params[name])
    return PARAMETER.sub(one, sql)


def query(config: Config, q: Query) -> Result:
    """Columns and rows of `q`, read-only, from the file or through the running agent."""
    answer = run_readonly(config.store_path(), q.text(config), agent_api(config))
    if answer.truncated:  # a forensic table must be whole or say it is not
        raise QueryError(f"the answer was cut ({answer.truncated}); narrow the window")
    return answer.columns, [tuple(row) for row in answer.rows]
