"""Shared fixtures: the MySQL test URL and a ``backend`` that writes master tables R.

``backend`` is parametrised over SQLite (a file in ``tmp_path``) and MySQL/MariaDB (the test
server of ``.ci/setup``); the MySQL cases carry ``pytest.mark.mysql`` and FAIL, never skip,
when the server cannot be reached. Each test gets one connection; every table it writes has a
name of its own and is dropped at teardown.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.joins import base
from airflow_provider_semijoin.core.stores import DatabaseURL, MasterStore, store_for, write_table
from airflow_provider_semijoin.core.stores.binlog import binlog_table
from airflow_provider_semijoin.core.stores.capture import CLOCK_SUFFIX
from airflow_provider_semijoin.core.stores.pagemaps import pages_table
from airflow_provider_semijoin.core.stores.horizon import READERS_TABLE
from airflow_provider_semijoin.core.stores.sql import side_tables, table_exists
from airflow_provider_semijoin.core.stores.versions import before_table
from worker_groups import start_rank, worker_group  # tests/ is on sys.path: pytest put it there for this file

DEFAULT_MYSQL_URL = "mysql://semijoin:semijoin@127.0.0.1:3306/semijoin_test"


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # in place of the scheduler of --dist
def pytest_xdist_make_scheduler(config, log):
    """xdist's scheduler by scope, each scope a group of :mod:`worker_groups`: a worker runs a
    group's files whole, one after another. (xdist's own ``loadgroup`` renames a test's node id,
    which pytest 9 no longer lets a plugin do.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkerGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid.split("::", 1)[0])

    config.option.loadscopereorder = False  # the groups in the order collected: the longest first
    return ByWorkerGroup(config, log)


def pytest_collection_modifyitems(config, items):
    """The longest groups first (:data:`worker_groups.LONGEST_FIRST`), each file's tests in their order."""
    root = Path(str(config.rootpath))
    items.sort(key=lambda item: start_rank(worker_group(Path(str(item.path)).relative_to(root).as_posix())))


@pytest.fixture(scope="session")
def mysql_url() -> str:
    """The MySQL/MariaDB test database (env ``SEMIJOIN_TEST_MYSQL_URL``)."""
    return os.environ.get("SEMIJOIN_TEST_MYSQL_URL", DEFAULT_MYSQL_URL)


class Backend:
    """One connection to a master database and the tables a test writes into it."""

    def __init__(self, name: str, url: str):
        self.name = name
        self.url = url
        self.connection = DatabaseURL.parse(url).connect()  # raises (fails the test) if unreachable
        self.tables: list[str] = []
        self._prefix = f"t{uuid.uuid4().hex[:12]}"

    def table_name(self) -> str:
        """A table name no other test (or example) uses."""
        name = f"{self._prefix}_{len(self.tables)}"
        self.tables.append(name)
        return name

    def execute(self, sql: str, params=()) -> list[tuple]:
        cursor = self.connection.cursor()
        try:
            cursor.execute(sql, tuple(params))
            return list(cursor.fetchall() or [])
        finally:
            cursor.close()

    def quote(self, name: str) -> str:
        return f"`{name}`" if self.name == "mysql" else f'"{name}"'

    def make_master(
        self,
        rows: pa.Table,
        key: str = "nk",
        select: list[str] | None = None,
        *,
        primary_key: str | None = None,
    ) -> MasterStore:
        """Write ``rows`` as a new table R (primary key ``key``) and open a store on it.

        With ``primary_key`` naming another column (an id), ``key`` gets a plain, non-unique
        index instead (``CREATE INDEX``): a 1:K master.
        """
        table = self.table_name()
        write_table(self.connection, table, rows, primary_key=primary_key or key)
        if primary_key and primary_key != key:
            self.execute(f"CREATE INDEX ix_{table}_{key} ON {self.quote(table)} ({self.quote(key)})")
        return store_for(self.connection, table, key, select)

    def close(self) -> None:
        try:
            for table in self.tables:
                for name in with_side_tables(table):
                    self.execute(f"DROP TABLE IF EXISTS {self.quote(name)}")
            if self.tables and table_exists(self.connection, READERS_TABLE):  # the notes of its readers (.horizon)
                self.execute(f"DELETE FROM {self.quote(READERS_TABLE)} WHERE table_name IN "
                             f"({', '.join(['%s' if self.name == 'mysql' else '?'] * len(self.tables))})", self.tables)
        finally:
            self.connection.close()


