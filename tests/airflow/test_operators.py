"""The join operators run through ``dag.test()`` on a real local Spark with SQLite and MariaDB
masters: output equal to the oracle, XCom metrics seen while the task runs, on_kill stops the
query, parse-time validation of the arguments."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_provider_semijoin.core.errors import ConfigError, SpecError
from airflow_provider_semijoin.core.oracle import engine_pairs, hash_join
from airflow_provider_semijoin.core.progress import SUMMARY_PREFIX, XCOM_HISTORY, XCOM_INFO, XCOM_LATEST
from airflow_provider_semijoin.core.stores import open_store
from airflow_provider_semijoin.operators.job import SemiJoinMetricsLink
from airflow_provider_semijoin.operators.join import (
    HybridJoinOperator,
    INLJOperator,
    SemiStreamJoinOperator,
    SSIJOperator,
)
from airflow_provider_semijoin.core.files import write_private_json
from airflow_provider_semijoin.spark.sinks import read_parquet_sink
from airflow_provider_semijoin.workloads.master import generate_master
from airflow_provider_semijoin.workloads.zipf import zipf_rows
from metadata import task_state, xcom, xcoms

# the Spark tests' standalone cluster (a master and a worker daemon), reused as it is
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "spark"))
from test_cluster import standalone_cluster  # noqa: E402,F401 (a fixture)

OPERATORS = "airflow_provider_semijoin.operators.join"
HYBRIDJOIN, INLJ = f"{OPERATORS}:HybridJoinOperator", f"{OPERATORS}:INLJOperator"
SELECT = ["sk", "category"]


class XComWatcher(threading.Thread):
    """Polls a task's latest-metrics XCom while ``dag.test()`` runs; records what it saw while the
    task was in the running state."""

    def __init__(self, dag_id: str, task_id: str):
        super().__init__(daemon=True)
        self.dag_id, self.task_id = dag_id, task_id
        self.seen_running: list[dict] = []
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            if task_state(self.dag_id, self.task_id) == "running":
                for value in xcoms(self.dag_id, self.task_id, XCOM_LATEST):
                    if not self.seen_running or self.seen_running[-1]["batch_id"] != value["batch_id"]:
                        self.seen_running.append(value)
            time.sleep(0.1)


@pytest.fixture
def master_db(backend, connections):
    """A generated master table of 2,000 products in the test's backend, as connection ``dims``."""
    table = backend.table_name()
    generate_master(backend.connection, table, 2000, seed=3, reuse=False)
    if backend.name == "mysql":
        connections("dims", backend.url)
    else:
        connections("dims", {"conn_type": "semijoin_master", "extra": {"dialect": "sqlite", "path": backend.url[len("sqlite:///"):]}})
    return backend, table


def sink_tables(folder) -> tuple[pa.Table, pa.Table]:
    """The matched and dead-letter Parquet sinks, each with ``rid``: the generator's row number."""
    tables = []
    for name in ("matched", "dead"):
        table = read_parquet_sink(str(folder / name))
        tables.append(table.append_column("rid", pc.cast(table["sj_id"], pa.int64())))
    return tables[0], tables[1]


def sink_pairs(folder, select=SELECT):
    """The sinks in the oracle's form: (row, master row) and (row, reason) multisets."""
    return engine_pairs(*sink_tables(folder), select, "rid")


def generator(total_rows: int, rate: float, **more) -> dict:
    return {"kind": "generator", "total_rows": total_rows, "rows_per_second": rate, "master_rows": 2000,
            "missing": 0.1, "exponent": 1.0, "seed": 11, **more}


def sinks(tmp_path) -> dict:
    return {"matched": {"path": str(tmp_path / "matched")}, "dead_letter": {"path": str(tmp_path / "dead")}}


