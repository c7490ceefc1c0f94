"""Every DuckDB connection spyglass opens, through one door: no extension is ever loaded or
installed behind our back (DuckDB would otherwise fetch `sqlite_scanner` from the network to
open a SQLite file given as the store), and a file that is not a store is refused in one line."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # DuckDB loads at the first connection: a metrics-only agent names StoreUnusable, never opens one
    import duckdb

SAFE = {
    "autoinstall_known_extensions": "false",
    "autoload_known_extensions": "false",
    "allow_community_extensions": "false",
}
SQLITE_MAGIC = b"SQLite format 3\0"


class StoreUnusable(Exception):
    """The store file cannot be used, said in one line: not a DuckDB file, a newer schema, a folder
    that cannot be written, a file that cannot be read."""


def connect(
    path: str | Path = ":memory:", *, read_only: bool = False, settings: Mapping[str, Any] | None = None
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with extension autoloading and autoinstall off, and `settings` (as strings)."""
    import duckdb

    config: dict[str, Any] = {**SAFE, **{k: str(v) for k, v in (settings or {}).items()}}
    return duckdb.connect(str(path), read_only=read_only, config=config)


def foreign_format(path: Path) -> str | None:
    """What a file that exists and is not a DuckDB database is, by its first bytes; None if it is one
    (or is empty, or missing: DuckDB makes a new store)."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    if not head:
        return None
    if head == SQLITE_MAGIC:
        return "a SQLite database"
    if len(head) >= 12 and head[8:12] == b"DUCK":
        return None
    return "not a DuckDB database"
