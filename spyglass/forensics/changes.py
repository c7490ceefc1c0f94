"""Deploys as records, and what changed between consecutive starts of an instance (`spyglass changes`).

A rollback is a bundle of actions (files, restart, config, caches, connections), so "rollback fixed
it" says nothing about the model until the change list says what the starts differed in. One
deploy record per engine start comes from its banner (the `deploys` view: build, model path, real
file, size, md5, CPUs, load time), its `args:` line kept verbatim, the serve version the status
endpoint reported, the gateway version of the last gateway start, the switch log's line for it,
how the start ended (supervisord), and the last smoke gate run against it (`spyglass smoke --config`;
the runs of the instance between this start and the next). A banner that lacks the model file, md5,
build or args is itself a finding (`missing`): the seed's habit of printing them on the first line.
The SQL runs through spyglass.forensics.run.query; everything after it is pure.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from spyglass.forensics.run import Query, Window

DEPLOYS_SQL = """
WITH d AS (
  SELECT *, lead(ts_utc) OVER (PARTITION BY source ORDER BY ts_utc) AS next_utc,
    lag(ts_utc) OVER (PARTITION BY source ORDER BY ts_utc) AS prev_utc
  FROM deploys WHERE component = 'engine' AND ts_utc IS NOT NULL
),
a AS (SELECT source AS a_source, ts AS a_ts, argv FROM ev_engine_log WHERE kind = 'args'),
s AS (SELECT instance AS s_instance, ts_utc AS s_ts, serve_version FROM status_snapshots__all
      WHERE serve_version IS NOT NULL),
g AS (SELECT ts_utc AS g_ts, version AS gateway_version FROM deploys__all WHERE component = 'gateway'),
sw AS (SELECT program AS sw_program, ts_utc AS sw_ts, detail AS switch, "by" AS switch_by FROM process_events__all
       WHERE event = 'switch'),
x AS (SELECT program AS x_program, ts_utc AS x_ts, event AS x_event, cause AS x_cause FROM process_events__all
      WHERE event IN ('exited', 'fatal', 'stopped', 'stop_kill')),
gated AS (SELECT d.source AS gd_source, d.ts_utc AS gd_ts, count(*) AS smoke_runs, max(m.ts_utc) AS smoke_utc,
            arg_max(m.passed, m.ts_utc) AS smoke_passed, arg_max(m.reason, m.ts_utc) AS smoke_reason
          FROM smoke_gates__all m ASOF JOIN d ON d.instance = m.instance AND m.ts_utc >= d.ts_utc
          GROUP BY ALL)
SELECT d.ts_utc, d.ts_local, d.source, d.instance, d.lane, d.build_name, d.version, d.build, d.pid,
  d.model_path, d.model_real, d.model_md5, d.model_bytes, d.port, d.slots, d.ctx, d.pool_workers, d.cache_mib,
  d.prompt_cache_every, d.cpus, d.load_seconds, d.ready_utc, d.ready_seconds, d.checksum_mismatch, d.next_utc,
  CASE WHEN a.a_ts < coalesce(d.next_utc, 'infinity'::TIMESTAMPTZ) THEN a.argv END AS argv,
  CASE WHEN s1.s_ts < coalesce(d.next_utc, 'infinity'::TIMESTAMPTZ) THEN s1.serve_version
       ELSE s0.serve_version END AS serve_version,
  g.gateway_version,
  CASE WHEN sw.sw_ts > coalesce(d.prev_utc, '-infinity'::TIMESTAMPTZ) THEN sw.switch || ' by ' || sw.switch_by END
    AS switch,
  CASE WHEN x.x_ts < coalesce(d.next_utc, 'infinity'::TIMESTAMPTZ) THEN x.x_ts END AS ended_utc,
  CASE WHEN x.x_ts < coalesce(d.next_utc, 'infinity'::TIMESTAMPTZ) THEN coalesce(x.x_cause, x.x_event) END AS ended_by,
  gated.smoke_runs, gated.smoke_utc, gated.smoke_passed, gated.smoke_reason
