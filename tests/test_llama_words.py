"""Issue 37, item 5: every page about a llama-server instance is in llama.cpp's words.

Over every heuristic of the catalogue: a finding of a llama_server instance, from a probe row with every
figure present and from one with none, and its evidence comparison, never print `?` and never name a Strata
flag; a heuristic that does not apply to llama-server says so (and why) instead of "could not check". Then a
real store: llama-server's own log (the 0.3.36 build's, tests/fixtures/llama/) ingested by `spyglass ingest`,
`diagnose` over it, and the evidence page of every alert for instance llama-a, as HTML and as text.
"""

from __future__ import annotations

import re
import shutil
from datetime import UTC, datetime, timedelta
from html import unescape
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spyglass.alerting.heuristics import Deployment, catalogue
from spyglass.alerting.rules import alerts, render_runbook
from spyglass.cli.app import app
from spyglass.config import load_config
from spyglass.forensics.diagnose import diagnose, fields_of, finding_of, instant, summarise
from spyglass.forensics.evidence import build
from spyglass.forensics.evidence_page import html, text
from spyglass.forensics.run import Query, Window, query
from spyglass.forensics.times import request_id_zones, request_window

# Strata's engine flags and its heartbeat, and the Strata stack's gateway: never on a llama-server page.
STRATA = (
    "--conversation-cache-mib",
    "--prompt-cache-every",
    "--pool-workers",
    "--slots",
    "--ctx",
    "[stats]",
    "gateway",
)
LLAMA = Deployment(engines={"llama-a": "llama_server"})
FIXTURE = Path(__file__).parent / "fixtures" / "llama" / "0.3.36" / "verbose" / "server.log"


def strata_words(text: str) -> list[str]:
    return [word for word in STRATA if word in text]


def rows(h) -> list[dict]:
    """A probe row with every column the templates name filled, and one with only where and when."""
    said = h.speaking("llama_server")
    names = set(h.probe.figures) | fields_of(said.probe.summary)
    if said.evidence is not None:
        names |= fields_of(said.evidence.this) | fields_of(said.evidence.other)
    where = {"instance": "llama-a", "lane": "normal", "start_utc": None, "end_utc": None}
    return [{**dict.fromkeys(names, 1234), **where}, {**dict.fromkeys(names), **where}]


PROBED = [h for h in catalogue(LLAMA) if h.probe is not None]


@pytest.mark.parametrize("h", PROBED, ids=[h.id for h in PROBED])
def test_a_llama_finding_shows_what_is_known_in_llamas_words(h) -> None:
    said = h.speaking("llama_server")
    for row in rows(h):
        finding = finding_of(h, row, "", LLAMA)
        if not h.applies_to("llama_server"):
            assert finding is None and h.why_not("llama_server")
            continue
        assert finding is not None
        page = " ".join([finding.summary, finding.check, finding.wrong_guess, *finding.knobs])
        assert "?" not in finding.summary and not strata_words(page), (h.id, page)
        assert finding.summary.count("Not known") <= 1
        if said.evidence is not None and not h.metrics_only("llama_server"):
            for template in (said.evidence.this, said.evidence.other):
                compared = summarise(template, row, h.unknown("llama_server"))
                assert "?" not in compared and not strata_words(compared), (h.id, compared)


def test_what_llama_server_cannot_give_is_said_once_with_why() -> None:
    h3 = next(h for h in catalogue(LLAMA) if h.id == "H3")
    row = {**rows(h3)[0], "budget_bytes": None, "slots": None}
    said = finding_of(h3, row, "", LLAMA)
    assert said is not None
    assert said.summary.startswith("llama-a evicted 1,234 prompts from its host prompt cache (up to 1234 a minute).")
    assert "The largest evicted entry was 1,234 bytes." in said.summary
    assert said.summary.endswith(
        "Not known: budget bytes, slots (the --cache-ram limit is read from a running llama-server's command line"
        " or its `- cache state:` lines (-lv 4); neither was in the window; -np is read from a running"
        " llama-server's command line, not from its log)."
    )
    assert said.knobs[0].startswith("--cache-ram")


def test_a_probe_row_carries_the_alert_it_names_and_only_one_its_probe_declares() -> None:
    """H13's row of an engine no supervisord watches is EngineRestartLoop's finding (the page it rang); a row
    naming an alert its probe does not declare is a bug in the probe's SQL, refused by name."""
    for h in catalogue(LLAMA):
        if h.probe is not None:
            assert {h.probe.alert, *h.probe.also} <= {a.name for a in h.alerts}, h.id
    h13 = next(h for h in catalogue(LLAMA) if h.id == "H13")
    row = {**rows(h13)[0], "alert": "EngineRestartLoop", "counted_by": "counted from its own log"}
    found = finding_of(h13, row, "", LLAMA)
    assert found is not None and (found.alert, found.severity) == ("EngineRestartLoop", "critical")
    assert finding_of(h13, {**row, "alert": None}, "", LLAMA).alert == "ProgramCrashLoop"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="H13's probe row names ProgramFatal"):
        finding_of(h13, {**row, "alert": "ProgramFatal"}, "", LLAMA)


