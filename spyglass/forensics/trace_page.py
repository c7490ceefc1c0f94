"""A request's trace as an HTML page (GET /trace/ID on the agent): the tree `spyglass trace ID` prints,
built by spyglass.forensics.trace from the same events, as nested lists; every value escaped."""

from __future__ import annotations

from html import escape

from spyglass.collectors.clock import format_both
from spyglass.collectors.trace_ids import trace_id_for
from spyglass.config import Config
from spyglass.forensics.page import CSS
from spyglass.forensics.trace import (
    clock_notes,
    engine_span,
    events_of,
    label,
    live_tree,
    outcome,
    request_tree,
    resolve,
)
from spyglass.query.bounded import NotFound
from spyglass.signals.spans import PhaseSpan

TRACE_CSS = "ul.tree { list-style: none; padding-left: 18px; border-left: 1px solid #ddd; } .dim { color: #777; }"


def tree_html(span: PhaseSpan) -> str:
    children = "".join(tree_html(c) for c in span.children)
    return f"<li>{escape(label(span).plain)}" + (f'<ul class="tree">{children}</ul>' if children else "") + "</li>"


def trace_page(config: Config, given: str) -> str:
    """The page of the request `given` names (a request id or a trace id); NotFound (a QueryError) when there is none."""
    request_id = resolve(config, given.strip())
    events = events_of(config, request_id)
    kinds = {name: options.kind for name, options in config.sources.items()}
    engine = [e for e in events if kinds.get(e.source) == "engine_log"]
    spans = [e for e in events if e.kind == "span"]
    root = live_tree(spans, engine_span(engine), request_id) if spans else None
    root = root or request_tree(engine, [e for e in events if kinds.get(e.source) == "gateway_log"])
    if root is None:
        if not events:
            raise NotFound(f"no finished request {request_id} in the store")
        return events_page(request_id, events)
    trace_hex = format(trace_id_for(request_id), "032x")
    notes = "".join(f"<li>{escape(t.plain)}</li>" for t in outcome(events, kinds) + clock_notes(root))
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>trace {escape(request_id)}</title>'
        f"<style>{CSS}{TRACE_CSS}</style></head><body>\n<h1>Request {escape(request_id)}</h1>"
        f'<div class="window">trace {trace_hex}, started {escape(format_both(root.start))}</div>'
        f'<ul class="tree">{tree_html(root)}</ul>'
        + (f"<h2>Notes</h2><ul>{notes}</ul>" if notes else "")
        + f'<p class="dim"><small>The same tree as <code>spyglass trace {escape(request_id)}</code>.</small></p>'
        "</body></html>\n"
    )


def events_page(request_id: str, events: list) -> str:
    """A request without an engine or gateway tree (only its infer-store record, say): its stored events, with
    their numeric and yes/no fields only (no text of a prompt or an answer leaves the store this way)."""

    def figures(e) -> str:
        return ", ".join(f"{k}={v}" for k, v in e.fields.items() if isinstance(v, (int, float, bool)))

    rows = "".join(
        f'<tr><td class="nowrap">{escape(format_both(e.ts))}</td><td>{escape(e.source)}</td><td>{escape(e.kind)}</td>'
        f"<td>{escape(e.instance or '')}</td><td>{escape(figures(e))}</td></tr>"
        for e in events
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>trace {escape(request_id)}</title>'
        f"<style>{CSS}{TRACE_CSS}</style></head><body>\n<h1>Request {escape(request_id)}</h1>"
        "<p>No engine or gateway lines of this request are stored, so no tree of its phases: its stored events.</p>"
        f"<table><tr><th>time</th><th>source</th><th>kind</th><th>instance</th><th>figures</th></tr>{rows}</table>"
        "</body></html>\n"
    )
