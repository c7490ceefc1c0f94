"""Read-only queries in a process of their own: `python -m spyglass.query.sqlworker` reads a request
(JSON on stdin) and writes the answer (JSON on stdout), then exits; or, as a session, answers one
query a line on one connection until its stdin ends (a command's queries: `spyglass diagnose`'s probes).

A process is the only bound DuckDB cannot step over: its `memory_limit` does not cover string
heaps or result conversion (`SELECT repeat('x', 100000000) FROM range(100)` allocates 10 GB under
a 256 MB limit), so the kernel bounds its data segment (RLIMIT_DATA) and the CPU time, and the
caller kills the process at its deadline. The database is opened read-only with file access off
and the configuration locked: no statement, EXPLAIN ANALYZE or CTE included, can write anything.
"""

from __future__ import annotations

import datetime as dt
import json
import resource
import sys
import threading
from decimal import Decimal
from typing import Any

SETTINGS = {
    "autoinstall_known_extensions": "false",
    "autoload_known_extensions": "false",
    "allow_community_extensions": "false",
    "threads": "1",
}
CHUNK_ROWS = 1000


def jsonable(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return str(value)


def limit_process(memory_mb: int, cpu_seconds: float | None) -> None:
    """The process's memory, and its CPU time in all (None: set per query, `limit_query`)."""
    memory = memory_mb << 20
    resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
    if cpu_seconds is not None:
        cpu = int(cpu_seconds) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))


def limit_query(timeout: float) -> None:
    """A warm process's CPU bound for its next query: what it used so far plus the query's timeout (the
    soft limit only, raised again for the query after it; the caller also kills it at the deadline)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    cpu = int(used.ru_utime + used.ru_stime + timeout) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, resource.RLIM_INFINITY))


def open_readonly(path: str, memory_mb: int):
    import duckdb

    con = duckdb.connect(path, read_only=True, config={**SETTINGS, "memory_limit": f"{memory_mb // 2}MB"})
    for statement in (
        "SET temp_directory = ''",
        "SET TimeZone = 'UTC'",
        "SET enable_external_access = false",
        "SET lock_configuration = true",
    ):
        con.execute(statement)
    return con


def answer(con, query: str, max_rows: int, max_bytes: int, timeout: float) -> dict[str, Any]:
    """Run `query`, keeping at most `max_rows` rows and about `max_bytes` bytes of JSON."""
    import duckdb
    import orjson

    watchdog = threading.Timer(timeout, con.interrupt)
    watchdog.start()
    try:
        result = con.execute(query)
        columns = [d[0] for d in result.description or []]
        rows: list[bytes] = []
        size, truncated = 0, None
        while columns and truncated is None:
            chunk = result.fetchmany(CHUNK_ROWS)
            if not chunk:
                break
            for row in chunk:
                encoded = orjson.dumps(row, default=jsonable, option=orjson.OPT_NON_STR_KEYS)
                if len(rows) >= max_rows:
                    truncated = f"more than {max_rows} rows: the first {max_rows} are shown"
                elif size + len(encoded) > max_bytes:
                    truncated = f"more than {max_bytes} bytes: the first {len(rows)} rows are shown"
                if truncated:
                    break
                rows.append(encoded)
                size += len(encoded) + 1
        return {"columns": columns, "rows": b"[" + b",".join(rows) + b"]", "truncated": truncated}
    except duckdb.InterruptException:
        return {"error": f"query interrupted after {timeout:g} s"}
    except duckdb.OutOfMemoryException:
        return {"error": "query needs more memory than its limit"}
    except MemoryError:
        return {"error": "answer needs more memory than the query's limit"}
    except duckdb.Error as exc:
        return {"error": str(exc).splitlines()[0]}
    finally:
        watchdog.cancel()


def encoded(out: dict[str, Any]) -> bytes:
    """An answer as one line of JSON (its rows are JSON already, encoded by orjson)."""
    rows: bytes = out.pop("rows", b"[]")
    head = json.dumps(out).encode()
    return (head[:-1] + b', "rows": ' + rows + b"}" if "columns" in out else head) + b"\n"


def main() -> None:
    """One request (a JSON line): answer its query and exit; or, with "session": true, open the file
    once, say whether it opened ({"ready": true} or {"error": ...}), then answer one query a line
    ({"query", "max_rows", "max_bytes", "timeout"}) until stdin ends: every query of a command on
    one connection, in one process, under one memory and CPU limit. A "warm" session (the agent's, kept
    between queries) bounds each query's CPU instead, and a query may name a new "path" (the store's
    newest copy): the file is opened there, in the same process, without importing DuckDB again."""
    request = json.loads(sys.stdin.readline())
    warm = bool(request.get("warm"))
    limit_process(request["memory_mb"], None if warm else request.get("cpu_seconds", request["timeout"]))
    out = sys.stdout.buffer
    try:
        con = open_readonly(request["path"], request["memory_mb"])
    except Exception as exc:  # noqa: BLE001 - every reason goes back to the caller
        out.write(encoded({"error": str(exc).splitlines()[0]}))
        out.flush()
        return
    if not request.get("session"):
        out.write(encoded(answer(con, request["query"], request["max_rows"], request["max_bytes"], request["timeout"])))
        out.flush()
        return
    out.write(encoded({"ready": True}))
    out.flush()
    path = request["path"]
    for line in sys.stdin:
        ask = json.loads(line)
        if warm:
            limit_query(ask["timeout"])
        if ask.get("path", path) != path:
            con.close()
            try:
                con = open_readonly(ask["path"], request["memory_mb"])
            except Exception as exc:  # noqa: BLE001 - as at the start: the reason goes back, the process ends
                out.write(encoded({"error": str(exc).splitlines()[0]}))
                out.flush()
                return
            path = ask["path"]
        out.write(encoded(answer(con, ask["query"], ask["max_rows"], ask["max_bytes"], ask["timeout"])))
        out.flush()


if __name__ == "__main__":
    main()