def test_a_llama_only_deployments_runbooks_speak_llama() -> None:
    for h, a in alerts(LLAMA):
        book = render_runbook(LLAMA, h, a)
        if h.applies_to("llama_server"):
            knobs = book.split("## Knobs")[1].split("##")[0]
            assert not strata_words(knobs), (a.name, knobs)
    deferred = next(render_runbook(LLAMA, h, a) for h, a in alerts(LLAMA) if a.name == "EngineRequestsDeferred")
    head = deferred.split("## Thresholds")[0]  # a new user's: the title, check and query of Strata's gateway 429s
    assert "Every slot busy: requests deferred" in head and "gateway" not in head and "(429)" not in head, head
    storm = next(render_runbook(LLAMA, h, a) for h, a in alerts(LLAMA) if a.name == "EngineEvictionStorm")
    assert "- --cache-ram MiB" in storm and "On llama.cpp" not in storm
    strata = next(
        render_runbook(Deployment(), h, a) for h, a in alerts(Deployment()) if a.name == "EngineEvictionStorm"
    )
    assert "- --conversation-cache-mib" in strata and "## On llama.cpp's llama-server" in strata


@pytest.fixture
def llama_store(spawns: None, tmp_path: Path) -> Path:
    log = tmp_path / "llama-a.log"
    shutil.copy(FIXTURE, log)
    config = tmp_path / "spyglass.toml"
    config.write_text(
        f'[agent]\nstate_dir = "{tmp_path / "state"}"\n[exporters.prometheus]\nenabled = false\n'
        "[exporters.store]\nenabled = true\n"
        f'[sources.engine-llama-a]\nkind = "engine_log"\npreset = "llama_server"\npath = "{log}"\n'
        'instance = "llama-a"\nlane = "normal"\n'
    )
    result = CliRunner().invoke(app, ["ingest", "--config", str(config)])
    assert result.exit_code == 0, result.output[-500:]
    return config


def visible(page: str) -> str:
    page = re.sub(r"<details>.*?</details>", " ", page, flags=re.S)  # the probe's SQL, folded: a query, not prose
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", re.sub(r"<style>.*?</style>", " ", page, flags=re.S))))


def test_diagnose_and_every_evidence_page_of_a_real_llama_log(llama_store: Path) -> None:
    config = load_config(llama_store)
    w = Window(None, None)
    result = diagnose(config, w)
    assert {"H4", "H6", "H7", "H8", "H9", "H10", "H11", "H16", "H20"} <= set(result.not_applicable)
    assert not set(result.not_checked) & set(result.not_applicable)
    assert all("?" not in f.summary and not strata_words(f.summary + " ".join(f.knobs)) for f in result.findings)
    assert {"H12", "H15"} <= set(result.unchecked)  # their alerts watch llama-server; their probes read nothing of it
    said = CliRunner().invoke(app, ["diagnose", "--config", str(llama_store)]).output
    assert re.search(r"watched by the alerts only \(no probe of the store\): .*H12, H15", " ".join(said.split())), said
    _, [(first, last)] = query(config, Query("SELECT min(ts_utc), max(ts_utc) FROM timeline", w.params()))
    everything = Window(instant(first) - timedelta(minutes=1), instant(last) + timedelta(minutes=1))
    for h, a in alerts(Deployment.of(config)):
        page = build(config, a.name, {"instance": "llama-a"}, window=everything)
        shown = visible(html(page)) + "\n" + "\n".join(text(page)).replace(page.evidence_sql, "")
        if h.applies_to("llama_server") and a.watches("llama_server"):
            assert not strata_words(shown), (a.name, strata_words(shown))
        assert "?" not in shown.replace(page.runbook, ""), (
            a.name,
            [line for line in shown.splitlines() if "?" in line],
        )


def test_timeline_and_trace_find_a_llama_request_by_its_utc_id(llama_store: Path) -> None:
    """Issue 37, item 6: a llama request id holds its task's UTC time; `timeline --request ID --since 30m` and
    `trace ID` find it (read as Beijing time, its window ended 8 hours before it began)."""
    config = load_config(llama_store)
    assert request_id_zones(config) == {"UTC"}
    _, rows = query(
        config, Query("SELECT request_id FROM engine_requests WHERE request_id IS NOT NULL", Window().params())
    )
    request = rows[0][0]
    utc_arrival = datetime.strptime(request[:15], "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    assert request_window(request, {"UTC"}).start == utc_arrival - timedelta(minutes=1)
    runner = CliRunner()
    found = runner.invoke(app, ["timeline", "--config", str(llama_store), "--request", request, "--since", "30m"])
    assert found.exit_code == 0 and f"req={request}" in found.output, found.output[-800:]
    traced = runner.invoke(app, ["trace", "--config", str(llama_store), request])
    assert traced.exit_code == 0 and request in traced.output, traced.output[-800:]