def test_join_operator_matches_the_oracle_and_reports_while_running(master_db, tmp_path, make_dag, spark, capfd):
    backend, table = master_db
    dag_id = f"join_{backend.name}_{table}"
    dag = make_dag(dag_id, {"join": (HYBRIDJOIN, dict(
        column="nk", master_static=True, master_table=table, master_key="nk", select=SELECT, master_conn_id="dims",
        memory="2M", algorithm_params={"page_rows": 100}, source=generator(3000, 1500), sinks=sinks(tmp_path),
        checkpoint=str(tmp_path / "checkpoint"), stop={"end_of_input": True}, trigger_interval_s=0.3,
    ))})
    watcher = XComWatcher(dag_id, "join")
    watcher.start()
    try:
        run = dag.test()
    finally:
        watcher.done.set()
        watcher.join()
    assert str(run.state) == "success"
    logged = "".join(capfd.readouterr())
    assert "SEMIJOIN_PROGRESS" in logged and "starts on Spark master local[2]" in logged
    credentials = re.search(r"//([^/@]+:[^/@]+)@", backend.url)
    assert credentials is None or credentials.group(1) not in logged  # the task log shows user:***@host
    stream = zipf_rows(0, 3000, 2000, exponent=1.0, missing=0.1, seed=11)
    with open_store(backend.url, table, "nk", SELECT) as store:
        expected = hash_join(store, stream, "nk")
    assert sink_pairs(tmp_path) == expected
    assert sum(expected[1].values()) > 100  # missing keys really left as dead letters
    # metrics were in XCom while the task ran, more than one micro-batch of them
    assert len(watcher.seen_running) >= 2, watcher.seen_running
    assert [r["batch_id"] for r in watcher.seen_running] == sorted({r["batch_id"] for r in watcher.seen_running})
    summary = xcom(dag_id, "join")
    assert (summary["input_rows"], summary["stopped_by"]) == (3000, "end_of_input")
    history = xcom(dag_id, "join", XCOM_HISTORY)
    totals = history["series"].index("total_input_rows")
    assert history["points"][-1][totals] == 3000 and len(history["points"]) == summary["batches"]
    info = xcom(dag_id, "join", XCOM_INFO)
    assert info["algorithm"] == "hybridjoin" and info["params"] == {"page_rows": 100}
    assert info["memory_bytes"] == 2 * 2**20 and info["memory_split"]["carried_rows_bytes"] > 0
    leaves = [v for k, v in info["memory_split"].items() if k.endswith("_bytes")]  # the structures and the rows
    assert sum(leaves) <= info["memory_bytes"], info["memory_split"]
    assert credentials is None or credentials.group(1) not in json.dumps(info)  # the URL without its password
    link = xcom(dag_id, "join", SemiJoinMetricsLink().xcom_key)
    assert link.startswith(f"/semijoin/ui/task?dag_id={dag_id}&run_id=manual__") and link.endswith("&task_id=join")


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_on_kill_stops_the_query(backend, master_db, tmp_path, make_dag, spark):
    """SIGTERM (what the supervisor sends to a task being killed) runs on_kill, which stops the
    endless query between micro-batches; every tuple read so far is in a sink exactly once."""
    _, table = master_db
    dag_id = f"kill_{table}"
    dag = make_dag(dag_id, {"join": (INLJ, dict(
        column="nk", master_static=True, master_table=table, master_key="nk", select=SELECT, master_conn_id="dims",
        memory="1M", source=generator(None, 300), sinks=sinks(tmp_path), checkpoint=str(tmp_path / "{{ dag.dag_id }}"),
        trigger_interval_s=0.3,
    ))})

    def kill_after_two_batches():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            seen = xcoms(dag_id, "join", XCOM_LATEST)
            if seen and seen[0]["batch_id"] >= 1:
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.1)

    previous = signal.getsignal(signal.SIGTERM)
    killer = threading.Thread(target=kill_after_two_batches, daemon=True)
    killer.start()
    try:
        run = dag.test()
    finally:
        killer.join()
        signal.signal(signal.SIGTERM, previous)
    assert str(run.state) == "failed"
    assert not spark.streams.active  # the query is stopped, not left running
    assert (tmp_path / dag_id / "commits").is_dir()  # the templated checkpoint was rendered
    latest = xcom(dag_id, "join", XCOM_LATEST)
    matched, dead = sink_tables(tmp_path)
    ids = matched["rid"].to_pylist() + dead["rid"].to_pylist()
    assert len(ids) == len(set(ids)) == latest["total_input_rows"] > 0
    assert sorted(ids) == list(range(len(ids)))  # the generator's first rows, none lost


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"algorithm": "hybrid"}, r"^j: algorithm: 'hybrid' is not one of \["),
        ({"algorithm_params": {"page_rows": "many"}}, r"^j: algorithm_params\.page_rows: 'many' is not a valid int \("),
        ({"algorithm_params": {"pages": 3}}, r"^j: algorithm_params\.pages: not a parameter of hybridjoin \(parameters: \['page_rows', 'read_ahead', 'rider_repeats'\]\)$"),
        ({"memory": "lots"}, r"^j: memory: 'lots' is not a size"),
        ({"master_table": "dim product"}, r"^j: master_table: 'dim product' is not a valid identifier"),
        ({"on_missing": "drop"}, r"^j: on_missing: 'drop' is not one of \['dead_letter', 'unknown_member', 'retry', 'inferred_member'\]$"),
        ({"source": {"kind": "files", "path": "/landing"}}, r"^j: source\.format: missing; expected one of \['parquet', 'csv', 'json'\]$"),
        ({"deadline_max_latency_s": -1}, r"^j: deadline_max_latency_s: -1 is not a positive number$"),
    ],
)
def test_arguments_are_validated_when_the_dag_is_parsed(arguments, message):
    base = {"task_id": "j", "column": "nk", "master_table": "dim", "master_key": "nk", "source": generator(10, 10)}
    with pytest.raises(SpecError, match=message):
        SemiStreamJoinOperator(**{**base, **arguments})


