"""The one place a forensic query leaves for the store.

A command builds SQL that names views, plus parameters (`$from`, `$to`, ...); `query` puts the
views in front (views.with_views) and runs it read-only: on the file when no agent holds it,
else through the agent's read-only query path. That path takes one statement and no
parameters today, so parameters are rendered as SQL literals here (`render`), and nowhere else.

With `parquet` (a glob of published segments, `--parquet` on every forensic command) the same
query runs over Parquet instead (exporters/parquet.py): `events` and each `events_<source kind>` are
then CTEs over `read_parquet(GLOB, hive_partitioning = true)` with the store's views' columns and types
(exporters/segment_schema.py), and the query runs in
an in-memory DuckDB that may read only below the glob's folder. No agent is asked: any number
of processes read segments while agents publish them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from spyglass.collectors.checkpoint_reuse import checkpoint_only_sql
from spyglass.config import Config
from spyglass.exporters import request_rows
from spyglass.exporters.event_schema import source_kinds, source_view
from spyglass.exporters.segment_schema import events_view_sql, every_column_sql, source_view_sql
from spyglass.forensics.views import PAD, literal, with_views
from spyglass.query.bounded import Answer, QueryError, Session, agent_api, run_readonly

Result = tuple[list[str], list[tuple[Any, ...]]]
Asker = Callable[[str], Answer]  # one read-only query, as the agent answers its own pages (no process of its own)

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

    def text(
        self, config: Config, json_events: bool = False, from_events: bool = False, shared_rows: bool = False
    ) -> str:
        params = {"display_tz": config.agent.display_tz, **self.params}  # the views' `_local` clocks
        return render(with_views(self.sql, config.sources, json_events, from_events, shared_rows), params)


@dataclass(frozen=True)
class SqlCondition:
    """A parameter that is SQL rather than a value: a rule stated once in Python (such as
    collectors.checkpoint_reuse), written in parentheses wherever a query names it."""

    text: str


def settings_params(config: Config) -> dict[str, Any]:
    """The parameters every report and probe may use beside the window: `$long_prompt_tokens` and
    `$default_every` (signals.long_prompt_tokens, signals.default_prompt_cache_every), and
    `$checkpoint_only` (the rule, over prompt_tokens, reused_tokens and cache_every)."""
    return {
        "long_prompt_tokens": config.signals.long_prompt_tokens,
        "default_every": config.signals.default_prompt_cache_every,
        "checkpoint_only": SqlCondition(checkpoint_only_sql()),
    }


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


class _Open:
    """The connection of a `session`, opened at its first query: a query process on the store file,
    the agent's API when an agent holds the file, or one in-memory DuckDB over Parquet segments.
    A session opened with no config takes the config and segments of its first query."""

    def __init__(self, config: Config | None, parquet: str | None, ask: Asker | None = None) -> None:
        self.config, self.parquet, self.ask = config, parquet, ask
        self.worker: Session | None = None
        self.via_agent = False
        self.parquet_con: Any = None
        self.rows_window: tuple[Any, Any] | None = None  # the window whose rows parquet_con holds (share_rows)

    def store(self, text: str) -> Any:
        config = self.config
        assert config is not None  # adopted at the first query
        if self.ask is not None:
            return self.ask(text)
        if self.worker is None and not self.via_agent:
            if not config.store_path().exists():
                raise QueryError(f"no store at {config.store_path()}: run `spyglass ingest` or `spyglass run` first")
            try:
                self.worker = Session(config.store_path(), config.forensics.limits())
            except QueryError as exc:
                if "could not set lock" not in str(exc).lower() or agent_api(config) is None:
                    raise
                self.via_agent = True
        if self.worker is not None:
            return self.worker.ask(text)
        return run_readonly(config.store_path(), text, agent_api(config), config.forensics.limits())

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
        if self.parquet_con is not None:
            self.parquet_con.close()


_SESSION: ContextVar[_Open | None] = ContextVar("forensic_session", default=None)


@contextlib.contextmanager
def session(config: Config | None = None, parquet: str | None = None, ask: Asker | None = None) -> Iterator[None]:
    """Every `query` in the block (for this config and `parquet`; with no config, those of the first
    query) on one connection: one query process on the store file, opened read-only once, instead of
    one per query; with `ask` (the agent serving a page), each through it. Nested sessions share the outer."""
    current = _SESSION.get()
    if current is not None and current.config is None and config is not None:
        current.config, current.parquet = config, parquet  # the command's session, not yet used: this store
    if current is not None and (config is None or current.config is config and current.parquet == parquet):
        yield
        return
    opened = _Open(config, parquet, ask)
    token = _SESSION.set(opened)
    try:
        yield
    finally:
        _SESSION.reset(token)
        opened.close()


def ask_store(config: Config, text: str) -> Answer:
    """One read-only query of raw SQL (no views): on the current session's connection, else as run_readonly."""
    current = _SESSION.get()
    if current is not None and current.config is None and current.parquet is None:
        current.config = config  # a command's session adopts its first query's store
    if current is not None and current.config is config and current.parquet is None:
        return current.store(text)
    return run_readonly(config.store_path(), text, agent_api(config), config.forensics.limits())


