"""`spyglass trace ID`: one request's tree of spans, rebuilt from the store's events.

ID is a request id, or a trace id (32 hex digits, as on an exemplar of /metrics). A trace id is
resolved to its request in one query: the stored request id whose `trace_id_for` it is (DuckDB's
sha256 over the distinct request ids, so it works when no span was ever pushed), else the request
id a pushed span of that trace carries (a trace the client started itself).
"""

from __future__ import annotations

import json
import re

from rich.text import Text
from rich.tree import Tree

from spyglass.collectors.clock import format_both
from spyglass.collectors.event import Event
from spyglass.collectors.trace_ids import span_id_for, trace_id_for
from spyglass.config import Config
from spyglass.forensics.run import ask_store
from spyglass.query.bounded import NotFound, QueryError
from spyglass.signals.spans import PhaseSpan, engine_span, request_tree
from spyglass.terminal.console import console_for, plain

REQUEST_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{2,32}$")
TRACE_ID = re.compile(r"^[0-9a-f]{32}$")


def request_of(config: Config, trace_hex: str) -> str:
    """The request id of a trace id (32 lowercase hex digits, already checked)."""
    answer = ask_store(
        config,
        "SELECT request_id FROM (SELECT DISTINCT request_id FROM events WHERE request_id IS NOT NULL)"
        f" WHERE substr(sha256('spyglass-trace:' || request_id), 1, 32) = '{trace_hex}'"
        " UNION ALL (SELECT request_id FROM events_otlp WHERE kind = 'span' AND request_id IS NOT NULL"
        f" AND trace_id = '{trace_hex}' LIMIT 1) LIMIT 1",
    )
    if not answer.rows:
        raise NotFound(f"no request of trace {trace_hex} in the store")
    return str(answer.rows[0][0])


def resolve(config: Config, given: str) -> str:
    """The request id `given` names: itself, or the request of a trace id."""
    if REQUEST_ID.match(given):
        return given
    if TRACE_ID.match(given.lower()):
        return request_of(config, given.lower())
    raise QueryError(
        f"not a request id or a trace id: {given!r:.80} (expected YYYYMMDD-HHMMSS-hex, or a trace id of 32 hex digits)"
    )


def events_of(config: Config, request_id: str) -> list[Event]:
    if not REQUEST_ID.match(request_id):
        raise QueryError(f"not a request id: {request_id!r} (expected YYYYMMDD-HHMMSS-hex)")
    trace_hex = format(trace_id_for(request_id), "032x")  # client spans carry no request id, only the trace
    answer = ask_store(
        config,
        "SELECT epoch(ts), source, kind, instance, fields::VARCHAR"
        f" FROM events WHERE request_id = '{request_id}' OR seq IN (SELECT seq FROM events_otlp"
        f" WHERE trace_id = '{trace_hex}') ORDER BY ts",
    )
    return [
        Event(float(ts), source, kind, instance, json.loads(fields), request_id)
        for ts, source, kind, instance, fields in answer.rows
    ]


STATUS_KEYS = ("http.status_code", "http.response.status_code")  # a span's HTTP answer, old and new conventions


def label(span: PhaseSpan) -> Text:
    """One span's line, its names and values as data (no markup read, control characters escaped)."""
    status = next((span.attributes[k] for k in STATUS_KEYS if k in span.attributes), None)
    facts = ", ".join(
        [
            *([f"status={status}"] if status is not None else []),
            *(
                f"{k.removeprefix('spyglass.').removeprefix('gen_ai.')}={v}"
                for k, v in span.attributes.items()
                if k not in STATUS_KEYS
            ),
        ]
    )
    line = Text.assemble(plain(span.name, "bold"), f" {span.duration:.3f} s")
    if span.error:
        line.append_text(Text(" ").append_text(plain(span.error, "red")))
    return line.append_text(Text("  ").append_text(plain(facts, "dim")))


def add(tree: Tree, span: PhaseSpan) -> None:
    for child in span.children:
        add(tree.add(label(child)), child)


def live_tree(spans: list[Event], engine: PhaseSpan | None, request_id: str) -> PhaseSpan | None:
    """The spans the gateway and serve pushed, with the engine phases from the log under the serve."""
    nodes: dict[str, PhaseSpan] = {}
    roots: list[PhaseSpan] = []
    for span in spans:
        f = span.fields
        attributes = {
            k: v
            for k, v in f["attributes"].items()
            if k.startswith(("gen_ai.usage", "spyglass.tokens")) or k in STATUS_KEYS
        }
        nodes[f["span_id"]] = PhaseSpan(
            f"{f['service']}: {f['name']}",
            f["start"],
            f["end"],
            attributes,
            error=(f.get("status_message") or "error") if f["status"] == "error" else None,
        )
    for span in spans:
        parent = nodes.get(span.fields.get("parent_span_id") or "")  # a root's is NULL, so absent from the store
        (parent.children if parent else roots).append(nodes[span.fields["span_id"]])
    serve = nodes.get(format(span_id_for("serve", request_id), "016x"))
    pushed_engine = serve is not None and any(c.name.split(": ", 1)[-1].startswith("engine ") for c in serve.children)
    if serve is not None and engine is not None and not pushed_engine:  # the agent may have pushed them itself
        serve.children.append(engine)
    for node in nodes.values():
        node.children.sort(key=lambda child: child.start)
    return min(roots, key=lambda root: root.start) if roots else None


