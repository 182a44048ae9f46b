"""Where credentials travel (issue 13 security review): a MariaDB user created for the test with a
sentinel password runs real joins - the operator on local Spark through ``dag.test()``, the
operator through spark-submit on a standalone cluster, the command line - and every output and
artifact is searched for the password: the task log, every XCom of the task (what the UI's API
serves), Airflow's metadata DB file, the checkpoint and sink folders, the driver's and executors'
logs, the packaged zip shipped to Spark, the command lines of every process while the job runs
(``ps``), and error messages. The job spec file the driver reads must hold the password (it
connects with it): it is mode 0600 while it exists and deleted afterwards."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import MySQLdb
import pytest

from airflow_provider_semijoin.core.stores import DatabaseURL
from airflow_provider_semijoin.workloads.master import generate_master
from metadata import xcoms

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "spark"))
from test_cluster import standalone_cluster  # noqa: E402,F401 (a fixture)

pytestmark = pytest.mark.mysql

OPERATORS = "airflow_provider_semijoin.operators.join"
ROOT_SOCKET = "/run/mysqld/mysqld.sock"


def read_without_touching_locks(path: Path) -> bytes:
    """The bytes of ``path``; a SQLite file is read by a child process: closing any descriptor of a
    file drops every POSIX lock this process holds on it, so reading Airflow's open metadata DB here
    would let another process delete its WAL under this process's connections ("disk I/O error")."""
    if path.suffix != ".db":
        return path.read_bytes()
    return subprocess.run(["cat", str(path)], capture_output=True, check=True).stdout


class Sentinel:
    """A MariaDB user whose password is easy to find anywhere: ``S3ntinel-<hex>-p@ss/w:rd``."""

    def __init__(self, database: str):
        tag = uuid.uuid4().hex[:10]
        self.user = f"sj_sentinel_{tag}"
        self.password = f"S3ntinel-{tag}-p@ss/w:rd"
        self.database = database
        self.url = f"mysql://{self.user}:{quote(self.password, safe='')}@127.0.0.1:3306/{database}"
        self.forms = {self.password, quote(self.password, safe=""), f"S3ntinel-{tag}"}  # raw, URL-quoted, its stem

    def found_in(self, text: str) -> list[str]:
        return [form for form in self.forms if form in text]

    def found_in_files(self, *folders: Path) -> list[str]:
        hits = []
        for folder in folders:
            for path in [folder] if folder.is_file() else folder.rglob("*"):
                if path.is_file() and not path.is_symlink():
                    data = read_without_touching_locks(path).decode("latin-1")
                    hits += [f"{path}: {form}" for form in self.found_in(data)]
        return hits


def _root():
    return MySQLdb.connect(unix_socket=ROOT_SOCKET, user="root", autocommit=True)


@pytest.fixture
def sentinel(mysql_url):
    """The sentinel user (created as root over the socket, dropped at teardown) and a master table."""
    database = DatabaseURL.parse(mysql_url).database
    s = Sentinel(database)
    root = _root()
    cursor = root.cursor()
    for host in ("127.0.0.1", "localhost"):
        cursor.execute(f"CREATE USER '{s.user}'@'{host}' IDENTIFIED BY %s", (s.password,))
        cursor.execute(f"GRANT ALL PRIVILEGES ON `{database}`.* TO '{s.user}'@'{host}'")
    s.table = f"sentinel_{uuid.uuid4().hex[:10]}"
    try:
        generate_master(s.url, s.table, 2000, seed=3, reuse=False)
        yield s
    finally:
        for name in (s.table, f"{s.table}_facts"):
            cursor.execute(f"DROP TABLE IF EXISTS `{database}`.`{name}`")
        cursor.execute(f"DELETE FROM `{database}`.semijoin_datasets WHERE table_name = %s", (s.table,))
        for host in ("127.0.0.1", "localhost"):
            cursor.execute(f"DROP USER IF EXISTS '{s.user}'@'{host}'")
        root.close()


