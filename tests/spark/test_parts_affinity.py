"""``partitions = N`` keeps each part's state where it was built: every call after the first
finds each part's state in the Python worker that holds it (no part is rebuilt, each stays on
its worker), and a part whose worker lost its state is rebuilt from the driver's copy, counted in
the step's stats and the progress record, without a tuple lost or doubled."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_semijoin.job.spec import StepSpec
from airflow_provider_semijoin.spark import partitioned
from airflow_provider_semijoin.spark.step import JoinStep

BATCHES = 6
BATCH_ROWS = 600


def master_step(backend) -> StepSpec:
    store = backend.make_master(pa.table({"nk": pa.array(range(0, 4000, 2), pa.int64()),
                                          "v": pa.array(range(2000), pa.int64())}))
    return StepSpec(column="nk", master={"url": backend.url, "table": store.table, "key": "nk", "select": ["v"]},
                    algorithm="hybridjoin", memory="1M", master_static=True, params={"page_rows": 50})


def stream(batch_id: int) -> pa.Table:
    """Keys of R (even), keys not in R (odd, and beyond R's range) and nulls."""
    rng = np.random.default_rng(batch_id)
    keys = pa.array(rng.integers(-50, 4200, BATCH_ROWS), pa.int64(), mask=rng.random(BATCH_ROWS) < 0.02)
    first = batch_id * BATCH_ROWS
    return pa.table({"sj_id": pa.array([str(i) for i in range(first, first + BATCH_ROWS)]), "nk": keys,
                     "sj_arrival": pa.array(np.full(BATCH_ROWS, time.time()))})


def run_batches(join: JoinStep, lose=None) -> tuple[list, list, int, list]:
    """Every batch through ``join`` (the last drains; ``lose(batch_id)`` after each); per batch the
    parts rebuilt and the worker of each part, the tuples that left, the tuples carried after each."""
    rebuilds, workers, left, carried = [], [], 0, []
    for batch_id in range(BATCHES):
        result = join.run(stream(batch_id), batch_id, time.time(), -np.inf, -np.inf, batch_id == BATCHES - 1)
        rebuilds.append(result.stats.join.rebuilds)
        workers.append([p.worker for p in result.stats.join.part_stats])
        left += result.stats.join.left
        carried.append(result.stats.carried)
        if lose is not None:
            lose(batch_id)
    return rebuilds, workers, left, carried


@pytest.mark.parametrize("parts", [2, 4])
def test_no_steady_state_batch_rebuilds_a_part_on_local_spark(spark, sqlite_backend, monkeypatch, parts):
    monkeypatch.setattr(partitioned, "CUT_PAGE_ROWS", 100)  # 20 pages of R to cut: a key range for every part
    join = JoinStep(master_step(sqlite_backend), 0, spark=spark, partitions=parts)
    try:
        rebuilds, workers, left, carried = run_batches(join)
    finally:
        join.close()
    assert left == BATCHES * BATCH_ROWS and carried[-1] == 0  # (exactly once: the step checks each batch)
    assert min(carried[:-1]) > 0  # tuples waited across batches: a part's state matters
    assert rebuilds == [0] * BATCHES
    assert all(w == workers[0] for w in workers)  # each part served where it was built, every batch
    assert len(set(workers[0])) == 2  # local[2]: the parts spread over both Python workers


def test_a_part_whose_worker_lost_it_is_rebuilt_and_counted(sqlite_backend):
    """In this process (``spark=None``): the registry this process holds as a worker would."""
    join = JoinStep(master_step(sqlite_backend), 0, spark=None, partitions=2)

    def lose(batch_id: int) -> None:
        if batch_id in (1, 3):  # part 1's worker went away after these batches
            partitioned._PARTS.pop((join.partitioned.step_json, 1))[1].algorithm.store.close()

    try:
        rebuilds, _, left, carried = run_batches(join, lose)
    finally:
        join.close()
        for key in [k for k in partitioned._PARTS if k[0] == join.partitioned.step_json]:
            partitioned._PARTS.pop(key)[1].algorithm.store.close()
    assert rebuilds == [0, 0, 1, 0, 1, 0]
    assert left == BATCHES * BATCH_ROWS and carried[-1] == 0


def test_with_parts_a_refreshed_r_is_as_old_as_the_last_refresh(sqlite_backend):
    """``refresh: {every_s}`` at partitions 2 (parts in this process), R's writes not captured: a
    batch's ``master_read_at`` is the last refresh, however late the call (the parts' caches hold
    rows read since then), so a plain UPDATE after it is not claimed seen; after the next refresh
    every part reads R anew."""
    spec = master_step(sqlite_backend)
    spec = StepSpec(**{**spec.__dict__, "algorithm": "cachejoin", "master_static": False, "refresh": {"every_s": 10.0}})
    now = [1000.0]
    join = JoinStep(spec, 0, spark=None, partitions=2, clock=lambda: now[0])
    in_r = pa.table({"sj_id": pa.array([str(i) for i in range(200)]), "nk": pa.array(range(0, 400, 2), pa.int64()),
                     "sj_arrival": pa.array(np.full(200, now[0]))})

    def batch(batch_id: int):
        return join.run(in_r, batch_id, now[0], -np.inf, -np.inf, True)

    try:
        first = batch(0)
        assert first.stats.join.master_read_at == 1000.0 and first.passed["v"].to_pylist() == list(range(200))
        sqlite_backend.connection.execute(f'UPDATE "{spec.master.table}" SET v = v + 100000')
        sqlite_backend.connection.commit()
        now[0] = 1005.0  # not due: the parts' caches may answer with the rows read before the UPDATE
        join.refresh_if_due()
        assert batch(1).stats.join.master_read_at == 1000.0 and join.refreshes == 0
        now[0] = 1011.0
        join.refresh_if_due()
        after = batch(2)
        assert join.refreshes == 1 and after.stats.join.master_read_at == 1011.0
        assert sorted(after.passed["v"].to_pylist()) == list(range(100000, 100200))
    finally:
        join.close()
        for key in [k for k in partitioned._PARTS if k[0] == join.partitioned.step_json]:
            partitioned._PARTS.pop(key)[1].algorithm.store.close()