FROM d
LEFT JOIN gated ON gated.gd_source = d.source AND gated.gd_ts = d.ts_utc
ASOF LEFT JOIN a ON a.a_source = d.source AND a.a_ts >= d.ts_utc
ASOF LEFT JOIN s s1 ON s1.s_instance = d.instance AND s1.s_ts >= d.ts_utc
ASOF LEFT JOIN s s0 ON s0.s_instance = d.instance AND s0.s_ts <= d.ts_utc
ASOF LEFT JOIN g ON g.g_ts <= d.ts_utc
ASOF LEFT JOIN sw ON sw.sw_program = d.instance AND sw.sw_ts <= d.ts_utc
ASOF LEFT JOIN x ON x.x_program = d.instance AND x.x_ts >= d.ts_utc
WHERE $instance IS NULL OR d.instance = $instance
ORDER BY d.instance, d.ts_utc"""

FLAG_COLUMNS = {
    "port": "--port",
    "slots": "--slots",
    "ctx": "--ctx",
    "pool_workers": "--pool-workers",
    "cache_mib": "--conversation-cache-mib",
    "prompt_cache_every": "--prompt-cache-every",
}
COMPARED = (
    "build",
    "version",
    "build_name",
    "model_path",
    "model_real",
    "model_md5",
    "model_bytes",
    "cpus",
    "serve_version",
    "gateway_version",
)
BANNER = {"build": "build", "version": "version", "model_real": "model file", "model_md5": "md5", "cpus": "cpus"}


def as_rows(columns: list[str], rows: list[tuple]) -> list[dict[str, Any]]:
    """Rows as dicts with instants as aware datetimes, whether read from the file or through the agent's API."""
    out = []
    for row in rows:
        record = dict(zip(columns, row))
        for key, value in record.items():
            if key.endswith("_utc") and isinstance(value, str):
                value = datetime.fromisoformat(value.replace("Z", "+00:00"))
            if isinstance(value, datetime) and value.tzinfo is None:
                value = value.replace(tzinfo=UTC)
            record[key] = value
        out.append(record)
    return out


def deploys_query(window: Window, instance: str | None = None) -> Query:
    return Query(DEPLOYS_SQL, {**window.params(), "instance": instance})


def is_flag(word: str) -> bool:
    """`-x` or `--x`, but not a negative number (`--offset -1`)."""
    return word.startswith("-") and not word.lstrip("-").replace(".", "", 1).isdigit()


def parse_argv(text: str) -> dict[str, str]:
    """Flags of an engine command line in order, verbatim: `--flag value`, `--flag=value`, a bare
    `--flag` (value ''), and any other word as its own key, so nothing unknown is dropped."""
    try:
        words = shlex.split(text)
    except ValueError:  # an unbalanced quote: split on blanks, still verbatim
        words = text.split()
    out: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("-") and "=" in word:
            flag, value = word.split("=", 1)
            out[flag] = value
        elif word.startswith("-") and i + 1 < len(words) and not is_flag(words[i + 1]):
            out[word] = words[i + 1]
            i += 1
        else:
            out[word] = ""
        i += 1
    return out


@dataclass
class Deploy:
    """One engine start: what it ran, and what its banner did not say (`missing`)."""

    instance: str
    n: int  # 1 for the first stored start of the instance
    at: datetime
    record: dict[str, Any]
    args: dict[str, str]
    missing: list[str] = field(default_factory=list)
    over_budget: bool = False

    def get(self, key: str) -> Any:
        return self.record.get(key)


def deploy_of(row: dict[str, Any], n: int, probe_budget: float, expect_serve: bool) -> Deploy:
    argv = row.get("argv")
    if argv is not None:
        args = parse_argv(argv)
    else:  # a store ingested before the args line was kept verbatim: the flags the parser knew
        args = {flag: str(row[col]) for col, flag in FLAG_COLUMNS.items() if row.get(col) is not None}
        if row.get("model_path") and args:
            args = {"--model": str(row["model_path"]), **args}
    missing = [name for key, name in BANNER.items() if row.get(key) is None]
    if argv is None and not args:
        missing.append("args")
    if expect_serve and row.get("serve_version") is None:
        missing.append("serve version")
    ready = row.get("ready_seconds")
    return Deploy(
        row["instance"], n, row["ts_utc"], row, args, missing, over_budget=ready is not None and ready > probe_budget
    )


def deploys(
    rows: list[dict[str, Any]], probe_budget: float, serve_instances: frozenset[str] = frozenset()
) -> list[Deploy]:
    """Rows of DEPLOYS_SQL (ordered by instance, time) as records numbered per instance."""
    out: list[Any] = []
    count: dict[Any, int] = {}
    # A serve that reported its version at some start of the instance does report it: a start without one
    # ended before a status poll reached it (a crash loop's), which is no finding of its own.
    reported = {row["instance"] for row in rows if row.get("serve_version") is not None}
    for row in rows:
        count[row["instance"]] = count.get(row["instance"], 0) + 1
        expect = row["instance"] in serve_instances and row["instance"] not in reported
        out.append(deploy_of(row, count[row["instance"]], probe_budget, expect))
    return out