def test_templated_arguments_are_validated_when_the_task_runs():
    op = SemiStreamJoinOperator(task_id="j", column="nk", master_static=True, master_table="{{ params.table }}", master_key="nk",
                                memory="lots", source=generator(10, 10))
    assert op.memory == "lots"  # not checked yet: the table is a template


def test_deadline_arguments_reach_the_job_spec():
    op = HybridJoinOperator(task_id="j", column="nk", master_static=True, master_table="d", master_key="nk", source=generator(1, 1),
                            deadline_column="due_at", stop={"duration_s": 5})
    job = op.job_dict(resolve=False)
    assert job["deadline"] == {"max_latency_s": None, "column": "due_at"}
    assert job["stop"] == {"duration_s": 5}
    with pytest.raises(SpecError, match=r"^j: deadline_column: 'due at' is not a valid identifier"):
        HybridJoinOperator(task_id="j", column="nk", master_static=True, master_table="d", master_key="nk", source=generator(1, 1),
                           deadline_column="due at")


def test_named_operators_fix_their_algorithm():
    with pytest.raises(SpecError, match=r"^j: algorithm: INLJOperator always runs 'inlj'; use SemiStreamJoinOperator"):
        INLJOperator(task_id="j", algorithm="meshjoin", column="nk", master_static=True, master_table="d", master_key="nk", source=generator(1, 1))
    assert SSIJOperator(task_id="s", column="nk", master_static=True, master_table="d", master_key="nk", source=generator(1, 1)).algorithm == "ssij"


