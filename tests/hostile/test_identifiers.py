"""SQL-injection-shaped identifiers and values (issue 13): hostile table, key, column and sink
names given to every place that builds SQL from configuration - the stores, the change log
(stage / install), the master generator, the table sink - are refused with one ConfigError
naming the field, before any statement reaches the database (SQLite's authorizer sees none);
a valid name reaches it only quoted. Hostile values reach MySQL only as bound parameters: R is
intact afterwards."""

from __future__ import annotations

import sqlite3

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.core.errors import ConfigError, StoreError
from airflow_provider_semijoin.core.stores import (
    DatabaseURL,
    install_changes,
    stage_changes,
    store_for,
)
from airflow_provider_semijoin.core.stores.sql import IDENTIFIER
from airflow_provider_semijoin.spark.sinks import open_sink
from airflow_provider_semijoin.job.spec import TargetSpec
from airflow_provider_semijoin.workloads import generate_master

from .strategies import INJECTION, ODD_TEXT
from .tally import record

FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.function_scoped_fixture])
NAMES = st.sampled_from(INJECTION + [t for t in ODD_TEXT if len(t) < 1000] + ["product", "nk", "sk", "sqlite_master",
                                                                             "a" * 64, "_x", "x__sj_changes"]) \
    | st.text(max_size=20) | st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,70}", fullmatch=True)
NAMES = NAMES.filter(lambda n: "\ud800" not in n)  # Arrow cannot name a column with a lone surrogate


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """A SQLite R whose connection logs every table/column access the statements it prepares make."""
    url = f"sqlite:///{tmp_path_factory.mktemp('ident') / 'm.db'}"
    generate_master(url, "product", 200, seed=0)
    connection = DatabaseURL.parse(url).connect()
    log: list = []
    connection.set_authorizer(lambda action, a1, a2, dbname, trigger: (log.append((action, a1, a2)), sqlite3.SQLITE_OK)[1])
    yield url, connection, log
    connection.close()


def names_reaching_sqlite(log: list) -> set:
    return {name for action, a1, a2 in log for name in (a1, a2) if name and action != sqlite3.SQLITE_FUNCTION}


def attempt(surface: str, log: list, names: list, call) -> None:
    log.clear()
    try:
        call()
    except (ConfigError, StoreError) as exc:
        message = str(exc)
        assert "\n" not in message and len(message) < 600, message[:300]
        record(surface, message)
        bad = [n for n in names if not (isinstance(n, str) and IDENTIFIER.match(n))]
        if bad:  # refused before any SQL: nothing with a bad name reached the database
            assert not (names_reaching_sqlite(log) & set(bad)), log
        return
    record(surface)
    for name in names:
        assert isinstance(name, str) and IDENTIFIER.match(name), f"{name!r} was accepted"


@FAST
@given(table=NAMES, key=NAMES, select=st.none() | st.lists(NAMES, min_size=1, max_size=3))
def test_hostile_names_for_a_store(db, table, key, select):
    _, connection, log = db
    attempt("identifiers: store", log, [table, key, *(select or [])], lambda: store_for(connection, table, key, select))


@FAST
@given(table=NAMES, key=NAMES, column=NAMES)
def test_hostile_names_for_the_change_log(db, table, key, column):
    url, connection, log = db
    changes = pa.table({"op": ["U"], key if key != "op" else "nk": [7], column if column not in ("op", key) else "name": ["x"]})
    attempt("identifiers: stage/install", log, [table, key], lambda: stage_changes(connection, table, key, changes))
    attempt("identifiers: stage/install", log, [table, key], lambda: install_changes(connection, table, key, changes))


@FAST
@given(table=NAMES, columns=st.lists(NAMES, min_size=1, max_size=3, unique=True))
def test_hostile_names_for_a_table_sink(tmp_path_factory, table, columns):
    url = f"sqlite:///{tmp_path_factory.getbasetemp() / 'sink.db'}"  # one file: tables of earlier examples stay
    columns = [c for c in columns if c.encode("utf-8", "surrogatepass").decode("utf-8", "replace") == c]  # Arrow's names
    rows = pa.table({"sj_id": ["a"], **{c: [1] for c in columns if c != "sj_id"}})
    log: list = []

    def write():
        sink = open_sink(TargetSpec(kind="table", url=url, table=table))
        sink.connection.set_authorizer(lambda action, a1, a2, d, t: (log.append((action, a1, a2)), sqlite3.SQLITE_OK)[1])
        try:
            sink.write(0, rows)
        finally:
            sink.close()

    attempt("identifiers: table sink", log, [table, *rows.column_names], write)


@pytest.mark.mysql
def test_injection_shaped_values_reach_mysql_as_parameters(mysql_backend):
    """String keys shaped like SQL injection, through every algorithm's probes and the change log,
    on MariaDB: nothing matches but the real keys, and R still holds its rows."""
    from airflow_provider_semijoin.core.joins import create
    from airflow_provider_semijoin.core.runner import run_join
    from airflow_provider_semijoin.workloads.master import master_table

    store = mysql_backend.make_master(master_table(300, key_type="str"), select=["sk"])
    q = mysql_backend.quote
    keys = INJECTION + ["P-000000001", "P-000000001' OR '1'='1", "P-000000003\\", "P-0000000%", "P-00000000_1"]
    stream = pa.table({"k": keys})
    for algorithm in ("inlj", "inlist", "hybridjoin", "cachejoin-pq", "ssij", "meshjoin"):
        run = run_join(create(algorithm, store, 2**20), stream, "k")
        assert run.stats["exactly_once"]["ok"]
        assert run.matched["k"].to_pylist() == ["P-000000001"], algorithm
    too_long = pa.table({"op": ["U"], "nk": ["x'); DROP TABLE t; --"], "sk": [1]})  # R's keys are VARCHAR(11)
    with pytest.raises(ConfigError, match=r"^changes: the database refused them for '.*' \(Data too long for column 'nk'"):
        stage_changes(mysql_backend.connection, store.table, "nk", too_long)  # MySQLdb.DataError
    staged = pa.table({"op": ["U", "D"], "nk": ["x'); DROP--", "P-03' OR 1"], "sk": [1, None]})
    stage_changes(mysql_backend.connection, store.table, "nk", staged)
    install_changes(mysql_backend.connection, store.table, "nk")
    assert mysql_backend.execute(f"SELECT COUNT(*) FROM {q(store.table)}")[0][0] == 301  # one upsert, no delete of a real key
    assert mysql_backend.execute(f"SELECT COUNT(*) FROM {q(store.table)} WHERE nk = %s", ("x'); DROP--",))[0][0] == 1