def one_connection(command: Callable[..., None]) -> Callable[..., None]:
    """A CLI command whose queries all run in one `session`: one query process, one connection."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> None:
        with session():
            command(*args, **kwargs)

    return run


def query(config: Config, q: Query, parquet: str | None = None) -> Result:
    """Columns and rows of `q`, read-only: from the store file or through the running agent, or
    over the Parquet segments `parquet` matches. Inside a `session`, on its connection."""
    current = _SESSION.get()
    if current is not None and current.config is None:
        current.config, current.parquet = config, parquet  # a command's session adopts its first query's store
    opened = current if current is not None and current.config is config and current.parquet == parquet else None
    if parquet is None:
        answer = _ask_store(config, q, opened)
        if answer.truncated:  # a forensic table must be whole or say it is not
            raise QueryError(f"the answer was cut ({answer.truncated}); narrow the window")
        return answer.columns, [tuple(row) for row in answer.rows]
    start, end = q.params.get("from"), q.params.get("to")
    shared = opened is not None and opened.rows_window == (start, end)
    # the segments have the store's typed columns (over_parquet gives its views), but no per-request rows
    text = q.text(config, from_events=True, shared_rows=shared)
    if opened is None:
        return run_parquet(parquet, text, start, end)
    if opened.parquet_con is None:
        opened.parquet_con = parquet_connection(parquet)
    return execute(opened.parquet_con, over_parquet(text, absolute(parquet), start, end))


def share_rows(config: Config, w: Window, parquet: str) -> None:
    """In a session over Parquet (which holds no per-request rows): compute the window's rows once, a temp
    table per row table of the session's in-memory connection, and let every later query of the same window
    read them there instead of computing them again from the same events (diagnose: about 0.9 s a probe on
    a busy day). The same SQL over the same events: the same rows."""
    current = _SESSION.get()
    if current is None or current.config is not config or current.parquet != parquet:
        return
    if current.parquet_con is None:
        current.parquet_con = parquet_connection(parquet)
    params = w.params()
    for table in request_rows.row_tables():
        text = Query(f"SELECT * FROM rows_{table}", params).text(config, from_events=True)
        sql = over_parquet(text, absolute(parquet), params["from"], params["to"])
        execute(current.parquet_con, f"CREATE OR REPLACE TEMP TABLE {table} AS {sql}")
    current.rows_window = (params["from"], params["to"])


NO_ROWS = re.compile(rf"Table with name requests_\w+ does not exist|{re.escape(request_rows.BEHIND)}")


def _ask_store(config: Config, q: Query, opened: _Open | None) -> Any:
    """`q` on the store; on a store from before the per-request rows (schema 2, not yet migrated by an
    agent: opened read-only, nothing may migrate it), or whose rows wait for a fold (its agent was killed
    between two), with the rows computed from the window's events."""

    def ask(text: str) -> Any:
        if opened:
            return opened.store(text)
        return run_readonly(config.store_path(), text, agent_api(config), config.forensics.limits())

    try:
        try:
            return ask(q.text(config))
        except QueryError as exc:
            if not NO_ROWS.search(str(exc)):
                raise
        return ask(q.text(config, from_events=True))
    except QueryError as exc:
        old = _old_schema(ask) if OLD_SCHEMA_ERRORS.search(str(exc)) else None
        if old is None:
            raise
        raise QueryError(
            f"the store {config.store_path()} is of schema {old} (one JSON `events` table); the views read"
            " schema 2 and on: `spyglass store migrate` converts it (it needs write access: the agent"
            " does it at start; a read-only store can be copied somewhere writable first)"
        ) from None


