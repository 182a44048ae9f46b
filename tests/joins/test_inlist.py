"""The micro-batch IN-list baseline: the contract, and its queries per batch."""

import math

import numpy as np
import pytest
from contract import JoinContract, master_of, stream_of
from hypothesis import strategies as st

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.joins import create
from airflow_provider_semijoin.core.runner import run_join


class TestInList(JoinContract):
    algorithm = "inlist"
    params = {"in_list_max": 16}
    param_strategies = {"in_list_max": st.integers(1, 40)}


@pytest.mark.parametrize("batch_rows, in_list_max", [(50, 7), (1, 3), (400, 1000), (33, 1)])
def test_queries_are_ceil_of_distinct_keys_over_in_list_max_per_batch(backend, batch_rows, in_list_max):
    store = backend.make_master(master_of(range(0, 300, 3)))
    rng = np.random.default_rng(batch_rows)
    keys = rng.integers(-10, 320, 400)
    algorithm = create("inlist", store, 8 << 20, {"batch_rows": batch_rows, "in_list_max": in_list_max})
    run = run_join(algorithm, stream_of(keys.tolist()), "sk")
    batches = [keys[i : i + batch_rows] for i in range(0, len(keys), batch_rows)]
    expected = sum(math.ceil(len(np.unique(b)) / in_list_max) for b in batches)
    assert run.stats["disk_queries"] == expected
    assert run.stats["loads"] == expected


def test_batch_rows_beyond_the_budget_is_refused(backend):
    store = backend.make_master(master_of(range(0, 300, 3)))
    fits = create("inlist", store, 4096).batch_rows
    with pytest.raises(ConfigError, match=r"^memory: .*batch_rows|^inlist\.batch_rows: .*memory"):
        create("inlist", store, 4096, {"batch_rows": fits * 10})


class TestInListLRU(JoinContract):
    algorithm = "inlist-lru"
    param_strategies = {"cache_fraction": st.sampled_from([0.0, 0.2, 0.5, 0.9])}


def test_lru_cache_saves_queries_on_a_repeating_stream(backend):
    """The second pass over the same keys hits the LRU cache: no IN query is needed for it."""
    store = backend.make_master(master_of(range(0, 300, 3)))
    keys = list(range(0, 60, 3)) * 2  # 20 keys of R, twice
    algorithm = create("inlist-lru", store, 1 << 20, {"batch_rows": 20})
    run = run_join(algorithm, stream_of(keys), "sk")
    assert algorithm.counters.loads == 1  # the first batch only
    assert run.stats["cache_hit_ratio"] == 0.5
