"""A Spark worker killed mid-batch on a real standalone cluster (a master and two workers
started with spark-class on free ports): the join runs in the executors (``partitions: 2``),
the tasks of the lost executor are rerun on the other worker, and the sinks hold every tuple
exactly once, as the oracle says."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from harness import SELECT, Versions, exactly_once, free_port, record_fault
from harness import mariadb, seed  # noqa: F401 (fixtures)

from airflow_provider_semijoin.core.progress import parse_line
from airflow_provider_semijoin.spark.driver import driver_path
from airflow_provider_semijoin.spark.sinks import read_parquet_sink
from airflow_provider_semijoin.spark.standalone import master_state, spark_env, spark_home, start_daemon
from airflow_provider_semijoin.workloads.zipf import zipf_rows

TOTAL_ROWS = 15_000


@pytest.fixture
def two_worker_cluster(tmp_path):
    """``(spark://url, {name: worker process})``; every daemon killed at teardown."""
    port, ui = free_port(), free_port()
    daemons = {"master": start_daemon(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                                       str(port), "--webui-port", str(ui)], tmp_path / "master.log")}
    url = f"spark://127.0.0.1:{port}"
    try:
        for name in ("worker-a", "worker-b"):
            daemons[name] = start_daemon(["org.apache.spark.deploy.worker.Worker", "--cores", "1", "--memory", "1g",
                                          "--webui-port", str(free_port()), "--work-dir", str(tmp_path / name), url],
                                         tmp_path / f"{name}.log")
        deadline = time.monotonic() + 120
        while (master_state(ui) or {}).get("aliveworkers", 0) < 2:
            assert time.monotonic() < deadline, f"the workers did not register: {(tmp_path / 'worker-a.log').read_text()[-2000:]}"
            time.sleep(0.5)
        yield url, daemons
    finally:
        for process in daemons.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def unfinished_tasks(work_dir: Path) -> set[str]:
    """Task ids the worker's executor started and has not finished (its own log says so: the
    worker appends the executor's stderr to its work dir as it comes)."""
    lines = "".join(p.read_text(errors="replace") for p in work_dir.glob("app-*/*/stderr")).splitlines()
    started = {m.group(1) for m in (re.search(r"Running task .* \(TID (\d+)\)", line) for line in lines) if m}
    finished = {m.group(1) for m in (re.search(r"Finished task .* \(TID (\d+)\)", line) for line in lines) if m}
    return started - finished


def kill_when_busy(worker: subprocess.Popen, work_dir: Path, started: threading.Event, killed_at: list,
                   timeout_s: float = 400.0) -> None:
    """SIGKILL ``worker`` (and the executor it launched) while that executor runs a task, as the
    executor's own log in the worker's work dir shows it. (The driver's REST API was the first
    signal tried: its ``activeTasks`` lags the executor, and a kill it timed once landed between
    two tasks.)"""
    started.wait(timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and worker.poll() is None:
        if unfinished_tasks(work_dir):
            os.killpg(worker.pid, signal.SIGKILL)
            killed_at.append(time.time())
            return
        time.sleep(0.01)


def test_worker_killed_mid_batch_tasks_rerun_output_exact(tmp_path, mariadb, two_worker_cluster, seed):
    url, daemons = two_worker_cluster
    master = Versions(mariadb, 5_000, f"r{uuid.uuid4().hex[:10]}")
    landing = tmp_path / "landing"  # a files source: no Python data-source worker in the driver
    landing.mkdir()
    for first in range(0, TOTAL_ROWS, 1500):
        pq.write_table(zipf_rows(first, first + 1500, 5_500, missing=0.05, seed=seed), landing / f"part-{first:06d}.parquet")
    spec = {
        "source": {"kind": "files", "path": str(landing), "format": "parquet", "max_files_per_trigger": 1,
                   "id_column": "tid", "schema": "tid BIGINT, nk BIGINT, qty BIGINT, amount DOUBLE"},
        "steps": [{"column": "nk", "master_static": True, "master": {"url": mariadb.url, "table": master.table, "key": "nk", "select": SELECT},
                   "algorithm": "hybridjoin", "memory": "2M"}],
        "sinks": {"matched": {"path": str(tmp_path / "matched")}, "dead_letter": {"path": str(tmp_path / "dead")}},
        "checkpoint": str(tmp_path / "checkpoint"), "stop": {"end_of_input": True},
        "trigger_interval_s": 0.2, "partitions": 2,
    }
    spec_file = tmp_path / "job.json"
    spec_file.write_text(json.dumps(spec))
    ui = free_port()
    driver = subprocess.Popen(
        [f"{spark_home()}/bin/spark-submit", "--master", url, "--conf", "spark.executor.memory=512m",
         "--conf", "spark.executor.cores=1", "--conf", f"spark.ui.port={ui}",
         "--conf", f"spark.executorEnv.PYSPARK_PYTHON={sys.executable}", driver_path(), "--spec", str(spec_file)],
        env=spark_env(), stdout=subprocess.PIPE, stderr=open(tmp_path / "driver.err", "w"), text=True,
    )
    records, killed_at = [], []
    started = threading.Event()
    killer = threading.Thread(target=kill_when_busy, args=(daemons["worker-b"], tmp_path / "worker-b", started, killed_at),
                              daemon=True)
    killer.start()
    try:
        for line in driver.stdout:
            record = parse_line(line)
            if record is not None:
                records.append(record)
                started.set()  # a batch is done: executors are up, the next batch's tasks are the target
        assert driver.wait(timeout=600) == 0, (tmp_path / "driver.err").read_text()[-3000:]
    finally:
        started.set()
        if driver.poll() is None:
            driver.kill()
            driver.wait(30)
        killer.join(30)
    log = (tmp_path / "driver.err").read_text()
    assert killed_at and daemons["worker-b"].poll() is not None, "no task of worker-b's executor was seen running"
    assert "Lost executor" in log
    assert unfinished_tasks(tmp_path / "worker-b"), "the kill hit no running task"
    matched, dead = read_parquet_sink(spec["sinks"]["matched"]["path"]), read_parquet_sink(spec["sinks"]["dead_letter"]["path"])
    tids = matched["tid"].to_pylist() + [int(i) for i in dead["sj_id"].to_pylist()]
    keys = matched["nk"].to_pylist() + [json.loads(r)["nk"] for r in dead["row"].to_pylist()]
    expected = master.expected(0, tids, keys)
    assert Counter(zip(matched["tid"].to_pylist(), zip(*(matched[c].to_pylist() for c in SELECT)))) == expected[0]
    assert Counter(zip([int(i) for i in dead["sj_id"].to_pylist()], dead["reason"].to_pylist())) == expected[1]
    lost, duplicated = exactly_once(list(range(TOTAL_ROWS)), Counter(tids))
    assert (lost, duplicated) == (0, 0)
    after = [r for r in records if r["time"] > killed_at[0]]
    record_fault(
        "Spark worker (and its executor) SIGKILLed mid-batch, standalone cluster, partitions=2",
        injected=1, tuples_in=TOTAL_ROWS, tuples_out=len(tids), lost=lost, duplicated=duplicated,
        recovery_s=[after[0]["time"] - killed_at[0]] if after else [], seed=seed,
        how="pytest tests/faults/test_cluster_faults.py; lost tasks rerun on the other worker; "
            "recovery = kill to the end of the next batch",
    )
