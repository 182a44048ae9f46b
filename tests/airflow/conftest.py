"""An Airflow of its own for the provider's tests: AIRFLOW_HOME in a temporary folder, a SQLite
metadata DB migrated once per test session, connections as ``AIRFLOW_CONN_*`` variables, and one
local Spark session shared by every test that runs a join.

Airflow binds its metadata DB when it is first imported, so the variables are set when this
conftest is loaded; when another test package imported Airflow earlier (with a DB of its own),
the ORM is pointed here again, before every test module of this folder.

``dag.test()`` only runs a DAG it finds by parsing DAGS_FOLDER (it parses the whole folder on
every call), so tests write their DAGs as small files into a DAGS_FOLDER of their own
(:func:`write_dag`) instead of building them inside test functions.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="semijoin-airflow-"))

AIRFLOW_ENV = {
    "AIRFLOW_HOME": str(AIRFLOW_HOME),
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}",
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
    "AIRFLOW__CORE__DAGS_FOLDER": str(AIRFLOW_HOME / "dags"),
    "AIRFLOW__SEMIJOIN__LOCAL_MASTER": "local[2]",
    "PYSPARK_PYTHON": sys.executable,
    "PYSPARK_DRIVER_PYTHON": sys.executable,
}


def point_airflow_here() -> None:
    """This folder's environment, and Airflow's ORM on its DB if Airflow was imported already."""
    os.environ.update(AIRFLOW_ENV)
    if "airflow.settings" in sys.modules:
        from airflow import settings

        if settings.SQL_ALCHEMY_CONN != AIRFLOW_ENV["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]:
            settings.configure_vars()
            settings.reconfigure_orm()


point_airflow_here()
(AIRFLOW_HOME / "dags").mkdir()


@pytest.fixture(autouse=True, scope="module")
def _airflow_here():
    point_airflow_here()

DAG_FILE = """\
import importlib.util
import json

import pendulum
from airflow.sdk import DAG
{imports}

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), catchup=False) as dag:
{tasks}
{edges}
"""


def write_dag(dag_id: str, tasks: dict, edges: tuple = ()):
    """Write a DAG file into DAGS_FOLDER and return its DAG.

    ``tasks`` maps task ids to ``("module:Class", {keyword arguments})`` (JSON-able arguments);
    ``edges`` are ``(upstream, downstream)`` task id pairs.
    """
    classes = {path for path, _ in tasks.values()}
    imports = "\n".join(f"from {p.split(':')[0]} import {p.split(':')[1]}" for p in sorted(classes))
    body = "\n".join(
        f"    {cls.split(':')[1]}(task_id={task_id!r}, **json.loads({json.dumps(kwargs)!r}))"
        for task_id, (cls, kwargs) in tasks.items()
    )
    links = "\n".join(f"dag.get_task({a!r}) >> dag.get_task({b!r})" for a, b in edges)
    path = AIRFLOW_HOME / "dags" / f"{dag_id}.py"
    path.write_text(DAG_FILE.format(imports=imports, dag_id=dag_id, tasks=body, edges=links))
    spec = importlib.util.spec_from_file_location(f"test_dag_{dag_id}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """The metadata DB, migrated once (``airflow db migrate``, a few seconds)."""
    proc = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], capture_output=True, text=True, env=os.environ.copy()
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return AIRFLOW_HOME / "airflow.db"


@pytest.fixture
def connections(monkeypatch):
    """``connections(conn_id, uri_or_fields)`` defines an Airflow connection for this test."""

    def define(conn_id: str, value) -> None:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", value if isinstance(value, str) else json.dumps(value))

    return define


@pytest.fixture(scope="session")
def spark():
    """One local[2] Spark session for the whole test session (about 8 s to start), configured as
    the product configures its own (:func:`...spark.session.get_spark`): the Spark tests that run
    after these get this session, and its static settings (the Python workers' sockets) stay."""
    from airflow_provider_semijoin.spark.session import get_spark

    session = get_spark("local[2]", app_name="semijoin-airflow-tests",
                        conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its connection close at exit logs to closed streams


@pytest.fixture
def make_dag(airflow_db):
    """``make_dag(dag_id, tasks, edges=())``: see :func:`write_dag` (the metadata DB is ready)."""
    return write_dag
