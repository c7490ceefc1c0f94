"""The `spyglass` command's entry point, and the warm query path of the forensic commands.

`timeline`, `requests`, `trace`, `sql`, `report`, `views` and `diagnose` ask the running agent that serves the store
(POST /api/command, spyglass/agent/command_route.py): it runs the command on its warm read-only query
processes (/api/sql's, with its bounds and sandbox) and sends back what it printed and its exit status.
This module imports only the standard library (no typer, pydantic, DuckDB or pyarrow: check with
`python -X importtime -m spyglass.cli.warm ...`), so a command the agent answers costs Python's start
and the query. With no agent (nothing listens, another agent's config, an older agent), or for what only
this process may do (`--parquet` and `--file` read files here, `--html` writes one, `--help`), the
command runs here as before (spyglass/cli/app.py), with the same output.
"""

from __future__ import annotations

import json
import os
import socket
import sys

from spyglass.serving import COMMANDS, ENVIRON, HERE_ONLY

CONNECT_SECONDS = 1.0
ANSWER_SECONDS = 3600.0  # the longest sql_timeout_seconds a config may set; the agent bounds each query


def main() -> None:  # pragma: no cover - the console entry point
    request = command_request(sys.argv[1:])
    answer = through_agent(request) if request is not None else None
    if answer is None:
        if request is not None and request["stdin"] is not None:
            import io

            sys.stdin = io.StringIO(request["stdin"])  # read once, for the agent: the command here reads it again
        from spyglass.cli.app import main as here

        here()
        return
    status, out, err = answer
    sys.stdout.write(out)
    sys.stderr.write(err)
    sys.stdout.flush()
    raise SystemExit(status)


def through_agent(request: dict) -> tuple[int, str, str] | None:
    """(exit status, stdout, stderr) of the command (`command_request`) as the running agent ran it; None to
    run it here."""
    config = request["argv"][request["config_at"]]
    try:
        address = agent_address(config)
    except (OSError, ValueError, IndexError):
        return None  # this process reports the config's problem, as it always did
    if address is None:
        return None
    body = json.dumps(request).encode()
    reply = post(address, "/api/command", body)
    if reply is None or reply[0] != 200:
        return None
    try:
        sent = json.loads(reply[1])
        return int(sent["exit"]), str(sent["stdout"]), str(sent["stderr"])
    except (ValueError, KeyError, TypeError):
        return None


def command_request(argv: list[str]) -> dict | None:
    """The body of the command's request: its words (the config's path made absolute), what it reads on
    stdin (`-`), and the terminal it prints on; None for a command the agent does not run."""
    if not argv or argv[0] not in COMMANDS or any(a.split("=", 1)[0] in HERE_ONLY for a in argv):
        return None
    words = list(argv)
    at = config_at(words)
    if at is None:
        return None
    words[at] = os.path.abspath(os.path.expanduser(words[at]))
    stdin = sys.stdin.read() if "-" in words[1:] else None
    return {"argv": words, "config_at": at, "stdin": stdin, "terminal": terminal()}


def config_at(words: list[str]) -> int | None:
    """The index of the config's path in `words` (`--config PATH`, `-c PATH`), rewritten from `--config=PATH`."""
    for i, word in enumerate(words):
        if word in ("--config", "-c") and i + 1 < len(words):
            return i + 1
        if word.startswith("--config="):
            words[i : i + 1] = ["--config", word.split("=", 1)[1]]
            return i + 1
    return None


def terminal() -> dict:
    """What rich reads off this process's stdout and environment."""
    environ = {name: os.environ[name] for name in ENVIRON if name in os.environ}
    size = None
    if sys.stdout.isatty():
        try:
            size = list(os.get_terminal_size(sys.stdout.fileno()))
        except OSError:
            size = [80, 25]
    return {"environ": environ, "size": size}


def agent_address(config: str) -> tuple[str, int, str | None] | None:
    """(host, port, bearer token) of the agent the config's `[exporters.prometheus]` serves, or None when off."""
    import tomllib

    from spyglass import serving

    with open(config, "rb") as file:
        server = tomllib.load(file).get("exporters", {}).get("prometheus", {})
    if not server.get("enabled", True):
        return None
    host, port = serving.client_address(str(server.get("listen", serving.LISTEN)))
    token = server.get("token")
    if server.get("token_file"):
        with open(os.path.expanduser(server["token_file"]), encoding="utf-8") as file:
            token = file.read().strip().splitlines()[0]
    return host.strip("[]"), int(port), token


def post(address: tuple[str, int, str | None], path: str, body: bytes) -> tuple[int, bytes] | None:
    """(status, body) of one POST over a fresh connection; None when nothing answers."""
    host, port, token = address
    head = [
        f"POST {path} HTTP/1.1",
        f"Host: {'[' + host + ']' if ':' in host else host}:{port}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    if token:
        head.append(f"Authorization: Bearer {token}")
    try:
        with socket.create_connection((host, port), timeout=CONNECT_SECONDS) as sock:
            sock.settimeout(ANSWER_SECONDS)
            sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
            reply = b"".join(iter(lambda: sock.recv(1 << 16), b""))
    except OSError:
        return None
    header, _, content = reply.partition(b"\r\n\r\n")
    try:
        return int(header.split(b" ", 2)[1]), content
    except (IndexError, ValueError):
        return None


if __name__ == "__main__":  # pragma: no cover
    main()
