"""Installed as a provider is: ``python -m build`` makes the wheel, a brand-new venv gets it with a
plain ``pip install <wheel>`` (no constraints, no forced reinstall; ``--no-compile`` only skips
writing .pyc files), and in that venv, on a SQLite metadata DB:

* ``airflow providers list`` and ``airflow plugins`` show the provider and its UI plugin;
* ``airflow dags test`` runs a HYBRIDJOIN task over the embedded SQLite master (made by the
  ``semijoin`` CLI of the venv) with ``partitions: 2`` (a Spark job of Python tasks a batch) and the generator source
  (a Python data source): both run Python workers, which a clashing pyspark-client breaks; the
  sinks equal the hash-join oracle's;
* a ``spark://`` connection without the ``spark-submit`` extra is refused in one sentence;
* then pyspark-client 4.2.0 is installed over it (what apache-airflow-providers-apache-spark 6.x
  brings), and the same task stops before any work with the one-sentence repair.

pip resolves everything from the package index, through pip's cache (pyspark's built wheel is
cached; the rest is fetched), so this test takes minutes: it is marked slow. Its command output
is kept in ``tests/artifacts/wheel/`` (or ``$SEMIJOIN_ARTIFACTS/wheel/``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_provider_semijoin import __version__
from airflow_provider_semijoin.core.oracle import engine_pairs, hash_join
from airflow_provider_semijoin.core.stores import open_store
from airflow_provider_semijoin.spark.sinks import read_parquet_sink
from airflow_provider_semijoin.workloads.zipf import zipf_rows

REPO = Path(__file__).resolve().parents[1]
DIST = "airflow-provider-semijoin"
SOURCES = ("setup.cfg", "pyproject.toml", "README.md", "airflow_provider_semijoin")
ROWS, MASTER_ROWS = 2000, 1000

DAG = """\
import pendulum
from airflow.sdk import DAG
from airflow_provider_semijoin.operators.join import SemiStreamJoinOperator

with DAG("wheel_join", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), catchup=False):
    SemiStreamJoinOperator(
        task_id="join", algorithm="hybridjoin", column="nk", master_static=True, master_table="product", master_key="nk",
        select=["sk"], memory="1M", partitions=2, trigger_interval_s=0.5, stop={{"end_of_input": True}},
        source={{"kind": "generator", "total_rows": {rows}, "rows_per_second": 2000, "master_rows": {master_rows},
                "missing": 0.1, "exponent": 1.0, "seed": 11}},
        sinks={{"matched": {{"path": {matched!r}}}, "dead_letter": {{"path": {dead!r}}}}},
        checkpoint={checkpoint!r},
    )
