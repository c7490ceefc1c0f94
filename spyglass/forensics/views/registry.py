"""VIEWS: the one table of views, in the order docs/forensics.md lists them and a query's CTEs define them."""

from __future__ import annotations

from spyglass.forensics.views.lifecycle import DEPLOYS, PROCESS_EVENTS, STATUS_SNAPSHOTS
from spyglass.forensics.views.requests import ENGINE_REQUESTS, GATEWAY_REQUESTS, INFER_REQUESTS, REQUESTS, SPANS
from spyglass.forensics.views.resources import CACHE_EVENTS, HOST_SAMPLES
from spyglass.forensics.views.schema import View
from spyglass.forensics.views.timeline import TIMELINE
from spyglass.forensics.views.verdicts import ALERTS, SMOKE_GATES

VIEWS: dict[str, View] = {
    v.name: v
    for v in (
        TIMELINE,
        ENGINE_REQUESTS,
        CACHE_EVENTS,
        PROCESS_EVENTS,
        DEPLOYS,
        STATUS_SNAPSHOTS,
        ALERTS,
        SMOKE_GATES,
        SPANS,
        GATEWAY_REQUESTS,
        INFER_REQUESTS,
        HOST_SAMPLES,
        REQUESTS,
    )
}