OLD_SCHEMA_ERRORS = re.compile(r"Binder Error|Catalog Error|does not exist|does not have a column")


def _old_schema(ask: Callable[[str], Any]) -> int | None:
    """1 when the store is of the first schema (a base table `events` and no `store_schema`), else None."""
    try:
        answer = ask(
            "SELECT count(*) FILTER (WHERE table_name = 'store_schema'),"
            " count(*) FILTER (WHERE table_name = 'events' AND table_type = 'BASE TABLE')"
            " FROM information_schema.tables"
        )
    except QueryError:
        return None
    rows = getattr(answer, "rows", None) or []
    return 1 if rows and rows[0][0] == 0 and rows[0][1] == 1 else None


GLOB_CHARS = re.compile(r"[*?\[{]")
LEADING_COMMENTS = re.compile(r"(?:[ \t]*--[^\n]*\n)*WITH ")


def hours(start: Any, end: Any) -> str:
    """A filter on the partition folders: only the hours the views read for [start, end) (the
    window widened by their PAD), so the other hours' files are never opened."""
    if not (isinstance(start, datetime) and isinstance(end, datetime)) or start <= EARLIEST or end >= LATEST:
        return ""
    first = (start - PAD_SECONDS).astimezone(UTC).replace(minute=0, second=0, microsecond=0, tzinfo=None)
    last = (end + PAD_SECONDS).astimezone(UTC).replace(tzinfo=None)
    return (
        f"\n  WHERE date BETWEEN DATE '{first:%Y-%m-%d}' AND DATE '{last:%Y-%m-%d}'"
        f" AND date + to_hours(CAST(hour AS INTEGER)) >= TIMESTAMP '{first:%Y-%m-%d %H:%M:%S}'"
        f" AND date + to_hours(CAST(hour AS INTEGER)) < TIMESTAMP '{last:%Y-%m-%d %H:%M:%S.%f}'"
    )


def over_parquet(sql: str, glob: str, start: Any = None, end: Any = None) -> str:
    """`sql` (as `Query.text` made it: comments, then WITH) with `events` read from `glob`:
    with a window, only from the hours the views read of it."""
    found = LEADING_COMMENTS.match(sql)
    if found is None:
        raise QueryError("a query over Parquet must start with the views' WITH")
    read = f"SELECT * FROM read_parquet({literal(glob)}, hive_partitioning = true){hours(start, end)}"
    segments = f"({every_column_sql()} UNION ALL BY NAME {read})"  # older segments lack newer fields' columns
    # each view scans the files itself: a CTE named by many would be materialized whole
    ctes = [f"{source_view(sk)} AS ({source_view_sql(sk, segments)})" for sk in source_kinds()]
    ctes.append(f"events AS ({events_view_sql(segments)})")
    joined = ",\n".join(ctes)
    return f"{sql[: found.end()]}{joined},\n{sql[found.end() :]}"


def absolute(glob: str) -> str:
    return os.path.abspath(os.path.expanduser(glob))


def parquet_connection(glob: str) -> Any:
    """An in-memory DuckDB that may read only below the glob's folder."""
    import duckdb

    root = GLOB_CHARS.split(absolute(glob), 1)[0].rsplit("/", 1)[0] or "/"
    con = duckdb.connect(
        config={
            "autoinstall_known_extensions": "false",
            "autoload_known_extensions": "false",
            "allow_community_extensions": "false",
        }
    )
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"SET allowed_directories = [{literal(root + '/')}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def run_parquet(glob: str, sql: str, start: Any = None, end: Any = None) -> Result:
    """Run `sql` over the segments `glob` matches, reading nothing outside the glob's folder."""
    con = parquet_connection(glob)
    try:
        return execute(con, over_parquet(sql, absolute(glob), start, end))
    finally:
        con.close()


def execute(con: Any, sql: str, timeout: float = 60.0) -> Result:
    """`sql` on `con`, interrupted after `timeout`, rows encoded as the store's query process
    encodes them (spyglass.query.sqlworker), so an answer reads the same from Parquet as from the store."""
    import threading

    import duckdb
    import orjson

    from spyglass.query.sqlworker import jsonable

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
