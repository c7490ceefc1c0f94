"""H19: spyglass's own blind spots. Incident §6.2 of the seed: evictions= were only in the engine log."""

from __future__ import annotations

from spyglass.alerting.heuristics.model import INSTANCE, SECONDS, Alert, Check, Deployment, Heuristic, Threshold
from spyglass.alerting.heuristics.promql import num, ratio, spoken


def _since_last(source: str, instance: str) -> str:
    """Seconds since the source's newest event, labelled with the instance it belongs to."""
    return (
        f'label_replace(time() - spyglass_source_last_event_timestamp_seconds{{source="{source}"}},'
        f' "instance", "{instance}", "", "")'
    )


def _silent(d: Deployment, silent: float, polls_missed: float) -> str:
    """Only sources that should be speaking: an engine log that writes while idle (Strata's [stats] line
    every 10 s; a loading engine writes none) while its process runs and it is ready, a status endpoint
    (a serve's, llama-server's) past `polls_missed` times the time its next poll was due. A supervisord,
    switch or gateway log is quiet by nature when nothing happens, and so is an idle llama-server's log:
    its poller's events are its liveness."""
    engines = [
        f"({_since_last(source, instance)} > {num(silent)}\n"
        "    and on (host, instance) (spyglass_host_process_up == 1)\n"
        "    and on (host, instance) (max by (host, instance) (spyglass_engine_ready) == 1))"
        for source, instance in d.heartbeat_sources.items()
    ]
    status = [
        f"{_since_last(source, instance)} > {num(max(silent / 6, polls_missed * due))}"
        for source, (instance, due) in d.status_sources.items()
    ]
    return "\n  or\n  ".join(engines + status) or "vector(0) > 1"


def build(d: Deployment) -> Heuristic:
    s = d.settings
    silent, unmatched, ahead, polls_missed = s.source_silent_minutes * 60, 0.05, 300, 3.0
    unreadable, unreadable_lines = 0.5, 20
    lines = "spyglass_source_lines_total"
    scrape_hold, down_hold, parse_window, read_window, read_hold = "2m", "5m", "15m", "15m", "10m"
    return Heuristic(
        id="H19",
        title="spyglass's own blind spots",
        incident="§6.2 of the seed: evictions= were only in the engine log",
        symptom="spyglass's target is down; a source went silent while its process runs; lines stop parsing (format drift);"
        " a source writes lines but spyglass can read few of them (an unknown format, a wrong preset, a wrapper);"
        " a status endpoint is down; a source's clock runs ahead.",
        wrong_guess="-",
        check=Check(
            text="spyglass's own per-source health.",
            promql="spyglass_source_up or spyglass_source_last_event_timestamp_seconds",
            shell="curl -s http://127.0.0.1:9464/debug/sources",
        ),
        knobs=("sources.<name>.path / tz", "sources.<name>.patterns (after an upgrade)"),
        thresholds=(
            Threshold(
                name="silent_seconds",
                value=silent,
                unit="s",
                meaning="engine log without a line",
                setting="alerts.source_silent_minutes",
            ),
            Threshold(
                name="polls_missed",
                value=polls_missed,
                unit="polls",
                meaning="status endpoint without an event for this many times its next poll's due time",
            ),
            Threshold(
                name="unmatched_share", value=unmatched, unit="ratio", meaning="share of lines no pattern matched"
            ),
            Threshold(
                name="unreadable_share",
                value=unreadable,
                unit="ratio",
                meaning="share of a source's lines it could not use: of no known shape or pattern (with or without a level"
                " letter) or refused as invalid (a forged stamp or clock, a body past its bounds); at or above it fires",
            ),
            Threshold(
                name="unreadable_lines",
                value=unreadable_lines,
                unit="lines",
                meaning="fewest lines in the window for the unreadable share to count",
            ),
            Threshold(name="ahead_seconds", value=ahead, unit="s", meaning="newest event this far in the future"),
        ),
        alerts=(
            Alert(
                name="SpyglassTargetDown",
                severity="critical",
                expr=f'up{{job="{s.job}"}} == 0 or absent(up{{job="{s.job}"}})',
                for_=scrape_hold,
                summary="spyglass's /metrics cannot be scraped: the pager is blind.",
                description="Prometheus has not scraped spyglass (job {{ $labels.job }}) for "
                + spoken(scrape_hold)
                + ".",
            ),
            Alert(
                name="SpyglassSourceDown",
                severity="warning",
                expr="spyglass_source_up == 0",
                for_=down_hold,
                summary="A spyglass source cannot be read.",
                description="Source {{ $labels.source }} could not be read (file) or did not answer (endpoint) for "
                + spoken(down_hold)
                + ".",
            ),
            Alert(
                name="SpyglassSourceSilent",
                severity="warning",
                expr=_silent(d, silent, polls_missed),
                for_="2m",
                summary="A source that should be speaking is silent: {{ $labels.source }} of " + INSTANCE + ".",
                description="No event from {{ $labels.source }} ("
                + INSTANCE
                + f") for {SECONDS}: a ready Strata engine writes a"
                " [stats] line every 10 s while its process runs, a status endpoint (a serve's, llama-server's) is"
                " polled even while it fails; an idle llama-server's log is quiet, and not watched for silence.",
            ),
            Alert(
                name="SpyglassUnparsedLines",
                severity="warning",
                expr=ratio(
                    f'rate({lines}{{outcome="unmatched"}}[{parse_window}])',
                    f"rate({lines}[{parse_window}])",
                    "host, source",
                )
                + f" > {num(unmatched)}",
                for_=parse_window,
                summary="Lines of a source stopped parsing: format drift.",
                description="{{ $value | humanizePercentage }} of source {{ $labels.source }}'s lines matched no pattern over "
                + spoken(parse_window)
                + ".",
            ),
            Alert(
                name="SpyglassSourceUnreadable",
                severity="warning",
                expr=ratio(
                    f'increase({lines}{{outcome=~"unmatched|unprefixed|invalid"}}[{read_window}])',
                    f"increase({lines}[{read_window}])",
                    "host, source",
                )
                + f" >= {num(unreadable)}\n"
                f"  and on (host, source) sum by (host, source) (increase({lines}[{read_window}])) >= {unreadable_lines}",
                for_=read_hold,
                summary="A source writes lines spyglass cannot read: {{ $labels.source }}.",
                description="{{ $value | humanizePercentage }} of source {{ $labels.source }}'s lines over "
                + spoken(read_window)
                + " could not be used: of no shape or pattern spyglass knows (a new build's format, a wrong preset, an"
                " unknown wrapper) or refused as invalid (stamps or clocks it cannot believe)."
                " Run `spyglass check-log` on the file to see what it reads and the shapes it cannot.",
            ),
            Alert(
                name="SpyglassSourceClockAhead",
                severity="warning",
                expr=f"spyglass_source_last_event_timestamp_seconds - time() > {ahead}",
                for_="5m",
                summary="A source's timestamps are in the future: its time zone is wrong.",
                description="Source {{ $labels.source }}'s newest event is {{ $value | humanizeDuration }} ahead of Prometheus's clock.",
            ),
            Alert(
                name="Watchdog",
                severity="info",
                expr="vector(1)",
                for_="0m",
                summary="The alerting pipeline works (always firing).",
                description="Always fires; the heartbeat receiver alarms when it stops arriving (a dead man's switch).",
            ),
        ),
        diagnosis="Two sources' clocks disagreeing while both are active needs their events side by side in the store.",
    )
