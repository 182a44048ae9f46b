"""workloads.temporal: the SSIJ paper's temporal-locality stream (sec. VI-A)."""

import numpy as np
import pytest

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.workloads import master_keys, temporal_stream, temporal_stream_chunks


def test_each_interval_draws_from_its_own_slice_of_r_with_zipf_skew():
    rows, interval = 20_000, 5_000
    stream = temporal_stream(interval * 22, rows, interval_tuples=interval, fraction=0.05, seed=3)
    position = {k: i for i, k in enumerate(master_keys(rows).tolist())}
    positions = np.array([position[k] for k in stream["nk"].to_pylist()])
    for i in range(22):  # 20 slices of 1,000 keys, then the first ones again
        part = positions[i * interval : (i + 1) * interval]
        lo = (i % 20) * 1000
        assert part.min() >= lo and part.max() < lo + 1000, i
        counts = np.bincount(part - lo, minlength=1000)
        assert counts.argmax() == 0 and counts[0] > 4 * counts[10]  # the slice's first key is the hottest
    assert len(np.unique(positions[:interval])) > 500  # the whole slice is used, not a few keys


def test_chunks_continue_the_stream_across_interval_boundaries():
    whole = temporal_stream(7_000, 10_000, interval_tuples=1_500, exponent=0.8, seed=9)
    chunks = temporal_stream_chunks(7_000, 10_000, interval_tuples=1_500, exponent=0.8, seed=9)
    assert next(chunks).equals(whole)
    second = next(chunks)
    assert second["tid"].to_pylist() == list(range(7_000, 14_000))
    slice_of = (second["nk"].to_numpy() // 2) // 500  # key 2p+1 at position p; slices of 500 keys
    interval_of = np.arange(7_000, 14_000) // 1_500
    assert np.array_equal(slice_of, interval_of % 20)


def test_a_last_short_slice_stays_inside_r():
    stream = temporal_stream(4_000, 1_050, interval_tuples=100, fraction=0.1, seed=1)
    assert stream["nk"].to_numpy().max() <= 2 * 1_049 + 1


@pytest.mark.parametrize("kwargs, message", [
    ({"fraction": 0}, r"^fraction: 0 is not a share of R's keys in \(0, 1\]"),
    ({"fraction": 1.5}, r"^fraction: 1.5 is not a share"),
    ({"interval_tuples": 0}, r"^interval_tuples"),
    ({"exponent": -1}, r"^exponent: -1 must be >= 0"),
])
def test_bad_options_name_the_field(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        temporal_stream(10, 1000, **kwargs)
    with pytest.raises(ConfigError, match=message):
        temporal_stream_chunks(10, 1000, **kwargs)