class ProcessWatcher(threading.Thread):
    """Reads the command line of every process on the machine while a job runs (what ``ps``
    shows to any user), and the mode of every job spec file under ``spec_folder``."""

    def __init__(self, sentinel: Sentinel, spec_folder: Path | None = None):
        super().__init__(daemon=True)
        self.sentinel, self.spec_folder = sentinel, spec_folder
        self.done = threading.Event()
        self.hits: list[str] = []
        self.spec_modes: set[int] = set()
        self.scans = 0

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.join()

    def run(self):
        while not self.done.is_set():
            for entry in Path("/proc").iterdir():
                try:
                    argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("latin-1")
                except OSError:
                    continue
                self.hits += [f"pid {entry.name}: {argv[:120]}" for _ in self.sentinel.found_in(argv)]
            if self.spec_folder is not None and self.spec_folder.is_dir():
                for spec in self.spec_folder.glob("*.json"):
                    try:
                        self.spec_modes.add(stat.S_IMODE(spec.stat().st_mode))
                    except OSError:
                        continue
            self.scans += 1
            time.sleep(0.2)


def join_task(s: Sentinel, tmp_path: Path, **more) -> dict:
    return dict(
        column="nk", master_static=True, master_table=s.table, master_key="nk", select=["sk", "category"], master_conn_id="dims", memory="2M",
        source={"kind": "generator", "total_rows": 3000, "rows_per_second": 3000, "master_rows": 2000, "missing": 0.1,
                "seed": 11},
        sinks={"matched": {"kind": "table", "conn_id": "dims", "table": f"{s.table}_facts"},
               "dead_letter": {"path": str(tmp_path / "dead")}},
        checkpoint=str(tmp_path / "checkpoint"), stop={"end_of_input": True}, trigger_interval_s=0.3, **more,
    )


def task_outputs(dag_id: str) -> str:
    """Every XCom the task pushed (the UI plugin's API serves these), as text."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        keys = {row.key for row in session.query(XComModel).filter_by(dag_id=dag_id, task_id="join").all()}
    return repr({key: xcoms(dag_id, "join", key) for key in keys})


def facts_in(s: Sentinel) -> int:
    connection = DatabaseURL.parse(s.url).connect()
    try:
        cursor = connection.cursor()
        cursor.execute(f"SELECT COUNT(DISTINCT sj_id) FROM `{s.table}_facts`")
        return int(cursor.fetchone()[0])
    finally:
        connection.close()


def test_the_password_stays_out_of_logs_xcom_and_files_on_local_spark(sentinel, tmp_path, make_dag, connections, spark,
                                                                      capfd, airflow_db):
    connections("dims", sentinel.url)
    dag_id = f"sentinel_local_{sentinel.table}"
    dag = make_dag(dag_id, {"join": (f"{OPERATORS}:HybridJoinOperator", join_task(sentinel, tmp_path))})
    with ProcessWatcher(sentinel) as watcher:
        run = dag.test()
    assert str(run.state) == "success"
    assert facts_in(sentinel) > 2000  # the join really connected as the sentinel user and wrote its facts
    logged = "".join(capfd.readouterr())
    assert "SEMIJOIN_PROGRESS" in logged and f"{sentinel.user}:***@127.0.0.1" in logged
    assert sentinel.found_in(logged) == []
    assert sentinel.found_in(task_outputs(dag_id)) == []
    assert watcher.scans > 0 and watcher.hits == []
    assert sentinel.found_in_files(tmp_path, airflow_db.parent / "logs", airflow_db) == []


@pytest.mark.slow
def test_the_password_stays_out_of_spark_submit_argv_driver_logs_and_the_zip(sentinel, tmp_path, make_dag, connections,
                                                                             standalone_cluster, spark_submit_on_path, airflow_db):
    from airflow_provider_semijoin.config import work_folder

    url, _ = standalone_cluster
    connections("dims", sentinel.url)
    connections("cluster", url)
    dag_id = f"sentinel_cluster_{sentinel.table}"
    dag = make_dag(dag_id, {"join": (f"{OPERATORS}:CacheJoinOperator", join_task(
        sentinel, tmp_path, spark_conn_id="cluster",
        spark_conf={"spark.executor.memory": "512m", "spark.executorEnv.PYSPARK_PYTHON": sys.executable}))})
    specs = work_folder() / "specs"
    with ProcessWatcher(sentinel, specs) as watcher:
        run = dag.test()
    assert str(run.state) == "success"
    assert facts_in(sentinel) > 2000
    assert watcher.scans > 0 and watcher.hits == []  # spark-submit, the driver, the executors: no password in argv
    assert watcher.spec_modes <= {0o600}  # the spec file the driver reads: this user only
    assert not list(specs.glob("*.json"))  # and gone after the run
    assert sentinel.found_in(task_outputs(dag_id)) == []
    cluster_work = tmp_path / "work"  # the worker's folder: the driver's and executors' stdout/stderr
    assert any(cluster_work.rglob("stderr"))
    assert sentinel.found_in_files(cluster_work, tmp_path / "checkpoint", tmp_path / "dead", airflow_db.parent / "logs",
                                   airflow_db, work_folder() / "airflow_provider_semijoin.zip") == []


def test_the_command_line_takes_the_password_from_the_environment(sentinel, tmp_path):
    """``semijoin join`` with the password in SEMIJOIN_DB_PASSWORD: not in its argv, not in its
    output or statistics; and a failing run's error names the user, never the password."""
    from airflow_provider_semijoin.core.files import write_table
    from airflow_provider_semijoin.workloads import zipf_stream

    write_table(tmp_path / "s.parquet", zipf_stream(2000, 2000, missing=0.1, seed=1))
    bare = f"mysql://{sentinel.user}@127.0.0.1:3306/{sentinel.database}"
    args = [sys.executable, "-m", "airflow_provider_semijoin.cli", "join", "--algorithm", "cachejoin", "--master", bare,
            "--table", sentinel.table, "--key", "nk", "--stream", str(tmp_path / "s.parquet"), "--stream-key", "nk",
            "--out", str(tmp_path / "o.parquet"), "--stats", str(tmp_path / "stats.json")]
    env = {**os.environ, "SEMIJOIN_DB_PASSWORD": sentinel.password}
    with ProcessWatcher(sentinel) as watcher:
        ok = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
        failing = subprocess.run([*args[:7], bare, "--table", "no_such_table", *args[10:]], capture_output=True, text=True,
                                 env=env, timeout=300)
        wrong = subprocess.run([*args[:7], bare, *args[8:]], capture_output=True, text=True, timeout=300,
                               env={**env, "SEMIJOIN_DB_PASSWORD": sentinel.password + "x"})
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "exactly once: yes" in ok.stdout
    assert failing.returncode == 2 and "no_such_table" in failing.stderr and "Traceback" not in failing.stderr
    assert wrong.returncode == 2 and f"cannot connect to MySQL at {sentinel.user}@127.0.0.1:3306" in wrong.stderr
    assert watcher.scans > 0 and watcher.hits == []
    for proc in (ok, failing, wrong):
        assert sentinel.found_in(proc.stdout + proc.stderr) == []
    assert sentinel.found_in_files(tmp_path) == []


