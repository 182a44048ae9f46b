"""Shared fixtures: the MySQL test URL and a ``backend`` that writes master tables R.

``backend`` is parametrised over SQLite (a file in ``tmp_path``) and MySQL/MariaDB (the test
server of ``.ci/setup``); the MySQL cases carry ``pytest.mark.mysql`` and FAIL, never skip,
when the server cannot be reached. Each test gets one connection; every table it writes has a
name of its own and is dropped at teardown.
"""

from __future__ import annotations

import os
import uuid

import pyarrow as pa
import pytest

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.stores import DatabaseURL, MasterStore, store_for, write_table
from airflow_provider_semijoin.core.stores.sql import side_tables

DEFAULT_MYSQL_URL = "mysql://semijoin:semijoin@127.0.0.1:3306/semijoin_test"


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
        finally:
            self.connection.close()


def with_side_tables(table: str) -> tuple[str, ...]:
    """``table`` and the names of its change tables (if it can have them)."""
    try:
        return (table, *side_tables(table))
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
