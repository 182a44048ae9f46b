"""A step's algorithm is built once over the step's life (:class:`...spark.step.JoinStep`): at its
creation where the carried rows spill (their bytes known then), else with the first rows, which
show their width - never first at the whole M and again at the share the rows leave."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_semijoin.core.joins.frontstage import FrontStage
from airflow_provider_semijoin.core.joins.registry import ALGORITHMS
from airflow_provider_semijoin.spark.runner import BatchProcessor
from airflow_provider_semijoin.workloads.stream import generator_rows

from spark_jobs import generator_job, write_master


@pytest.mark.parametrize("on_missing", ["dead_letter", "retry"])
@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_a_step_builds_its_algorithm_once_from_creation_through_its_first_batch(tmp_path, sqlite_backend, constructions,
                                                                                  name, on_missing):
    store = write_master(sqlite_backend, 2000)
    spec = generator_job(tmp_path, sqlite_backend.url, store.table, algorithm=name, total_rows=600, master_rows=2000)
    step_spec = spec.steps[0]
    step_spec.on_missing, step_spec.max_queue_time_s = on_missing, None
    if on_missing == "retry":
        step_spec.retry_grace_s = 60.0
    processor = BatchProcessor(spec, None, False, lambda: 1000.0)
    at_creation = list(constructions)
    rows = generator_rows(spec.source.settings(), 0, 300)
    record = processor.process(rows.append_column("sj_arrival", pa.array(np.full(300, 1000.0))), 0)
    step = processor.steps[0]
    layers = [name, step.algorithm.algorithm.name] if isinstance(step.algorithm, FrontStage) else [name]
    assert constructions == layers
    assert at_creation == (layers if step.spills else [])
    assert step.sized and step.algorithm.memory == step.algorithm_memory < step_spec.memory_bytes
    assert record["input_rows"] == 300


@pytest.mark.parametrize("name", ["hybridjoin", "cachejoin", "ssij"])
def test_a_rebuild_where_r_did_not_move_reads_nothing_of_r(tmp_path, sqlite_backend, monkeypatch, name):
    """The stepping ahead lost its session with R as it was: the algorithm is built again from the
    step's plan (caches cold, counters carried on), R's statistics not read again; where R moved
    (a refresh, a snapshot lost while R changed) they are, once."""
    store = write_master(sqlite_backend, 2000)
    spec = generator_job(tmp_path, sqlite_backend.url, store.table, algorithm=name, total_rows=600, master_rows=2000)
    spec.steps[0].max_queue_time_s = None
    processor = BatchProcessor(spec, None, False, lambda: 1000.0)
    rows = generator_rows(spec.source.settings(), 0, 300)
    processor.process(rows.append_column("sj_arrival", pa.array(np.full(300, 1000.0))), 0)
    step = processor.steps[0]
    cls, read = ALGORITHMS[name], []
    statistics = cls.statistics.__func__
    monkeypatch.setattr(cls, "statistics", classmethod(lambda c, s, settings: read.append(c.name) or statistics(c, s, settings)))
    before, counters, plan = step.algorithm, step.algorithm.counters, step.plan
    io = (step.store.counters.queries, step.store.counters.rows)
    step._rebuild(step.carried.carried(), r_moved=False)
    assert read == [] and (step.store.counters.queries, step.store.counters.rows) == io
    assert step.algorithm is not before and step.algorithm.plan_used is plan and step.algorithm.counters is counters
    step._rebuild(step.carried.carried())
    assert read == [name] and step.algorithm.counters is counters
