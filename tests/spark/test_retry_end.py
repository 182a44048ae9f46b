"""``on_missing: retry`` at the end of a bounded input, through real Spark: a landing folder
whose file holds keys in R, keys inserted into R (plain SQL, captured by triggers) while the
job waits for them, and keys R never gets. The end of input is the end: the job goes on
retrying the held tuples each micro-batch until their key appears or their grace passes, so
every tuple leaves exactly once - matched, or to the dead letter ``not_in_master``. A stop by
``max_batches`` is a pause: the held tuples stay in the checkpoint and the next run on it
resolves them.
"""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_semijoin.core.oracle import hash_join
from airflow_provider_semijoin.core.stores import store_for
from airflow_provider_semijoin.job.spec import JobSpec
from airflow_provider_semijoin.spark.runner import run_job
from airflow_provider_semijoin.spark.sinks import read_parquet_sink

GRACE_S = 6.0  # long enough for the insert after the first draining batch to land inside it
LATE = [1001, 1003, 1005, 1007]  # inserted into R while the job runs (or between its two runs)
NEVER = [2001, 2003, 2005, 2007, 2009, 2011]  # never in R: the dead letter, once their grace passed


def master_and_landing(tmp_path, backend) -> tuple[str, pa.Table]:
    """R: even keys 0..398 with surrogate keys; one landing file of 300 tuples, most of them on
    R's keys, one tuple on each key of LATE and NEVER."""
    keys = np.arange(0, 400, 2)
    master = backend.make_master(pa.table({"nk": pa.array(keys, pa.int64()), "sk": pa.array(keys * 10 + 1, pa.int64())}),
                                 "nk", ["sk"])
    rng = np.random.default_rng(3)
    nk = np.concatenate([rng.choice(keys, 300 - len(LATE) - len(NEVER)), LATE, NEVER])
    rng.shuffle(nk)
    stream = pa.table({"tid": pa.array(np.arange(len(nk)), pa.int64()), "nk": pa.array(nk, pa.int64())})
    (tmp_path / "landing").mkdir()
    pq.write_table(stream, tmp_path / "landing" / "sales.parquet")
    return master.table, stream


def retry_job(tmp_path, url: str, table: str, partitions: int, stop: dict) -> JobSpec:
    return JobSpec.from_dict({
        "source": {"kind": "files", "path": str(tmp_path / "landing"), "format": "parquet", "id_column": "tid"},
        "steps": [{"column": "nk", "master": {"url": url, "table": table, "key": "nk", "select": ["sk"]},
                   "algorithm": "hybridjoin", "memory": "1M", "change_capture": "triggers",
                   "on_missing": "retry", "retry_grace_s": GRACE_S}],
        "sinks": {"matched": {"path": str(tmp_path / "matched")}, "dead_letter": {"path": str(tmp_path / "dead")}},
        "checkpoint": str(tmp_path / "checkpoint"), "stop": stop, "trigger_interval_s": 1.0,
        "partitions": partitions, "work_ahead": False,
    })


def insert_late_keys(backend, table: str) -> None:
    backend.execute(f'INSERT INTO "{table}" (nk, sk) VALUES ' + ", ".join(f"({k}, {k * 10 + 1})" for k in LATE))


def assert_each_tuple_left_once_as_the_oracle_says(backend, table: str, spec: JobSpec, stream: pa.Table) -> None:
    """The sinks against the plain hash join with R as it ended (LATE in it): each tuple once."""
    expected_matched, expected_unmatched = hash_join(store_for(backend.connection, table, "nk", ["sk"]), stream, "nk")
    matched, dead = read_parquet_sink(spec.sinks.matched.path), read_parquet_sink(spec.sinks.dead_letter.path)
    got_matched = sorted(zip(matched["tid"].to_pylist(), matched["sk"].to_pylist()))
    got_dead = sorted((int(i), r) for i, r in zip(dead["sj_id"].to_pylist(), dead["reason"].to_pylist()))
    assert got_matched == sorted((i, row[0]) for (i, row), n in expected_matched.items() for _ in range(n))
    assert got_dead == sorted(expected_unmatched.elements())
    assert {i for i, _ in got_dead} == {i for i, k in enumerate(stream["nk"].to_pylist()) if k in NEVER}
    assert {k for t, k in zip(stream["tid"].to_pylist(), stream["nk"].to_pylist()) if t in dict(got_matched)} >= set(LATE)


@pytest.mark.parametrize("partitions", [1, 2])
def test_the_end_of_input_waits_for_the_held_tuples_grace_and_each_leaves_once(spark, tmp_path, sqlite_backend, caplog,
                                                                                partitions):
    """The first draining micro-batch (the trigger that found no new file) holds the tuples of
    LATE and NEVER; the test then inserts LATE into R. The job ends once NEVER's grace passed:
    nothing held, LATE matched with the inserted rows, NEVER in the dead letter, every tuple
    once. Before the fix the query ended with that batch, 10 tuples held in the checkpoint."""
    table, stream = master_and_landing(tmp_path, sqlite_backend)
    spec = retry_job(tmp_path, sqlite_backend.url, table, partitions, {"end_of_input": True})
    records = []

    def on_progress(record: dict) -> None:
        records.append(record)
        if record["drained"] == "end_of_input" and sum(r["drained"] is not None for r in records) == 1:
            assert record["queue_tuples"] == len(LATE) + len(NEVER)  # all of them held, none carried
            insert_late_keys(sqlite_backend, table)

    with caplog.at_level(logging.INFO, logger="airflow_provider_semijoin.spark.runner"):
        summary = run_job(spec, spark=spark, on_progress=on_progress)
    assert (summary["stopped_by"], summary["drained"], summary["held_for_retry"]) == ("end_of_input", "end_of_input", 0)
    assert summary["input_rows"] == stream.num_rows and records[-1]["queue_tuples"] == 0
    waits = [r.getMessage() for r in caplog.records if r.getMessage().startswith("end of input: the job waits")]
    assert len(waits) == 1 and f"for the grace of {len(LATE) + len(NEVER)} tuples held for a retry" in waits[0]
    assert_each_tuple_left_once_as_the_oracle_says(sqlite_backend, table, spec, stream)


def test_a_max_batches_stop_leaves_the_held_tuples_to_the_next_run_which_resolves_them(spark, tmp_path, sqlite_backend):
    """``max_batches: 1`` is a pause: its one batch drains the join and stops with LATE and NEVER
    held in the checkpoint; LATE is inserted; the next run on the same checkpoint, to the end of
    input, matches LATE and dead-letters NEVER: every tuple once over both runs."""
    table, stream = master_and_landing(tmp_path, sqlite_backend)
    first = run_job(retry_job(tmp_path, sqlite_backend.url, table, 1, {"max_batches": 1}), spark=spark)
    assert (first["stopped_by"], first["drained"], first["held_for_retry"]) == ("max_batches", "max_batches",
                                                                                len(LATE) + len(NEVER))
    assert read_parquet_sink(str(tmp_path / "dead")).num_rows == 0
    insert_late_keys(sqlite_backend, table)
    spec = retry_job(tmp_path, sqlite_backend.url, table, 1, {"end_of_input": True})
    second = run_job(spec, spark=spark)
    assert (second["stopped_by"], second["held_for_retry"], second["input_rows"]) == ("end_of_input", 0, 0)
    assert_each_tuple_left_once_as_the_oracle_says(sqlite_backend, table, spec, stream)
