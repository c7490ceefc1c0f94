"""POST /api/command: a forensic command run by the agent for the light client (spyglass/cli/warm.py).

The body names the command's words (its config's path absolute), what it reads on stdin and the client's
terminal; the answer is {"exit", "stdout", "stderr"}: what the command printed, as it would have printed
it there. Every query it makes is /api/sql's (`ask`): a warm read-only process on the store's newest copy,
with /api/sql's bounds and sandbox. The agent runs only the commands of `serving.COMMANDS`, only for its own
config file, and nothing that reads or writes a file the client names (`serving.HERE_ONLY`): those answer
409, and the client runs the command itself.
"""

from __future__ import annotations

import io
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from loguru import logger

from spyglass import serving
from spyglass.query.bounded import Answer

COMMAND = "/api/command"
_local = threading.local()


class _Routed(io.TextIOBase):
    """sys.stdout, sys.stderr or sys.stdin of the agent: a command's own stream in the thread that runs it,
    the process's everywhere else (the agent's log, which loguru writes to the stream it was given)."""

    def __init__(self, name: str, real: Any) -> None:
        self.name, self.real = name, real

    def _stream(self) -> Any:
        return getattr(_local, self.name, None) or self.real

    def write(self, text: str) -> int:
        return int(self._stream().write(text))

    def read(self, size: int | None = -1) -> str:
        return str(self._stream().read(size))

    def readline(self, size: int | None = -1) -> str:  # type: ignore[override]
        return str(self._stream().readline(size))

    def flush(self) -> None:
        self._stream().flush()

    def isatty(self) -> bool:
        mine = getattr(_local, self.name, None)
        return bool(getattr(_local, "tty", False)) if mine is not None else self.real.isatty()

    def fileno(self) -> int:
        return int(self._stream().fileno())

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8" if getattr(_local, self.name, None) is not None else str(self.real.encoding)

    @property
    def errors(self) -> str:  # type: ignore[override]
        return "strict" if getattr(_local, self.name, None) is not None else str(self.real.errors)


_installing = threading.Lock()


def _install() -> None:
    with _installing:
        for name in ("stdout", "stderr", "stdin"):
            if not isinstance(getattr(sys, name), _Routed):
                setattr(sys, name, _Routed(name, getattr(sys, name)))


@contextmanager
def captured(stdin: str, tty: bool) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """This thread's stdout and stderr as strings, and `stdin` as its stdin, for the block."""
    _install()
    out, err = io.StringIO(), io.StringIO()
    _local.stdout, _local.stderr, _local.stdin, _local.tty = out, err, io.StringIO(stdin), tty
    try:
        yield out, err
    finally:
        _local.stdout = _local.stderr = _local.stdin = None
        _local.tty = False


def refusal(argv: list[str], at: int, config_path: Path | None) -> str | None:
    """Why the agent does not run these words (the client then runs them itself), or None."""
    if not argv or argv[0] not in serving.COMMANDS:
        return "not a command the agent runs"
    if any(a.split("=", 1)[0] in serving.HERE_ONLY for a in argv):
        return "the command reads or writes a file on the client's side"
    if not 0 < at < len(argv) or argv[at - 1] not in ("--config", "-c"):
        return "no --config"
    if sum(a in ("--config", "-c") or a.startswith("--config=") for a in argv) != 1:
        return "more than one --config"  # the last would win, and name a file the agent was not given
    if config_path is None or not os.path.isabs(argv[at]) or os.path.realpath(argv[at]) != str(config_path.resolve()):
        return "another config than this agent's"
    return None


def run(
    commands: Callable[[list[str]], None],
    argv: list[str],
    stdin: str,
    terminal: dict[str, Any],
    ask: Callable[[str], Answer],
) -> dict[str, Any]:
    """The command's exit status and output, run here by `commands` with every query through `ask`."""
    from spyglass.forensics.run import session
    from spyglass.terminal.console import CLIENT, Terminal

    size = terminal.get("size")
    client = Terminal(dict(terminal.get("environ") or {}), (int(size[0]), int(size[1])) if size else None)
    status: Any = 0
    with captured(stdin, client.size is not None) as (out, err), session(ask=ask):
        token = CLIENT.set(client)
        try:
            commands(argv)
        except SystemExit as exc:
            status = exc.code
        except Exception as exc:  # noqa: BLE001 - a bug: the client hears of it, the agent goes on
            logger.exception("/api/command {} failed", argv[0])
            err.write(f"error: the agent failed to run {argv[0]} ({type(exc).__name__}: {exc}); see its log\n")
            status = 1
        finally:
            CLIENT.reset(token)
    if isinstance(status, str):  # sys.exit("message")
        err.write(status + "\n")
        status = 1
    return {"exit": int(status or 0), "stdout": out.getvalue(), "stderr": err.getvalue()}


def command(
    config_path: Path | None,
    commands: Callable[[list[str]], None] | None,
    ask: Callable[[str], Answer],
    request: Any,
    body: bytes,
) -> None:
    """200 with the command's output; 400 for a body that is not a command; 409 for one the client runs itself
    (every command, when the agent was given none to run: `commands` is what the CLI hands it, cli.answered.run)."""
    try:
        sent = json.loads(body)
        argv, at, stdin, terminal = sent["argv"], sent["config_at"], sent.get("stdin") or "", sent["terminal"]
        if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv) and isinstance(at, int)):
            raise ValueError("argv must be a list of strings, config_at its config's index")
        if not isinstance(stdin, str) or not isinstance(terminal, dict):
            raise ValueError("stdin must be a string, terminal an object")
        size = terminal.get("size")
        if size is not None and not (
            isinstance(size, list) and len(size) == 2 and all(isinstance(n, int) and 0 < n <= 10_000 for n in size)
        ):
            raise ValueError("terminal.size must be [columns, lines], each 1 to 10000")
        environ = terminal.get("environ") or {}
        if not isinstance(environ, dict) or not all(isinstance(v, str) for v in environ.values()):
            raise ValueError("terminal.environ must map names to strings")
        terminal = {"environ": {k: v for k, v in environ.items() if k in serving.ENVIRON}, "size": size}
    except (ValueError, KeyError, TypeError) as exc:
        request.answer(400, "application/json", json.dumps({"error": str(exc)}).encode())
        return
    why = refusal(argv, at, config_path) if commands is not None else "this agent runs no commands"
    if why is not None or commands is None:
        request.answer(409, "application/json", json.dumps({"local": why}).encode())
        return
    request.answer(200, "application/json", json.dumps(run(commands, argv, stdin, terminal, ask)).encode())
