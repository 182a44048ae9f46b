"""Faults under the Spark pipeline (local Spark, real private MariaDB servers): the sessions of
the master store and the table sinks killed 20 times while changes install, and the sink's
server stopped for a batch past db_retry_max_s (the batch fails, the task's retry resumes from
the checkpoint, the batch lands once). The sinks are checked against the oracle per micro-batch."""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from collections import Counter

import pytest
from harness import SELECT, Installer, SessionKiller, Versions, exactly_once, record_fault
from harness import mariadb, seed, sink_mariadb  # noqa: F401 (fixtures)

from airflow_provider_semijoin.core.stores import StoreUnavailable
from airflow_provider_semijoin.spark.runner import run_job
from airflow_provider_semijoin.job.spec import JobSpec

MASTER_ROWS = 5_000
KILLS = 20


def table_job(tmp_path, master_url: str, table: str, sink_url: str, *, total_rows: int, retry_s: float) -> JobSpec:
    """Generator -> hybridjoin over R -> matched and dead-letter tables at ``sink_url``."""
    tag = uuid.uuid4().hex[:8]
    return JobSpec.from_dict({
        "source": {"kind": "generator", "total_rows": total_rows, "rows_per_second": 2000.0,
                   "max_rows_per_batch": 1000, "master_rows": MASTER_ROWS + 500, "missing": 0.05, "seed": 3},
        "steps": [{"column": "nk", "master_static": True, "master": {"url": master_url, "table": table, "key": "nk", "select": SELECT},
                   "algorithm": "hybridjoin", "memory": "2M"}],
        "sinks": {"matched": {"kind": "table", "url": sink_url, "table": f"fact_{tag}"},
                  "dead_letter": {"kind": "table", "url": sink_url, "table": f"dead_{tag}"}},
        "checkpoint": str(tmp_path / "checkpoint"),
        "stop": {"end_of_input": True},
        "trigger_interval_s": 0.2,
        "db_retry_max_s": retry_s,
    })


def read_sinks(server, spec: JobSpec) -> tuple[list, list]:
    with server.root() as root:
        cursor = root.cursor()
        cursor.execute(f"SELECT sj_batch, tid, nk, name, category FROM {server.DATABASE}.{spec.sinks.matched.table}")
        matched = cursor.fetchall()
        cursor.execute(f"SELECT sj_batch, sj_id, reason, `row` FROM {server.DATABASE}.{spec.sinks.dead_letter.table}")
        dead = cursor.fetchall()
    return list(matched), list(dead)


def check_against_oracle(server, spec: JobSpec, versions: Versions, records: list[dict]) -> tuple[int, int, int]:
    """Each micro-batch's sink rows equal the oracle at the version of R it read; returns
    ``(tuples out, lost, duplicated)`` over the whole stream."""
    matched, dead = read_sinks(server, spec)
    version_of = {r["batch_id"]: r["master_versions"][0] for r in records}
    left = Counter([row[1] for row in matched] + [int(row[1]) for row in dead])
    for batch, version in version_of.items():
        mine = [r for r in matched if r[0] == batch]
        rejected = [r for r in dead if r[0] == batch]
        tids = [r[1] for r in mine] + [int(r[1]) for r in rejected]
        keys = [r[2] for r in mine] + [json.loads(r[3])["nk"] for r in rejected]
        expected = versions.expected(version, tids, keys)
        assert Counter((r[1], (r[3], r[4])) for r in mine) == expected[0], f"batch {batch} vs R at version {version}"
        assert Counter((int(r[1]), r[2]) for r in rejected) == expected[1], f"batch {batch} vs R at version {version}"
    assert set(r[0] for r in matched + dead) <= set(version_of), "rows of a batch no progress record reported"
    lost, duplicated = exactly_once(list(range(spec.source.total_rows)), left)
    assert (lost, duplicated) == (0, 0)
    return len(matched) + len(dead), lost, duplicated


@pytest.fixture(scope="module")
def spark():
    """The test session's Spark session if one is active (left running), else one of this module."""
    from pyspark.sql import SparkSession

    from airflow_provider_semijoin.spark.session import get_spark

    ours = SparkSession.getActiveSession() is None
    session = get_spark("local[2]", app_name="semijoin-fault-tests")
    yield session
    if ours:
        session.stop()


