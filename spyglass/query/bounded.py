"""Read-only SQL over the store, bounded, from the CLI or through the running agent.

`run_bounded(path, query, limits)` is the one way a query runs: in a process of its own
(`spyglass.query.sqlworker`) that opens a DuckDB file read-only with file access off and the
configuration locked, under a memory and CPU limit, killed at its deadline; the answer is cut at
`max_rows` rows and `max_bytes` bytes and says so. Nothing it runs has a write path to the store.

DuckDB lets no other process open the store while the agent writes it (duckdb-forensics.md §1),
so `spyglass sql` opens the file itself when no agent holds it and otherwise asks the agent's
/api/sql, which runs the same function on a read-only copy of the store (spyglass.agent.snapshot).
"""

from __future__ import annotations

import contextlib
import csv
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from spyglass.query.sqlworker import jsonable


class QueryError(Exception):
    """A query that was refused or failed, phrased for the analyst."""


class NotFound(QueryError):
    """No such alert in the catalogue, no notification of it, or no such request: a 404, with why."""


@dataclass(frozen=True)
class Limits:
    """What one query may cost: wall time (start to encoded answer), memory, rows and bytes."""

    timeout_seconds: float = 30.0
    memory_mb: int = 512
    max_rows: int = 100_000
    max_bytes: int = 16 << 20
    settings: str = "[exporters.prometheus] sql_memory_mb, sql_timeout_seconds"  # where to raise them


@dataclass
class Answer:
    columns: list[str]
    rows: list[list[Any]]
    truncated: str | None = None  # why the rows were cut, if they were
    as_of: float | None = None  # epoch seconds of the copy the query read; None: the store itself

    def to_json(self) -> dict[str, Any]:
        return {"columns": self.columns, "rows": self.rows, "truncated": self.truncated, "as_of": self.as_of}


@dataclass(frozen=True)
class AgentApi:
    url: str  # .../api/sql
    token: str | None = None


