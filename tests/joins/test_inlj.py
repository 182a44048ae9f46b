"""INLJ: the contract, and one index lookup per stream tuple that enters the join."""

import numpy as np
import pyarrow as pa
from contract import JoinContract, master_of, stream_of

from airflow_provider_semijoin.core.joins import create
from airflow_provider_semijoin.core.runner import run_join


class TestInlj(JoinContract):
    algorithm = "inlj"


def test_exactly_one_query_per_valid_in_range_tuple(backend):
    store = backend.make_master(master_of(range(0, 200, 2)))
    rng = np.random.default_rng(2)
    valid = rng.integers(0, 199, 250).tolist()  # present (even) and absent (odd) keys in R's range
    stream = stream_of([str(v) for v in valid] + ["x", None, "2.5", ""] * 10, pa.string())
    run = run_join(create("inlj", store, 1 << 20), stream, "sk")
    assert run.stats["disk_queries"] == 250
    assert run.stats["loads"] == 250
    assert run.stats["tuples_matched"] == sum(v % 2 == 0 for v in valid)
