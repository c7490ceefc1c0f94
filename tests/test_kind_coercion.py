"""A kind table's typed columns (event_schema.kind_arrow): a value of the declared type is stored as it is,
one that only converts (an int as a digit string) is converted, and one that would change (3.5 as an int,
True as a float) is kept as given in `extra`, whatever the other events of the batch hold. Arrow alone
took 3.5 for an int column as 3 whenever every other value of the batch was a number."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spyglass.collectors.event import Event
from spyglass.exporters import event_schema

DONE = event_schema.kind_tables()[("engine_log", "done")]  # task: int, decode_tps: float, finish: text, orphan: bool
T0 = 1_792_380_000.0


def stored(events: list[Event]) -> list[dict]:
    table = event_schema.kind_arrow(DONE, events, list(range(len(events))))
    rows = table.to_pylist()
    for row in rows:
        del row["seq"]
        row["extra"] = json.loads(row["extra"]) if row["extra"] else None
    return rows


def done(**fields) -> Event:
    return Event(T0, "engine-a", "done", "strata-a", fields, "r1", "h1")


@pytest.mark.parametrize(
    ("given_", "column", "value", "extra"),
    [
        ({"task": 3}, "task", 3, None),
        ({"task": "12"}, "task", 12, None),
        ({"task": 3.0}, "task", 3, None),
        ({"task": 3.5}, "task", None, {"task": 3.5}),
        ({"task": True}, "task", None, {"task": True}),
        ({"decode_tps": 3}, "decode_tps", 3.0, None),
        ({"decode_tps": True}, "decode_tps", None, {"decode_tps": True}),
        ({"finish": 5}, "finish", "5", None),
        ({"orphan": 1}, "orphan", None, {"orphan": 1}),
    ],
)
def test_a_value_is_stored_converted_or_kept_in_extra(given_, column, value, extra):
    for batch in ([done(**given_)], [done(task=1, decode_tps=2.0, finish="stop", orphan=False), done(**given_)]):
        row = stored(batch)[-1]
        assert (row[column], row["extra"]) == (value, extra)


field_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**62), 2**62),
    st.floats(-1e15, 1e15),  # past 2^63 an int field refuses the event (store.storable_tables), alone or not
    st.text(max_size=4),
    st.sampled_from(["12", "-3", "1.5"]),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.fixed_dictionaries({}, optional={f: field_values for f, _ in DONE.fields}), min_size=1, max_size=8))
def test_each_event_is_stored_as_it_would_be_alone(fields):
    events = [done(**f) for f in fields]
    assert stored(events) == [stored([event])[0] for event in events]