@dataclass(frozen=True)
class Change:
    instance: str
    deploy: int
    at: datetime
    change: str  # build, model_md5, arg --ctx, ..., or a finding: banner lacks, load over probe budget
    before: Any
    after: Any


def changes(before: Deploy | None, now: Deploy, known: dict[str, Any] | None = None) -> list[Change]:
    """What `now` differs in from the previous start of its instance, then its own findings. A compared value
    is compared with the last one `known` of the instance's earlier starts: one that a start did not report
    (its serve crashed before a status poll, the gateway started later) and the next one did is no change."""

    def row(what: str, old: Any, new: Any) -> Change:
        return Change(now.instance, now.n, now.at, what, old, new)

    known = known if known is not None else {k: before.get(k) for k in COMPARED} if before else {}
    out = []
    if before is None:
        out.append(row("first start stored", None, now.get("build")))
    else:
        for key in COMPARED:
            if known.get(key) is not None and known.get(key) != now.get(key) and now.get(key) is not None:
                out.append(row(key, known.get(key), now.get(key)))
        for flag in dict.fromkeys([*before.args, *now.args]):
            old, new = before.args.get(flag), now.args.get(flag)
            if old != new:  # a bare flag shows as itself
                out.append(row(f"arg {flag}", flag if old == "" else old, flag if new == "" else new))
    if now.get("switch"):
        out.append(row("switch log", None, now.get("switch")))
    if now.get("smoke_runs"):
        out.append(row("smoke gate", None, smoke_text(now)))
    if now.missing:
        out.append(row("banner lacks", None, ", ".join(now.missing)))
    if now.get("checksum_mismatch"):
        out.append(row("checksum mismatch while loading", None, now.get("model_real")))
    if now.over_budget:
        out.append(row("load over probe budget", None, f"{now.get('ready_seconds'):g} s"))
    if now.get("ready_utc") is None and now.get("ended_utc") is not None:
        took = (now.get("ended_utc") - now.at).total_seconds()
        out.append(row("ended while loading", None, f"{now.get('ended_by')} after {took:g} s"))
    return out


def smoke_text(d: Deploy) -> str | None:
    """The last smoke run against this start: `passed: 5 samples passed`, `FAILED: ...`, and how many runs."""
    runs = d.get("smoke_runs")
    if not runs:
        return None
    verdict = "passed" if d.get("smoke_passed") else "FAILED"
    more = f" (last of {runs} runs)" if runs > 1 else ""
    return f"{verdict}: {d.get('smoke_reason')}{more}"


def change_list(records: list[Deploy], since: datetime | None = None) -> list[Change]:
    """The changes of every start at or after `since`, each against the previous start of its instance."""
    out: list[Any] = []
    last: dict[Any, Any] = {}
    known: dict[Any, dict[str, Any]] = {}  # instance -> the last value each compared key had
    for d in records:
        seen = known.setdefault(d.instance, {})
        if since is None or d.at >= since:
            out += changes(last.get(d.instance), d, dict(seen))
        seen.update({k: d.get(k) for k in COMPARED if d.get(k) is not None})
        last[d.instance] = d
    return out


def as_dict(c: Change) -> dict[str, Any]:
    return {
        "instance": c.instance,
        "deploy": c.deploy,
        "at_utc": c.at,
        "change": c.change,
        "before": c.before,
        "after": c.after,
    }


def deploy_dict(d: Deploy) -> dict[str, Any]:
    keep = (
        "build_name",
        "version",
        "build",
        "pid",
        "model_path",
        "model_real",
        "model_bytes",
        "model_md5",
        "cpus",
        "serve_version",
        "gateway_version",
        "ready_seconds",
        "ended_by",
    )
    return {
        "instance": d.instance,
        "deploy": d.n,
        "at_utc": d.at,
        **{k: d.get(k) for k in keep},
        "smoke": smoke_text(d),
        "args": " ".join(f"{k} {v}".strip() for k, v in d.args.items()),
        "missing": d.missing,
        "over_budget": d.over_budget,
    }
