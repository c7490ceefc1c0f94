"""The captures a llama-server line arrives in, recognized per line with no configuration: the wrapper is
taken off, and its absolute time kept when it has one (it beats the file's mtime as a clock).

- journald: `journalctl -o short` (`Dec 03 14:58:42 host unit[pid]: ...`), `short-precise` (with
  microseconds), `short-iso` / `short-iso-precise` (`2024-05-27T12:32:31+0000 host unit[pid]: ...`), and
  `-o json` (`{"__REALTIME_TIMESTAMP": "...", "MESSAGE": "...", ...}`);
- syslog RFC 3164 (`<13>Dec  3 14:58:42 host tag[pid]: ...`, also what rsyslog writes to /var/log/syslog,
  with or without the priority; rsyslog's RFC 3339 file format is short-iso's shape) and RFC 5424
  (`<165>1 2026-12-03T11:00:00.003Z host app procid msgid - ...`);
- docker's json-file driver (`{"log": "...\\n", "stream": "stderr", "time": "...Z"}`), `docker logs -t`
  (an RFC 3339 stamp first) and docker compose (`service-1  | ...`);
- llama-server's router mode, where the router prints each child's lines after `[PORT] `;
- runners that embed llama.cpp and interleave their own lines with llama.cpp's: Ollama (Go's slog
  `time=... level=INFO source=...` and log `2024/06/02 18:43:45 file.go:12: ...`), llama-swap
  (`[INFO] ...`, `[DEBUG] <model> ...`), LM Studio (its own `LlamaV4: ...` lines), Lemonade (`[Info]
  (ServerManager) ...`, `[LlamaCpp] ...`), LocalAI (`7:23PM INF ...`) and a Windows console's prompt
  (`C:\\dir>llama-server.exe ...`, `PS C:\\dir> ...`): such lines are the runner's, marked `foreign` (no event,
  not counted as unreadable);
- the wrappers those runners put around llama.cpp's own lines, taken off with their clock: LocalAI's
  backend (`7:23PM DBG GRPC(model-127.0.0.1:44125): stderr ...`, the time of day on the file's day),
  Lemonade's (`2026-04-09 21:52:11.806 [Info] (Process) ...`, `[stdout] ...`), and LM Studio's, whose
  header line (`2026-06-04 12:09:49 [DEBUG]`) dates the lines after it, each with one blank before it
  (` 11.40.246.753 I slot ...`): the header is `dating` (its time is the next lines'). A level in a wrapper
  is no filter: a runner's debug output is read like any other.

Wrappers nest (a router child's line in journald, a compose service in docker); ANSI colour codes
(`--log-colors`) are dropped. Pure: the year of a year-less stamp comes from `ref` (the file's mtime),
and a zone-less stamp is read in `tz`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from spyglass.collectors.bounded_json import TooLarge, loads

MONTHS = {
    m: n for n, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)
}
ANSI = re.compile(rb"\x1b\[[0-9;]*m")
ISO = rb"(?P<iso>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?)"
SYSLOG_TAG = rb" (?P<host>[^\s:]{1,255}) (?P<tag>[^\s\[:]{1,128})(?:\[(?P<pid>\d{1,10})\])?: ?"
# util-linux `logger`'s default to the local socket: no host name (`<13>Dec  4 14:57:03 llama-server: ...`).
BSD_TAG = rb" (?:(?P<host>[^\s:]{1,255}) )?(?P<tag>[^\s\[:]{1,128})(?:\[(?P<pid>\d{1,10})\])?: ?"
BSD = re.compile(
    rb"(?:<\d{1,3}>)?(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) (?P<day>[ \d]\d)"
    rb" (?P<hms>\d\d:\d\d:\d\d)(?P<frac>\.\d{1,9})?" + BSD_TAG
)
ISO_SYSLOG = re.compile(rb"(?:<\d{1,3}>)?" + ISO + SYSLOG_TAG)
RFC5424 = re.compile(
    rb"<\d{1,3}>1 (?:-|" + ISO + rb") \S{1,255} \S{1,48} \S{1,128} \S{1,32} (?:-|(?:\[(?:[^\]\\]|\\.)*\])+) ?"
    rb"(?:\xef\xbb\xbf)?"
)
DOCKER_T = re.compile(ISO + rb" (?=\S)")  # docker logs -t (RFC 3339), or a naive dated prefix (Docker Desktop's view)
COMPOSE = re.compile(rb"(?P<service>[\w.-]{1,64}) +\| ")
LOCALAI = re.compile(
    rb"(?P<hour>\d{1,2}):(?P<minute>\d\d)(?P<half>AM|PM) (?:TRC|DBG|INF|WRN|ERR|FTL) GRPC\([^)]{1,300}\): std(?:err|out) "
)
LEMONADE = re.compile(rb"\[(?:Trace|Debug|Info|Warn|Warning|Error|Fatal)\] \(Process\) |\[stdout\] |\[stderr\] ")
LMSTUDIO_HEAD = re.compile(rb"\[(?:DEBUG|INFO|WARN|WARNING|ERROR)\]$")  # after its date: the next lines' clock
ROUTER = re.compile(rb"\[(?P<port>\d{1,5})\] ")
# A runner's own lines: Ollama (slog, Go log), llama-swap (bracketed level).
MAX_JSON_BYTES = 256 << 10  # a journald or docker JSON record: a llama line and its fields, far below this
FOREIGN = re.compile(
    rb"time=\d{4}-\d\d-\d\dT\S+ level=[A-Z]+ source=|\d{4}/\d\d/\d\d \d\d:\d\d:\d\d \S+\.go:\d+: "
    rb"|\[(?:INFO|DEBUG|WARN|ERROR)\] "
    rb"|LlamaV\d+(?:::\w+)?:? |\[\d+:\d{4}/\d{6}\.\d{3}:[A-Z]+:"  # LM Studio's own lines, its Chromium's
    rb"|\[(?:Trace|Debug|Info|Warn|Warning|Error|Fatal)\] \(|\[LlamaCpp\] "  # Lemonade's own lines
    rb"|\d{1,2}:\d\d[AP]M (?:TRC|DBG|INF|WRN|ERR|FTL) "  # LocalAI's own lines (zerolog)
    rb"|(?:PS )?[A-Za-z]:\\[^>\r\n]{0,260}> ?\S"  # a Windows console's prompt and the command typed at it
)


@dataclass(frozen=True)
class Unwrapped:
    """A line without its wrappers: the payload, the wrapper's absolute time (epoch seconds, None: none),
    the captures it came through (outermost first, e.g. "journald-iso+router"), whether it is a
    runner's own line rather than llama.cpp's, and whether it is a header that dates the lines after it.
    `refused`: why a wrapper past its bounds (a JSON record nested too deep or too large) was not taken
    off; the line is then one invalid line."""

    payload: bytes
    wall: float | None = None
    capture: str = "plain"
    foreign: bool = False
    refused: str | None = None
    child: str = ""  # router mode: the child's port (its `[PORT] ` prefix); "" for the router's or a plain server's
    dating: bool = False  # a runner's header line whose time is the next lines' (LM Studio)


def unwrap(line: bytes, ref: float, tz: str = "UTC") -> Unwrapped:
    """`line` (no newline) without its captures' wrappers; `ref` dates a year-less stamp."""
    payload, wall, layers, child = line, None, list[str](), ""
    for _ in range(4):  # wrappers nest at most a few deep; a loop bound, not a format rule
        try:
            found = _one(payload, ref, tz)
        except TooLarge as exc:
            return Unwrapped(b"", None, "+".join([*layers, "json"]), refused=str(exc))
        if found is None:
            break
        if found[2] == "router":
            port = ROUTER.match(payload)
            child = port.group("port").decode() if port is not None else ""
        payload, stamp, name = found
        layers.append(name)
        wall = wall if wall is not None else stamp  # the outermost clock received the line first
    if b"\x1b[" in payload:
        payload = ANSI.sub(b"", payload)
    payload = payload.lstrip(b"\r")
    if layers and layers[-1] == "dated" and LMSTUDIO_HEAD.match(payload) is not None:
        return Unwrapped(b"", wall, "+".join(layers[:-1] + ["lmstudio"]), foreign=True, dating=True)
    if payload[:1] == b" " and payload[1:2] not in b" \t":
        payload = payload[1:]  # LM Studio's message line, one blank in; 2024's ` ERR [...]` reads the same without
    return Unwrapped(payload, wall, "+".join(layers) or "plain", FOREIGN.match(payload) is not None, child=child)


