"""Where a running agent serves its HTTP API, in the standard library only: the config's default
(`exporters.prometheus.listen`) and how a local client reaches a listen address. Read by the config's
model and by the light client of the forensic commands (spyglass/cli/warm.py), which must not import
pydantic to find the agent."""

from __future__ import annotations

LISTEN = "127.0.0.1:9464"
ALL_INTERFACES = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]", "localhost": "127.0.0.1"}


def client_address(listen: str) -> tuple[str, str]:
    """(host, port) a local client connects to: an all-interfaces address means this host's loopback."""
    host, _, port = listen.rpartition(":")
    return ALL_INTERFACES.get(host, host), port
