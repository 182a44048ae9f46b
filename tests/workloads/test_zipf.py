"""workloads.zipf: Zipf ranks, the noperm/random shapes, missing keys, reproducible chunks."""

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.workloads.master import master_keys
from airflow_provider_semijoin.workloads.zipf import zipf_ranks, zipf_stream, zipf_stream_chunks


def _frequencies(ranks, n_keys):
    return np.bincount(ranks, minlength=n_keys) / len(ranks)


def _in_r(keys: pa.ChunkedArray, rows: int, key_type: str) -> np.ndarray:
    """Which stream keys are keys of R (Arrow's hash-based is_in: fast for strings too)."""
    r = pa.array(master_keys(rows, key_type).tolist() if key_type == "str" else master_keys(rows))
    return pc.is_in(keys, value_set=r).to_numpy(zero_copy_only=False)


def _hottest(keys, count):
    values, counts = np.unique(np.asarray(keys), return_counts=True)
    return values[np.argsort(-counts, kind="stable")[:count]]


@pytest.mark.parametrize("exponent", [1.0, 2.0, 0.5])
def test_rank_frequencies_follow_zipf(exponent):
    n = 200_000
    ranks = zipf_ranks(n, 1000, exponent, np.random.default_rng(7))
    weights = 1.0 / np.arange(1, 1001) ** exponent
    expected = weights / weights.sum()
    freq = _frequencies(ranks, 1000)
    sigma = np.sqrt(expected * (1 - expected) / n)
    for rank in (0, 1, 9, 99):
        assert abs(freq[rank] - expected[rank]) < 5 * sigma[rank], rank
    # the ratio of the two hottest ranks is 2^exponent
    assert freq[0] / freq[1] == pytest.approx(2.0**exponent, rel=0.1)


def test_rank_zero_of_exponent_one_is_one_over_the_harmonic_number():
    freq = _frequencies(zipf_ranks(200_000, 1000, 1, np.random.default_rng(0)), 1000)
    harmonic = sum(1.0 / r for r in range(1, 1001))
    assert freq[0] == pytest.approx(1.0 / harmonic, rel=0.03)


def test_exponent_zero_is_uniform():
    counts = np.bincount(zipf_ranks(200_000, 1000, 0.0, np.random.default_rng(1)), minlength=1000)
    expected = 200.0
    chi2 = ((counts - expected) ** 2 / expected).sum()
    # chi-square with 999 degrees of freedom: mean 999, sd 44.7; Zipf(1) would give ~10^6
    assert chi2 < 999 + 5 * 44.7
    assert counts.max() < 2 * expected


@settings(max_examples=50, deadline=None)
@given(
    n=st.integers(0, 2000),
    n_keys=st.integers(1, 5000),
    exponent=st.floats(0, 4, allow_nan=False),
    seed=st.integers(0, 2**32),
)
def test_ranks_are_int64_in_range(n, n_keys, exponent, seed):
    ranks = zipf_ranks(n, n_keys, exponent, np.random.default_rng(seed))
    assert ranks.dtype == np.int64 and ranks.shape == (n,)
    if n:
        assert ranks.min() >= 0 and ranks.max() < n_keys


def test_stream_columns_types_and_tids():
    stream = zipf_stream(1000, 500, first_tid=40)
    assert stream.column_names == ["tid", "nk", "qty", "amount"]
    assert [f.type for f in stream.schema] == [pa.int64(), pa.int64(), pa.int64(), pa.float64()]
    assert stream.column("tid").to_pylist() == list(range(40, 1040))
    qty = stream.column("qty").to_numpy()
    assert qty.min() == 1 and qty.max() == 10
    assert (stream.column("amount").to_numpy() > 0).all()
    assert zipf_stream(10, 500, key_type="str").schema.field("nk").type == pa.string()
    assert zipf_stream(0, 500).num_rows == 0


@pytest.mark.parametrize("key_type", ["int", "str"])
@pytest.mark.parametrize("shape", ["noperm", "random"])
def test_without_missing_every_key_is_in_r(key_type, shape):
    keys = zipf_stream(20_000, 3000, shape=shape, key_type=key_type, seed=2).column("nk")
    assert _in_r(keys, 3000, key_type).all()


def test_noperm_hot_keys_are_the_smallest_keys_of_r():
    keys = zipf_stream(100_000, 10_000, exponent=1.2, shape="noperm", seed=3).column("nk").to_numpy()
    assert sorted(_hottest(keys, 5).tolist()) == master_keys(5).tolist()


def test_random_hot_keys_are_spread_and_the_same_for_every_seed():
    def hottest(seed):
        keys = zipf_stream(100_000, 10_000, exponent=1.2, shape="random", seed=seed).column("nk").to_numpy()
        return _hottest(keys, 10)

    first, second = hottest(1), hottest(2)
    smallest = master_keys(10_000)[:10]
    assert len(set(first.tolist()) & set(smallest.tolist())) <= 1
    assert first.max() - first.min() > 5000  # spread over R, not clustered
    assert set(first[:3].tolist()) == set(second[:3].tolist())  # the fixed permutation


