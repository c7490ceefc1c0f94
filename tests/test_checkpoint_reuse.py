"""The checkpoint-only rule is stated once (collectors/checkpoint_reuse.py) in two languages: the
Python the engine signals call and the SQL condition H4's probe and the cache report use. Both
give the same answer for any prompt, reuse and checkpoint interval, and the seed's case holds."""

from __future__ import annotations

import duckdb
from hypothesis import given
from hypothesis import strategies as st

from spyglass.alerting.heuristics import by_id
from spyglass.collectors.checkpoint_reuse import checkpoint_only, checkpoint_only_sql
from spyglass.forensics.reports import get
from spyglass.forensics.run import SqlCondition, render

TOKENS = st.integers(min_value=-5, max_value=300_000)
EVERY = st.sampled_from([-1, 0, 1, 7, 4096, 16384])


def test_the_seeds_case():
    assert checkpoint_only(253_214, 16_384, 16_384)  # incident 2: a 254k prompt reused only the checkpoint
    assert not checkpoint_only(253_214, 251_787, 16_384)  # the same conversation's turn that reused its snapshot
    assert not checkpoint_only(16_384, 16_384, 16_384)  # the whole prompt reused: not a fraction
    assert not checkpoint_only(253_214, 0, 16_384) and not checkpoint_only(253_214, 16_384, 0)


@given(prompt=TOKENS, reused=TOKENS, every=EVERY)
def test_the_sql_condition_answers_as_the_python_rule(prompt, reused, every):
    condition = checkpoint_only_sql("p", "r", "e")
    sql = render(
        "SELECT $rule FROM (SELECT $p::BIGINT AS p, $r::BIGINT AS r, $e::BIGINT AS e)",
        {"rule": SqlCondition(condition), "p": prompt, "r": reused, "e": every},
    )
    ((answer,),) = duckdb.sql(sql).fetchall()
    assert answer is checkpoint_only(prompt, reused, every)


def test_the_engine_signals_call_the_rule():
    import spyglass.signals.engine_log

    assert spyglass.signals.engine_log.checkpoint_only is checkpoint_only


def test_the_probe_and_the_report_name_the_rule_and_do_not_restate_it():
    for sql in (by_id()["H4"].probe.sql, get("cache").sql):
        assert "$checkpoint_only" in sql and "% cache_every" not in sql
