"""The task's published memory split is the plan the job's runner kept beside its checkpoint
(:mod:`airflow_provider_semijoin.job.kept_plans`): shown without opening the master database
where it exists, planned on R (as the runner will) where it does not."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.job.kept_plans import plan_file, stats_stamp
from airflow_provider_semijoin.job.spec import StepSpec
from airflow_provider_semijoin.operators.join import HybridJoinOperator
from airflow_provider_semijoin.spark.runner import BatchProcessor
from airflow_provider_semijoin.spark.step import JoinStep
from airflow_provider_semijoin.workloads.stream import generator_rows

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "spark"))
from spark_jobs import generator_job, write_master  # noqa: E402

DOWN = "mysql://semijoin:semijoin@127.0.0.1:9/semijoin"  # nothing listens on port 9 (discard): the server is down


class LocalSpark:
    master = "local[1]"


def operator() -> HybridJoinOperator:
    op = HybridJoinOperator(task_id="join", column="nk", master_static=True, master_table="d", master_key="nk",
                            source={"kind": "generator", "total_rows": 100})
    op._spark_hook = LocalSpark()
    return op


def run_one_batch(spec) -> BatchProcessor:
    processor = BatchProcessor(spec, None, False, lambda: 1000.0)
    rows = generator_rows(spec.source.settings(), 0, 200)
    processor.process(rows.append_column("sj_arrival", pa.array(np.full(200, 1000.0))), 0)
    return processor


@pytest.mark.parametrize("on_missing", ["dead_letter", "retry"])
def test_the_split_the_runner_kept_is_shown_without_opening_the_master_database(tmp_path, sqlite_backend, on_missing):
    store = write_master(sqlite_backend, 2000)
    spec = generator_job(tmp_path, sqlite_backend.url, store.table, algorithm="hybridjoin", master_rows=2000,
                         params={"page_rows": 16})
    spec.steps[0].on_missing = on_missing
    if on_missing == "retry":
        spec.steps[0].retry_grace_s = 60.0
    processor = run_one_batch(spec)
    step = processor.steps[0]
    ran = {**step.algorithm.memory_split(), "carried_rows_bytes": spec.steps[0].memory_bytes - step.algorithm_memory}
    assert plan_file(spec.checkpoint, 0).exists()
    spec.steps[0].master.url = DOWN  # the worker's connection now points at a server that is down
    info = operator().job_info(spec, "link")
    assert info["steps"][0]["memory_split_planned_by"] == "runner"
    assert info["memory_split"] == ran


def test_without_a_kept_plan_the_split_is_planned_on_r_as_the_runner_plans_it(tmp_path, sqlite_backend):
    store = write_master(sqlite_backend, 2000)
    spec = generator_job(tmp_path, sqlite_backend.url, store.table, algorithm="hybridjoin", master_rows=2000,
                         params={"page_rows": 16})
    shown = operator().job_info(spec, "link")
    assert shown["steps"][0]["memory_split_planned_by"] == "worker"
    step = run_one_batch(spec).steps[0]
    assert shown["memory_split"] == {**step.algorithm.memory_split(),
                                     "carried_rows_bytes": spec.steps[0].memory_bytes - step.algorithm_memory}
    spec.checkpoint = str(tmp_path / "another_checkpoint")  # no plan kept there: the worker opens R
    spec.steps[0].master.url = DOWN
    with pytest.raises(ConfigError, match=r"^master URL: cannot connect to MySQL at semijoin@127\.0\.0\.1:9/semijoin"):
        operator().job_info(spec, "link")


def test_a_step_changed_since_its_plan_was_kept_is_planned_anew(tmp_path, sqlite_backend):
    store = write_master(sqlite_backend, 2000)
    spec = generator_job(tmp_path, sqlite_backend.url, store.table, algorithm="hybridjoin", master_rows=2000,
                         params={"page_rows": 16})
    run_one_batch(spec)
    spec.steps[0].memory = "2M"  # not the step whose plan was kept
    assert operator().job_info(spec, "link")["steps"][0]["memory_split_planned_by"] == "worker"


def test_a_refresh_that_plans_anew_keeps_the_new_plan(tmp_path, sqlite_backend):
    """``refresh: {every_s}`` reads R's statistics again and plans the step anew: the kept plan,
    what the operator shows, is the new one (it kept the plan of the start, with its stamp)."""
    store = sqlite_backend.make_master(pa.table({"nk": pa.array(range(0, 4000, 2), pa.int64()),
                                                 "v": pa.array(range(2000), pa.int64())}))
    step = StepSpec(column="nk", master={"url": sqlite_backend.url, "table": store.table, "key": "nk", "select": ["v"]},
                    algorithm="hybridjoin", memory="1M", params={"page_rows": 50}, refresh={"every_s": 10.0})
    now = [1000.0]
    join = JoinStep(step, 0, clock=lambda: now[0], checkpoint=str(tmp_path / "checkpoint"))
    rows = pa.table({"sj_id": pa.array([str(i) for i in range(300)]), "nk": pa.array(range(0, 900, 3), pa.int64()),
                     "sj_arrival": pa.array(np.full(300, now[0]))})
    try:
        join.run(rows, 0, now[0], -np.inf, -np.inf, False)
        first = json.loads(plan_file(str(tmp_path / "checkpoint"), 0).read_text())
        sqlite_backend.connection.executemany(f'INSERT INTO "{store.table}" (nk, v) VALUES (?, ?)',
                                              [(k, k) for k in range(4000, 40_000, 2)])  # R ten times as large
        sqlite_backend.connection.commit()
        now[0] = 1011.0
        join.refresh_if_due()
        kept = json.loads(plan_file(str(tmp_path / "checkpoint"), 0).read_text())
        assert join.refreshes == 1 and kept["planned_at"] == 1011.0
        assert kept["stats_stamp"] == stats_stamp(join.planner.stats) != first["stats_stamp"]
        assert kept["memory_split"] == {**join.algorithm.memory_split(),
                                        "carried_rows_bytes": step.memory_bytes - join.algorithm_memory}
    finally:
        join.close()