def _one(line: bytes, ref: float, tz: str) -> tuple[bytes, float | None, str] | None:
    """One wrapper taken off `line`: (inside, its time or None, its name), or None if there is none."""
    head = line[:1]
    if head == b"{":
        return _json(line)
    if head == b"<":
        found = RFC5424.match(line)
        if found is not None:
            return line[found.end() :], iso_epoch(found.group("iso"), tz), "syslog-5424"
    if head == b"[":
        found = ROUTER.match(line) or LEMONADE.match(line)
        if found is None:
            return None
        return line[found.end() :], None, "router" if found.re is ROUTER else "lemonade"
    if head.isdigit():
        found = LOCALAI.match(line)
        if found is not None:
            return line[found.end() :], kitchen_epoch(found, ref, tz), "localai"
    found = BSD.match(line)
    if found is not None:
        return (
            line[found.end() :],
            bsd_epoch(found, ref, tz),
            "journald" if found.group("frac") is None else "journald-precise",
        )
    found = ISO_SYSLOG.match(line)
    if found is not None:
        return line[found.end() :], iso_epoch(found.group("iso"), tz), "journald-iso"
    found = DOCKER_T.match(line)
    if found is not None:
        return (
            line[found.end() :],
            iso_epoch(found.group("iso"), tz),
            "docker-t" if b"T" in found.group("iso") else "dated",
        )
    found = COMPOSE.match(line)
    if found is not None:
        return line[found.end() :], None, "compose"
    return None


