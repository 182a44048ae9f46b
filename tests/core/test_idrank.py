"""The rank index finds an id where a binary search finds it, through feeds and compactions."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.core.idrank import MAX_BYTES_PER_ID, RankIndex
from airflow_provider_semijoin.core.session import LOG_BYTES_PER_TUPLE

# a feed: how many ids, the largest step between two of them (1: consecutive), the gap before it
FEEDS = st.lists(st.tuples(st.integers(0, 400), st.sampled_from([1, 1, 2, 3, 9, 300]), st.integers(1, 5000)),
                 min_size=1, max_size=6)


def check(index: RankIndex, log: np.ndarray, rng: np.random.Generator) -> None:
    if not len(log):
        return
    present = rng.choice(log, min(len(log), 200))
    absent = np.setdiff1d(rng.integers(int(log[0]) - 70, int(log[-1]) + 70, 100), log)
    positions = index.positions(log, np.concatenate([present, absent]))
    assert ((positions >= 0) & (positions < len(log))).all()
    assert (log[positions[:len(present)]] == present).all()
    assert (log[positions[len(present):]] != absent).all()
    assert index.nbytes <= MAX_BYTES_PER_ID * len(log)


@settings(max_examples=150, deadline=None)
@given(FEEDS, st.integers(0, 2**40), st.lists(st.floats(0.0, 1.0), max_size=6), st.integers(0, 2**32 - 1))
def test_every_id_fed_is_found_where_a_binary_search_finds_it(feeds, first, keep_shares, seed):
    rng = np.random.default_rng(seed)
    index, log, start = RankIndex(), np.zeros(0, np.int64), first
    for i, (n, step, gap) in enumerate(feeds):
        fed = start + np.cumsum(rng.integers(1, step + 1, n))
        start = int(fed[-1]) + gap if n else start
        log = np.concatenate([log, fed])
        index.update(log, n)
        check(index, log, rng)
        if i < len(keep_shares):  # a compaction: the tuples that left are dropped from the log
            log = log[rng.random(len(log)) < keep_shares[i]]
            index.update(log)
            check(index, log, rng)


def test_consecutive_ids_are_indexed_and_sparse_ones_are_searched_for():
    index, dense = RankIndex(), np.arange(10_000, 30_000, dtype=np.int64)
    index.update(dense)
    assert 0 < index.nbytes <= MAX_BYTES_PER_ID * len(dense)
    sparse = np.arange(0, 10_000 * 1000, 1000, dtype=np.int64)  # 15.6 words an id: far more than the budget
    index.update(sparse)
    assert index.nbytes == 0
    assert (index.positions(sparse, sparse[::7]) == np.arange(0, len(sparse), 7)).all()
    assert LOG_BYTES_PER_TUPLE == 8 + 8 + 1 + MAX_BYTES_PER_ID  # id, due, done and the index at most


def test_ids_eight_apart_as_a_cache_algorithms_misses_are_indexed():
    """CACHEJOIN-L's log holds its cache misses only: in the bench's pipeline its ids spanned up to
    8.3 times their count (99th percentile). Such a log is indexed, and found where it is."""
    index, spread = RankIndex(), np.arange(5, 8 * 50_000, 8, dtype=np.int64)
    index.update(spread)
    assert 0 < index.nbytes <= MAX_BYTES_PER_ID * len(spread)
    asked = spread[np.random.default_rng(0).permutation(len(spread))[:5000]]
    assert (index.positions(spread, asked) == np.searchsorted(spread, asked)).all()
