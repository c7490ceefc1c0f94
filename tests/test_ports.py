"""Loopback ports for the stack's servers come from outside the kernel's ephemeral range, where no
outbound connection can take one between the probe and the server's bind."""

from __future__ import annotations

import socket

import pytest

from spyglass import ports


@pytest.mark.parametrize(
    ("proc_text", "expected"),
    [
        ("32768\t60999\n", range(20000, 32768)),  # Linux's default: the stretch below
        ("15000 60999\n", range(61000, 65536)),  # a range reaching low: the stretch above is larger
        (None, range(20000, 32768)),  # no /proc (not Linux): Linux's default assumed
        ("garbage\n", range(20000, 32768)),
    ],
)
def test_the_unreserved_stretch_avoids_the_ephemeral_range(tmp_path, monkeypatch, proc_text, expected):
    path = tmp_path / "ip_local_port_range"
    if proc_text is not None:
        path.write_text(proc_text)
    monkeypatch.setattr(ports, "EPHEMERAL", path)
    assert ports.unreserved_ports() == expected


def test_a_base_and_the_ports_after_it_are_free_and_outside_the_ephemeral_range():
    low, high = map(int, ports.EPHEMERAL.read_text().split())
    for _ in range(50):
        base = ports.free_port_base(3)
        assert all(not low <= port <= high for port in range(base, base + 3))
        with socket.socket() as a, socket.socket() as b, socket.socket() as c:
            for sock, port in zip((a, b, c), range(base, base + 3), strict=True):
                sock.bind(("127.0.0.1", port))


def test_a_port_in_use_is_passed_over(monkeypatch):
    base = ports.free_port_base(2)
    monkeypatch.setattr(ports, "_handed", set())
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", base))
        taken.listen()
        monkeypatch.setattr(ports, "unreserved_ports", lambda: range(base, base + 2))
        assert ports.free_port() == base + 1


def test_no_port_is_handed_out_twice(monkeypatch):
    base = ports.free_port_base(3)
    monkeypatch.setattr(ports, "unreserved_ports", lambda: range(base, base + 3))
    monkeypatch.setattr(ports, "_handed", set())
    assert sorted(ports.free_port() for _ in range(3)) == [base, base + 1, base + 2]
    with pytest.raises(RuntimeError, match="no 1 free loopback ports"):
        ports.free_port()


def test_an_ephemeral_range_over_everything_still_gives_ports(tmp_path, monkeypatch):
    """Tuned to 1024-65535 (busy hosts do this), no port is outside it: draw from all, as bind(0) would."""
    path = tmp_path / "ip_local_port_range"
    path.write_text("1024 65535\n")
    monkeypatch.setattr(ports, "EPHEMERAL", path)
    assert ports.unreserved_ports() == range(ports.LOWEST, 65536)
    assert ports.LOWEST <= ports.free_port() < 65536
