"""The agent's HTTP API under attack (issue 9, findings 1, 4, 8 and 10), against `spyglass run`
as a real process with a real DuckDB store on 127.0.0.1.

/api/sql cannot write (EXPLAIN ANALYZE and data-modifying CTEs included), its answers are
bounded and say so, and queries never stop ingestion; bodies, headers, spans and attributes are
bounded, a half-sent request cannot pin a worker, and the agent's own memory stays under a bound
through every bomb; prompt text pushed in spans is not stored; a token guards the API."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import duckdb
import httpx
import pytest
from conftest import FIXTURES, wait_until
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from spyglass.agent.otlp_receiver import SpanLimits, decode_spans
from spyglass.config import ConfigError, engine_log_toml, parse_config
from spyglass.engine.instrument import trace_id_for
from spyglass.exporters import event_schema
from spyglass.exporters.request_rows import row_tables
from spyglass.ports import free_port
from spyglass.query.bounded import AgentApi, QueryError, run_readonly

JSON_BODY = {"Content-Type": "application/json"}
PROTOBUF_BODY = {"Content-Type": "application/x-protobuf"}
pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier

FIXTURE = FIXTURES / "engine_log" / "strata-iq3_xxs-b.log"
TOKEN = "s3cret-token-for-tests-only"
RSS_BOUND_MB = 400  # the agent idles at about 90 MB; a bomb must not take it far past that
EVICT = (
    "2026-10-19 05:21:{:02d}.{:03d} I [cache] evict conv=7b7b bytes=1 reason=budget parked=0"
    " used=0 budget=8589934592 evictions={}\n"
)
HOSTILE = [
    "EXPLAIN ANALYZE DROP TABLE events",
    "EXPLAIN ANALYZE DELETE FROM events",
    "EXPLAIN ANALYZE UPDATE events SET kind = 'forged'",
    "EXPLAIN ANALYZE INSERT INTO events SELECT * FROM events",
    "EXPLAIN ANALYZE CREATE TABLE forged AS SELECT 1",
    "EXPLAIN ANALYZE CREATE MACRO forged() AS 1",
    "EXPLAIN ANALYZE CREATE SEQUENCE forged",
    "WITH d AS (DELETE FROM events RETURNING *) SELECT count(*) FROM d",
    "WITH d AS (UPDATE checkpoints SET state = '{}' RETURNING *) SELECT count(*) FROM d",
    "DROP TABLE events",
    "CREATE VIEW forged AS SELECT 1",
    "SELECT 1; DELETE FROM events",
    "COPY events TO '/tmp/spyglass-forged.csv'",
    "ATTACH ':memory:' AS forged",
    "SET lock_configuration = false",
]


LIMITS = {
    "sql_timeout_seconds": "4",
    "sql_max_rows": "1000",
    "sql_max_bytes": "100000",
    "sql_workers": "3",
    "sql_snapshot_seconds": "0.2",
    "request_timeout_seconds": "2",
    "workers": "8",
}


def agent_config(tmp_path, port: int, extra: dict[str, str]) -> tuple:
    log = tmp_path / "strata-iq3_xxs-b.log"
    log.write_bytes(FIXTURE.read_bytes())
    text = engine_log_toml(log, tmp_path / "state", listen=f"127.0.0.1:{port}")
    limits = "".join(f"{key} = {value}\n" for key, value in {**LIMITS, **extra}.items())
    text = text.replace(f'listen = "127.0.0.1:{port}"\n', f'listen = "127.0.0.1:{port}"\n{limits}')
    config = tmp_path / "spyglass.toml"
    config.write_text(text)
    return config, log


@pytest.fixture
def start_agent(tmp_path):
    procs = []

    def start(**extra: str) -> dict:
        port = free_port()
        config, log = agent_config(tmp_path, port, extra)
        proc = subprocess.Popen(
            [sys.executable, "-m", "spyglass.cli.app", "run", "-c", str(config)], stderr=subprocess.PIPE, text=True
        )
        killer = threading.Timer(120, proc.kill)  # never let a hung agent hang the suite
        killer.start()
        procs.append((proc, killer))
        for line in proc.stderr:
            if "metrics at" in line:
                break
        drain = threading.Thread(target=proc.stderr.read, daemon=True)  # keep the pipe drained
        drain.start()
        procs[-1] += (drain,)
        url = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {TOKEN}"} if "token" in extra else {}
        wait_until(lambda: stored(url, headers) >= 35, what="the fixture stored")
        return {
            "proc": proc,
            "url": url,
            "port": port,
            "log": log,
            "config": config,
            "headers": headers,
            "store": tmp_path / "state" / "spyglass.duckdb",
        }

    yield start
    for proc, killer, drain in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        killer.cancel()
        drain.join()
        proc.stderr.close()


def sql(url: str, query: str, headers: dict | None = None) -> httpx.Response:
    return httpx.post(f"{url}/api/sql", json={"query": query}, headers=headers or {}, timeout=60)


def stored(url: str, headers: dict | None = None) -> int:
    for line in httpx.get(f"{url}/metrics", headers=headers or {}).text.splitlines():
        if line.startswith("spyglass_store_events_total "):
            return int(float(line.split()[1]))
    return 0


def status(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def peak_rss_mb(proc) -> float:
    return status(proc.pid, "VmHWM") / 1024  # the kernel's high-water mark: no sample can miss a peak


def append_evicts(log, first: int, count: int) -> None:
    with open(log, "ab") as f:
        for n in range(first, first + count):
            f.write(EVICT.format(n // 1000 % 60, n % 1000, n).encode())


def stop(agent) -> None:
    agent["proc"].send_signal(signal.SIGTERM)
    assert agent["proc"].wait(timeout=30) == 0


# -- finding 1: /api/sql cannot write -------------------------------------------------------------


def test_no_statement_can_write_the_store_and_ingest_goes_on(start_agent):
    agent = start_agent()
    url = agent["url"]
    before = sql(url, "SELECT count(*), count(DISTINCT kind) FROM events").json()["rows"]
    for query in HOSTILE:
        response = sql(url, query)
        assert response.status_code == 400, (query, response.text)
        assert "error" in response.json()
    assert sql(url, "SELECT count(*), count(DISTINCT kind) FROM events").json()["rows"] == before
    append_evicts(agent["log"], 1, 1)
    wait_until(
        lambda: sql(url, "SELECT count(*) FROM events").json()["rows"] == [[before[0][0] + 1]],
        what="a line appended after the attack, answered by /api/sql",
    )
    assert httpx.get(f"{url}/health").text == "ok\n"
    stop(agent)
    con = duckdb.connect(str(agent["store"]), read_only=True)
    assert con.execute("SELECT count(*) FROM events").fetchall() == [(before[0][0] + 1,)]
    assert con.execute("SELECT count(*) FROM events WHERE kind = 'forged'").fetchall() == [(0,)]
    names = {
        r[0]
        for r in con.execute(
            "SELECT table_name FROM duckdb_tables() UNION ALL "
            "SELECT view_name FROM duckdb_views() WHERE NOT internal UNION ALL "
            "SELECT sequence_name FROM duckdb_sequences()"
        ).fetchall()
    }
    assert names == {
        "checkpoints",
        "agent_state",
        "store_schema",
        *event_schema.table_names(),
        *row_tables(),
        "events",
        *map(event_schema.source_view, event_schema.source_kinds()),
    }
    con.close()


def test_answers_are_bounded_and_say_so(start_agent):
    agent = start_agent()
    url = agent["url"]
    many = sql(url, "SELECT * FROM range(1000000000000)").json()
    assert len(many["rows"]) == 1000 and "more than 1000 rows" in many["truncated"]
    wide = sql(url, "SELECT repeat('x', 1000) AS s FROM range(1000)").json()
    assert 0 < len(wide["rows"]) < 100 and "more than 100000 bytes" in wide["truncated"]
    small = sql(url, "SELECT count(*) AS n FROM events").json()
    assert small["truncated"] is None and time.time() - small["as_of"] < 60
    wrong = httpx.get(f"{url}/api/sql")  # a new user's first try: said what to send instead of "not found"
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST" and '{"query"' in wrong.text
    assert httpx.post(f"{url}/health").status_code == 405 and httpx.get(f"{url}/nowhere").status_code == 404
    echoed = httpx.post(f"{url}/trace/" + "<script>" * 500)  # a GET-only route under a prefix
    assert echoed.status_code == 405 and echoed.text == "/trace/ takes GET\n"
    started = time.monotonic()
    slow = sql(url, "SELECT count(*) FROM range(100000000000000)")
    assert slow.status_code == 400 and "interrupted after 4 s" in slow.json()["error"]
    assert time.monotonic() - started < 4 + 3  # the limit covers the whole request


@pytest.mark.parametrize(
    "bomb",
    [
        "SELECT list(range(100000000))",
        "SELECT repeat('x', 100000000) FROM range(100)",
        "SELECT [repeat('x', 10000000) for x in range(1000)]",
        "SELECT string_agg(repeat('x', 1000)) FROM range(10000000)",
    ],
)
def test_memory_bombs_cost_the_query_not_the_agent(start_agent, bomb):
    agent = start_agent()
    with ThreadPoolExecutor(3) as pool:  # three at once passed 13 GB before
        responses = list(pool.map(lambda _: sql(agent["url"], bomb), range(3)))
    errors = [response.json()["error"] for response in responses]
    assert [response.status_code for response in responses] == [400] * 3
    assert all(any(word in error for word in ("memory", "interrupted", "busy")) for error in errors), errors
    assert peak_rss_mb(agent["proc"]) < RSS_BOUND_MB
    assert sql(agent["url"], "SELECT count(*) FROM events").status_code == 200


def test_twenty_concurrent_queries_during_ingest_lose_nothing(start_agent):
    agent = start_agent(workers="24", sql_timeout_seconds="30")
    url, total = agent["url"], 3000
    writer = threading.Thread(target=lambda: [append_evicts(agent["log"], 1 + i * 100, 100) for i in range(30)])
    queries = [
        "SELECT count(*) FROM events",
        "SELECT kind, count(*) FROM events GROUP BY ALL",
        "SELECT max(fields->>'evictions') FROM events WHERE kind = 'evict'",
        "SELECT count(*) FROM events WHERE ts > now() - INTERVAL 100 YEAR",
    ]
    writer.start()
    with ThreadPoolExecutor(20) as pool:
        responses = list(pool.map(lambda i: sql(url, queries[i % len(queries)]), range(40)))
    writer.join()
    assert [r.status_code for r in responses] == [200] * 40
    wait_until(lambda: stored(url) == 35 + total, what="every appended line stored")
    wait_until(
        lambda: sql(url, "SELECT count(*) FROM events").json()["rows"] == [[35 + total]],
        what="every appended line readable through /api/sql",
    )


def test_sql_cli_gives_the_same_answer_from_the_file_and_through_the_agent(start_agent):
    agent = start_agent()
    query = "SELECT kind, count(*) AS n, min(ts) AS first FROM events GROUP BY kind ORDER BY kind"
    via_agent = run_readonly(agent["store"], query, AgentApi(f"{agent['url']}/api/sql"))
    assert via_agent.as_of is not None
    stop(agent)
    direct = run_readonly(agent["store"], query, None)
    assert (direct.columns, direct.rows) == (via_agent.columns, via_agent.rows)
    with pytest.raises(QueryError, match="read-only"):
        run_readonly(agent["store"], "EXPLAIN ANALYZE DROP TABLE events", None)
    con = duckdb.connect(str(agent["store"]), read_only=True)
    assert con.execute("SELECT count(*) FROM events").fetchall() == [(35,)]
    con.close()


# -- finding 4: every request is bounded ----------------------------------------------------------


def raw_request(port: int, head: bytes, timeout: float = 10.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def empty_spans(count: int) -> bytes:
    """An ExportTraceServiceRequest of `count` empty spans, two bytes each, written by hand."""

    def field(number: int, payload: bytes) -> bytes:
        return varint(number << 3 | 2) + varint(len(payload)) + payload

    return field(1, field(2, b"\x12\x00" * count))


def test_bodies_are_bounded_and_span_bombs_refused(start_agent):
    agent = start_agent()
    port, url = agent["port"], agent["url"]
    for path, kind in (("/api/sql", "application/json"), ("/v1/traces", "application/x-protobuf")):
        head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {kind}\r\n"
        answer = raw_request(port, f"{head}Content-Length: 50000000\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.0 413"), answer[:80]
        answer = raw_request(port, f"{head}Transfer-Encoding: chunked\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.0 411"), answer[:80]
    bomb = empty_spans(500_000)  # 1 MB: just under the body limit
    assert ExportTraceServiceRequest.FromString(bomb).resource_spans[0].scope_spans[0].spans[0] is not None
    # Issue 21 item 5: 32 at once reached 930-1,248 MB when each was parsed before its spans were
    # counted; they are counted on the wire now, and the agent's peak stays under RSS_BOUND_MB (measured:
    # 169 MB). A bomb that finds every worker busy is told so (503, Retry-After) and sent again, as an
    # OTLP exporter does: every one of the 32 is refused with its reason before the deadline. (How many
    # get a worker at the first try depends on the machine's load: 10 to 32 of 32 were seen.)
    deadline = time.monotonic() + 90

    def send_until_answered(_: int) -> list[httpx.Response]:
        answers = [httpx.post(f"{url}/v1/traces", content=bomb, timeout=60, headers=PROTOBUF_BODY)]
        while answers[-1].status_code == 503 and time.monotonic() < deadline:
            answers.append(httpx.post(f"{url}/v1/traces", content=bomb, timeout=60, headers=PROTOBUF_BODY))
        return answers

    with ThreadPoolExecutor(32) as pool:
        tries = list(pool.map(send_until_answered, range(32)))
    assert {r.status_code for answers in tries for r in answers} <= {400, 503}
    assert [answers[-1].status_code for answers in tries] == [400] * 32
    assert all("over 5000 spans in one export; at most 5000" in answers[-1].text for answers in tries)
    assert all(r.headers.get("retry-after") for answers in tries for r in answers if r.status_code == 503)
    assert (
        httpx.post(f"{url}/v1/traces", content=empty_spans(2_000_000), timeout=60, headers=PROTOBUF_BODY).status_code
        == 413
    )
    assert peak_rss_mb(agent["proc"]) < RSS_BOUND_MB
    assert httpx.get(f"{url}/health").text == "ok\n"


def test_a_deeply_nested_body_is_a_400_on_every_json_endpoint(start_agent):
    """10 KB of brackets exceeds the JSON decoder's recursion limit: a reason, not a hang-up."""
    agent = start_agent()
    deep = b"[" * 5000 + b"]" * 5000
    for path, reason in (
        ("/api/alerts", "nested too deeply"),
        ("/api/smoke", "nested too deeply"),
        ("/api/sql", "recursion"),
    ):
        answer = httpx.post(f"{agent['url']}{path}", content=deep, timeout=60, headers=JSON_BODY)
        assert (answer.status_code, reason in answer.text) == (400, True), (path, answer.status_code, answer.text)
    assert httpx.get(f"{agent['url']}/health").text == "ok\n"


