"""The one place a forensic query leaves for the store.

A command builds SQL that names views, plus parameters (`$from`, `$to`, ...); `query` puts the
views in front (views.with_views) and runs it read-only: on the file when no agent holds it,
else through the agent's read-only query path. That path takes one statement and no
parameters today, so parameters are rendered as SQL literals here (`render`), and nowhere else.

With `parquet` (a glob of published segments, `--parquet` on every forensic command) the same
query runs over Parquet instead (exporters/parquet.py): `events` is then a CTE over
`read_parquet(GLOB, hive_partitioning = true)` with the store's columns, and the query runs in
an in-memory DuckDB that may read only below the glob's folder. No agent is asked: any number
of processes read segments while agents publish them.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from collectors.checkpoint_reuse import checkpoint_only_sql
from spyglass.config import Config
from spyglass.forensics.views import PAD, literal, with_views
from spyglass.query import QueryError, agent_api, run_readonly

Result = tuple[list[str], list[tuple[Any, ...]]]

EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
_, _count, _unit = PAD.split()  # "INTERVAL 1 HOUR"
PAD_SECONDS = timedelta(**{f"{_unit.lower()}s": int(_count)})
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

    def text(self, config: Config, json_events: bool = False) -> str:
        return render(with_views(self.sql, config.sources, json_events), self.params)


@dataclass(frozen=True)
class SqlCondition:
    """A parameter that is SQL rather than a value: a rule stated once in Python (such as
    collectors.checkpoint_reuse), written in parentheses wherever a query names it."""
    text: str


def settings_params(config: Config) -> dict[str, Any]:
    """The parameters every report and probe may use beside the window: `$long_prompt_tokens` and
    `$default_every` (signals.long_prompt_tokens, signals.default_prompt_cache_every), and
    `$checkpoint_only` (the rule, over prompt_tokens, reused_tokens and cache_every)."""
    return {"long_prompt_tokens": config.signals.long_prompt_tokens,
            "default_every": config.signals.default_prompt_cache_every,
            "checkpoint_only": SqlCondition(checkpoint_only_sql())}


def sql_value(value: Any) -> str:
    if isinstance(value, SqlCondition):
        return f"({value.text})"
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


def query(config: Config, q: Query, parquet: str | None = None) -> Result:
    """Columns and rows of `q`, read-only: from the store file or through the running agent, or
    over the Parquet segments `parquet` matches."""
    if parquet is None:
        answer = run_readonly(config.store_path(), q.text(config), agent_api(config), config.forensics.limits())
        if answer.truncated:  # a forensic table must be whole or say it is not
            raise QueryError(f"the answer was cut ({answer.truncated}); narrow the window")
        return answer.columns, [tuple(row) for row in answer.rows]
    return run_parquet(parquet, q.text(config, json_events=True), q.params.get("from"), q.params.get("to"))


GLOB_CHARS = re.compile(r"[*?\[{]")
LEADING_COMMENTS = re.compile(r"(?:[ \t]*--[^\n]*\n)*WITH ")


def hours(start: Any, end: Any) -> str:
    """A filter on the partition folders: only the hours the views read for [start, end) (the
    window widened by their PAD), so the other hours' files are never opened."""
    if not (isinstance(start, datetime) and isinstance(end, datetime)) or start <= EARLIEST or end >= LATEST:
        return ""
    first = (start - PAD_SECONDS).astimezone(UTC).replace(minute=0, second=0, microsecond=0, tzinfo=None)
    last = (end + PAD_SECONDS).astimezone(UTC).replace(tzinfo=None)
    return (f"\n  WHERE date BETWEEN DATE '{first:%Y-%m-%d}' AND DATE '{last:%Y-%m-%d}'"
            f" AND date + to_hours(CAST(hour AS INTEGER)) >= TIMESTAMP '{first:%Y-%m-%d %H:%M:%S}'"
            f" AND date + to_hours(CAST(hour AS INTEGER)) < TIMESTAMP '{last:%Y-%m-%d %H:%M:%S.%f}'")


def over_parquet(sql: str, glob: str, start: Any = None, end: Any = None) -> str:
    """`sql` (as `Query.text` made it: comments, then WITH) with `events` read from `glob`:
    with a window, only from the hours the views read of it."""
    found = LEADING_COMMENTS.match(sql)
    if found is None:
        raise QueryError("a query over Parquet must start with the views' WITH")
    events = ("events AS (SELECT ts, source, kind, instance, host, request_id, fields, seq, NULL::VARCHAR AS source_kind\n"
              f"  FROM read_parquet({literal(glob)}, hive_partitioning = true){hours(start, end)})")
    return f"{sql[:found.end()]}{events},\n{sql[found.end():]}"


def run_parquet(glob: str, sql: str, start: Any = None, end: Any = None) -> Result:
    """Run `sql` over the segments `glob` matches, reading nothing outside the glob's folder."""
    import duckdb

    glob = os.path.abspath(os.path.expanduser(glob))
    root = GLOB_CHARS.split(glob, 1)[0].rsplit("/", 1)[0] or "/"
    con = duckdb.connect(config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false",
                                 "allow_community_extensions": "false"})
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.execute(f"SET allowed_directories = [{literal(root + '/')}]")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        return execute(con, over_parquet(sql, glob, start, end))
    finally:
        con.close()


def execute(con: Any, sql: str, timeout: float = 60.0) -> Result:
    """`sql` on `con`, interrupted after `timeout`, rows encoded as the store's query process
    encodes them (spyglass.sqlworker), so an answer reads the same from Parquet as from the store."""
    import threading

    import duckdb
    import orjson

    from spyglass.sqlworker import jsonable

    watchdog = threading.Timer(timeout, con.interrupt)
    watchdog.start()
    try:
        result = con.execute(sql)
        columns = [d[0] for d in result.description or []]
        rows = result.fetchall()
    except duckdb.InterruptException:
        raise QueryError(f"query interrupted after {timeout:.0f} s") from None
    except duckdb.Error as exc:
        raise QueryError(str(exc).splitlines()[0]) from None
    finally:
        watchdog.cancel()
    encoded = orjson.loads(orjson.dumps(rows, default=jsonable, option=orjson.OPT_NON_STR_KEYS))
    return columns, [tuple(row) for row in encoded]
