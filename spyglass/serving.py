"""Where a running agent serves its HTTP API and which commands it answers there, in the standard library
only: the config's default (`exporters.prometheus.listen`), how a local client reaches a listen address,
and POST /api/command's terms (spyglass/agent/command_route.py). Read by the config's model, the agent
and the light client of the forensic commands (spyglass/cli/warm.py), which must not import pydantic or
typer to find the agent."""

from __future__ import annotations

LISTEN = "127.0.0.1:9464"
ALL_INTERFACES = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]", "localhost": "127.0.0.1"}


def client_address(listen: str) -> tuple[str, str]:
    """(host, port) a local client connects to: an all-interfaces address means this host's loopback."""
    host, _, port = listen.rpartition(":")
    return ALL_INTERFACES.get(host, host), port


# The commands the agent runs for a client (spyglass/cli/answered.py registers them; a test holds the two
# equal), what makes the client run one itself (a file on its side, typer's help), and what of its
# environment says how it prints (rich reads these).
COMMANDS = frozenset({"timeline", "requests", "trace", "sql", "report", "views", "diagnose"})
HERE_ONLY = ("--parquet", "--html", "--file", "--help")
ENVIRON = ("TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "TTY_COMPATIBLE", "TTY_INTERACTIVE")
