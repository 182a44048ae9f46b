"""run_join's arrival times, deadlines and latency stats (SSIJ sec. IV-F): defaults and bad input."""

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.joins import create
from airflow_provider_semijoin.core.runner import check_exactly_once, run_join
from airflow_provider_semijoin.core.stores import DatabaseURL, store_for, write_table

STREAM = pa.table({"sk": pa.array([1, 2, 3, 40, None], pa.int64())})


@pytest.fixture
def algorithm(tmp_path):
    connection = DatabaseURL.parse(f"sqlite:///{tmp_path / 'r.db'}").connect()
    write_table(connection, "dim", pa.table({"nk": [1, 2, 3], "v": [10, 20, 30]}), primary_key="nk")
    yield create("hybridjoin", store_for(connection, "dim", "nk"), 1 << 20, {"page_rows": 2})
    connection.close()


def test_without_deadlines_nothing_misses_and_arrival_is_the_start(algorithm):
    times = iter(np.arange(100.0, 200.0))
    run = run_join(algorithm, STREAM, "sk", clock=lambda: next(times))
    assert run.stats["deadline_misses"] == 0 and run.stats["tuples_with_deadline"] == 0
    assert run.completed_at[4] == 100.0  # the null key leaves when the run starts
    assert (run.completed_at[:4] > 100.0).all()
    assert run.stats["latency_ms_p99"] == round(np.percentile(run.completed_at - 100.0, 99) * 1000, 3)


def test_a_deadline_met_exactly_is_not_a_miss(algorithm):
    run = run_join(algorithm, STREAM, "sk", clock=lambda: 5.0, deadline=[5.0, 4.999, np.nan, 6.0, 4.0])
    assert (run.stats["deadline_misses"], run.stats["tuples_with_deadline"]) == (2, 4)


def test_max_latency_zero_misses_every_tuple_that_waits(algorithm):
    times = iter(np.arange(0.0, 100.0))
    run = run_join(algorithm, STREAM, "sk", clock=lambda: next(times), max_latency_s=0)
    assert run.stats["deadline_misses"] == 4  # all but the null key, which left at once


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"deadline": [1.0] * 5, "max_latency_s": 2.0}, r"^deadline: give per-row deadlines or max_latency_s, not both"),
        ({"arrival": [0.0] * 4}, r"^arrival: 4 values for 5 stream rows; expected one per row"),
        ({"arrival": [0.0, 1.0, np.nan, 0.0, 0.0]}, r"^arrival: row 2 is not a finite time"),
        ({"deadline": ["soon"] * 5}, r"^deadline: expected one number per stream row"),
        ({"deadline": [[1.0]] * 5}, r"^deadline: 5 values for 5 stream rows"),
        ({"max_latency_s": -1}, r"^max_latency_s: -1 must be a number >= 0"),
        ({"max_latency_s": "5"}, r"^max_latency_s: '5' must be a number >= 0"),
        ({"max_latency_s": True}, r"^max_latency_s: True must be a number >= 0"),
        ({"max_latency_s": float("inf")}, r"^max_latency_s: inf must be a number >= 0"),
    ],
    ids=["both", "arrival-length", "arrival-nan", "deadline-text", "deadline-shape", "negative", "text", "bool", "inf"],
)
def test_bad_times_are_refused_before_any_work(algorithm, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        run_join(algorithm, STREAM, "sk", **kwargs)
    assert algorithm.counters.tuples_in == 0


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 30), st.lists(st.integers(0, 29), max_size=60), st.lists(st.integers(0, 29), max_size=20))
def test_exactly_once_counts_what_a_counter_of_the_ids_says(n, matched, unmatched):
    """A matched id may repeat (one pair a master row of its key); an id lost is in neither list,
    one duplicated is in both or unmatched twice, as a Counter of the ids says."""
    matched = [i for i in matched if i < n]
    unmatched = [i for i in unmatched if i < n]
    left = Counter(set(matched)) + Counter(unmatched)
    got = check_exactly_once(n, np.array(matched, np.int64), np.array(unmatched, np.int64))
    assert got["lost"] == sum(1 for i in range(n) if not left[i])
    assert got["duplicated"] == sum(1 for i in range(n) if left[i] > 1) + len(unmatched) - len(set(unmatched))
    assert got["ok"] == (all(left[i] == 1 for i in range(n)) and len(unmatched) == len(set(unmatched)))
