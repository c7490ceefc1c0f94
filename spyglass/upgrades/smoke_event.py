"""The smoke gate's result as a deploy event (`smoke_passed` / `smoke_failed`, source `smoke`).

`spyglass smoke --config FILE` records each run's verdict in spyglass's store, so the timeline, the
deploy records and the change list show "smoke passed/failed" beside the start it gated. The agent
owns the store (one writer), so the result goes to the running agent's `POST /api/smoke` (a JSON
body validated here: a bad one is a 400 saying which key and why, and nothing is stored). When no
agent answers at the config's address, the store file is written directly if no process holds it
(DuckDB's lock says so); if one does (an agent whose HTTP server does not answer), nothing is
written and the command says so. Either way the command exits with the gate's verdict.
"""

from __future__ import annotations

import hashlib
import statistics
from pathlib import Path

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spyglass.collectors import timebounds
from spyglass.collectors.bounded_json import json_object
from spyglass.collectors.event import Event
from spyglass.config import Config
from spyglass.upgrades.smoke import Verdict

SOURCE = "smoke"
KINDS = ("smoke_passed", "smoke_failed")
MAX_SAMPLES = 1000


class SampleResult(BaseModel):
    """One sample's outcome."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(..., min_length=1, max_length=80)
    status: int = Field(..., ge=0, le=599)
    ttft_ms: float | None = Field(None, ge=0)
    finish: str | None = Field(None, max_length=40)
    problem: str | None = Field(None, max_length=500)
    request_id: str | None = Field(
        None,
        pattern=r"^\d{8}-\d{6}-[0-9a-f]{2,32}$",
        description="The id the sample was sent with (spyglass trace ID).",
    )


class SmokeResult(BaseModel):
    """The body of `POST /api/smoke`: one run of the gate."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    instance: str = Field(..., min_length=1, max_length=80, description="The engine instance the run gated.")
    url: str = Field(..., min_length=1, max_length=300, description="The serve URL it checked.")
    passed: bool
    reason: str = Field(..., max_length=1000)
    at: float = Field(..., gt=0, description="When the run ended, epoch seconds.")
    waited_seconds: float = Field(..., ge=0, description="Seconds /health took to answer 200.")
    samples_file: str = Field(..., max_length=500)
    samples_sha256: str = Field(..., pattern=r"^[0-9a-f]{64}$")
    samples: list[SampleResult] = Field(default_factory=list, max_length=MAX_SAMPLES)

    def event(self, host: str) -> Event:
        ttfts = [s.ttft_ms for s in self.samples if s.ttft_ms is not None]
        fields = {
            "passed": self.passed,
            "reason": self.reason,
            "url": self.url,
            "at": self.at,
            "waited_seconds": self.waited_seconds,
            "samples_file": self.samples_file,
            "samples_sha256": self.samples_sha256,
            "samples": len(self.samples),
            "ttft_ms_median": statistics.median(ttfts) if ttfts else None,
            "ttft_ms_max": max(ttfts) if ttfts else None,
            "outcomes": [s.model_dump() for s in self.samples],
        }
        return Event(self.at, SOURCE, KINDS[0] if self.passed else KINDS[1], self.instance, fields, None, host)


def decode_result(body: bytes, host: str = "", *, now: float) -> Event:
    """The event of a `POST /api/smoke` body; ValueError naming the key and why if it is not one
    (`at` must lie between 2000 and a day past `now`, see collectors/timebounds.py)."""
    raw = json_object(body, "a smoke result")
    try:
        result = SmokeResult.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise ValueError(f"{where}: {first['msg']}") from None
    timebounds.check(result.at, now, "at")
    return result.event(host)


def result_of(verdict: Verdict, instance: str, url: str, samples: Path, at: float) -> SmokeResult:
    digest = hashlib.sha256(samples.read_bytes()).hexdigest()
    return SmokeResult(
        instance=instance,
        url=url,
        passed=verdict.ok,
        reason=verdict.reason[:1000],
        at=at,
        waited_seconds=verdict.waited_seconds,
        samples_file=str(samples)[:500],
        samples_sha256=digest,
        samples=[
            SampleResult(
                name=o.name,
                status=o.status,
                ttft_ms=o.ttft_ms,
                finish=o.finish,
                problem=o.problem[:500] if o.problem else None,
                request_id=o.request_id,
            )
            for o in verdict.outcomes[:MAX_SAMPLES]
        ],
    )


def instance_for(config: Config, url: str) -> str | None:
    """The instance of the serve_status source that polls the serve at `url` (same scheme, host and port)."""
    from urllib.parse import urlsplit

    from spyglass.collectors.serve_status import ServeStatusOptions

    def origin(text: str) -> tuple[str, str | None, int | None]:
        parts = urlsplit(text)
        return parts.scheme, parts.hostname, parts.port

    wanted = origin(url)
    found = {
        o.instance
        for o in config.sources_of(ServeStatusOptions).values()
        if o.url and o.instance and origin(o.url) == wanted
    }
    return found.pop() if len(found) == 1 else None


class NotRecorded(Exception):
    """The result could not be stored: the message says why."""


def record(config: Config, result: SmokeResult, timeout: float = 10.0) -> str:
    """Store `result`: through the running agent, else in the store file if no process holds it.
    Returns how it was stored; NotRecorded says why it was not."""
    server = config.exporters.prometheus
    body = result.model_dump_json().encode()
    if server.enabled:
        url = f"{server.client_url()}/api/smoke"
        try:
            token = server.bearer_token()
        except OSError as exc:
            raise NotRecorded(f"exporters.prometheus.token_file: {exc}") from None
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        try:
            answer = httpx.post(url, content=body, headers=headers, timeout=timeout, trust_env=False)
        except (httpx.ConnectError, httpx.ConnectTimeout):
            pass  # no agent listening: the store file may be free
        except httpx.HTTPError as exc:
            raise NotRecorded(f"the agent at {url} did not answer ({type(exc).__name__})") from None
        else:
            if answer.status_code == 200:
                return f"recorded by the agent at {server.client_url()}"
            if answer.status_code == 404:
                raise NotRecorded(
                    f"the agent at {server.client_url()} keeps no store (exporters.store.enabled"
                    " = false) or predates /api/smoke"
                )
            raise NotRecorded(f"the agent at {url} answered {answer.status_code}: {answer.text.strip()[:300]}")
    return write_store(config, result.event(config.agent.host))


def write_store(config: Config, event: Event) -> str:
    """Append one event to the store file, when no agent holds it (DuckDB's lock refuses otherwise)."""
    if not config.exporters.store.enabled:
        raise NotRecorded("no agent answers and exporters.store.enabled = false: there is no store to write")
    import duckdb

    from spyglass.exporters.event_schema import split
    from spyglass.exporters.store import DuckDBStore

    path = config.store_path()
    server = config.exporters.prometheus
    nobody = f"no agent answers at {server.client_url()}" if server.enabled else "the config serves no agent API"
    try:
        store = DuckDBStore(path, config.source_kinds())
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            raise NotRecorded(
                f"{nobody}, and {path} is held by another process (an agent whose HTTP server is off or hung?)"
            ) from None
        raise NotRecorded(f"{path}: {exc}") from None
    try:
        con = store.con
        con.begin()
        try:
            for name, table in split([event], store.next_seq, store.sources).items():
                con.from_arrow(table).insert_into(name)
            con.commit()
        except BaseException:
            con.rollback()
            raise
    except duckdb.Error as exc:
        raise NotRecorded(f"{path}: {exc}") from None
    finally:
        store.close()
    return f"{nobody}: written to {path}"