def test_half_sent_requests_cannot_pin_the_workers(start_agent):
    agent = start_agent()
    port, pid = agent["port"], agent["proc"].pid
    threads_before = status(pid, "Threads")
    sockets = []
    for n in range(200):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(
            b"POST /api/sql HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n"
            + (b"\r\n{" if n % 2 else b"")
        )
        sockets.append(s)
    assert status(pid, "Threads") <= threads_before + 8  # the pool, not a thread per connection

    def all_closed() -> bool:
        for s in sockets:
            s.settimeout(0.01)
            try:
                while s.recv(4096):
                    pass
            except (TimeoutError, BlockingIOError):
                return False
            except OSError:
                pass
        return True

    wait_until(all_closed, timeout=15, what="every half-sent request dropped at its deadline")
    for s in sockets:
        s.close()
    assert httpx.get(f"{agent['url']}/metrics").status_code == 200
    assert status(pid, "Threads") <= threads_before + 8


def test_a_dripping_request_is_dropped_at_its_deadline(start_agent):
    agent = start_agent()
    request = b'POST /api/sql HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 30\r\n\r\n{"query": "SELECT 1 AS one"}  '
    pace = threading.Event()
    started = time.monotonic()
    sent = 0
    with socket.create_connection(("127.0.0.1", agent["port"])) as s:
        try:
            for byte in request:
                s.sendall(bytes([byte]))
                sent += 1
                pace.wait(0.2)  # the attacker's pace: one byte per 0.2 s, 18 s for the request
        except OSError:
            pass  # the server closed the connection
        s.settimeout(5)
        try:
            answer = s.recv(100)
        except OSError:
            answer = b""
    assert sent < len(request) and not answer.startswith(b"HTTP/1.0 200")
    assert time.monotonic() - started < 2 + 3  # request_timeout_seconds = 2, plus slack


