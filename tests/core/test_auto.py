"""``algorithm: auto`` predicts each candidate at the share of M that the carried rows leave it
(:mod:`airflow_provider_semijoin.pipeline.auto`)."""

from __future__ import annotations

import pytest

from airflow_provider_semijoin.core.calibration import calibrate
from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.joins.registry import AUTO_CANDIDATES, create, planner
from airflow_provider_semijoin.core.prediction import predict
from airflow_provider_semijoin.core.session import sized_for_rows
from airflow_provider_semijoin.pipeline.auto import choose_algorithm, predictions
from airflow_provider_semijoin.job.rowbytes import JOIN_COLUMN_BYTES, STRING_BYTES, ddl_row_bytes, estimated_row_bytes
from airflow_provider_semijoin.job.sources import FilesSource, GeneratorSource
from airflow_provider_semijoin.workloads import master_table

MEMORY = 4 << 20


@pytest.fixture
def store(sqlite_backend):
    return sqlite_backend.make_master(master_table(200_000, seed=3).select(["nk", "sk"]))


def test_the_carried_rows_cost_the_candidates_that_hold_many_tuples(store):
    """MESHJOIN and HYBRIDJOIN hold H_S's tuples, whose rows take M from their structures: they
    are predicted slower once the rows count; INLJ holds one tuple and loses next to nothing."""
    costs = calibrate(store)  # one measurement for both: two would differ by the machine's noise
    whole = predictions(store, MEMORY, candidates=("meshjoin", "hybridjoin", "inlj"), costs=costs)
    shared = predictions(store, MEMORY, candidates=("meshjoin", "hybridjoin", "inlj"), row_bytes=100.0, costs=costs)
    for name in ("meshjoin", "hybridjoin"):
        assert shared[name] < 0.9 * whole[name], (name, shared[name], whole[name])
    assert shared["inlj"] == pytest.approx(whole["inlj"], rel=0.05)


def test_each_candidate_is_predicted_as_the_step_will_size_it(store):
    """The algorithm auto prices is the one a Spark step builds (:func:`sized_for_rows`)."""
    algorithm, share = sized_for_rows(planner("hybridjoin", store), MEMORY, 100.0)
    assert share < MEMORY and algorithm.memory_split() != create("hybridjoin", store, MEMORY).memory_split()
    name, rates = choose_algorithm(store, MEMORY, 1.0, row_bytes=100.0)
    assert name == max(rates, key=rates.get)


@pytest.mark.parametrize("row_bytes", [None, 100.0])
def test_auto_predicts_from_plans_as_from_the_algorithms_built_from_them(store, constructions, row_bytes):
    """``auto`` builds no candidate: the rate of each one's plan is the rate of the algorithm built
    from it (what it priced before it predicted from plans), so it chooses as before."""
    costs = calibrate(store)  # (measures the engine's costs on algorithms it builds)
    constructions.clear()
    rates = predictions(store, MEMORY, row_bytes=row_bytes, costs=costs)
    assert constructions == [] and set(rates) == set(AUTO_CANDIDATES)
    built = {}
    for name in AUTO_CANDIDATES:
        plans = planner(name, store)
        algorithm = plans.build(plans.plan(MEMORY)) if row_bytes is None else sized_for_rows(plans, MEMORY, row_bytes)[0]
        built[name] = predict(name, algorithm, costs, store.page_map().n_keys, 1.0)
    assert rates == built
    assert max(rates, key=rates.get) == max(built, key=built.get)


def test_a_budget_the_rows_fill_leaves_no_candidate(store):
    with pytest.raises(ConfigError, match=r"memory: 4096 bytes are too few for any algorithm"):
        choose_algorithm(store, 4096, 1.0, row_bytes=10_000.0)


@pytest.mark.parametrize("ddl, expected", [
    ("tid BIGINT, nk STRING", 8 + STRING_BYTES),
    ("a INT, b DOUBLE, c DECIMAL(10,2), d ARRAY<INT>", 4 + 8 + 16 + STRING_BYTES),
    ("flag boolean, day date", 1 + 4),
])
def test_ddl_row_bytes(ddl, expected):
    assert ddl_row_bytes(ddl) == expected


def test_the_estimate_counts_the_ids_the_join_columns_and_earlier_steps():
    generator = estimated_row_bytes(GeneratorSource(), 0)
    assert generator == 5 * 8 + STRING_BYTES + JOIN_COLUMN_BYTES  # tid, nk, qty, amount, sj_arrival
    assert estimated_row_bytes(GeneratorSource(), 2) == generator + 16
    files = FilesSource(path="/landing", format="parquet", schema="id BIGINT, nk BIGINT")
    assert estimated_row_bytes(files, 0) == 16 + 8 + 2 * STRING_BYTES + JOIN_COLUMN_BYTES


def test_the_estimate_counts_a_deadline_as_the_rows_carry_it():
    """A job's deadline adds each tuple's to the carried rows (:func:`with_deadlines`): the
    estimate grows by the bytes it adds a row (it counted none, 8 too few)."""
    import numpy as np
    import pyarrow as pa

    from airflow_provider_semijoin.job.spec import DeadlineSpec
    from airflow_provider_semijoin.spark.joinstate import with_deadlines

    rows = pa.table({"sj_arrival": pa.array(np.arange(1000, dtype=np.float64))})
    added = (with_deadlines(rows, DeadlineSpec(max_latency_s=5.0)).nbytes - rows.nbytes) / rows.num_rows
    assert estimated_row_bytes(GeneratorSource(), 0, deadline=True) - estimated_row_bytes(GeneratorSource(), 0) == added


def test_auto_counts_the_versions_per_key_of_a_type_2_dimension(sqlite_backend):
    """Three versions per key: each page is three times the rows, so a page-reading candidate is
    predicted slower than on the same keys with one row each, and auto prices it so."""
    import numpy as np
    import pyarrow as pa

    from airflow_provider_semijoin.core.prediction import predict

    keys = np.repeat(np.arange(0, 40_000, 2), 3)
    store = sqlite_backend.make_master(pa.table({"id": np.arange(len(keys)), "nk": keys, "sk": np.arange(len(keys))}),
                                       primary_key="id")
    assert store.page_map().rows_per_key == 3.0
    # c_IO = S + T * rows with S and T fixed (calibrate's placeholders without a store), the rest as
    # measured: by how much K = 3 slows an iteration follows T's share of it, which the machine's load
    # moved (0.91 of the K = 1 rate once, beside a CI run); that it slows it does not
    costs = calibrate(store).with_io(1e-4, 1e-6)
    algorithm = create("hybridjoin", store, MEMORY)
    one, three = (predict("hybridjoin", algorithm, costs, 20_000, 1.0, rows_per_key=k) for k in (1.0, 3.0))
    assert three < one
    assert predictions(store, MEMORY, candidates=("hybridjoin",), costs=costs)["hybridjoin"] == pytest.approx(three)
