"""What our own checks said: the alerts Alertmanager sent, and the smoke gate's runs."""

from __future__ import annotations

from spyglass.forensics.views.schema import ALERT, SMOKE, TS, View, clock_columns, clocks, cols, instant

ALERTS = View(
    "alerts",
    "Alert notifications, as Alertmanager's webhook (POST /api/alerts) stores them: events of"
    " kind `alert` whose fields are the Alertmanager alert (alertname, status, labels, startsAt, endsAt).",
    f"""
SELECT {clocks("ts")}, source, coalesce({ALERT("alertname")}, {ALERT("labels")}->>'alertname') AS alertname,
  {ALERT("status")} AS status, {ALERT("labels")}->>'severity' AS severity,
  coalesce({ALERT("labels")}->>'instance', instance) AS instance, {ALERT("labels")} AS labels,
  {ALERT("annotations")}->>'summary' AS summary,
  {clocks(instant(ALERT("startsAt")), "starts")},
  {clocks(f"CASE WHEN {ALERT('endsAt')} > 0 THEN {instant(ALERT('endsAt'))} END", "ends")}
FROM ev_alertmanager WHERE kind = 'alert'""",
    (
        *TS,
        *cols("""
    source text: The receiving source
    alertname text: labels.alertname
    status text: firing or resolved
    severity text: labels.severity
    instance text: labels.instance, else the event's instance
    labels json: Every label of the alert
    summary text: annotations.summary
"""),
        *clock_columns("starts", "startsAt"),
        *clock_columns("ends", "endsAt; NULL while firing (Alertmanager sends 0001-01-01)"),
    ),
)

SMOKE_GATES = View(
    "smoke_gates",
    "Runs of the smoke gate (`spyglass smoke --config`), one row a run: passed or"
    " failed, why, the instance it gated, latencies, the samples file's hash.",
    f"""
SELECT {clocks("ts")}, instance, kind = 'smoke_passed' AS passed, {SMOKE("reason")} AS reason, {SMOKE("url")} AS url,
  {SMOKE("samples")} AS samples, {SMOKE("ttft_ms_median")} AS ttft_ms_median, {SMOKE("ttft_ms_max")} AS ttft_ms_max,
  {SMOKE("waited_seconds")} AS waited_seconds, {SMOKE("samples_file")} AS samples_file,
  {SMOKE("samples_sha256")} AS samples_sha256, {SMOKE("outcomes")} AS outcomes, host
FROM ev_smoke WHERE kind IN ('smoke_passed', 'smoke_failed')""",
    (
        *TS,
        *cols("""
    instance text: The engine instance the run gated (--instance, or the serve_status source polling --url)
    passed bool: The gate passed
    reason text: The gate's reason: N samples passed, or the first failing check
    url text: The serve URL it checked
    samples int: Samples answered (a failing run stops at the first failure)
    ttft_ms_median float: Median TTFT of the answered samples (the serve's x-ttft-ms, else wall time)
    ttft_ms_max float: Slowest TTFT of the answered samples
    waited_seconds float: Seconds /health took to answer 200 (the probe budget's share used)
    samples_file text: The samples file as given
    samples_sha256 text: SHA-256 of the samples file: which fixed samples the verdict is about
    outcomes json: Per sample: name, status, ttft_ms, finish, problem
    host text: Host whose agent stored it
"""),
    ),
)
