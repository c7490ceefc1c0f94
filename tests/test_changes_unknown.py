"""A crash loop's starts that no status poll reached are no upgrade (issue 31: `changes` on the crash-loop demo
listed `serve_version -> 2026.10.18` and `banner lacks: serve version` at every start)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spyglass.forensics.changes import change_list, deploys

AT = datetime(2026, 12, 3, 11, 43, 52, tzinfo=UTC)


def start(n: int, serve: str | None, gateway: str | None, build: str = "7f3c2e1") -> dict:
    return {
        "instance": "strata-b",
        "ts_utc": AT + timedelta(seconds=7 * n),
        "build": build,
        "version": "0.9.3",
        "model_real": "/models/m.gguf",
        "model_md5": "a" * 32,
        "cpus": "1",
        "argv": "--port 8081 --ctx 8192",
        "serve_version": serve,
        "gateway_version": gateway,
        "ready_seconds": 1.0,
        "ready_utc": AT,
    }


def changes_of(rows: list[dict]) -> list[tuple]:
    return [(c.deploy, c.change, c.before, c.after) for c in change_list(deploys(rows, 600.0, frozenset({"strata-b"})))]


def test_a_value_a_start_did_not_report_is_no_change():
    rows = [
        start(0, None, None),
        start(1, None, "2026.10.19-2"),
        start(2, None, "2026.10.19-2"),
        start(3, "2026.10.18", "2026.10.19-2"),
    ]
    assert changes_of(rows) == [(1, "first start stored", None, "7f3c2e1")]


def test_a_real_change_is_compared_with_the_last_value_known():
    rows = [start(0, "2026.10.16", "g1"), start(1, None, "g1"), start(2, "2026.10.18", "g1", build="8a1b2c3")]
    assert changes_of(rows)[1:] == [
        (3, "build", "7f3c2e1", "8a1b2c3"),
        (3, "serve_version", "2026.10.16", "2026.10.18"),
    ]


def test_a_serve_that_never_reports_its_version_is_still_a_finding():
    rows = [start(0, None, "g1"), start(1, None, "g1")]
    assert [c for c in changes_of(rows) if c[1] == "banner lacks"] == [
        (1, "banner lacks", None, "serve version"),
        (2, "banner lacks", None, "serve version"),
    ]
