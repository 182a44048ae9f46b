"""StreamBuffer: arrival order, deadlines carried by take, earliest-deadline-first hand-out
(SSIJ sec. IV-F) against a plain Python model."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.core.joins import StreamBuffer
from airflow_provider_semijoin.core.keys import KeyType

INT = KeyType("int")
NAN = math.nan


def buffer_with(*chunks, clock=lambda: 7.0) -> StreamBuffer:
    """A buffer fed ``chunks`` of ``(row_ids, deadlines or None)``; key = 100 + row id."""
    buffer = StreamBuffer(INT, clock)
    for rows, deadlines in chunks:
        rows = np.asarray(rows, np.int64)
        buffer.append(rows, rows + 100, None if deadlines is None else np.asarray(deadlines, float))
    return buffer


def test_take_carries_deadlines_across_chunk_boundaries():
    buffer = buffer_with(([0, 1, 2], [5.0, NAN, 3.0]), ([3, 4], None), ([5], [1.0]))
    first = buffer.take(4)
    assert first.row_ids.tolist() == [0, 1, 2, 3] and first.keys.tolist() == [100, 101, 102, 103]
    assert np.array_equal(first.deadlines, [5.0, NAN, 3.0, NAN], equal_nan=True)
    rest = buffer.take(10)
    assert rest.row_ids.tolist() == [4, 5] and np.array_equal(rest.deadlines, [NAN, 1.0], equal_nan=True)
    assert buffer.available == 0 and len(buffer.take(3)) == 0
    assert [(ids.tolist(), t) for ids, t in buffer.taken] == [([0, 1, 2, 3], 7.0), ([4, 5], 7.0)]


def test_take_by_deadline_hands_out_the_earliest_deadlines_and_keeps_the_rest_in_arrival_order():
    buffer = buffer_with(([0, 1, 2, 3], [9.0, NAN, 2.0, 4.0]), ([4, 5, 6], [2.0, NAN, 1.0]))
    assert buffer.earliest_deadline == 1.0
    first = buffer.take_by_deadline(3)
    assert first.row_ids.tolist() == [6, 2, 4]  # 1.0, then the tie at 2.0 in arrival order
    assert first.deadlines.tolist() == [1.0, 2.0, 2.0] and first.keys.tolist() == [106, 102, 104]
    assert buffer.earliest_deadline == 4.0 and buffer.available == 4
    assert buffer.take(4).row_ids.tolist() == [0, 1, 3, 5]  # what is left, in arrival order
    assert buffer.earliest_deadline == math.inf


def test_tuples_without_deadline_come_last_in_arrival_order():
    buffer = buffer_with(([0, 1, 2], None), ([3], [50.0]), ([4, 5], None))
    assert buffer.take_by_deadline(4).row_ids.tolist() == [3, 0, 1, 2]
    assert buffer.take_by_deadline(9).row_ids.tolist() == [4, 5]


def test_without_any_deadline_take_by_deadline_is_take():
    buffer = buffer_with(([0, 1, 2], None), ([3, 4], None))
    assert buffer.earliest_deadline == math.inf
    assert buffer.take_by_deadline(3).row_ids.tolist() == [0, 1, 2]
    assert buffer.take_by_deadline(0).row_ids.tolist() == []
    assert [ids.tolist() for ids, _ in buffer.taken] == [[0, 1, 2]]


def test_deadlines_must_match_the_tuples():
    buffer = StreamBuffer(INT)
    with pytest.raises(ValueError, match=r"^deadlines: 1 values for 2 tuples"):
        buffer.append(np.array([0, 1]), np.array([5, 6]), np.array([1.0]))


@settings(max_examples=200, deadline=None)
@given(
    chunks=st.lists(
        st.lists(st.one_of(st.none(), st.sampled_from([0.0, 1.0, 2.5, 3.0, math.inf, -1.0])), min_size=1, max_size=8),
        max_size=6,
    ),
    takes=st.lists(st.tuples(st.booleans(), st.integers(0, 12)), max_size=10),
)
def test_hand_out_order_matches_a_model(chunks, takes):
    """Model: a list of (deadline or inf, arrival number); take pops the front, take_by_deadline
    pops the n smallest by (deadline, arrival); earliest_deadline is the smallest deadline;
    peek_keys shows the front without taking it."""
    buffer, model, row = StreamBuffer(INT), [], 0
    for deadlines in chunks:
        rows = np.arange(row, row + len(deadlines))
        values = np.array([NAN if d is None else d for d in deadlines])
        buffer.append(rows, rows, values if any(d is not None for d in deadlines) else None)
        model += [(math.inf if d is None else d, r) for d, r in zip(deadlines, rows.tolist())]
        row += len(deadlines)
    for by_deadline, n in takes:
        assert buffer.earliest_deadline == min((d for d, _ in model), default=math.inf)
        assert buffer.peek_keys(n).tolist() == [r for _, r in model[:n]]  # keys == row ids here
        chunk = buffer.take_by_deadline(n) if by_deadline else buffer.take(n)
        chosen = sorted(model)[:n] if by_deadline else model[:n]
        assert chunk.row_ids.tolist() == [r for _, r in chosen]
        assert [math.inf if math.isnan(d) else d for d in chunk.deadlines.tolist()] == [d for d, _ in chosen]
        model = [t for t in model if t not in chosen]
        assert buffer.available == len(model)
