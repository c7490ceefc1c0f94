"""The query processes /api/sql keeps warm: each a `spyglass.query.sqlworker` session that stays up between
queries, under the same bounds as a process started per query (its memory for its life, each query's CPU
and wall time, killed at the deadline), so a query pays neither Python's start nor DuckDB's import nor
opening the copy again (about 350 ms of a 15-minute `timeline` before, docs/benchmarks.md).

A process moves to the store's newest copy at its next query (sqlworker reopens the file in place); one
that died (killed at its deadline, over its memory) is dropped and the next query starts another.
"""

from __future__ import annotations

import threading
from pathlib import Path

from spyglass.query.bounded import Answer, Limits, QueryError, Session


class WarmQueries:
    """At most as many processes as queries ran at once (the caller bounds that: sql_workers)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._idle: list[Session] = []
        self._lock = threading.Lock()
        self._closed = False

    def ask(self, path: Path, query: str, deadline: float) -> Answer:
        """`query` on the copy at `path`, read-only, answered by `deadline` (time.monotonic())."""
        session = self._take(path)
        try:
            return session.ask(query, path, deadline)
        finally:
            self._give(session)  # a refused query leaves its process usable; a killed one is closed

    def _take(self, path: Path) -> Session:
        with self._lock:
            if self._closed:
                raise QueryError("the agent is stopping")
            while self._idle:
                session = self._idle.pop()
                if session.alive:
                    return session
                session.close()
        return Session(path, self.limits, warm=True)

    def _give(self, session: Session) -> None:
        with self._lock:
            if session.alive and not self._closed:
                self._idle.append(session)
                return
        session.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for session in idle:
            session.close()
