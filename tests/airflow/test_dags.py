"""dags/: the reference pipeline imports (the CLI's list-import-errors is empty), and its DAG has
the join, the deadline monitor and an update sensor + install task per dimension."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"


def test_airflow_lists_no_import_errors(airflow_db):
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS), "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, "-m", "airflow", "dags", "list-import-errors", "--local", "--output", "json"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_reference_pipeline_dag():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    dag = bag.dags["semijoin_sales_facts"]
    assert dag.fileloc == str(DAGS / "semijoin_pipelines.py")  # a worker loads the DAG from the DAG file
    assert {t.task_id: type(t).__name__ for t in dag.tasks} == {
        "surrogate_keys": "SemiJoinPipelineOperator", "deadline_monitor": "DeadlineMissSensor",
        "changes_dim_product": "MasterDataChangesSensor", "changes_dim_customer": "MasterDataChangesSensor"}
    assert {dag.get_task(f"changes_{t}").watch for t in ("dim_product", "dim_customer")} == {"versions"}
    steps = dag.get_task("surrogate_keys").pipeline["steps"]
    assert [(s["column"], s["dimension"]["table"]) for s in steps] == [("nk", "dim_product"), ("customer_nk", "dim_customer")]
    assert [s["change_capture"] for s in steps] == ["triggers", "triggers"]