def print_trace(config: Config, given: str) -> None:
    """Print the tree of a request, named by its request id or by its trace id."""
    request_id = resolve(config, given.strip())  # an id taken from `--format csv` output ends in "\r"
    events = events_of(config, request_id)
    kinds = {name: options.kind for name, options in config.sources.items()}
    engine = [e for e in events if kinds.get(e.source) == "engine_log"]
    spans = [e for e in events if e.kind == "span"]
    root = live_tree(spans, engine_span(engine), request_id) if spans else None
    root = root or request_tree(engine, [e for e in events if kinds.get(e.source) == "gateway_log"])
    if root is None:
        raise QueryError(f"no finished request {request_id} in the store")
    trace_hex = format(trace_id_for(request_id), "032x")
    heading = label(root).append(f"\n{request_id} (trace {trace_hex}), started {format_both(root.start)}", "dim")
    tree = Tree(heading)
    add(tree, root)
    said = outcome(events, kinds) + clock_notes(root)
    console = console_for(None, tree, *said)
    console.print(tree)
    for line in said:
        console.print(line)


def outcome(events: list[Event], kinds: dict[str, str]) -> list[Text]:
    """What became of a request that did not simply succeed, from the gateway's lines and the infer store:
    its status and the reason (`#545 prompt too long: 300004 > 262144`, a 429's limit), and each blind retry
    (what the gateway changed, and what the retry got). Nothing for a plain 200."""
    gateway = [e for e in events if kinds.get(e.source) == "gateway_log"]
    stored = [e for e in events if kinds.get(e.source) == "infer_store" and e.kind == "request"]
    failed = [e for e in gateway if e.kind in ("overfit", "reject")]
    retries = [e for e in gateway if e.kind == "retry_on_overfit"]
    final = final_status(stored + [e for e in gateway if e.kind in ("done", "reject")], failed)
    if not failed and not retries and final in (None, 200):
        return []
    reason = next((e.fields.get("upstream") or e.fields.get("reason") for e in failed), None)
    first = failed[0].fields.get("status") if failed else final
    lines = [Text.assemble(("status: ", "bold"), plain(f"{first}" + (f" {reason}" if reason else "")))]
    lines += [retry_line(retry, final) for retry in retries]
    if final is not None and final != first:
        lines.append(Text.assemble(("answered: ", "bold"), plain(str(final))))
    return lines


def final_status(answers: list[Event], failed: list[Event]) -> object:
    """The request's last status: the last answer's that has one (the store's, then the gateway's), else
    that of the gateway's last refusal; None when nothing says."""
    statuses = [e.fields.get("status") for e in answers]
    return next((s for s in reversed(statuses) if s is not None), failed[-1].fields.get("status") if failed else None)


def retry_line(retry: Event, final: object) -> Text:
    """A blind retry: what the gateway changed, and what the request got in the end."""
    fields = retry.fields
    return Text.assemble(
        ("blind retry: ", "bold"),
        plain(
            f"the gateway sent the same prompt again with max_tokens {fields.get('max_from')} -> {fields.get('max_to')}"
            f" (the prompt is what did not fit): {final if final is not None else 'no answer stored'}"
        ),
    )


def walk(span: PhaseSpan):
    yield span
    for child in span.children:
        yield from walk(child)


def clock_notes(root: PhaseSpan) -> list[Text]:
    """A note for each span whose logged TTFT is longer than the span itself: the log's durations then run
    on another clock than its timestamps (the demo's emulated engines log model time, 200x the wall clock),
    and the trace says so instead of showing the contradiction unexplained."""
    notes = []
    for span in walk(root):
        ttft = span.attributes.get("spyglass.ttft_ms")
        if isinstance(ttft, (int, float)) and ttft / 1000 > 1.5 * span.duration + 0.05:
            notes.append(
                Text.assemble(
                    ("clock: ", "bold"),
                    plain(
                        f"{span.name} logs ttft_ms={ttft:g} for a span of {span.duration * 1000:.0f} ms: the durations it logs run"
                        " on another clock than its timestamps (the demo's emulated engines log model time)"
                    ),
                )
            )
    return notes
