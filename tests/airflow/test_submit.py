"""The operator over spark-submit on a real standalone cluster (a master and a worker started
with spark-class): a driver's ``semijoin: error:`` fails the task with that one sentence as a
ConfigError, and on_kill stops the driver through the stop file, or kills spark-submit once
``[semijoin] kill_grace_s`` has passed."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from metadata import xcom, xcoms
from test_operators import OPERATORS, SELECT, generator, sink_tables, sinks
from test_operators import master_db  # noqa: F401 (a fixture)

from airflow_provider_semijoin.core.progress import XCOM_LATEST
from airflow_provider_semijoin.spark.standalone import standalone_cluster

# the acceptance tier: spark-submit's on_kill and errors on a cluster, a minute each; the first tier runs the
# operator through spark-submit (test_operators, test_credentials, tests/spark/test_cluster.py) and on_kill in process
pytestmark = [pytest.mark.parametrize("backend", ["sqlite"], indirect=True), pytest.mark.acceptance]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with standalone_cluster(tmp_path_factory.mktemp("cluster")) as found:
        yield found


@pytest.fixture
def on_cluster(cluster, connections, spark_submit_on_path):
    """The ``cluster`` Spark connection, spark-submit on PATH; yields the master UI port."""
    url, master_ui = cluster
    connections("cluster", url)
    return master_ui


def join_task(table, tmp_path, source, **more) -> tuple:
    return (f"{OPERATORS}:HybridJoinOperator", dict(
        column="nk", master_static=True, master_table=table, master_key="nk", select=SELECT, master_conn_id="dims", memory="1M",
        source=source, sinks=sinks(tmp_path), checkpoint=str(tmp_path / "cp"), trigger_interval_s=0.3,
        spark_conn_id="cluster",
        spark_conf={"spark.executor.memory": "512m", "spark.executorEnv.PYSPARK_PYTHON": sys.executable}, **more))


def test_a_driver_config_error_fails_the_task_with_its_sentence(master_db, tmp_path, make_dag, on_cluster, capfd):
    """The landing folder exists where the task parses the DAG, not where the driver runs:
    the driver's check fails, prints ``semijoin: error: ...`` and exits 2; SparkSubmitHook
    raises, and the operator re-raises the driver's sentence as a ConfigError."""
    _, table = master_db
    landing = tmp_path / "landing"
    dag_id = f"submit_error_{table}"
    dag = make_dag(dag_id, {"join": join_task(table, tmp_path, {"kind": "files", "path": str(landing), "format": "csv",
                                                                "schema": "nk BIGINT"}, stop={"end_of_input": True})})
    run = dag.test()
    assert str(run.state) == "failed"
    logged = "".join(capfd.readouterr())
    sentence = f"source.path: folder {str(landing)!r} does not exist (expected the landing folder of the stream)"
    assert f"semijoin: error: {sentence}" in logged  # what the driver printed
    assert f"ConfigError: {sentence}\n" in logged  # what the task failed with


def kill_after(dag_id: str, batch_id: int) -> threading.Thread:
    """SIGTERM to this process (what the supervisor sends a task it kills) once the task's
    latest progress record reached ``batch_id``: dag.test()'s handler runs on_kill."""

    def watch():
        deadline = time.monotonic() + 480  # then kill anyway: the endless query must end
        while time.monotonic() < deadline:
            seen = xcoms(dag_id, "join", XCOM_LATEST)
            if seen and seen[0]["batch_id"] >= batch_id:
                break
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGTERM)

    killer = threading.Thread(target=watch, daemon=True)
    killer.start()
    return killer


def run_killed(dag, dag_id: str):
    previous = signal.getsignal(signal.SIGTERM)
    killer = kill_after(dag_id, 1)
    try:
        return dag.test()
    finally:
        killer.join()
        signal.signal(signal.SIGTERM, previous)


def app_states(master_ui: int, name: str) -> list[str]:
    apps = json.load(urllib.request.urlopen(f"http://127.0.0.1:{master_ui}/json/", timeout=5))
    return [app["state"] for app in apps["completedapps"] if app["name"] == name]


def drivers_of(spec_folder) -> list[str]:
    """Command lines of the processes still running a driver spec of this test's work folder."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # the process ended meanwhile
            continue
        if "driver" in line and str(spec_folder) in line:
            found.append(line)
    return found


def test_on_kill_stops_the_driver_through_the_stop_file(master_db, tmp_path, make_dag, on_cluster, capfd):
    _, table = master_db
    dag_id = f"submit_kill_{table}"
    dag = make_dag(dag_id, {"join": join_task(table, tmp_path, generator(None, 2000))})
    run = run_killed(dag, dag_id)
    assert str(run.state) == "failed"
    logged = "".join(capfd.readouterr())
    stopped = [line for line in logged.splitlines() if "the semi-join was stopped by on_kill after" in line]
    assert stopped and "SEMIJOIN_SUMMARY" not in logged  # the driver's summary was read, not logged
    latest = xcom(dag_id, "join", XCOM_LATEST)
    assert f"after {latest['batch_id'] + 1} micro-batches ({latest['total_input_rows']} tuples" in stopped[0]
    matched, dead = sink_tables(tmp_path)
    ids = matched["rid"].to_pylist() + dead["rid"].to_pylist()
    assert len(ids) == len(set(ids)) == latest["total_input_rows"] > 0
    assert sorted(ids) == list(range(len(ids)))  # the generator's first rows, none lost
    assert app_states(on_cluster, f"semijoin-{dag_id}__join") == ["FINISHED"]


def test_on_kill_kills_spark_submit_after_the_grace(master_db, tmp_path, make_dag, on_cluster, monkeypatch, capfd):
    _, table = master_db
    monkeypatch.setenv("AIRFLOW__SEMIJOIN__KILL_GRACE_S", "0.01")  # no time to stop between micro-batches
    monkeypatch.setenv("AIRFLOW__SEMIJOIN__WORK_FOLDER", str(tmp_path / "work"))
    dag_id = f"submit_grace_{table}"
    dag = make_dag(dag_id, {"join": join_task(table, tmp_path, generator(None, 2000))})
    run = run_killed(dag, dag_id)
    assert str(run.state) == "failed"
    logged = "".join(capfd.readouterr())
    assert "the semi-join failed: Cannot execute" in logged and "stopped by on_kill" not in logged  # killed
    deadline = time.monotonic() + 60
    while (drivers_of(tmp_path / "work") or not app_states(on_cluster, f"semijoin-{dag_id}__join")) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert drivers_of(tmp_path / "work") == []  # spark-submit and the Python driver under it are gone
    assert app_states(on_cluster, f"semijoin-{dag_id}__join") in (["KILLED"], ["FINISHED"])
