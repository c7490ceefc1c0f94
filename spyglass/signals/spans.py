"""A request's log events as the spans of its trace: engine phases, and the gateway around them.

Pure: events in, `PhaseSpan`s out, with the timestamps the lines carry. The engine span hangs
under the serve's server span and the gateway span is the root, by the ids engine.instrument
derives from the request id, so these spans join the live ones of the same trace.

    engine          queued .. done (or the rejection, as an error)
      queue         queued .. prefill start
      prefill       prompt line minus its read time .. prompt line    reused and read tokens
      thinking      prompt line .. thinking line                      reasoning tokens, stop cause
      decode        thinking line .. done                             completion tokens, tool call
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from spyglass.collectors.event import Event


@dataclass
class PhaseSpan:
    name: str
    start: float  # epoch seconds
    end: float
    attributes: dict[str, Any] = field(default_factory=dict)
    children: list[PhaseSpan] = field(default_factory=list)
    error: str | None = None

    @property
    def duration(self) -> float:
        return max(0.0, self.end - self.start)


def engine_span(events: Iterable[Event]) -> PhaseSpan | None:
    """The engine phases of one request, or None before it has finished (done or rejected)."""
    by_kind = {e.kind: e for e in events}
    if "rejected" in by_kind:
        e = by_kind["rejected"]
        return PhaseSpan(
            f"engine {e.instance}",
            e.ts,
            e.ts,
            {"http.response.status_code": e.fields.get("status"), "spyglass.engine.reason": e.fields.get("reason")},
            error=f"#{e.fields.get('code')} {e.fields.get('reason')}",
        )
    if "done" in by_kind and "prompt" not in by_kind:
        return ended_span(by_kind)
    if "done" not in by_kind or "prompt" not in by_kind:
        return None
    prompt, done = by_kind["prompt"], by_kind["done"]
    queued = by_kind.get("queued", prompt)
    thinking = by_kind.get("thinking")
    prefill_start = max(queued.ts, prompt.ts - prompt.fields["ms"] / 1000)
    decode_start = thinking.ts if thinking else prompt.ts
    waited = done.fields.get("queue_ms")
    phases = [
        *(  # llama-server: the wait for a slot, before its task was logged
            [
                PhaseSpan(
                    "wait for a slot",
                    queued.ts - waited / 1000,
                    queued.ts,
                    {"spyglass.queue.basis": done.fields.get("queue_basis")},
                )
            ]
            if isinstance(waited, int) and waited > 0
            else []
        ),
        PhaseSpan("queue", queued.ts, prefill_start, {"spyglass.prefill_depth": queued.fields.get("prefill_depth")}),
        PhaseSpan(
            "prefill",
            prefill_start,
            prompt.ts,
            {
                "spyglass.prompt.reused_tokens": prompt.fields["reused"],
                "spyglass.prompt.read_tokens": prompt.fields["read"],
            },
        ),
    ]
    if thinking:
        phases.append(
            PhaseSpan(
                "thinking",
                prompt.ts,
                thinking.ts,
                {
                    "gen_ai.usage.reasoning.output_tokens": thinking.fields["tokens"],
                    "spyglass.thinking.budget": thinking.fields["max"],
                    "spyglass.thinking.stop": thinking.fields["cause"],
                },
            )
        )
    phases.append(
        PhaseSpan(
            "decode",
            decode_start,
            done.ts,
            {
                "gen_ai.usage.output_tokens": done.fields["completion"],
                "spyglass.tool_call": "tool_call" in by_kind,
                "spyglass.decode_tps": done.fields["decode_tps"],
            },
        )
    )
    outcome = done.fields.get("outcome")
    return PhaseSpan(
        f"engine {done.instance}",
        phases[0].start,
        done.ts,
        {
            "gen_ai.usage.input_tokens": done.fields["prompt"],
            "gen_ai.response.finish_reasons": [done.fields["finish"]],
            "spyglass.tokens.engine": done.fields["prompt"],
            "spyglass.ttft_ms": done.fields["ttft_ms"],
            **({"spyglass.outcome": outcome} if outcome else {}),
            **({"spyglass.client_wait_ms": done.fields["client_wait_ms"]} if "client_wait_ms" in done.fields else {}),
        },
        phases,
        error=what_ended(done) if outcome not in (None, "done") else None,
    )


def what_ended(done: Event) -> str:
    """What became of a task that did not simply finish, in the engine's words."""
    f = done.fields
    outcome = f.get("outcome") or {"abort": "cancelled"}.get(str(f.get("finish")), "error")
    if outcome == "cancelled":
        return "cancelled: the client went away before the answer was complete"
    if outcome == "truncated":
        return f"truncated: the context ran out at {f.get('n_tokens')} tokens"
    status = f" (HTTP {f['status']})" if f.get("status") else ""
    return f"error {f.get('error_reason', 'other')}{status}: {f.get('message', '')}".rstrip(": ")


def ended_span(by_kind: dict[str, Event]) -> PhaseSpan:
    """A task that ended without its timings (cancelled, or answered with an error): from its slot (or the
    moment it was refused) to its end, and the lines that say what happened."""
    done = by_kind["done"]
    queued = by_kind.get("queued", done)
    f = done.fields
    attributes = {
        "spyglass.outcome": f.get("outcome"),
        "spyglass.error.reason": f.get("error_reason"),
        "http.response.status_code": f.get("status"),
        "spyglass.engine.n_tokens": f.get("n_tokens"),
    }
    phases = [
        PhaseSpan(e.kind.replace("_", " "), e.ts, e.ts, {"spyglass.task": e.fields.get("task")})
        for kind in ("cancel", "task_error")
        if (e := by_kind.get(kind)) is not None
    ]
    return PhaseSpan(
        f"engine {done.instance}",
        queued.ts,
        done.ts,
        {k: v for k, v in attributes.items() if v is not None},
        phases,
        error=what_ended(done),
    )


def gateway_span(events: Iterable[Event], engine: PhaseSpan | None) -> PhaseSpan | None:
    """The gateway's view of the request from its log, with the engine span inside, if any."""
    by_kind = {e.kind: e for e in events}
    first = by_kind.get("request") or by_kind.get("reject")
    last = by_kind.get("done") or by_kind.get("overfit") or by_kind.get("reject")
    if first is None or last is None:
        return None
    f = {**first.fields, **last.fields}
    span = PhaseSpan(
        "gateway",
        first.ts,
        max(last.ts, engine.end if engine else last.ts),
        {
            "spyglass.lane": f.get("lane"),
            "spyglass.mode": f.get("mode"),
            "http.response.status_code": f.get("status"),
            "spyglass.tokens.gateway_estimate": f.get("est_tokens"),
            "spyglass.tokens.engine": f.get("engine_prompt"),
            "spyglass.assembly.client_msgs": f.get("client_msgs"),
            "spyglass.assembly.sent_msgs": f.get("sent_msgs"),
        },
        [engine] if engine else [],
        error=None if f.get("status") in (200, None) else str(f.get("status")),
    )
    span.attributes = {k: v for k, v in span.attributes.items() if v is not None}
    return span


def request_tree(engine_events: Iterable[Event], gateway_events: Iterable[Event]) -> PhaseSpan | None:
    """The whole tree the logs know for one request id."""
    engine = engine_span(sorted(engine_events, key=lambda e: e.ts))
    return gateway_span(sorted(gateway_events, key=lambda e: e.ts), engine) or engine