def test_deadline_threshold_needs_deadlines():
    with pytest.raises(ConfigError, match=r"^deadline_miss_threshold: given, but the tuples have no deadline"):
        HybridJoinOperator(task_id="j", column="nk", master_static=True, master_table="d", master_key="nk", source=generator(1, 1),
                           deadline_miss_threshold=0.1)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_cluster_connection_runs_the_driver_through_spark_submit(master_db, tmp_path, make_dag, connections,
                                                                 standalone_cluster, spark_submit_on_path):
    """A spark:// connection: the operator submits the packaged driver with SparkSubmitHook to a
    standalone master + worker, forwards the driver's progress lines to XCom, and returns its summary."""
    backend, table = master_db
    url, master_ui = standalone_cluster
    connections("cluster", url)
    dag_id = f"cluster_{table}"
    dag = make_dag(dag_id, {"join": (f"{OPERATORS}:CacheJoinOperator", dict(
        column="nk", master_static=True, master_table=table, master_key="nk", select=SELECT, master_conn_id="dims", memory="1M",
        source=generator(2000, 2000), sinks=sinks(tmp_path), checkpoint=str(tmp_path / "cp"),
        stop={"end_of_input": True}, trigger_interval_s=0.5, spark_conn_id="cluster",
        spark_conf={"spark.executor.memory": "512m", "spark.executorEnv.PYSPARK_PYTHON": sys.executable},
    ))})
    run = dag.test()
    assert str(run.state) == "success"
    summary = xcom(dag_id, "join")
    history = xcom(dag_id, "join", XCOM_HISTORY)
    assert summary["input_rows"] == 2000 and len(history["points"]) == summary["batches"] >= 1
    assert xcom(dag_id, "join", XCOM_INFO)["spark_master"] == url
    apps = json.load(urllib.request.urlopen(f"http://127.0.0.1:{master_ui}/json/", timeout=5))
    assert [app["name"] for app in apps["completedapps"]] == [f"semijoin-{dag_id}__join"]
    stream = zipf_rows(0, 2000, 2000, exponent=1.0, missing=0.1, seed=11)
    with open_store(backend.url, table, "nk", SELECT) as store:
        assert sink_pairs(tmp_path) == hash_join(store, stream, "nk")


class LoggedSubmit:
    """Stands in for spark-submit (the one mock here, for a fault that cannot be produced at
    will): the JVM copies the driver's output into its own log in chunks, so a log line can land
    inside the driver's summary line (a cluster run of f7444f0's parent failed on one run on
    after it). It writes the summary file as the driver does, when asked, and prints the line
    with a log line inside it."""

    def __init__(self, summary: dict, write_file: bool):
        self.summary, self.write_file, self.args = summary, write_file, None

    def submit(self, spec_file: str, *, name: str, on_line, summary_file: str | None = None) -> None:
        self.args = (spec_file, summary_file)
        if self.write_file:
            write_private_json(summary_file, self.summary)
        line = SUMMARY_PREFIX + json.dumps(self.summary)
        on_line(line[:30] + "26/11/29 16:38:20 WARN DAGScheduler: Failed to cancel job group" + line[30:])


class NamedSpec:
    name = "interleaved"

    def to_dict(self) -> dict:
        return {"name": self.name}


def test_the_summary_comes_from_the_drivers_file_when_a_log_line_cuts_its_line(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__SEMIJOIN__WORK_FOLDER", str(tmp_path / "work"))
    summary = {"input_rows": 2000, "settings": {"eviction": "lfu"}}
    op = HybridJoinOperator(task_id="j", column="nk", master_static=True, master_table="d", master_key="nk", source=generator(1, 1))
    op._spark_hook = submitted = LoggedSubmit(summary, write_file=True)
    assert op._submit(NamedSpec(), queue.Queue()) == summary
    spec_file, summary_file = submitted.args
    assert summary_file.endswith(".summary.json") and Path(summary_file).parent == Path(spec_file).parent
    assert not list((tmp_path / "work" / "specs").iterdir())  # the spec and the summary are removed
    op._spark_hook = LoggedSubmit(summary, write_file=False)  # a driver of a release before the file
    with pytest.raises(AirflowException, match=r"^spark-submit ended without the driver's summary \(no summary "
                                               r"file, no readable SEMIJOIN_SUMMARY line\)$"):
        op._submit(NamedSpec(), queue.Queue())


def test_db_retry_bound_comes_from_the_airflow_config(monkeypatch):
    op = HybridJoinOperator(task_id="j", column="nk", master_static=True, master_table="d", master_key="nk", source=generator(1, 1))
    assert op.job_dict(resolve=False)["db_retry_max_s"] == 120.0
    monkeypatch.setenv("AIRFLOW__SEMIJOIN__DB_RETRY_MAX_S", "7.5")
    assert op.job_dict(resolve=False)["db_retry_max_s"] == 7.5
    monkeypatch.setenv("AIRFLOW__SEMIJOIN__DB_RETRY_MAX_S", "0")
    with pytest.raises(ConfigError, match=r"^\[semijoin\] db_retry_max_s: '0' is not a positive number$"):
        op.job_dict(resolve=False)