def with_side_tables(table: str) -> tuple[str, ...]:
    """``table`` and the names of its change tables (if it can have them)."""
    try:
        return (table, *side_tables(table), before_table(table), pages_table(table), table + CLOCK_SUFFIX,
                binlog_table(table))
    except ConfigError:
        return (table,)


@pytest.fixture(params=["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)])
def backend(request, tmp_path, mysql_url):
    """A :class:`Backend` on SQLite or MySQL; ``backend.make_master(rows)`` -> a store on R."""
    url = f"sqlite:///{tmp_path / 'master.db'}" if request.param == "sqlite" else mysql_url
    db = Backend(request.param, url)
    yield db
    db.close()


@pytest.fixture
def make_master(backend):
    """``make_master(rows, key="nk", select=None) -> MasterStore`` on the test's backend."""
    return backend.make_master


@pytest.fixture
def sqlite_backend(tmp_path):
    """A :class:`Backend` on SQLite only (tests that need one backend, e.g. a Spark job per case)."""
    db = Backend("sqlite", f"sqlite:///{tmp_path / 'master.db'}")
    yield db
    db.close()


@pytest.fixture
def mysql_backend(mysql_url):
    """A :class:`Backend` on MySQL/MariaDB only; mark the test ``mysql``."""
    db = Backend("mysql", mysql_url)
    yield db
    db.close()


@pytest.fixture(scope="module")
def module_mysql_backend(mysql_url):
    """One :class:`Backend` on MySQL/MariaDB shared by a module's tests (fixtures that build masters once)."""
    db = Backend("mysql", mysql_url)
    yield db
    db.close()


@pytest.fixture
def spark_submit_on_path(monkeypatch):
    """For this test: ``spark-submit`` of this venv's PySpark on PATH, with SPARK_HOME and SPARK_LOCAL_IP set."""
    from airflow_provider_semijoin.spark.standalone import spark_env

    for name, value in spark_env().items():
        if name in ("SPARK_HOME", "SPARK_LOCAL_IP"):
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")


class DemoRun:
    """The README's first command (``.ci/setup && .venv/bin/semijoin demo``), word for word at its
    defaults, run once per session in a checkout of its own with no ``.semijoin-home`` yet: this
    checkout's ``.ci``, ``.venv`` and packaging files (so ``.ci/setup`` finds everything in place),
    nothing else. Its first line is read from README.md, not written here."""

    TIMEOUT_S = 1500  # minutes on a machine busy with other work; about two and a half on an idle one
    CHECKOUT = (".ci", ".venv", "setup.cfg", "pyproject.toml", "constraints.txt")

    def __init__(self, checkout: Path):
        repo = Path(__file__).resolve().parents[1]
        checkout.mkdir(parents=True)
        for name in self.CHECKOUT:
            (checkout / name).symlink_to(repo / name)
        self.command = readme_first_command(repo)
        self.home = checkout / ".semijoin-home"
        with self.start_in(checkout, self.command) as process:
            try:
                stdout, stderr = process.communicate(timeout=self.TIMEOUT_S)
            except subprocess.TimeoutExpired:
                state = self.hung_state(process.pid)  # before the demo's `finally` blocks change it
                process.terminate()  # the demo stops its side process and API server, then its group goes
                stdout, stderr = process.communicate(timeout=90)
                raise AssertionError(f"{self.command} did not end within {self.TIMEOUT_S} s:\n{stdout[-3000:]}\n"
                                     f"{state}") from None
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)  # LocalExecutor workers left behind, if any
        self.proc = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        self.out = stdout

    @staticmethod
    def start_in(checkout: Path, command: str) -> subprocess.Popen:
        """``command`` by bash in ``checkout``, in a session of its own, without the caller's
        Airflow settings; stdout and stderr piped apart, as text."""
        return subprocess.Popen(["bash", "-c", command], cwd=checkout, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=_demo_env(), start_new_session=True)

    @staticmethod
    def start(home: Path, *arguments: str, stderr=subprocess.STDOUT) -> subprocess.Popen:
        """``semijoin demo --dir home *arguments`` in a session of its own, without the caller's
        Airflow settings; its stdout (and ``stderr``) piped, as text."""
        command = [sys.executable, "-m", "airflow_provider_semijoin.cli", "demo", "--dir", str(home), *arguments]
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=_demo_env(),
                                start_new_session=True)

    @staticmethod
    def session_processes(sid: int) -> list[str]:
        """The processes of session ``sid`` still running (a zombie no reaper collected has
        ended), a line each: pid, parent, state, elapsed time, command."""
        listed = subprocess.run(["ps", "-o", "pid=,ppid=,stat=,etime=,args=", "-s", str(sid)],
                                capture_output=True, text=True).stdout
        return [line for line in listed.splitlines() if line.split()[2][0] != "Z"]

    def hung_state(self, session: int) -> str:
        """What a hung demo was doing: its task instances' states, its processes, the end of its
        Airflow and Spark log (``dag-run.log``), all left in ``self.home`` too."""
        try:
            with contextlib.closing(sqlite3.connect(f"file:{self.home / 'airflow.db'}?mode=ro", uri=True, timeout=5)) as db:
                tasks = db.execute("SELECT task_id, state, start_date, end_date FROM task_instance").fetchall()
        except sqlite3.Error as e:
            tasks = [f"airflow.db not readable: {e}"]
        processes = "\n".join(self.session_processes(session))
        log = self.home / "dag-run.log"
        tail = log.read_text(errors="replace")[-6000:] if log.exists() else "(no dag-run.log)"
        return (f"task instances: {tasks}\nprocesses of its session (pid, parent, state, elapsed, command):\n{processes}\n"
                f"end of {log}:\n{tail}")


