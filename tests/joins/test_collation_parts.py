"""partitions = N over a string key in a case- and accent-insensitive collation (MariaDB,
utf8mb4_general_ci): the partitioner's key ranges, as R spells its page bounds, restrict each
part's store so that the parts together join exactly as the database does."""

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from test_collation import GENERAL, Master, spelling, stream_for, words

from airflow_provider_semijoin.core.joins import create
from airflow_provider_semijoin.core.runner import run_join
from airflow_provider_semijoin.core.stores import store_for
from airflow_provider_semijoin.spark.partitioned import RangePartitioner


@pytest.mark.mysql
def test_parts_on_key_ranges_of_a_collated_key_are_exact(mysql_backend):
    rng = np.random.default_rng(5)
    bases = words(120, rng)
    master = Master(mysql_backend, GENERAL, [spelling(w, rng) for w in bases], unique=True)
    keys = stream_for(bases, rng, 600)
    stream = pa.table({"rid": pa.array(np.arange(len(keys))), "sk": pa.array(keys, pa.string())})
    partitioner = RangePartitioner(master.store, 3, page_rows=10)
    parts = partitioner.assign(stream["sk"])
    got, sizes = Counter(), []
    for part, key_range in enumerate(partitioner.key_ranges()):
        store = store_for(mysql_backend.connection, master.table, "nk", ["id"]).restrict(*key_range)
        sizes.append(store.n_rows)
        run = run_join(create("hybridjoin", store, 1 << 20, {"page_rows": 4}), stream.filter(pa.array(parts == part)), "sk")
        assert run.stats["exactly_once"]["ok"]
        got += Counter(zip(run.matched["rid"].to_pylist(), run.matched["id"].to_pylist()))
    assert sum(sizes) == master.store.n_rows and max(sizes) < master.store.n_rows  # the ranges tile R
    assert got == master.database_join(keys)
