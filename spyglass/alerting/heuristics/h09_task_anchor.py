"""H9: Assembly dropped the task anchor. Incident 5."""

from __future__ import annotations

from spyglass.alerting.heuristics.model import (
    LANE,
    VALUE,
    Alert,
    Check,
    Deployment,
    Evidence,
    Heuristic,
    Probe,
    Words,
    probe_sql,
)
from spyglass.alerting.heuristics.promql import HOURLY, last

SERVE_ONLY = (
    "it reads the Strata serve's infer store (its request and response records); llama-server has no serve layer"
)


def build(d: Deployment) -> Heuristic:
    probe = Probe(
        needs=("infer_store",),
        alert="AssemblyLostTaskAnchor",
        sql=probe_sql(__name__),
        summary="{anchor_lost} requests on lane {lane} ({sessions} sessions) were sent without the client's first user"
        " message; the worst sent {sent_msgs} of the client's {client_msgs} messages.",
        figures=("anchor_lost", "sessions", "sent_msgs", "client_msgs", "most_dropped_msgs"),
    )
    return Heuristic(
        words={"llama_server": Words(not_applicable=SERVE_ONLY)},
        evidence=Evidence(
            control="control group",
            text="The messages the client sent against those the assembly sent on.",
            this="{sent_msgs} messages sent to the model",
            other="{client_msgs} messages from the client",
            series="requests",
        ),
        id="H9",
        title="Assembly dropped the task anchor",
        incident="5",
        symptom="RAG assembly dropped most client messages, and the client's first user message is gone from the sent request.",
        wrong_guess="the tool schema got lost",
        check=Check(
            text="Is the client's first user message in the sent request?",
            sql="SELECT ts, request_id, lane FROM events_infer_store WHERE kind = 'request_body'"
            " AND anchor_survived = false ORDER BY ts DESC LIMIT 20",
        ),
        knobs=("the gateway's assembly budget", "pin the first user message in assembly"),
        thresholds=(),
        alerts=(
            Alert(
                name="AssemblyLostTaskAnchor",
                severity="warning",
                expr=f"sum by (host, lane) (increase(spyglass_infer_anchor_lost_total[{HOURLY}])) > 0",
                for_="5m",
                summary=f"Assembly on lane {LANE} drops the client's first user message.",
                description=f"{VALUE} requests on lane {LANE} in {last(HOURLY)} were sent without the client's task anchor.",
            ),
        ),
        diagnosis="Which messages were dropped needs the client and sent message lists of the request body.",
        probe=probe,
    )
