"""Every registry algorithm as a Spark Structured Streaming query, checked against the oracle."""

from __future__ import annotations

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
        assert record["matched"] + record["unmatched"] == record["input_rows"]
    assert_sinks_equal_oracle(store, spec)
