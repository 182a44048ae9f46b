"""The packaged driver through spark-submit on a real two-daemon standalone cluster
(a master and a worker started with spark-class, as NOTES-platform.md describes)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest
from spark_jobs import assert_sinks_equal_oracle, generator_job, write_master

from airflow_provider_semijoin.core.progress import parse_line
from airflow_provider_semijoin.spark.driver import driver_path
from airflow_provider_semijoin.spark.standalone import spark_env, spark_home, standalone_cluster as running_cluster

SPARK_HOME = spark_home()


@pytest.fixture
def standalone_cluster(tmp_path):
    with running_cluster(tmp_path) as cluster:
        yield cluster


def test_driver_runs_on_a_standalone_cluster_via_spark_submit(tmp_path, sqlite_backend, standalone_cluster):
    url, master_ui = standalone_cluster
    store = write_master(sqlite_backend, 300)
    spec = generator_job(tmp_path, sqlite_backend.url, store.table, algorithm="cachejoin", total_rows=4000)
    spec_file = tmp_path / "job.json"
    spec_file.write_text(json.dumps(spec.to_dict()))
    submit = subprocess.run(
        [f"{SPARK_HOME}/bin/spark-submit", "--master", url, "--conf", "spark.executor.memory=512m",
         "--conf", f"spark.executorEnv.PYSPARK_PYTHON={sys.executable}", driver_path(), "--spec", str(spec_file),
         "--summary", str(tmp_path / "summary.json")],
        env=spark_env(), capture_output=True, text=True, timeout=300,
    )
    assert submit.returncode == 0, submit.stderr[-3000:]
    records = [parse_line(line) for line in submit.stdout.splitlines() if parse_line(line)]
    summary = json.loads((tmp_path / "summary.json").read_text())  # whole: the JVM's log may run into the line
    assert summary["input_rows"] == 4000 == sum(r["input_rows"] for r in records)
    apps = json.load(urllib.request.urlopen(f"http://127.0.0.1:{master_ui}/json/", timeout=2))
    assert any(app["name"] == "semijoin-semijoin" for app in apps["completedapps"] + apps["activeapps"])
    assert_sinks_equal_oracle(store, spec)


SHOW_CONF = """
import json, sys
from airflow_provider_semijoin.spark.session import get_spark
conf = get_spark(app_name="semijoin-conf").sparkContext.getConf()
print("CONF " + json.dumps({key: conf.get(key) for key in sys.argv[1:]}))
"""


def test_what_spark_submit_was_told_wins_over_the_products_defaults(tmp_path):
    """A user's ``--conf`` (or the hook's ``conf``, which SparkSubmitHook passes as ``--conf``)
    reaches the session: the product's defaults fill in only what spark-submit was not told."""
    script = tmp_path / "show_conf.py"
    script.write_text(SHOW_CONF)
    keys = ["spark.sql.shuffle.partitions", "spark.task.maxDirectResultSize", "spark.python.worker.reuse", "spark.app.name"]
    submit = subprocess.run(
        [f"{SPARK_HOME}/bin/spark-submit", "--master", "local[1]", "--conf", "spark.sql.shuffle.partitions=7",
         "--conf", "spark.task.maxDirectResultSize=2m", str(script), *keys],
        env=spark_env(), capture_output=True, text=True, timeout=300,
    )
    assert submit.returncode == 0, submit.stderr[-3000:]
    shown = json.loads(next(line for line in submit.stdout.splitlines() if line.startswith("CONF "))[5:])
    assert shown == {"spark.sql.shuffle.partitions": "7", "spark.task.maxDirectResultSize": "2m",
                     "spark.python.worker.reuse": "true", "spark.app.name": "semijoin-conf"}
