"""example_dags/: every DAG imports (the CLI's list-import-errors is empty) and is there."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from pathlib import Path

from airflow_provider_semijoin.operators.job import SemiJoinJobOperator, SemiJoinMetricsLink

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "example_dags"
ALGORITHM_DAGS = ["cachejoin", "cachejoin_l", "cachejoin_pq", "cmeshjoin", "generic", "hybridjoin", "hybridjoin_l",
                  "hybridjoin_pq", "inlj", "meshjoin", "ssij", "ssj"]


def test_airflow_lists_no_import_errors(airflow_db):
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(EXAMPLES), "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, "-m", "airflow", "dags", "list-import-errors", "--local", "--output", "json"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_one_dag_per_operator_and_sensor():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(EXAMPLES))
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == sorted(
        [f"example_semijoin_{a}" for a in ALGORITHM_DAGS]
        + ["example_semijoin_updates", "example_semijoin_deadlines", "example_surrogate_keys",
           "example_semijoin_asset_events"])
    assert bag.dags["example_surrogate_keys"].fileloc == str(EXAMPLES / "example_surrogate_keys.py")
    kinds = {type(task).__name__ for dag in bag.dags.values() for task in dag.tasks}
    assert {"INLJOperator", "MeshJoinOperator", "HybridJoinOperator", "HybridJoinLOperator", "HybridJoinPQOperator",
            "SSJOperator", "CacheJoinOperator", "CacheJoinLOperator", "CacheJoinPQOperator", "CMeshJoinOperator",
            "SSIJOperator", "SemiStreamJoinOperator", "SemiJoinPipelineOperator", "InstallMasterChangesOperator",
            "MasterDataChangesSensor", "DeadlineMissSensor"} <= kinds
    (asset,) = bag.dags["example_semijoin_asset_events"].timetable.asset_condition.objects
    watchers = [watcher.trigger for watcher in asset.watchers]  # the event trigger, the asset's watcher
    assert [type(trigger).__name__ for trigger in watchers] == ["MasterDataVersionsTrigger"]
    joins = [task for dag in bag.dags.values() for task in dag.tasks if isinstance(task, SemiJoinJobOperator)]
    assert joins and all(any(isinstance(link, SemiJoinMetricsLink) for link in task.operator_extra_links) for task in joins)
