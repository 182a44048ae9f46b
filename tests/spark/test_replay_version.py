"""A micro-batch Spark replays after a crash reads the version of R its first attempt read: the
same values for the same tuples, though R changed (plain SQL, captured) before the restart."""

from __future__ import annotations

import json
import signal

import pyarrow.parquet as pq
import pytest
from spark_jobs import driver_summary, generator_job, run_driver, write_master

from airflow_provider_semijoin.core.stores import DatabaseURL
from airflow_provider_semijoin.job.spec import JobSpec

KILLED_BATCH = 4


def batch_values(spec: JobSpec, batch_id: int) -> dict:
    """tid -> (name, category) of one micro-batch's matched sink."""
    table = pq.read_table(f"{spec.sinks.matched.path}/batch={batch_id}/part-0.parquet")
    return {int(t): v for t, v in zip(table["tid"].to_pylist(), zip(table["name"].to_pylist(), table["category"].to_pylist()))}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("algorithm", ["cachejoin", pytest.param("hybridjoin", marks=pytest.mark.acceptance)])  # (first tier: one)
def test_a_replayed_batch_reads_the_version_its_first_attempt_read(tmp_path, sqlite_backend, algorithm):
    store = write_master(sqlite_backend, 400)
    data = generator_job(tmp_path, sqlite_backend.url, store.table, algorithm=algorithm, total_rows=3000).to_dict()
    data["source"]["rows_per_second"] = 1e6  # a backlog: every batch is max_rows_per_batch
    data["source"]["max_rows_per_batch"] = 300
    del data["steps"][0]["master_static"]
    data["steps"][0]["change_capture"] = "triggers"
    spec = JobSpec.from_dict(data)
    spec_file = tmp_path / "job.json"
    spec_file.write_text(json.dumps(spec.to_dict()))

    first = run_driver(spec_file, kill=f"sinks:{KILLED_BATCH}")  # the batch's sinks written, Spark not told
    assert first.returncode == -signal.SIGKILL
    before = batch_values(spec, KILLED_BATCH)
    assert before  # the first attempt's output
    connection = DatabaseURL.parse(sqlite_backend.url).connect()
    try:
        connection.execute(f'UPDATE "{store.table}" SET name = name || \' (renamed)\'')  # every key, committed
    finally:
        connection.close()

    second = run_driver(spec_file)
    assert second.returncode == 0, second.stdout[-2000:]
    assert driver_summary(second.stdout)["stopped_by"] == "end_of_input"
    after = batch_values(spec, KILLED_BATCH)  # the replay's (tuples the join worked ahead on may differ)
    assert after and not any(name.endswith(" (renamed)") for name, _ in after.values())  # all at the first attempt's version
    common = before.keys() & after.keys()
    assert len(common) > len(before) // 2 and all(before[t] == after[t] for t in common)
    last = max(int(p.name.split("=")[1]) for p in (tmp_path / "matched").glob("batch=*"))
    assert all(name.endswith(" (renamed)") for name, _ in batch_values(spec, last).values())  # later batches: the new R
    tids = [t for p in (tmp_path / "matched").glob("batch=*") for t in pq.read_table(p)["tid"].to_pylist()]
    dead = [t for p in (tmp_path / "dead").glob("batch=*") for t in pq.read_table(p)["sj_id"].to_pylist()]
    assert sorted(tids + [int(t) for t in dead]) == list(range(3000))  # exactly once