"""


def artifacts() -> Path:
    folder = Path(os.environ.get("SEMIJOIN_ARTIFACTS", REPO / "tests" / "artifacts")) / "wheel"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def run(args, *, env=None, cwd, log: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    """Run a command; its output goes to ``artifacts()/log`` and, on failure, into the assertion."""
    proc = subprocess.run([str(a) for a in args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    (artifacts() / log).write_text(f"$ {' '.join(map(str, args))}\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
    if check:
        assert proc.returncode == 0, f"{args[:4]} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def build_wheel(tmp: Path) -> Path:
    """``python -m build --wheel`` of a copy of the sources (the checkout stays untouched)."""
    src = tmp / "src"
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    run([sys.executable, "-m", "build", "--wheel", "--outdir", tmp / "dist", src], cwd=tmp, log="build.log")
    (wheel,) = (tmp / "dist").glob("airflow_provider_semijoin-*.whl")
    return wheel


def airflow_env(home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYSPARK", "VIRTUAL_ENV"))}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
        AIRFLOW__SEMIJOIN__LOCAL_MASTER="local[2]",
    )
    return env


def expected_output(master_db: Path):
    stream = zipf_rows(0, ROWS, MASTER_ROWS, exponent=1.0, missing=0.1, seed=11)
    with open_store(f"sqlite:///{master_db}", "product", "nk", ["sk"]) as store:
        return hash_join(store, stream, "nk")


def sink_pairs(tmp: Path):
    tables = []
    for name in ("matched", "dead"):
        table = read_parquet_sink(str(tmp / name))
        tables.append(table.append_column("rid", pc.cast(table["sj_id"], pa.int64())))
    return engine_pairs(tables[0], tables[1], ["sk"], "rid")


@pytest.mark.slow
@pytest.mark.acceptance  # the wheel from the index with plain pip: minutes of downloads and installs
@pytest.mark.timeout(1500)
def test_wheel_installs_with_plain_pip_and_runs_a_python_worker_join(tmp_path):
    wheel = build_wheel(tmp_path)
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=tmp_path, log="venv.log")
    bin_ = venv / "bin"
    run([bin_ / "python", "-m", "pip", "install", "--no-compile", wheel], cwd=tmp_path, log="pip-install.log", timeout=1200)

    home = tmp_path / "home"
    (home / "dags").mkdir(parents=True)
    env = airflow_env(home)
    listed = json.loads(run([bin_ / "airflow", "providers", "list", "--output", "json"], env=env, cwd=tmp_path,
                            log="providers-list.log").stdout)
    ours = [p for p in listed if p["package_name"] == DIST]
    assert [p["version"] for p in ours] == [__version__], listed
    # the plain install has no Spark provider, so no pyspark-client
    assert "apache-airflow-providers-apache-spark" not in {p["package_name"] for p in listed}
    plugins = json.loads(run([bin_ / "airflow", "plugins", "--output", "json"], env=env, cwd=tmp_path,
                             log="plugins.log").stdout)
    ours = [p for p in plugins if p["source"].startswith(f"{DIST}=={__version__}: ")]
    assert [p["name"] for p in ours] == ["semijoin"], plugins
    assert {v["name"] for v in ours[0]["external_views"]} == {"Semi-joins", "Semi-join"}

    master_db = home / "semijoin" / "master.db"  # the embedded default master: no connection needed
    master_db.parent.mkdir()
    run([bin_ / "semijoin", "generate", "master", "--db", f"sqlite:///{master_db}", "--table", "product",
         "--rows", MASTER_ROWS, "--seed", 3], env=env, cwd=tmp_path, log="generate-master.log")
    (home / "dags" / "wheel_join.py").write_text(DAG.format(
        rows=ROWS, master_rows=MASTER_ROWS, matched=str(tmp_path / "matched"), dead=str(tmp_path / "dead"),
        checkpoint=str(tmp_path / "checkpoint")))
    run([bin_ / "airflow", "db", "migrate"], env=env, cwd=tmp_path, log="db-migrate.log")
    run([bin_ / "airflow", "dags", "test", "wheel_join"], env=env, cwd=tmp_path, log="dags-test.log", timeout=900)
    expected = expected_output(master_db)
    assert sink_pairs(tmp_path) == expected
    assert sum(expected[0].values()) > 1000 and sum(expected[1].values()) > 100  # both sinks really used

    # a cluster master without the spark-submit extra: one sentence naming the extra
    probe = ("from airflow_provider_semijoin.hooks.spark import SemiJoinSparkHook\n"
             "try:\n    SemiJoinSparkHook('cluster')\nexcept Exception as exc:\n    print(exc)")
    cluster = run([bin_ / "python", "-c", probe], env={**env, "AIRFLOW_CONN_CLUSTER": "spark://127.0.0.1:7077"},
                  cwd=tmp_path, log="cluster-without-extra.log")
    assert cluster.stdout.strip().splitlines()[-1] == (
        "spark_conn_id: master 'spark://127.0.0.1:7077' runs through spark-submit, which needs the Spark provider "
        "(pip install 'airflow-provider-semijoin[spark-submit]')")

    # pyspark-client over pyspark, as the Spark provider 6.x installs it: caught before any work
    run([bin_ / "python", "-m", "pip", "install", "--no-compile", "--no-deps", "pyspark-client==4.2.0"],
        cwd=tmp_path, log="pip-install-pyspark-client.log")
    shutil.rmtree(tmp_path / "matched")
    clashed = run([bin_ / "airflow", "dags", "test", "wheel_join"], env=env, cwd=tmp_path, log="dags-test-clashed.log",
                  timeout=900, check=False)
    output = clashed.stdout + clashed.stderr
    assert clashed.returncode != 0
    assert "pyspark's Python files in" in output and "are version 4.2.0 but its jars are 4.3.0" in output, output[-3000:]
    assert "repair with: pip install --force-reinstall --no-deps pyspark==4.3.0" in output
    assert not (tmp_path / "matched").exists()  # stopped before any work: nothing written