def run_bounded(path: Path, query: str, limits: Limits, deadline: float | None = None) -> Answer:
    """Run one query read-only against the DuckDB file at `path`, within `limits`.

    `deadline` (time.monotonic()) lets a caller that already waited (for a copy, for a turn)
    count that wait in the query's time."""
    deadline = deadline or time.monotonic() + limits.timeout_seconds
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise QueryError(f"query not started within {limits.timeout_seconds:g} s (the agent is busy)")
    request = {
        "path": str(path),
        "query": query,
        "memory_mb": limits.memory_mb,
        "timeout": remaining,
        "max_rows": limits.max_rows,
        "max_bytes": limits.max_bytes,
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "spyglass.query.sqlworker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        out, _ = worker.communicate(json.dumps(request).encode(), timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.communicate()
        raise QueryError(f"query interrupted after {limits.timeout_seconds:g} s") from None
    if worker.returncode != 0 or not out:
        raise QueryError(
            f"query stopped by its limits ({limits.memory_mb} MB, "
            f"{limits.timeout_seconds:g} s; exit {worker.returncode}; {limits.settings})"
        )
    return _answer(json.loads(out), limits)


SESSION_QUERIES = 16  # a session's CPU limit: this many queries' worth of timeout_seconds


def _answer(body: dict[str, Any], limits: Limits) -> Answer:
    if "error" in body:
        hint = f" ({limits.memory_mb} MB; {limits.settings})" if "memory" in body["error"] else ""
        raise QueryError(body["error"] + hint)
    return Answer(body["columns"], body["rows"], body.get("truncated"))


class Session:
    """One query process (spyglass.query.sqlworker) and one read-only connection for every query of a command:
    `ask` sends a query and waits for its answer, each within `limits` (memory for the process, the
    timeout per query, and SESSION_QUERIES timeouts of CPU in all). Raises QueryError as run_bounded does;
    a query killed at its deadline ends the session. Opening it raises QueryError("... lock ...") when
    an agent holds the file."""

    def __init__(self, path: Path, limits: Limits, warm: bool = False) -> None:
        self.limits = limits
        self.path = path
        request = {
            "path": str(path),
            "session": True,
            "warm": warm,  # the agent's: kept between queries, its CPU bounded per query, moved between copies
            "memory_mb": limits.memory_mb,
            "timeout": limits.timeout_seconds,
            "cpu_seconds": limits.timeout_seconds * SESSION_QUERIES,
        }
        self.worker = subprocess.Popen(
            [sys.executable, "-m", "spyglass.query.sqlworker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            opened = self._exchange(request)
        except BaseException:  # the process is ours to end whatever failed, or it outlives us unclosed
            self.close()
            raise
        if "error" in opened:
            self.close()
            raise QueryError(opened["error"])

    def _exchange(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        import threading

        assert self.worker.stdin is not None and self.worker.stdout is not None
        timeout = self.limits.timeout_seconds if timeout is None else timeout
        timer = threading.Timer(timeout, self.worker.kill)  # the deadline of this exchange
        timer.start()
        try:
            self.worker.stdin.write(json.dumps(request).encode() + b"\n")
            self.worker.stdin.flush()
            line = self.worker.stdout.readline()
        except (BrokenPipeError, OSError):
            line = b""
        finally:
            timer.cancel()
        if not line:
            self.worker.wait()
            if self.worker.returncode == -9:
                raise QueryError(f"query interrupted after {self.limits.timeout_seconds:g} s")
            raise QueryError(
                f"query stopped by its limits ({self.limits.memory_mb} MB, "
                f"{self.limits.timeout_seconds:g} s; exit {self.worker.returncode}; {self.limits.settings})"
            )
        return dict(json.loads(line))

    def ask(self, query: str, path: Path | None = None, deadline: float | None = None) -> Answer:
        """The answer to `query`, on the file at `path` (reopened there when it is not the session's; a warm
        session's copies), killed at `deadline` (time.monotonic(); default: the limits' timeout from now)."""
        limits = self.limits
        timeout = limits.timeout_seconds if deadline is None else deadline - time.monotonic()
        if timeout <= 0:
            raise QueryError(f"query not started within {limits.timeout_seconds:g} s (the agent is busy)")
        request = {"query": query, "max_rows": limits.max_rows, "max_bytes": limits.max_bytes, "timeout": timeout}
        if path is not None and path != self.path:
            request["path"], self.path = str(path), path
        return _answer(self._exchange(request, timeout), limits)

    @property
    def alive(self) -> bool:
        return self.worker.poll() is None

    def close(self) -> None:
        if self.worker.stdin is not None:
            with contextlib.suppress(OSError):
                self.worker.stdin.close()
        try:
            self.worker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.worker.kill()
            self.worker.wait()
        if self.worker.stdout is not None:
            self.worker.stdout.close()


def run_readonly(path: Path, query: str, api: AgentApi | None = None, limits: Limits = Limits()) -> Answer:
    """Query the store file read-only, or through the agent that holds it."""
    if not path.exists():
        raise QueryError(f"no store at {path}: run `spyglass ingest` or `spyglass run` first")
    try:
        return run_bounded(path, query, limits)
    except QueryError as exc:
        if "could not set lock" not in str(exc).lower() or api is None:
            raise
    return _via_agent(api, query, limits)


def _via_agent(api: AgentApi, query: str, limits: Limits) -> Answer:
    headers = {"Authorization": f"Bearer {api.token}"} if api.token else {}
    try:
        response = httpx.post(api.url, json={"query": query}, headers=headers, timeout=limits.timeout_seconds + 30.0)
    except httpx.HTTPError as exc:
        raise QueryError(f"the store is locked by a running agent, and {api.url} did not answer: {exc}") from None
    try:
        body = response.json()
    except ValueError:
        raise QueryError(f"{api.url} answered {response.status_code}: {response.text[:200]}") from None
    if response.status_code != 200:
        raise QueryError(body.get("error", response.text))
    return Answer(body["columns"], body["rows"], body.get("truncated"), body.get("as_of"))


def agent_api(config) -> AgentApi | None:
    """The running agent's /api/sql, with its token, if the config serves one."""
    server = config.exporters.prometheus
    return AgentApi(f"{server.client_url()}/api/sql", server.bearer_token()) if server.enabled else None


def nested(value: Any) -> Any:
    """A JSON column's value as JSON, not as a string of JSON: DuckDB hands JSON back as text.
    Rows arrive JSON-decoded already (the query process encodes them), so numbers stay numbers."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def show(columns: list[str], rows: list[list[Any]] | list[tuple[Any, ...]], fmt: str) -> None:
    """Print a result as a rich table, CSV (LF line ends) or JSON lines (JSON columns nested). Values
    are data: no markup is read, control characters are escaped, no CSV cell starts a formula."""
    from spyglass.terminal.console import csv_cell, json_line, plain

    if fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow([csv_cell(c) for c in columns])
        writer.writerows([csv_cell(v) for v in row] for row in rows)
    elif fmt == "json":
        for row in rows:
            print(json_line({c: nested(v) for c, v in zip(columns, row)}, default=jsonable))
    else:
        from spyglass.terminal.layout import show as show_table

        show_table(list(columns), rows, [[plain("" if v is None else v) for v in row] for row in rows])