# -- finding 8: no prompt text stored from spans --------------------------------------------------


def span_export(request_id: str) -> bytes:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue, KeyValueList
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

    def kv(key: str, value: str) -> KeyValue:
        return KeyValue(key=key, value=AnyValue(string_value=value))

    secret = "my password is hunter2"
    attributes = [
        kv("gen_ai.prompt", secret),
        kv("gen_ai.completion", secret),
        kv("gen_ai.prompt.0.content", secret),
        kv("gen_ai.completion.0.content", secret),
        kv("gen_ai.input.messages", json.dumps([{"role": "user", "content": secret}])),
        kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "content": secret}])),
        kv("spyglass.request.id", request_id),
        kv("spyglass.long", "y" * 100_000),
        # issue 21 item 12: text under keys no deny-list named
        kv("traceloop.entity.input", secret),
        kv("retrieval.documents.0.document.content", secret),
        kv("llm.prompt_template.variables", secret),
        KeyValue(key="spyglass.extra", value=AnyValue(kvlist_value=KeyValueList(values=[kv("gen_ai.prompt", secret)]))),
        *[kv(f"extra.{n}", "z") for n in range(500)],
    ]
    span = Span(
        trace_id=trace_id_for(request_id).to_bytes(16, "big"),
        span_id=b"\x01" * 8,
        name="POST /v1/chat",
        kind=2,
        start_time_unix_nano=1_792_389_000_000_000_000,
        end_time_unix_nano=1_792_389_001_000_000_000,
        attributes=attributes,
        status=Status(code=2, message=secret),
    )
    resource = ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])
    resource.resource.attributes.append(kv("service.name", "gateway"))
    return ExportTraceServiceRequest(resource_spans=[resource]).SerializeToString()


