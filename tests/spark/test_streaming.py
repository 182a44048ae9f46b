"""Every registry algorithm as a Spark Structured Streaming query, checked against the oracle."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from airflow_provider_semijoin.core.joins import ALGORITHMS
from airflow_provider_semijoin.core.progress import ProgressRecord
from airflow_provider_semijoin.spark.runner import run_job

from spark_jobs import assert_sinks_equal_oracle, generator_job, write_master

MYSQL_ALGORITHMS = ["inlj", "meshjoin", "hybridjoin", "cachejoin-pq"]


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_every_algorithm_streams_exactly_once_on_sqlite(spark, tmp_path, sqlite_backend, algorithm):
    run_and_check(spark, tmp_path, sqlite_backend, algorithm)


@pytest.mark.mysql
@pytest.mark.parametrize("algorithm", MYSQL_ALGORITHMS)
def test_algorithms_stream_exactly_once_on_mariadb(spark, tmp_path, mysql_backend, algorithm):
    run_and_check(spark, tmp_path, mysql_backend, algorithm, rows=1500)


def run_and_check(spark, tmp_path, backend, algorithm, rows=3000):
    store = write_master(backend, 400)
    spec = generator_job(tmp_path, backend.url, store.table, algorithm=algorithm, total_rows=rows)
    records = []
    summary = run_job(spec, spark=spark, on_progress=records.append)
    assert summary["stopped_by"] == "end_of_input"
    assert summary["input_rows"] == rows == sum(r["input_rows"] for r in records)
    assert summary["matched"] + summary["unmatched"] == rows
    assert [r["batch_id"] for r in records] == list(range(len(records)))
    for record in records:
        ProgressRecord.from_dict(record)  # every field is a known one
    assert sum(r["matched"] + r["unmatched"] for r in records) == rows  # each tuple left once, in some batch
    assert records[-1]["drained"] == "end_of_input" and records[-1]["queue_tuples"] == 0
    assert_sinks_equal_oracle(store, spec)


@pytest.mark.parametrize("algorithm", ["hybridjoin", "cachejoin"])
def test_partitions_split_a_micro_batch_over_instances_exactly_once(spark, tmp_path, sqlite_backend, algorithm,
                                                                   monkeypatch):
    """Each part keeps its tuples inside between micro-batches (in its Python worker; rebuilt from
    the driver's copy where a worker does not hold them) and the batch that ends the input drains.
    A slice steps no longer than it takes to take its tuples in (no share of the trigger interval):
    how many it carries then does not depend on how fast the parts are (with a share, the parts
    drained every batch once their tasks started sooner)."""
    monkeypatch.setattr("airflow_provider_semijoin.spark.runner.STEP_SHARE", 0.0)
    store = write_master(sqlite_backend, 2000)
    spec = generator_job(tmp_path, sqlite_backend.url, store.table, algorithm=algorithm, total_rows=6000,
                         master_rows=2000, partitions=3, params={"page_rows": 16})
    spec.source.rows_per_second, spec.source.max_rows_per_batch = 1e6, 600  # ten batches of a backlog
    records = []
    summary = run_job(spec, spark=spark, on_progress=records.append)
    assert summary["input_rows"] == 6000 and len(records) >= 10
    assert max(r["queue_tuples"] for r in records) > 0  # tuples were carried from one batch to the next
    assert records[-1]["drained"] == "end_of_input" and records[-1]["queue_tuples"] == 0
    assert_sinks_equal_oracle(store, spec)


def test_range_partitioner_balances_a_zipf_hot_range(sqlite_backend):
    from airflow_provider_semijoin.spark.partitioned import RangePartitioner
    from airflow_provider_semijoin.workloads.zipf import zipf_rows

    store = write_master(sqlite_backend, 20_000)
    partitioner = RangePartitioner(store, 4, page_rows=100)
    stream = zipf_rows(0, 40_000, 20_000, exponent=1.0, shape="noperm", seed=3)["nk"]
    uniform = np.bincount(partitioner.part_of(stream[:20_000]), minlength=4)  # the cuts before any key is seen
    pages, _ = partitioner.pages(stream[:20_000])
    hottest_page = np.bincount(pages).max()
    first = np.bincount(partitioner.assign(stream[:20_000]), minlength=4)
    second = np.bincount(partitioner.assign(stream[20_000:]), minlength=4)
    assert uniform.max() > 0.8 * 20_000  # cut by R's pages alike, the hot head of R lands on part 0
    assert hottest_page <= first.max() < 0.7 * 20_000  # the first keys seen cut at once; a page is never split
    assert second.max() < 0.7 * 20_000
    assert (np.diff(partitioner.cut_pages()) >= 0).all()


def test_the_generator_clock_starts_after_a_warm_up_batch():
    """The reader's offsets (a clock passed in): an empty warm-up batch first, then ``t0``."""
    import json

    from airflow_provider_semijoin.job.sources import GeneratorSource
    from airflow_provider_semijoin.workloads.stream import WARM_UP, generator_data_source

    settings = GeneratorSource(rows_per_second=100.0, master_rows=50, seed=1).settings()
    reader = generator_data_source()({"settings": json.dumps(settings)}).streamReader(None)
    now = [1000.0]
    reader.clock = lambda: now[0]
    start = reader.initialOffset()
    assert start == {"row": 0, "t0": None}
    now[0] += 60  # Spark starts (plans, Python workers): no tuple arrives meanwhile
    assert reader.latestOffset(start, None) == WARM_UP
    (warm_up,) = reader.partitions(start, WARM_UP)
    assert (warm_up.start, warm_up.end) == (0, 0) and list(reader.read(warm_up)) == []
    now[0] += 30  # the warm-up batch runs
    first = reader.latestOffset(WARM_UP, None)
    assert first == {"row": 1, "t0": 1090.0}  # the clock starts now: the first tuple arrives at t0
    now[0] += 2.0
    second = reader.latestOffset(first, None)
    assert second == {"row": 201, "t0": 1090.0}
    (part,) = reader.partitions(first, second)
    (batch,) = list(reader.read(part))
    assert batch.num_rows == 200 and batch["sj_arrival"].to_pylist()[:2] == pytest.approx([1090.01, 1090.02])


def test_every_tuple_arrives_after_the_warm_up_batch(spark, tmp_path, sqlite_backend):
    """A slow first micro-batch (a progress callback that takes 2 s) is not charged to any tuple:
    the first record is the warm-up (no tuple), and every tuple arrived after it ended."""
    import time

    from airflow_provider_semijoin.spark.sinks import read_parquet_sink

    store = write_master(sqlite_backend, 400)
    spec = generator_job(tmp_path, sqlite_backend.url, store.table, total_rows=1500)
    records = []

    def slow_warm_up(record):
        records.append(record)
        if record["batch_id"] == 0:
            time.sleep(2.0)

    summary = run_job(spec, spark=spark, on_progress=slow_warm_up)
    assert summary["input_rows"] == 1500 and records[0]["input_rows"] == 0 and records[0]["latency_ms_p99"] is None
    warmed_at = records[0]["time"] + 2.0
    arrivals = np.concatenate([read_parquet_sink(spec.sinks.matched.path)["sj_arrival"].to_numpy(),
                               read_parquet_sink(spec.sinks.dead_letter.path)["sj_arrival"].to_numpy()])
    assert len(arrivals) == 1500 and arrivals.min() >= warmed_at
    assert_sinks_equal_oracle(store, spec)


UNIX_SOCKETS_OF = """
import os, sys
from airflow_provider_semijoin.spark.session import get_spark
if sys.argv[2] == "hook":  # the operator's in-process session
    from airflow_provider_semijoin.hooks.spark import SemiJoinSparkHook
    spark = SemiJoinSparkHook(None).get_session("sockets", partitions=int(sys.argv[1]))
else:
    spark = get_spark("local[1]", app_name="sockets", partitions=int(sys.argv[1]))
print("SOCKETS", spark.sparkContext.parallelize([0], 1).map(lambda _: os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED", "false")).collect()[0])
spark.stop()
"""


def test_python_workers_use_unix_domain_sockets_only_for_partitioned_jobs(spark):
    """A session for ``partitions`` > 1 has its Python workers reach their executor over a Unix
    domain socket, not TCP over loopback, where a task that does nothing ran 43-55 ms (``partitions
    = N`` pays a job a batch); one for a single part keeps TCP, over which a stop leaves no
    BrokenPipeError traceback of PySpark's daemon in the driver's log. (Each in a process of its own:
    a process has one session.)"""
    told = spark.sparkContext.parallelize([0], 1).map(lambda _: os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED", "false")).collect()
    assert told == ["false"]  # the tests' session: one part (unset over TCP)
    for partitions, expected, through in ((1, "false", "get_spark"), (2, "true", "get_spark"), (2, "true", "hook")):
        run = subprocess.run([sys.executable, "-c", UNIX_SOCKETS_OF, str(partitions), through], capture_output=True, text=True,
                             timeout=300, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
        assert run.returncode == 0, run.stderr[-2000:]
        told = [line.split()[1].lower() for line in run.stdout.splitlines() if line.startswith("SOCKETS ")]
        assert told == [expected], (partitions, through)  # (Airflow's logging prints to stdout too)


def test_a_micro_batch_reaches_the_driver_in_large_arrow_batches(spark):
    """The session collects a micro-batch in Arrow batches of ARROW_BATCH_ROWS, not Spark's 10,000:
    each batch costs the JVM and the driver work beyond its rows."""
    from airflow_provider_semijoin.spark.session import ARROW_BATCH_ROWS

    rows = 2 * ARROW_BATCH_ROWS + 1
    collected = spark.range(0, rows, numPartitions=1).toArrow()
    assert collected.num_rows == rows
    assert [len(chunk) for chunk in collected.column(0).chunks] == [ARROW_BATCH_ROWS, ARROW_BATCH_ROWS, 1]
