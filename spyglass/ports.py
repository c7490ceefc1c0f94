"""Free loopback ports that no outbound connection can take before their server binds them.

A port the kernel hands out for `bind(0)` lies in its ephemeral range, the range every `connect()`
draws its local port from. On a busy machine another connection can take that port between the
probe and the server's own bind, and the server never comes up (a gateway did, once, in CI). These
ports come from outside that range instead, from a random start, so that parallel runs do not race
for the same ones.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
LINUX_DEFAULT = (32768, 60999)
LOWEST = 20000  # below: the well-known homes of real services (8080, 9090, 3000, ...)


ENOUGH = 1000  # a stretch smaller than this (an ephemeral range tuned to 1024-65535): all ports, racy
_handed: set[int] = set()  # probed ports are not held: never hand one out twice in a process


def unreserved_ports() -> range:
    """The larger stretch of ports above LOWEST that the kernel never picks for a connection; all
    of them from LOWEST on if that stretch is too small to draw from (the old race, not a crash)."""
    try:
        low, high = map(int, EPHEMERAL.read_text().split())
    except (OSError, ValueError):
        low, high = LINUX_DEFAULT
    stretch = max(range(LOWEST, low), range(high + 1, 65536), key=len)
    return stretch if len(stretch) >= ENOUGH else range(LOWEST, 65536)


def free_port_base(count: int = 3) -> int:
    """A port with `count` free loopback ports from it on (the first is the base itself), none of
    them handed out before by this process."""
    ports = unreserved_ports()
    bases = range(ports.start, ports.stop - count + 1, count)
    start = random.randrange(len(bases))
    for base in [*bases[start:], *bases[:start]]:
        wanted = range(base, base + count)
        if _handed.isdisjoint(wanted) and all(_free(port) for port in wanted):
            _handed.update(wanted)
            return base
    raise RuntimeError(f"no {count} free loopback ports in {ports.start}-{ports.stop - 1}")


def free_port() -> int:
    """One free loopback port outside the ephemeral range."""
    return free_port_base(1)


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
