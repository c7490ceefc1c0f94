"""The pinned build's real log (tests/fixtures/llama_server/llama-server.log), captured as services are: it
yields the same events by kind through journald (every `journalctl -o` form), docker (json-file, `logs
-t`, compose), syslog (RFC 3164 and 5424, sent by util-linux's real `logger` to a socket of the test's)
and llama-server's router mode as from the plain file, and each capture's own clock places it."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from spyglass import collectors
from spyglass.collectors.engine_log import EngineLogOptions
from spyglass.collectors.llama_log import LlamaLogSource

FIXTURE = Path(__file__).parent / "fixtures" / "llama_server" / "llama-server.log"
START = 1_796_000_000.0  # when the first process started; the second starts 30 s after the first's last line


def walls(lines: list[str]) -> list[float]:
    """Each line's wall-clock time: its process's start plus its stamp (M.SS.mmm.uuu)."""
    out, start, last = [], START, 0.0
    for line in lines:
        minutes, seconds, ms, us = line.split(" ", 1)[0].split(".")
        rel = int(minutes) * 60 + int(seconds) + int(ms) / 1e3 + int(us) / 1e6
        if rel < last - 1:
            start += last + 30
        out.append(start + rel)
        last = rel
    return out


def stamp(epoch: float, form: str) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime(form)


Wrap = Callable[[str, float], str]
CAPTURES: dict[str, Wrap] = {
    "journald short": lambda line, t: f"{stamp(t, '%b %d %H:%M:%S')} gpu-1 llama-server[4242]: {line}",
    "journald short-precise": lambda line, t: f"{stamp(t, '%b %d %H:%M:%S.%f')} gpu-1 llama-server[4242]: {line}",
    "journald short-iso": lambda line, t: f"{stamp(t, '%Y-%m-%dT%H:%M:%S+0000')} gpu-1 llama-server[4242]: {line}",
    "journald short-iso-precise": lambda line, t: (
        f"{stamp(t, '%Y-%m-%dT%H:%M:%S.%f+0000')} gpu-1 llama-server[4242]: {line}"
    ),
    "journald json": lambda line, t: json.dumps(
        {
            "__REALTIME_TIMESTAMP": str(round(t * 1e6)),
            "_HOSTNAME": "gpu-1",
            "SYSLOG_IDENTIFIER": "llama-server",
            "_PID": "4242",
            "MESSAGE": line,
        }
    ),
    "docker json-file": lambda line, t: json.dumps(
        {"log": line + "\n", "stream": "stderr", "time": stamp(t, "%Y-%m-%dT%H:%M:%S.%f") + "123Z"},
        separators=(",", ":"),
    ),
    "docker logs -t": lambda line, t: f"{stamp(t, '%Y-%m-%dT%H:%M:%S.%f')}123Z {line}",
    "docker compose": lambda line, t: f"llama-1  | {line}",
    "router mode": lambda line, t: f"[18999] {line}",
    "router mode in journald": lambda line, t: (
        f"{stamp(t, '%Y-%m-%dT%H:%M:%S+0000')} gpu-1 llama-server[1]: [18999] {line}"
    ),
}


def read(lines: list[bytes], mtime: float) -> tuple[Counter[str], LlamaLogSource, list]:
    made = collectors.load_all()["engine_log"].build(
        "engine-a", EngineLogOptions(path=Path("/nonexistent/llama.log"), instance="llama-a", preset="llama_server")
    )
    assert isinstance(made, LlamaLogSource)
    made.writer_of = lambda path, now: None
    made.file_mtime(mtime)
    events, misses, last = made.handle_lines(lines)
    assert misses.get("unmatched", 0) == misses.get("unprefixed", 0) == 0, last
    return Counter(e.kind for e in events), made, events


PLAIN_LINES = FIXTURE.read_text().splitlines()


@pytest.mark.parametrize("capture", sorted(CAPTURES))
def test_a_captured_log_yields_the_plain_files_events(capture: str) -> None:
    plain, _, _ = read([line.encode() for line in PLAIN_LINES], START + 3600)
    wrap = CAPTURES[capture]
    kinds, src, events = read(
        [wrap(line, t).encode() for line, t in zip(PLAIN_LINES, walls(PLAIN_LINES))], START + 3600
    )
    assert kinds == plain and plain["done"] == 7 and plain["evict"] == 4
    if capture in ("docker compose", "router mode"):
        return  # no clock of its own: placed as the plain file
    assert src.anchors == ["wrapper", "wrapper"]  # the capture's clock, not the mtime's guess
    released = walls(PLAIN_LINES)[next(n for n, line in enumerate(PLAIN_LINES) if "stop processing" in line)]
    assert abs(next(e for e in events if e.kind == "done").ts - released) < 1.0  # journald short: to the second


@pytest.mark.parametrize("rfc", ["--rfc3164", "--rfc5424", "default"])
def test_syslog_as_util_linux_logger_sends_it(tmp_path: Path, rfc: str, spawns: None) -> None:
    """util-linux's logger formats each line and sends it to a datagram socket (/dev/log's kind) the test
    binds; what arrives is read as rsyslog would have written it to a file, one message a line. By default
    (to a local socket) it names no host: `<13>Dec  4 14:57:03 llama-server: ...`."""
    path = tmp_path / "log.sock"
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(str(path))
    receiver.settimeout(20)
    try:
        before = time.time()
        form = [] if rfc == "default" else [rfc]
        sender = subprocess.Popen(["logger", "-u", str(path), "-d", *form, "-t", "llama-server", "-f", str(FIXTURE)])
        received = [receiver.recv(65536) for _ in PLAIN_LINES]  # read while it sends: a full socket blocks it
        assert sender.wait(timeout=60) == 0
    finally:
        receiver.close()
    plain, _, _ = read([line.encode() for line in PLAIN_LINES], time.time())
    kinds, src, events = read(received, time.time())
    assert kinds == plain and src.captures == Counter(
        {f"syslog-{rfc[-4:]}" if rfc == "--rfc5424" else "journald": len(PLAIN_LINES)}
    )
    assert src.anchors == ["wrapper", "wrapper"]
    start = next(e for e in events if e.kind == "start")
    assert before - 2 <= start.ts <= time.time() + 1  # logger's clock (RFC 3164: to the second)
