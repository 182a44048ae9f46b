"""OpenLineage: a real task run (``airflow dags test`` in a subprocess, so the OpenLineage
provider reads its configuration afresh) with the provider's ``file`` transport writing every
event to a file; the COMPLETE event of the join task names the stream's landing folder and the
MariaDB master as inputs, the Parquet and SQLite sinks as outputs, per the naming spec."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_semijoin.core.stores import DatabaseURL
from airflow_provider_semijoin.operators.lineage import job_datasets
from airflow_provider_semijoin.spark.sinks import read_parquet_sink
from airflow_provider_semijoin.job.sources import SparkSource
from airflow_provider_semijoin.job.spec import JobSpec, TargetSpec
from airflow_provider_semijoin.workloads.master import generate_master

OPERATOR = "airflow_provider_semijoin.operators.join:HybridJoinOperator"


def ol_events(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.mysql
@pytest.mark.timeout(900)
@pytest.mark.parametrize("backend", ["mysql"], indirect=True)
def test_task_run_reports_lineage_through_the_openlineage_provider(backend, tmp_path, make_dag, connections):
    table = backend.table_name()
    generate_master(backend.connection, table, 500, seed=3, reuse=False)
    connections("dims", backend.url)
    dead_db = tmp_path / "dead.db"
    connections("deadletters", {"conn_type": "semijoin_master", "extra": {"dialect": "sqlite", "path": str(dead_db)}})
    landing = tmp_path / "landing"
    landing.mkdir()
    pq.write_table(pa.table({"sale_id": list(range(200)), "nk": [(i * 7) % 650 for i in range(200)]}),
                   landing / "part-0.parquet")
    dag_id = f"lineage_{table}"
    make_dag(dag_id, {"join": (OPERATOR, dict(
        column="nk", master_static=True, master_table=table, master_key="nk", select=["sk"], master_conn_id="dims", memory="1M",
        source={"kind": "files", "path": str(landing), "format": "parquet"},
        sinks={"matched": {"path": str(tmp_path / "matched")},
               "dead_letter": {"conn_id": "deadletters", "table": "dead_letters"}},
        checkpoint=str(tmp_path / "cp"), stop={"end_of_input": True}, trigger_interval_s=0.3,
    ))})
    events_file = tmp_path / "openlineage.jsonl"
    env = {
        **os.environ,
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(events_file), "append": True}),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "semijoin-tests",
        "AIRFLOW__OPENLINEAGE__DISABLED": "False",
    }
    log = tmp_path / "dags-test.log"
    with log.open("w") as out:
        proc = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", dag_id], env=env, cwd=tmp_path,
                              stdout=out, stderr=subprocess.STDOUT, timeout=480)
    assert proc.returncode == 0, log.read_text()[-4000:]
    matched = read_parquet_sink(str(tmp_path / "matched"))
    assert 0 < matched.num_rows < 200  # keys above 500 are not in the master: dead letters in SQLite

    events = ol_events(events_file)
    complete = [e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"] == f"{dag_id}.join"]
    assert len(complete) == 1, [(e["eventType"], e["job"]["name"]) for e in events]
    event = complete[0]
    assert event["job"]["namespace"] == "semijoin-tests"
    inputs = [(d["namespace"], d["name"]) for d in event["inputs"]]
    outputs = [(d["namespace"], d["name"]) for d in event["outputs"]]
    server = DatabaseURL.parse(backend.url)
    assert inputs == [("file", str(landing)), (f"mysql://{server.host}:{server.port}", f"{server.database}.{table}")]
    assert outputs == [("file", str(tmp_path / "matched")),
                       (f"sqlite://{socket.gethostname()}", f"{dead_db}.dead_letters")]
    assert "semijoin:semijoin@" not in events_file.read_text()  # no credentials in the lineage


def _spec(source: dict) -> JobSpec:
    return JobSpec.from_dict({
        "source": source,
        "steps": [{"column": "nk", "master": {"url": "mysql://u:secret@db.example:3307/dw", "table": "dim_product",
                                                "key": "nk"}},
                  {"column": "ck", "master": {"url": "mysql://u:secret@db.example:3307/dw", "table": "dim_customer",
                                                "key": "ck"}}],
        "sinks": {"matched": {"kind": "table", "url": "sqlite:///facts.db", "table": "fact_sales"},
                  "dead_letter": {"path": "dead"}},
        "checkpoint": "cp",
    })


def test_dataset_names_for_kafka_generator_and_relative_paths():
    """Kafka topics as ``kafka://{server}``, the generator as no dataset, relative SQLite and
    Parquet paths made absolute, two master tables of one server, no password anywhere."""
    kafka = {"kind": "spark", "format": "kafka", "id_column": "offset",
             "options": {"kafka.bootstrap.servers": "k1:9092,k2:9092", "subscribe": "sales,returns"}}
    inputs, outputs = job_datasets(_spec(kafka))
    assert inputs == [("kafka://k1:9092", "sales"), ("kafka://k1:9092", "returns"),
                      ("mysql://db.example:3307", "dw.dim_product"), ("mysql://db.example:3307", "dw.dim_customer")]
    assert outputs == [(f"sqlite://{socket.gethostname()}", f"{os.path.abspath('facts.db')}.fact_sales"),
                       ("file", os.path.abspath("dead"))]
    inputs, _ = job_datasets(_spec({"kind": "generator", "total_rows": 10}))
    assert [ns for ns, _ in inputs] == ["mysql://db.example:3307"] * 2
    assert "secret" not in repr(job_datasets(_spec(kafka)))
    assert job_datasets(SimpleNamespace(
        source=SparkSource(format="delta", id_column="id"), steps=[],
        sinks=SimpleNamespace(matched=TargetSpec(kind="parquet", path="/out"),
                              dead_letter=TargetSpec(kind="parquet", path="/out")),
    )) == ([], [("file", "/out")])
