"""Master-data updates installed while the query runs (each micro-batch reads one version of R,
SSIJ sec. IV-E), and per-tuple deadlines counted end to end (sec. IV-F)."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from spark_jobs import SELECT, generator_job

from airflow_provider_semijoin.core.errors import StoreError
from airflow_provider_semijoin.core.stores import DatabaseURL, store_for
from airflow_provider_semijoin.core.stores.binlog import server_position, wait_captured
from airflow_provider_semijoin.core.stores.changes import create_change_tables, install_changes
from airflow_provider_semijoin.spark.runner import run_job
from airflow_provider_semijoin.job.spec import JobSpec
from airflow_provider_semijoin.workloads.master import master_table


def plain_sql(backend, table: str, changes: list[dict], columns: list[str], job_ended: threading.Event) -> int | None:
    """``changes`` as another application writes them: one transaction of DELETEs and REPLACEs
    on its own connection; R's version after it (R's writes are captured: by triggers, or from
    the binary log once the capture has read past the commit). None: the job ended (and its
    binlog follower with it) before the capture read the commit."""
    connection = DatabaseURL.parse(backend.url).connect()
    cursor = connection.cursor()
    try:
        q, p = backend.quote, "%s" if backend.name == "mysql" else "?"
        cursor.execute("BEGIN")
        for change in changes:
            if change["op"] == "D":
                cursor.execute(f"DELETE FROM {q(table)} WHERE nk = {p}", (change["nk"],))
            else:
                cursor.execute(f"REPLACE INTO {q(table)} ({', '.join(map(q, columns))}) VALUES "
                               f"({', '.join([p] * len(columns))})", [change[c] for c in columns])
        cursor.execute("COMMIT")
        store = store_for(connection, table, "nk")
        if not store.captured_from_binlog():
            return store.version()
        at = server_position(cursor)
        for _ in range(30):
            try:
                return wait_captured(connection, table, at.file, at.pos, 1)
            except StoreError:
                if job_ended.is_set():
                    return None
        return wait_captured(connection, table, at.file, at.pos, 1)
    finally:
        cursor.close()
        connection.close()


@pytest.mark.parametrize("writes", ["installs", "plain_sql"])
@pytest.mark.parametrize("algorithm", ["hybridjoin", "cachejoin"])
def test_each_micro_batch_sees_one_version_of_r_while_updates_install(spark, tmp_path, sqlite_backend, algorithm, writes):
    """R changes while the query runs: batches installed through the provider, or (R's writes
    captured) plain SQL transactions of another connection; every micro-batch's output equals
    the join with R at the one version it read, and that version is one a transaction left."""
    one_version_per_batch(spark, tmp_path, sqlite_backend, algorithm, writes, "triggers" if writes == "plain_sql" else None)


@pytest.mark.mysql
@pytest.mark.parametrize("algorithm", ["hybridjoin", "cachejoin"])
def test_each_micro_batch_sees_one_version_of_r_captured_from_the_binary_log(spark, tmp_path, binlog_backend, algorithm):
    """The same on MariaDB with its binary log on, R's changes captured from it by the job
    (change_capture: binlog: a follower thread in the driver)."""
    one_version_per_batch(spark, tmp_path, binlog_backend, algorithm, "plain_sql", "binlog")


def one_version_per_batch(spark, tmp_path, backend, algorithm: str, writes: str, capture: str | None) -> None:
    initial = master_table(300)
    store = backend.make_master(initial, select=SELECT)
    if capture != "binlog":
        create_change_tables(backend.url, store.table, "nk")
    data = generator_job(tmp_path, backend.url, store.table, algorithm=algorithm, total_rows=9000,
                         master_rows=330, missing=0.05).to_dict()
    data["steps"][0]["change_capture"] = capture
    data["source"]["rows_per_second"] = 1500.0
    data["source"]["max_rows_per_batch"] = 600  # many micro-batches, however slow the first one is
    data["trigger_interval_s"] = 0.2
    spec = JobSpec.from_dict(data)

    rows = {k: r for k, r in zip(initial["nk"].to_pylist(), initial.to_pylist())}
    versions = {0: dict(rows)}  # R at each version a batch or transaction left
    committed = []  # (wall time after the commit, version it left)
    rng = np.random.default_rng(5)
    done = threading.Event()

    first_batch = threading.Event()

    writer_failed = []

    def writer():
        try:
            write_versions()
        except BaseException as exc:  # the test fails with it (a thread's exception is only a warning)
            writer_failed.append(exc)
            raise

    def write_versions():
        first_batch.wait(120)
        i = 0
        while not done.is_set() and i < 300:
            i += 1
            keys = rng.choice(np.arange(1, 661, 2), 4, replace=False).tolist()  # some beyond R: inserts
            current = dict(versions[max(versions)])
            changes = []
            for k in keys:
                if k in current and rng.random() < 0.2:
                    changes.append({"op": "D", **{c: None for c in initial.column_names}, "nk": k})
                    del current[k]
                else:
                    row = dict(current.get(k, rows.get(k) or {**rows[1], "nk": k, "sk": 10_000 + k}))
                    row.update(name=f"v{len(versions)}-{k}", category=f"c{i % 7}")
                    changes.append({"op": "U", **row})
                    current[k] = row
            if writes == "installs":
                version = install_changes(backend.url, store.table, "nk", pa.Table.from_pylist(changes)).version
                assert version == len(versions)
            else:
                version = plain_sql(backend, store.table, changes, initial.column_names, done)
                if version is None:  # committed after the job's last micro-batch read R: in no batch
                    break
            committed.append((time.time(), version))  # after COMMIT returned: the commit came before
            versions[version] = current
            done.wait(0.02)

    thread = threading.Thread(target=writer)
    records = []
    thread.start()
    try:
        run_job(spec, spark=spark, on_progress=lambda r: (records.append(r), first_batch.set()))
    finally:
        done.set()
        thread.join()
    assert not writer_failed
    seen_versions = {r["master_versions"][0] for r in records}
    assert len(versions) > 20 and len(seen_versions) > 3  # updates landed between many micro-batches
    left = []  # every tuple that left, over all batches (HYBRIDJOIN carries some to a later batch)
    for record in records:
        r_version = versions[record["master_versions"][0]]
        folder = f"batch={record['batch_id']}/part-0.parquet"
        matched = pq.read_table(f"{spec.sinks.matched.path}/{folder}").to_pylist()
        dead = pq.read_table(f"{spec.sinks.dead_letter.path}/{folder}").to_pylist()
        for row in matched:
            master = r_version[row["nk"]]
            assert (row["name"], row["category"]) == (master["name"], master["category"]), record["batch_id"]
        for row in dead:
            assert row["reason"] == "not_in_master" and json.loads(row["row"])["nk"] not in r_version, record["batch_id"]
        left += [row["tid"] for row in matched] + [int(row["sj_id"]) for row in dead]
        # the record's staleness: every transaction committed before its version's time was seen
        read_at = record["time"] - record["master_staleness_s"][0] - 0.001  # the record rounds it to ms
        unseen = [(round(read_at - t, 4), v) for t, v in committed if t < read_at and v > record["master_versions"][0]]
        assert not unseen, (record["batch_id"], record["master_versions"], record["master_staleness_s"], record["ahead_s"], unseen)
    assert sorted(left) == sorted(set(left)) and len(left) == sum(r["input_rows"] for r in records)  # exactly once


@pytest.mark.parametrize("max_latency_s, all_miss", [(120.0, False), (0.0001, True)])
def test_deadline_misses_are_counted_end_to_end(spark, tmp_path, sqlite_backend, max_latency_s, all_miss):
    store = sqlite_backend.make_master(master_table(200), select=SELECT)
    spec = generator_job(tmp_path, sqlite_backend.url, store.table, algorithm="hybridjoin", total_rows=2000,
                         master_rows=200, deadline={"max_latency_s": max_latency_s})
    summary = run_job(spec, spark=spark)
    assert summary["deadline_misses"] == (2000 if all_miss else 0)
