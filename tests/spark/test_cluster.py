"""The packaged driver through spark-submit on a real two-daemon standalone cluster
(a master and a worker started with spark-class, as NOTES-platform.md describes)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyspark
import pytest
from spark_jobs import assert_sinks_equal_oracle, generator_job, write_master

from airflow_provider_semijoin.core.progress import parse_line
from airflow_provider_semijoin.spark.driver import SUMMARY_PREFIX, driver_path

SPARK_HOME = str(Path(pyspark.__file__).parent)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_env() -> dict:
    return {**os.environ, "SPARK_HOME": SPARK_HOME, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}


@pytest.fixture
def standalone_cluster(tmp_path):
    port, master_ui, worker_ui = free_port(), free_port(), free_port()
    spark_class = f"{SPARK_HOME}/bin/spark-class"
    daemons = [
        subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                          "--port", str(port), "--webui-port", str(master_ui)],
                         env=spark_env(), stdout=open(tmp_path / "master.log", "w"), stderr=subprocess.STDOUT,
                         start_new_session=True),
    ]
    url = f"spark://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{master_ui}/json/", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        daemons.append(subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.worker.Worker", "--cores", "2", "--memory", "1g",
             "--webui-port", str(worker_ui), "--work-dir", str(tmp_path / "work"), url],
            env=spark_env(), stdout=open(tmp_path / "worker.log", "w"), stderr=subprocess.STDOUT, start_new_session=True))
        while time.monotonic() < deadline:
            state = json.load(urllib.request.urlopen(f"http://127.0.0.1:{master_ui}/json/", timeout=2))
            if state.get("aliveworkers", 0) >= 1:
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"the standalone worker did not register: {(tmp_path / 'worker.log').read_text()[-2000:]}")
        yield url, master_ui
    finally:
        for daemon in daemons:
            os.killpg(daemon.pid, signal.SIGTERM)
        for daemon in daemons:
            daemon.wait(timeout=30)


def test_driver_runs_on_a_standalone_cluster_via_spark_submit(tmp_path, sqlite_backend, standalone_cluster):
    url, master_ui = standalone_cluster
    store = write_master(sqlite_backend, 300)
    spec = generator_job(tmp_path, sqlite_backend.url, store.table, algorithm="cachejoin", total_rows=4000)
    spec_file = tmp_path / "job.json"
    spec_file.write_text(json.dumps(spec.to_dict()))
    submit = subprocess.run(
        [f"{SPARK_HOME}/bin/spark-submit", "--master", url, "--conf", "spark.executor.memory=512m",
         "--conf", f"spark.executorEnv.PYSPARK_PYTHON={sys.executable}", driver_path(), "--spec", str(spec_file)],
        env=spark_env(), capture_output=True, text=True, timeout=300,
    )
    assert submit.returncode == 0, submit.stderr[-3000:]
    records = [parse_line(line) for line in submit.stdout.splitlines() if parse_line(line)]
    summary = json.loads(next(l for l in submit.stdout.splitlines() if l.startswith(SUMMARY_PREFIX))[len(SUMMARY_PREFIX):])
    assert summary["input_rows"] == 4000 == sum(r["input_rows"] for r in records)
    apps = json.load(urllib.request.urlopen(f"http://127.0.0.1:{master_ui}/json/", timeout=2))
    assert any(app["name"] == "semijoin-semijoin" for app in apps["completedapps"] + apps["activeapps"])
    assert_sinks_equal_oracle(store, spec)