@pytest.mark.parametrize("key_type", ["int", "str"])
@pytest.mark.parametrize("shape", ["noperm", "random"])
def test_missing_fraction_and_missing_keys_fall_between_keys_of_r(key_type, shape):
    n, rows = 100_000, 5000
    keys = zipf_stream(n, rows, missing=0.2, shape=shape, key_type=key_type, seed=9).column("nk")
    absent = ~_in_r(keys, rows, key_type)
    assert absent.mean() == pytest.approx(0.2, abs=0.01)  # sd of the fraction: 0.0013
    missing = keys.filter(pa.array(absent))
    if key_type == "str":
        assert pc.all(pc.starts_with(missing, "P-")).as_py()
        missing = pc.cast(pc.utf8_slice_codeunits(missing, 2), pa.int64())
    numbers = missing.to_numpy()
    # between R's keys: even numbers (or their spelling) from 0 up to below R's largest key
    assert (numbers % 2 == 0).all() and numbers.min() >= 0 and numbers.max() < 2 * rows


def test_missing_keys_are_skewed_like_present_ones():
    keys = zipf_stream(100_000, 5000, missing=0.5, exponent=1.0, seed=4).column("nk").to_numpy()
    # noperm: rank 0 maps to position 0, whose absent key is 0, the hottest missing key
    assert _hottest(keys[keys % 2 == 0], 1)[0] == 0
    assert _hottest(keys[keys % 2 == 1], 1)[0] == 1


def test_missing_zero_and_one():
    assert (zipf_stream(5000, 100, missing=0.0).column("nk").to_numpy() % 2 == 1).all()
    assert (zipf_stream(5000, 100, missing=1).column("nk").to_numpy() % 2 == 0).all()


def test_same_seed_same_stream_other_seed_other_stream():
    options = dict(exponent=0.8, shape="random", missing=0.1)
    assert zipf_stream(5000, 2000, seed=11, **options).equals(zipf_stream(5000, 2000, seed=11, **options))
    assert not zipf_stream(5000, 2000, seed=12, **options).column("nk").equals(
        zipf_stream(5000, 2000, seed=11, **options).column("nk")
    )


def test_chunks_continue_tids_reproducibly_and_start_like_zipf_stream():
    options = dict(exponent=1.0, shape="random", missing=0.05, seed=6, first_tid=100)
    chunks = list(itertools.islice(zipf_stream_chunks(1000, 800, **options), 4))
    joined = pa.concat_tables(chunks)
    assert joined.column("tid").to_pylist() == list(range(100, 4100))
    assert chunks[0].equals(zipf_stream(1000, 800, **options))
    assert not chunks[1].column("nk").equals(chunks[0].column("nk"))  # each chunk has its own draw
    again = list(itertools.islice(zipf_stream_chunks(1000, 800, **options), 4))
    assert all(a.equals(b) for a, b in zip(chunks, again))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(shape="norm"), r"^shape: 'norm' is not one of \['noperm', 'random'\]"),
        (dict(missing=1.5), r"^missing: 1\.5 is not in \[0, 1\]"),
        (dict(missing=-0.1), r"^missing: -0\.1 is not in \[0, 1\]"),
        (dict(exponent=-1), r"^exponent: -1(\.0)? must be >= 0"),
        (dict(exponent="1"), r"^exponent: '1' is not a number"),
        (dict(key_type="bytes"), r"^key_type: 'bytes' is not one of \['int', 'str'\]"),
        (dict(seed=-3), r"^seed: -3 must be >= 0"),
        (dict(first_tid=-1), r"^first_tid: -1 must be >= 0"),
    ],
)
def test_bad_arguments_are_config_errors_naming_the_argument(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        zipf_stream(10, 100, **kwargs)
    with pytest.raises(ConfigError, match=message):
        zipf_stream_chunks(10, 100, **kwargs)  # checked at the call, not at the first chunk


def test_chunks_reject_unknown_options():
    with pytest.raises(ConfigError, match=r"^option: 'skew' is not one of \['exponent', 'shape', 'missing'"):
        zipf_stream_chunks(10, 100, skew=1.0)


def test_bad_sizes_are_config_errors():
    with pytest.raises(ConfigError, match=r"^master_rows: 0 must be >= 1"):
        zipf_stream(10, 0)
    with pytest.raises(ConfigError, match=r"^n_tuples: -1 must be >= 0"):
        zipf_stream(-1, 10)
    with pytest.raises(ConfigError, match=r"^chunk_rows: 0 must be >= 1"):
        zipf_stream_chunks(0, 10)
    with pytest.raises(ConfigError, match=r"^n_keys: 0 must be >= 1"):
        zipf_ranks(5, 0, 1.0, np.random.default_rng(0))