def test_a_sink_url_with_a_password_is_refused_when_the_dag_is_parsed(tmp_path):
    """Task arguments are kept rendered in the metadata DB and shown in the UI: a password belongs
    in a connection (``conn_id``), so a sink URL holding one is refused before anything runs."""
    from airflow.sdk import DAG

    from airflow_provider_semijoin.core.errors import SpecError
    from airflow_provider_semijoin.operators.join import HybridJoinOperator
    from airflow_provider_semijoin.pipeline import PipelineSpec

    secret = f"mysql://u:{uuid.uuid4().hex}@127.0.0.1:3306/warehouse"
    sinks = {"matched": {"kind": "table", "url": secret, "table": "facts"}}
    with DAG("sink_password", schedule=None):
        with pytest.raises(SpecError, match=r"^join: sinks\.matched\.url: holds a password, .*; expected conn_id "):
            HybridJoinOperator(task_id="join", column="nk", master_static=True, master_table="r", master_key="nk",
                               source={"kind": "generator", "total_rows": 10}, sinks=sinks)
    with pytest.raises(SpecError, match=r"^sinks\.matched\.url: holds a password"):
        PipelineSpec(dag_id="p", source={"kind": "generator", "total_rows": 10}, sinks=sinks,
                     steps=[{"column": "nk", "dimension": {"table": "d", "natural_key": "nk", "surrogate_key": "sk"}}])
    with DAG("sink_no_password", schedule=None):  # a URL without one is taken as it is
        HybridJoinOperator(task_id="join", column="nk", master_static=True, master_table="r", master_key="nk",
                           source={"kind": "generator", "total_rows": 10},
                           sinks={"matched": {"kind": "table", "url": f"sqlite:///{tmp_path}/f.db", "table": "facts"}})
