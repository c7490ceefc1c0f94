"""The timeline: every stored event of the window, in the order it was stored."""

from __future__ import annotations

from spyglass.forensics.views.schema import TS, View, clocks, cols

TIMELINE = View(
    "timeline",
    "Every stored event of the window, one row an event, in the order it was stored.",
    f"""
SELECT {clocks("ts")}, seq, source, source_kind, kind, instance, host, request_id, fields FROM ev""",
    (
        *TS,
        *cols("""
    seq int: Order of storage (ties of ts keep the order the lines were read in)
    source text: The configured source name, e.g. engine-b
    source_kind text: The collector kind of that source (engine_log, gateway_log, ...); NULL for spans, alerts and smoke results
    kind text: The event kind, e.g. park, done, exited
    instance text: strata-a, strata-b, rag-proxy, supervisord, ...
    host text: Host that stored it
    request_id text: The gateway's request id, where the event belongs to one
    fields json: Every typed field of the event (the collector's named groups)
"""),
    ),
)
