"""An Airflow of its own for the provider's tests: AIRFLOW_HOME in a temporary folder, a SQLite
metadata DB migrated once per test session, connections as ``AIRFLOW_CONN_*`` variables, and one
local Spark session shared by every test that runs a join.

Airflow reads its configuration when it is first imported, so the variables are set when this
conftest is loaded, before any test module imports airflow; a session that imported airflow
earlier is refused (it would use another AIRFLOW_HOME). ``dag.test()`` only runs DAGs whose
file is inside DAGS_FOLDER: DAGS_FOLDER is the repository, so DAGs defined in test modules and
in example_dags/ both qualify.
"""

from __future__ import annotations

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

if "airflow" in sys.modules and os.environ.get("AIRFLOW_HOME") != str(AIRFLOW_HOME):
    raise RuntimeError("airflow was imported before tests/airflow/conftest.py could point it at a test AIRFLOW_HOME")

AIRFLOW_ENV = {
    "AIRFLOW_HOME": str(AIRFLOW_HOME),
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}",
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
    "AIRFLOW__CORE__DAGS_FOLDER": str(REPO),
    "AIRFLOW__SEMIJOIN__LOCAL_MASTER": "local[2]",
    "PYSPARK_PYTHON": sys.executable,
    "PYSPARK_DRIVER_PYTHON": sys.executable,
}
os.environ.update(AIRFLOW_ENV)


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
    """One local[2] Spark session for the whole test session (about 8 s to start)."""
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("semijoin-airflow-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    yield session
    session.stop()
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its connection close at exit logs to closed streams