def test_prompt_text_in_spans_is_not_stored_or_printed(start_agent):
    agent = start_agent()
    request_id = "20261019-124900-7aa82c"
    assert (
        httpx.post(f"{agent['url']}/v1/traces", content=span_export(request_id), headers=PROTOBUF_BODY).status_code
        == 200
    )
    wait_until(
        lambda: sql(agent["url"], "SELECT count(*) FROM events WHERE kind = 'span'").json()["rows"] == [[1]],
        what="the span stored",
    )
    [[fields]] = sql(agent["url"], "SELECT fields::VARCHAR FROM events WHERE kind = 'span'").json()["rows"]
    assert "hunter2" not in fields
    span = json.loads(fields)
    assert {"gen_ai.prompt", "gen_ai.input.messages", "status.message"} <= set(span["redacted"])
    assert len(span["attributes"]["spyglass.long"]) == 1024 and len(span["attributes"]) <= 64
    assert {
        "traceloop.entity.input",
        "retrieval.documents.0.document.content",
        "llm.prompt_template.variables",
        "spyglass.extra",
    } <= set(span["redacted"])
    assert span["dropped_attributes"] > 0 and span["status"] == "error"
    printed = subprocess.run(
        [sys.executable, "-m", "spyglass.cli.app", "trace", request_id, "-c", str(agent["config"])],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert printed.returncode == 0, printed.stderr
    assert "gateway: POST /v1/chat" in printed.stdout and "hunter2" not in printed.stdout + printed.stderr


def test_content_is_kept_only_when_configured():
    body = span_export("20261019-124900-7aa82c")
    [dropped] = decode_spans(body, now=time.time())
    [kept] = decode_spans(body, limits=SpanLimits(keep_content=True, max_attributes=1000), now=time.time())
    assert "hunter2" not in json.dumps(dropped.fields)
    assert kept.fields["attributes"]["gen_ai.prompt"] == "my password is hunter2"
    assert kept.fields["status_message"] == "my password is hunter2"


# -- finding 10: a token guards every path but /metrics and /health --------------------------------


@pytest.mark.parametrize(
    ("prometheus", "message"),
    [
        (
            'listen = "0.0.0.0:9464"',
            r"exporters\.prometheus\.listen: 0\.0\.0\.0 is not a loopback address: set "
            r"exporters\.prometheus\.token",
        ),
        ('listen = "[::]:9464"', r"exporters\.prometheus\.listen: \[::\] is not a loopback address"),
        ('listen = "999.1.1.1:9464"', r"exporters\.prometheus\.listen: 999\.1\.1\.1 is not an IP address"),
        ('listen = "::1:9464"', r"exporters\.prometheus\.listen: write an IPv6 address in brackets"),
        ('token = "short"', r"exporters\.prometheus\.token: must be 16 or more of A-Z a-z 0-9"),
        (
            f'token = "{" " * 20}"',
            r"exporters\.prometheus\.token: must be 16 or more of A-Z a-z 0-9 - \. _ ~ \+ / "
            r"\(RFC 6750: no spaces\)$",
        ),  # issue 21 item 12: 20 spaces were accepted
        ('token = "abcdefgh\\u0000ijklmnop"', r"exporters\.prometheus\.token: must be 16 or more"),
        ('token_file = "/nonexistent/token"', r"exporters\.prometheus\.token_file: cannot read the token file"),
    ],
)
def test_listen_and_token_are_validated(tmp_path, prometheus, message):
    from spyglass.config import load_config

    path = tmp_path / "spyglass.toml"
    path.write_text(f"[exporters.prometheus]\n{prometheus}\n")
    with pytest.raises(ConfigError, match=f"^{path}: {message}"):
        load_config(path)


def test_a_non_loopback_address_is_accepted_with_a_token(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    for section in ({"listen": "0.0.0.0:9464", "token": TOKEN}, {"listen": "[::]:9464", "token_file": str(token_file)}):
        server = parse_config({"exporters": {"prometheus": section}}).exporters.prometheus
        assert server.bearer_token() == TOKEN
        assert server.client_url() in ("http://127.0.0.1:9464", "http://[::1]:9464")


def test_with_a_token_every_path_but_metrics_and_health_requires_it(start_agent):
    agent = start_agent(token=f'"{TOKEN}"')
    url, auth = agent["url"], agent["headers"]
    assert httpx.get(f"{url}/metrics").status_code == 200
    assert httpx.get(f"{url}/health").status_code == 200
    for method, path in (("GET", "/debug/sources"), ("POST", "/api/sql"), ("POST", "/v1/traces"), ("GET", "/nope")):
        for headers in ({}, {"Authorization": "Bearer wrong-token-of-enough-length"}, {"Authorization": TOKEN}):
            response = httpx.request(method, f"{url}{path}", headers=headers, content=b"{}")
            assert response.status_code == 401, (path, headers)
            assert response.headers["WWW-Authenticate"] == "Bearer"
    assert httpx.get(f"{url}/debug/sources", headers=auth).status_code == 200
    # round 4: the scheme is case-insensitive (RFC 7235), and every refusal says nosniff
    assert httpx.get(f"{url}/debug/sources", headers={"Authorization": f"bearer {TOKEN}"}).status_code == 200
    refused = httpx.get(f"{url}/nope", headers=auth)
    assert refused.status_code == 404 and refused.headers["X-Content-Type-Options"] == "nosniff"
    assert sql(url, "SELECT count(*) FROM events", auth).json()["rows"] == [[35]]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "spyglass.cli.app",
            "sql",
            "--format",
            "csv",
            "-c",
            str(agent["config"]),
            "SELECT count(*) AS n FROM events",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.splitlines() == ["n", "35"], out.stderr


def test_open_paths_are_configurable(start_agent):
    agent = start_agent(token=f'"{TOKEN}"', open_paths='["/health"]')
    assert httpx.get(f"{agent['url']}/health").status_code == 200
    assert httpx.get(f"{agent['url']}/metrics").status_code == 401
    assert httpx.get(f"{agent['url']}/metrics", headers=agent["headers"]).status_code == 200


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2)."""
    size, n = b"", len(payload)
    while True:
        size += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            break
    return bytes([number << 3 | 2]) + size + payload


def test_an_otlp_attribute_nested_three_thousand_deep_is_refused_as_no_export():
    """Round 4's depth bound on OTLP: a kvlist value in a kvlist value, 3,000 deep (40 KB), is a ValueError
    (a 400), never a RecursionError; protobuf's decoder stops at its own depth limit (100)."""
    value = _field(1, b"x")  # AnyValue.string_value
    for _ in range(3000):
        value = _field(6, _field(1, _field(1, b"k") + _field(2, value)))  # kvlist_value.values[0].value
    now = int(time.time() * 1e9).to_bytes(8, "little")
    span = _field(1, b"0" * 16) + _field(2, b"1" * 8) + _field(5, b"s") + b"\x39" + now + b"\x41" + now
    body = _field(1, _field(2, _field(2, span + _field(9, _field(1, b"a") + _field(2, value)))))
    with pytest.raises(ValueError, match="not an OTLP trace export"):
        decode_spans(body, now=time.time())


def test_a_request_that_keeps_failing_logs_one_traceback_then_counts():
    """Round 4: 2,000 requests failing in 8 s added 15.7 MB of tracebacks to the agent's log."""
    from loguru import logger

    from spyglass.agent import server

    lines: list[str] = []
    sink = logger.add(lines.append, format="{message}")
    try:
        for _ in range(2000):
            try:
                raise OverflowError("date value out of range")
            except OverflowError as exc:
                server.failed(exc, "GET /evidence/X")
    finally:
        logger.remove(sink)
    assert sum("Traceback" in line for line in lines) == 1 and len(lines) <= 5, lines
    assert server.FAILURES["OverflowError"] >= 2000