@pytest.fixture
def demo_run():
    """:class:`DemoRun`, for a test that starts a demo of its own (``demo_run.start``)."""
    return DemoRun


@pytest.fixture(scope="session")
def readme_demo(tmp_path_factory):
    """The main job as the README's first command runs it (200,000 sales at its defaults), shared
    by the tests of its summary and of its UI."""
    return DemoRun(tmp_path_factory.mktemp("readme") / "checkout")


def readme_first_command(repo: Path) -> str:
    """The first line of the README's first ``sh`` block: the command a new user types first."""
    text = (repo / "README.md").read_text()
    return re.search(r"^```sh\n(.*?)\n", text, re.M).group(1).strip()


def _demo_env() -> dict:
    """This environment without the caller's Airflow settings, importing this checkout's package."""
    repo = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo), os.environ.get("PYTHONPATH")) if p)
    return env


@pytest.fixture(scope="session")
def binlog_server(tmp_path_factory):
    """A private MariaDB server with the binary log on (:mod:`binlog_server`), for the session;
    ``binlog_server.url()`` -> a user with the replication grants, ``url(binlog_server.plain_user)``
    one without them. Fails (never skips) when mariadbd is missing."""
    from binlog_server import BinlogServer  # tests/ is on sys.path: pytest put it there for this file

    server = BinlogServer(tmp_path_factory.mktemp("binlog"))
    yield server
    server.stop()


@pytest.fixture
def binlog_backend(binlog_server):
    """A :class:`Backend` on the private MariaDB whose binary log is on (mark the test ``mysql``)."""
    db = Backend("mysql", binlog_server.url())
    yield db
    db.close()


@pytest.fixture
def constructions(monkeypatch):
    """The names of the algorithms constructed, in order (a front stage and the algorithm it wraps: two)."""
    made = []
    init = base.JoinAlgorithm.__init__

    def counted(self, *args, **kwargs):
        made.append(self.name)
        init(self, *args, **kwargs)

    monkeypatch.setattr(base.JoinAlgorithm, "__init__", counted)
    return made
