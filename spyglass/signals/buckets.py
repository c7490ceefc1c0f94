"""Histogram bucket bounds, each list defined once: the catalogue's histograms and the
instrumentation shipped into the observed processes (engine/instrument.py) use the same ones; and
the `le` label text of a bound, as /metrics, the backfill and the rules write it."""


def le_label(bound: float) -> str:
    """The `le` label value of a bucket bound (prometheus_client style: 0.25, 1.0, +Inf)."""
    return "+Inf" if bound == float("inf") else repr(float(bound))


# OpenTelemetry's advisory TTFT head (1 ms .. 10 s) with vLLM's tail out to 30 minutes: CPU-expert
# engines with 250k-token prompts take minutes, and a capped bucket list hides exactly that tail.
LATENCY_SECONDS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    320.0,
    640.0,
    1200.0,
    1800.0,
)
TOKENS_PER_SECOND = (
    0.5,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    70.0,
    80.0,
    90.0,
    100.0,
    120.0,
    150.0,
    200.0,
)
SNAPSHOT_BYTES = tuple(float(1 << k) for k in range(24, 36))  # 16 MiB .. 32 GiB
PROMPT_TOKENS = (1024.0, 4096.0, 16384.0, 32768.0, 65536.0, 131072.0, 200000.0, 262144.0, 524288.0, 1048576.0)

# The GenAI semantic conventions' advisory bounds for gen_ai.server.request.duration and
# gen_ai.server.time_per_output_token, the first with the same 30-minute tail as LATENCY_SECONDS.
REQUEST_DURATION_SECONDS = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
    160.0,
    320.0,
    640.0,
    1200.0,
    1800.0,
)
TIME_PER_OUTPUT_TOKEN_SECONDS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)
TOKEN_COUNTS = tuple(float(4**k) for k in range(14))  # gen_ai.client.token.usage: 1 .. 67M tokens