def _json(line: bytes) -> tuple[bytes, float | None, str] | None:
    """docker json-file or `journalctl -o json`; any other JSON (llama.cpp's own 2024 JSON log) is no wrapper."""
    if not (line.startswith(b'{"log":') or b'"__REALTIME_TIMESTAMP"' in line):
        return None
    try:
        record = loads(line, MAX_JSON_BYTES)
    except TooLarge:
        raise
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    if isinstance(record.get("log"), str):
        stamp = record.get("time")
        return (
            record["log"].rstrip("\r\n").encode(),
            iso_epoch(stamp.encode(), "UTC") if isinstance(stamp, str) else None,
            "docker-json",
        )
    message, stamp = record.get("MESSAGE"), record.get("__REALTIME_TIMESTAMP")
    if isinstance(message, list):  # journald's form of a message that is not valid UTF-8: its bytes
        message = bytes(b for b in message if isinstance(b, int) and 0 <= b < 256).decode("utf-8", "replace")
    if not isinstance(message, str):
        return None
    wall = int(stamp) / 1e6 if isinstance(stamp, str) and stamp.isdigit() and len(stamp) <= 19 else None
    return message.rstrip("\r\n").encode(), wall, "journald-json"


def kitchen_epoch(found: re.Match[bytes], ref: float, tz: str) -> float | None:
    """Epoch seconds of a time of day with no date (`7:23PM`, Go's Kitchen layout): on the day of `ref`, or the
    day before when that would put it more than an hour after `ref`."""
    hour = int(found.group("hour")) % 12 + (12 if found.group("half") == b"PM" else 0)
    minute = int(found.group("minute"))
    if hour > 23 or minute > 59:
        return None
    day = datetime.fromtimestamp(ref, tz=ZoneInfo(tz))
    moment = day.replace(hour=hour, minute=minute, second=0, microsecond=0).timestamp()
    return moment - 86400 if moment > ref + 3600 else moment


def iso_epoch(text: bytes, tz: str) -> float | None:
    """Epoch seconds of an RFC 3339 / ISO 8601 stamp (nanoseconds cut to microseconds; no offset: `tz`)."""
    raw = text.decode()
    body, offset = raw, ""
    if raw.endswith("Z"):
        body, offset = raw[:-1], "+00:00"
    elif len(raw) > 19 and raw[-5] in "+-" and raw[-3] != ":":
        body, offset = raw[:-5], raw[-5:-2] + ":" + raw[-2:]
    elif len(raw) > 19 and raw[-6] in "+-":
        body, offset = raw[:-6], raw[-6:]
    if "." in body:
        whole, frac = body.split(".", 1)
        body = f"{whole}.{frac[:6]:0<6}"
    try:
        moment = datetime.fromisoformat(body.replace(" ", "T") + offset)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=ZoneInfo(tz))
    return moment.timestamp()


def bsd_epoch(found: re.Match[bytes], ref: float, tz: str) -> float | None:
    """Epoch seconds of a year-less `Mon DD HH:MM:SS[.frac]` stamp: the year that puts it at most a day
    after `ref` (a log read in January holds December's lines)."""
    zone = ZoneInfo(tz)
    year = datetime.fromtimestamp(ref, tz=zone).year
    hour, minute, second = (int(part) for part in found.group("hms").split(b":"))
    frac = float(found.group("frac") or 0)
    for candidate in (year, year - 1):
        try:
            moment = (
                datetime(
                    candidate,
                    MONTHS[found.group("mon").decode()],
                    int(found.group("day")),
                    hour,
                    minute,
                    second,
                    tzinfo=zone,
                ).timestamp()
                + frac
            )
        except ValueError:  # Feb 29 of a year that has none
            continue
        if moment <= ref + 86400:
            return moment
    return None


def utc_text(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat()
