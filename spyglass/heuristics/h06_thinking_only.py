"""H6: Responses that stop inside reasoning or are thinking-only. Incident 3 (special-token early stop, 2026-10-17)."""
from __future__ import annotations

from spyglass.heuristics.model import INSTANCE, LANE, PERCENT, Alert, Check, Deployment, Heuristic, Probe, Threshold, probe_sql
from spyglass.heuristics.promql import STOPS_REASONING, THINKING_ONLY, num


def build(d: Deployment) -> Heuristic:
    share = 0.05

    def counts(prefix: str, condition: str) -> str:
        return (f"count(*) FILTER (WHERE {condition}) AS {prefix}_requests,"
                f" count(*) FILTER (WHERE {condition} AND thinking_only) AS {prefix}_thinking_only,\n"
                f"  count(*) FILTER (WHERE {condition} AND invalid_tool_json > 0) AS {prefix}_broken_tool_json,"
                f" count(*) FILTER (WHERE {condition} AND coalesce(body_content_chars, content_chars) > 0)"
                f" AS {prefix}_visible_content")
    # Beyond the metric: the share among prompts with special-token literals (the 58 / 295 split).
    probe = Probe(alert="ThinkingOnlyResponses", sql=probe_sql(__file__, share=num(share)),
        summary="On lane {lane}, {with_literals_thinking_only} of {with_literals_requests} responses to prompts with"
        " special-token literals were thinking-only, against {without_literals_thinking_only} of"
        " {without_literals_requests} without; visible text {with_literals_visible_content} against"
        " {without_literals_visible_content}.",
        figures=tuple(f"{p}_{c}" for p in ("with_literals", "without_literals")
              for c in ("requests", "thinking_only", "broken_tool_json", "visible_content"))
        + ("thinking_only", "requests"))
    return Heuristic(
        id="H6", title="Responses that stop inside reasoning or are thinking-only", incident="3 (special-token early stop, 2026-10-17)",
        symptom="A share of responses have reasoning but no visible text and no tool call, or stopped while reasoning.",
        wrong_guess="long context breaks it",
        check=Check(text="Same day, same lane: requests with special-token literals against those without (58 thinking-only"
              " against 0 of 295).",
              sql="SELECT fields->>'lane' AS lane, (fields->>'special_literals')::INT > 0 AS special_tokens,"
                  " count(*) AS requests, count(*) FILTER ((fields->>'thinking_only')::BOOLEAN) AS thinking_only"
                  " FROM events WHERE kind = 'request_body' GROUP BY ALL ORDER BY ALL"),
        knobs=("the serve's prompt_escapes fix", "lane routing to a fixed serve build"),
        thresholds=(Threshold(name="thinking_only_share", value=share, unit="ratio", meaning="share of responses that are thinking-only"),),
        alerts=(Alert(name="ThinkingOnlyResponses", severity="warning", expr=f"{THINKING_ONLY} > {num(share)}", for_="15m",
               summary=f"Lane {LANE} answers with reasoning only.",
               description=f"{PERCENT} of lane {LANE}'s responses in the last hour had reasoning but no text and no tool call."),
         Alert(name="StopsWhileReasoning", severity="warning", expr=f"{STOPS_REASONING} > {num(share)}", for_="15m",
               summary=f"{INSTANCE} stops responses inside reasoning.",
               description=f"{PERCENT} of {INSTANCE}'s responses in the last hour stopped while reasoning.")),
        diagnosis="The 58/295 split needs the sent prompts' special-token literals: request_body events.",
        probe=probe)
