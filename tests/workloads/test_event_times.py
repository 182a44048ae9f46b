"""workloads.stream.event_times: the generator's ``sold_at``, roughly in order, some sales late."""

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.job.sources import GeneratorSource
from airflow_provider_semijoin.workloads.stream import ARRIVAL_BLOCK, event_times, generator_rows, generator_schema

EVENT_TIME = {"column": "sold_at", "start": "2026-01-01T00:00:00+00:00", "late": 0.05, "max_lateness_s": 5}
FIRST_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


def micros(times: pa.Array) -> np.ndarray:
    return times.cast(pa.int64()).to_numpy()


@settings(max_examples=30, deadline=None)
@given(start=st.integers(0, 3 * ARRIVAL_BLOCK), length=st.integers(0, 2 * ARRIVAL_BLOCK))
def test_any_range_of_rows_has_the_times_the_whole_stream_gives_them(start, length):
    whole = micros(event_times(0, 4 * ARRIVAL_BLOCK, 1000.0, EVENT_TIME, 7))
    assert (micros(event_times(start, start + length, 1000.0, EVENT_TIME, 7)) == whole[start:start + length]).all()


def test_a_sale_is_never_later_than_its_place_and_a_late_share_is_out_of_order_by_at_most_the_lateness():
    rows = 3 * ARRIVAL_BLOCK
    times = micros(event_times(0, rows, 4000.0, EVENT_TIME, 1))
    place = FIRST_US + np.round(np.arange(rows) / 4000.0 * 1e6).astype(np.int64)
    early_by = place - times
    assert early_by.min() >= 0 and early_by.max() <= 5_000_000
    late = early_by > 0
    assert 0.04 < late.mean() < 0.06  # 5% late, of 196,608 sales
    assert (np.diff(times) < 0).any() and (np.diff(times[~late]) > 0).all()  # out of order only by the late ones
    assert (micros(event_times(0, rows, 4000.0, {**EVENT_TIME, "late": 0}, 1)) == place).all()


def test_the_generator_carries_the_event_time_column_its_schema_names():
    source = GeneratorSource(total_rows=100, master_rows=50, extra_keys={"customer_nk": {"master_rows": 20}},
                             event_time={"column": "sold_at"})
    rows = generator_rows(source.settings(), 0, 100)
    assert generator_schema(source.settings()) == ("tid BIGINT, nk BIGINT, qty BIGINT, amount DOUBLE, customer_nk BIGINT, "
                                                   "sold_at TIMESTAMP, sj_arrival DOUBLE")
    assert rows.column_names == ["tid", "nk", "qty", "amount", "customer_nk", "sold_at"]
    assert rows.schema.field("sold_at").type == pa.timestamp("us", "UTC")
    assert "sold_at" not in generator_rows(GeneratorSource(total_rows=10).settings(), 0, 10).column_names