@pytest.fixture
def master(mariadb):
    return Versions(mariadb, MASTER_ROWS, f"r{uuid.uuid4().hex[:10]}")


def test_spark_pipeline_survives_20_session_kills_of_store_and_sinks(spark, tmp_path, mariadb, master, seed):
    spec = table_job(tmp_path, mariadb.url, master.table, mariadb.url, total_rows=16_000, retry_s=60)
    killer, installer = SessionKiller(mariadb, KILLS, seed, gap_s=(0.05, 0.25)), Installer(master, seed, gap_s=0.3)
    records: list[dict] = []

    def on_progress(record):
        records.append(record)
        if len(records) == 1:  # the first batch landed: faults from now on
            killer.start()
            installer.start()

    try:
        summary = run_job(spec, spark=spark, on_progress=on_progress)
    finally:
        killer.finish(0)
        installer.halt.set()
        if installer.ident:
            installer.join(30)
    assert installer.error is None, installer.error
    assert len(killer.kills) == KILLS, f"only {len(killer.kills)} kills landed while the job ran"
    out, lost, duplicated = check_against_oracle(mariadb, spec, master, records)
    # a kill of an idle session is noticed at its next query (none after the last batch)
    assert summary["reconnects"] >= 1 and summary["reconnects"] == records[-1]["total_reconnects"]
    assert len({r["master_versions"][0] for r in records}) > 1
    waits = [r["reconnect_wait_s"] / r["reconnects"] for r in records if r["reconnects"]]
    record_fault(
        f"KILL CONNECTION x{KILLS} of master store + table sinks, Spark pipeline (hybridjoin, changes installing)",
        injected=len(killer.kills), tuples_in=spec.source.total_rows, tuples_out=out, lost=lost,
        duplicated=duplicated, recovery_s=waits, seed=seed,
        how=f"pytest tests/faults/test_spark_faults.py; {summary['reconnects']} reconnects over {len(records)} "
            "micro-batches; recovery = reconnect_wait_s per reconnect of each batch's progress record",
    )


def test_sink_server_down_past_the_bound_batch_fails_then_lands_once(spark, tmp_path, mariadb, master,
                                                                      sink_mariadb, seed):
    spec = table_job(tmp_path, mariadb.url, master.table, sink_mariadb.url, total_rows=8_000, retry_s=3)
    records: list[dict] = []
    stopped = threading.Event()

    def on_progress(record):
        records.append(record)
        if len(records) == 2:  # the sink's server dies before the third batch writes
            sink_mariadb.stop(signal.SIGTERM)
            stopped.set()

    with pytest.raises(StoreUnavailable, match=rf"^the database server {sink_mariadb.server} stayed unreachable "
                                              r"for \d+\.\d s \(\d+ reconnect attempts, last error: .*\); raise "
                                              r"\[semijoin\] db_retry_max_s to wait longer$") as failed:
        run_job(spec, spark=spark, on_progress=on_progress)
    assert stopped.is_set()
    assert sink_mariadb.PASSWORD not in str(failed.value)
    landed_before = len(records)
    sink_mariadb.start()
    restarted = time.time()
    retry_records: list[dict] = []
    summary = run_job(spec, spark=spark, on_progress=retry_records.append)  # the task's retry: same checkpoint
    assert summary["stopped_by"] == "end_of_input" and retry_records
    recovery = retry_records[0]["time"] - restarted
    assert retry_records[0]["batch_id"] == records[-1]["batch_id"] + 1  # resumed at the failed batch
    out, lost, duplicated = check_against_oracle(sink_mariadb, spec, master, records + retry_records)
    record_fault(
        "sink MariaDB stopped during a batch, past db_retry_max_s=3 s (Spark pipeline)",
        injected=1, tuples_in=spec.source.total_rows, tuples_out=out, lost=lost, duplicated=duplicated,
        recovery_s=[recovery], seed=seed,
        how=f"pytest tests/faults/test_spark_faults.py; the batch after {landed_before} failed the query, "
            "the rerun from the checkpoint landed it once; recovery = sink restart to the first batch of the rerun",
    )
