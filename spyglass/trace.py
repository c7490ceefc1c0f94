"""`spyglass trace REQUEST_ID`: one request's tree of spans, rebuilt from the store's events."""
from __future__ import annotations

import json
import re

from rich.console import Console
from rich.tree import Tree

from collectors.clock import format_both
from collectors.event import Event
from engine.spans import PhaseSpan, request_tree
from spyglass.config import Config
from spyglass.query import QueryError, run_readonly

REQUEST_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{2,32}$")


def events_of(config: Config, request_id: str) -> list[Event]:
    if not REQUEST_ID.match(request_id):
        raise QueryError(f"not a request id: {request_id!r} (expected YYYYMMDD-HHMMSS-hex)")
    api = f"http://{config.exporters.prometheus.listen}/api/sql" if config.exporters.prometheus.enabled else None
    columns, rows = run_readonly(config.store_path(), "SELECT epoch(ts), source, kind, instance, fields::VARCHAR"
                                 f" FROM events WHERE request_id = '{request_id}' ORDER BY ts", api)
    return [Event(float(ts), source, kind, instance, json.loads(fields), request_id)
            for ts, source, kind, instance, fields in rows]


def label(span: PhaseSpan) -> str:
    facts = ", ".join(f"{k.removeprefix('spyglass.').removeprefix('gen_ai.')}={v}" for k, v in span.attributes.items())
    status = f" [red]{span.error}[/]" if span.error else ""
    return f"[bold]{span.name}[/] {span.duration:.3f} s{status}  [dim]{facts}[/]"


def add(tree: Tree, span: PhaseSpan) -> None:
    for child in span.children:
        add(tree.add(label(child)), child)


def print_trace(config: Config, request_id: str) -> None:
    events = events_of(config, request_id)
    kinds = {name: options.kind for name, options in config.sources.items()}
    root = request_tree([e for e in events if kinds.get(e.source) == "engine_log"],
                        [e for e in events if kinds.get(e.source) == "gateway_log"])
    if root is None:
        raise QueryError(f"no finished request {request_id} in the store")
    tree = Tree(f"{label(root)}\n[dim]{request_id}, started {format_both(root.start)}[/]")
    add(tree, root)
    Console().print(tree)
