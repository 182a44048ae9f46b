"""Change capture by triggers (:mod:`airflow_provider_semijoin.core.stores.capture`), on SQLite
and MySQL: plain SQL from another connection - INSERT, UPDATE (of hot keys, and of the key
itself), DELETE, multi-row transactions, REPLACE - becomes versions of R that a store reads whole,
at the newest version and at every older one (the before-images), and every algorithm of the
registry, warm from the batch before, joins the batch after a commit exactly as a plain hash join
of the new table does (its caches, page maps, queues and memory of missing keys kept true)."""

from __future__ import annotations

import contextlib
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.joins import ALGORITHMS, create
from airflow_provider_semijoin.core.runner import run_join
from airflow_provider_semijoin.core.stores import DatabaseURL, install_changes, open_store, store_for
from airflow_provider_semijoin.core.stores.binlog import BinlogCapture
from airflow_provider_semijoin.core.stores.binlog import BinlogFollower
from airflow_provider_semijoin.core.stores.capture import capture_enabled, disable_capture, enable_capture
from airflow_provider_semijoin.core.stores.sql import SQLITE

KEYS = list(range(10, 410, 4))  # 100 keys with gaps: room for inserts between, below and above


def master(keys=KEYS) -> pa.Table:
    return pa.table({"nk": pa.array(keys, pa.int64()), "v": pa.array([10 * k for k in keys], pa.int64())})


@contextlib.contextmanager
def writer(backend):
    """Another connection to R's database: the "anyone" who writes R with plain SQL."""
    connection = DatabaseURL.parse(backend.url).connect()
    try:
        yield connection
    finally:
        connection.close()


def commit(connection, *statements: str) -> None:
    """``statements`` in ONE transaction of ``connection``, committed."""
    cursor = connection.cursor()
    try:
        cursor.execute("BEGIN")  # sqlite3 connections here are in autocommit mode; MySQL's BEGIN is START TRANSACTION
        for sql in statements:
            cursor.execute(sql)
        cursor.execute("COMMIT")
    finally:
        cursor.close()


def table_now(backend, table: str) -> dict:
    q = backend.quote
    return dict(backend.execute(f"SELECT {q('nk')}, {q('v')} FROM {q(table)}"))


def read_all(store, keys) -> dict:
    """R as the store reads it inside one snapshot (at its ``reading_at`` version, if set)."""
    with store.snapshot():
        page = store.lookup_many(np.array(sorted(set(keys)), dtype=np.int64))
    return dict(zip(page.keys.tolist(), page.rows["v"].to_pylist()))


def plain_sql(backend, table: str) -> list[list[str]]:
    """Transactions another application commits: INSERT (inside R's range, below and above it),
    UPDATE of hot keys, DELETE, an UPDATE that moves a key, a multi-row transaction, REPLACE."""
    t, k = backend.quote(table), backend.quote("nk")
    return [
        [f"INSERT INTO {t} ({k}, v) VALUES (12, 120000), (2, 20000), (999, 9990000)"],
        [f"UPDATE {t} SET v = v + 1 WHERE {k} IN (10, 14, 18, 22)"],
        [f"DELETE FROM {t} WHERE {k} IN (26, 30, 2)"],
        [f"UPDATE {t} SET {k} = 1001 WHERE {k} = 34"],
        [f"UPDATE {t} SET v = -1 WHERE {k} = 38", f"DELETE FROM {t} WHERE {k} = 42", f"INSERT INTO {t} ({k}, v) VALUES (43, 430)",
         f"UPDATE {t} SET v = -2 WHERE {k} = 38"],
        [f"REPLACE INTO {t} ({k}, v) VALUES (46, 4646), (47, 4747)"],
    ]


def test_enable_creates_the_triggers_once_and_disable_drops_them(backend):
    store = backend.make_master(master())
    assert not capture_enabled(store) and not store.captures_writes()
    assert enable_capture(store) is True
    assert enable_capture(store) is False  # already there
    assert capture_enabled(store) and store.captures_writes()
    assert disable_capture(store) is True and not capture_enabled(store)
    assert disable_capture(store) is False


def test_plain_sql_becomes_versions_read_whole_now_and_at_every_older_version(backend):
    store = backend.make_master(master())
    enable_capture(store)
    every_key = KEYS + [2, 12, 43, 47, 999, 1001]
    seen = [(store.version(), table_now(backend, store.table))]
    with writer(backend) as other:
        for transaction in plain_sql(backend, store.table):
            commit(other, *transaction)
            seen.append((store.version(), table_now(backend, store.table)))
    versions = [v for v, _ in seen]
    assert versions == sorted(set(versions)), versions  # each transaction a newer version
    for version, content in seen:
        with store.reading_at(version):
            assert read_all(store, every_key) == content, version
    assert read_all(store, every_key) == seen[-1][1]


HISTORY = 500  # changes of one hot key before the version read at


def rows_examined(store, read) -> int:
    """What ``read()`` cost the database: the rows it read (MySQL's ``Handler_read_*`` and index
    condition checks of the store's session), or SQLite's virtual-machine steps in tens."""
    if store.dialect is SQLITE:
        steps = [0]
        store.connection.set_progress_handler(lambda: steps.__setitem__(0, steps[0] + 1), 10)
        try:
            read()
        finally:
            store.connection.set_progress_handler(None, 0)
        return steps[0]

    def index_reads() -> int:
        return sum(int(n) for _, n in store.bookkeeping_query(
            "SHOW SESSION STATUS WHERE Variable_name IN ('Handler_read_key', 'Handler_read_next', 'Handler_read_rnd_next', "
            "'Handler_icp_attempts')"))

    before = index_reads()
    read()
    return index_reads() - before


def test_a_read_at_an_older_version_costs_the_span_read_across_not_the_keys_history(backend):
    """A hot key changed all day has thousands of before-images; a read at a version a change
    old takes those of that span only. It took every one of them (to keep the one it needed), so
    the reads of hot keys grew with the table's history: 1.5 s against 0.08 s for a page of
    3,734 keys with 100,000 before-images on each of five keys, in the change bench's table."""
    store = backend.make_master(master())
    enable_capture(store)
    t, k, v = backend.quote(store.table), backend.quote("nk"), backend.quote("v")
    with writer(backend) as other:
        for i in range(HISTORY):  # hot key 10's day
            commit(other, f"UPDATE {t} SET {v} = {i} WHERE {k} = 10")
        commit(other, f"UPDATE {t} SET {v} = -1 WHERE {k} = 14")  # key 14's one change
        version = store.version()
        assert read_all(store, [10, 14]) == {10: HISTORY - 1, 14: -1}  # a running join has seen it all
        commit(other, f"UPDATE {t} SET {v} = -2 WHERE {k} IN (10, 14)")  # the span read across: one change of each
    with store.reading_at(version):
        hot = rows_examined(store, lambda: read_all(store, [10, 18]))  # (a key alone: its look-up is a constant)
        cold = rows_examined(store, lambda: read_all(store, [14, 18]))
        assert read_all(store, [10, 14]) == {10: HISTORY - 1, 14: -1}
    assert read_all(store, [10, 14]) == {10: -2, 14: -2}
    assert hot <= 2 * cold + 10, f"a read of the hot key cost {hot}, of a key changed once {cold}"


def test_a_reader_sees_a_multi_row_transaction_whole_or_not_at_all(backend):
    store = backend.make_master(master())
    enable_capture(store)
    before = read_all(store, KEYS)
    with writer(backend) as other:
        cursor = other.cursor()
        cursor.execute("BEGIN")
        t, k = backend.quote(store.table), backend.quote("nk")
        cursor.execute(f"UPDATE {t} SET v = 0 WHERE {k} < 100")
        assert read_all(store, KEYS) == before and store.version() == 0  # not committed: not seen
        cursor.execute("COMMIT")
        cursor.close()
    after = read_all(store, KEYS)
    assert after == {k: (0 if k < 100 else 10 * k) for k in KEYS}


def test_installs_through_the_provider_leave_the_log_to_the_triggers(backend):
    store = backend.make_master(master())
    enable_capture(store)
    installed = install_changes(backend.url, store.table, "nk", pa.table({
        "op": ["U", "D", "U"], "nk": pa.array([10, 14, 5000], pa.int64()), "v": pa.array([1, 0, 2], pa.int64())}))
    assert installed.version == store.version() and installed.version >= 3
    with store.reading_at(0):
        assert read_all(store, [10, 14, 5000]) == {10: 100, 14: 140}
    assert read_all(store, [10, 14, 5000]) == {10: 1, 5000: 2}


@pytest.mark.mysql
def test_a_user_who_may_not_create_triggers_is_told_the_privilege(mysql_backend, mysql_url):
    import MySQLdb

    store = mysql_backend.make_master(master())
    url = DatabaseURL.parse(mysql_url)
    root = MySQLdb.connect(unix_socket="/run/mysqld/mysqld.sock", user="root", autocommit=True)  # as .ci/setup makes users
    cursor = root.cursor()
    cursor.execute("CREATE OR REPLACE USER 'sj_notrigger'@'127.0.0.1' IDENTIFIED BY 'pw'")
    try:
        cursor.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, INDEX ON `{url.database}`.* TO 'sj_notrigger'@'127.0.0.1'")
        limited = DatabaseURL.parse(f"mysql://sj_notrigger:pw@{url.host}:{url.port}/{url.database}").connect()
        try:
            with pytest.raises(ConfigError, match=r"^changes: the database refused to create triggers on '\w+' .*needs the TRIGGER privilege"):
                enable_capture(store_for(limited, store.table, "nk"))
            assert not capture_enabled(store)
        finally:
            limited.close()
    finally:
        cursor.execute("DROP USER IF EXISTS 'sj_notrigger'@'127.0.0.1'")
        root.close()


# ------------------------------------------------------------------ every algorithm, kept true


def params_for(name: str) -> dict:
    params = ALGORITHMS[name].params
    chosen = {"page_rows": 4} if "page_rows" in params else {}
    if "partition_pages" in params:
        chosen["partition_pages"] = 2
    return chosen


def stream_for(keys) -> pa.Table:
    """Hot keys many times (so caches hold them), every key R ever has once, and misses."""
    hot = [10, 14, 18, 22, 26, 34, 38] * 20
    wanted = hot + list(keys) + [2, 12, 43, 47, 999, 1001, 11, 5000]
    return pa.table({"sk": pa.array(wanted, pa.int64()), "tid": pa.array(range(len(wanted)), pa.int64())})


def oracle(stream: pa.Table, table: dict) -> tuple[Counter, set]:
    """What a plain hash join of ``stream`` with R (``table``: key -> v) gives: the (tid, v)
    pairs matched, the tids unmatched."""
    matched = Counter((t, table[k]) for k, t in zip(stream["sk"].to_pylist(), stream["tid"].to_pylist()) if k in table)
    unmatched = {t for k, t in zip(stream["sk"].to_pylist(), stream["tid"].to_pylist()) if k not in table}
    return matched, unmatched


def joined(algorithm, stream: pa.Table) -> tuple[Counter, set]:
    run = run_join(algorithm, stream, "sk")
    assert run.stats["exactly_once"]["ok"], run.stats["exactly_once"]
    return (Counter(zip(run.matched["tid"].to_pylist(), run.matched["v"].to_pylist())),
            set(run.unmatched["tid"].to_pylist()))


def joins_follow_plain_sql(backend, store, name: str) -> None:
    """``name`` on ``store``, warm from two batches, joins the batch after each transaction of
    :func:`plain_sql` as a hash join of R after it."""
    algorithm = create(name, store, 1 << 20, params_for(name))
    stream = stream_for(KEYS)
    for _ in range(2):  # warm: caches learn the hot keys, page maps are built
        assert joined(algorithm, stream) == oracle(stream, table_now(backend, store.table))
    with writer(backend) as other:
        for transaction in plain_sql(backend, store.table):
            commit(other, *transaction)
            assert joined(algorithm, stream) == oracle(stream, table_now(backend, store.table)), transaction


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_every_algorithm_warm_from_a_batch_before_joins_the_batch_after_plain_sql_as_the_new_table(backend, name):
    store = backend.make_master(master(), select=["v"])
    enable_capture(store)
    joins_follow_plain_sql(backend, store, name)


@pytest.mark.mysql
@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_every_algorithm_follows_plain_sql_captured_from_the_binary_log(binlog_backend, name):
    """The same, R's changes read from the binary log by a follower thread (the capture of a
    running job) instead of triggers: each snapshot waits for the capture to reach its own
    binlog position and reads the change log on a second session."""
    table = binlog_backend.make_master(master()).table
    BinlogCapture(binlog_backend.url, table, "nk").enable()
    follower = BinlogFollower(binlog_backend.url, table, "nk").start()
    try:
        with open_store(binlog_backend.url, table, "nk", ["v"]) as store:
            assert store.captures_writes() and not capture_enabled(store)
            joins_follow_plain_sql(binlog_backend, store, name)
    finally:
        follower.stop()
    assert follower.error is None


# ------------------------------------------------------------------ any sequence of transactions

_op = st.tuples(st.sampled_from(["insert", "update", "delete", "move", "replace"]), st.integers(0, 120), st.integers(-5, 5))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(transactions=st.lists(st.lists(_op, min_size=1, max_size=4), min_size=1, max_size=5))
def test_any_sequence_of_transactions_reads_back_at_each_version(backend, transactions):
    """hypothesis: transactions of random inserts, updates, deletes, key moves and replaces;
    after all of them, R at each version a transaction left equals R as it was then."""
    store = backend.make_master(master(KEYS[:30]))
    enable_capture(store)
    t, k = backend.quote(store.table), backend.quote("nk")
    ignore = "IGNORE" if backend.name == "mysql" else "OR IGNORE"
    seen = [(store.version(), table_now(backend, store.table))]
    touched = set(KEYS[:30])
    with writer(backend) as other:
        for transaction in transactions:
            statements = []
            for op, key, delta in transaction:
                touched.add(key)
                statements.append({
                    "insert": f"INSERT {ignore} INTO {t} ({k}, v) VALUES ({key}, {delta})",
                    "update": f"UPDATE {t} SET v = v + {delta} WHERE {k} BETWEEN {key} AND {key + 8}",
                    "delete": f"DELETE FROM {t} WHERE {k} = {key}",
                    "move": f"UPDATE {ignore} {t} SET {k} = {key + 1000} WHERE {k} = {key}",
                    "replace": f"REPLACE INTO {t} ({k}, v) VALUES ({key}, {delta})",
                }[op])
                touched.add(key + 1000)
            commit(other, *statements)
            seen.append((store.version(), table_now(backend, store.table)))
    for version, content in seen:
        with store.reading_at(version):
            assert read_all(store, touched) == content


@pytest.mark.mysql
def test_a_kept_page_map_follows_plain_sql_from_the_change_log_without_a_full_scan(mysql_backend, monkeypatch):
    """A page map kept beside R (at its version then) is brought up to date from the captured
    change log when R is opened again: the pages holding changed keys are counted again, keys
    inserted beyond R's ends are covered, and R's index is not read whole again."""
    store = mysql_backend.make_master(master())
    enable_capture(store)
    store.page_map(8)  # built and kept
    assert store.kept_page_rows() == [8]
    with writer(mysql_backend) as other:
        t, k = mysql_backend.quote(store.table), mysql_backend.quote("nk")
        commit(other, f"INSERT INTO {t} ({k}, v) VALUES (1, 1), (11, 11), (5000, 5)", f"DELETE FROM {t} WHERE {k} IN (14, 18)")
    reopened = store_for(mysql_backend.connection, store.table, "nk")

    def no_full_scan(page_rows):
        raise AssertionError("the kept map was built again from R's index")

    monkeypatch.setattr(reopened, "_build_page_map", no_full_scan)
    page_map = reopened.page_map(8)
    now = sorted(table_now(mysql_backend, store.table))
    pages = page_map.page_of(np.array(now, dtype=np.int64))
    assert (pages >= 0).all()  # every key of R, 1 and 5000 included, is on a page
    assert np.bincount(pages, minlength=page_map.n_pages).tolist() == page_map.sizes.tolist()
    assert page_map.n_rows == len(now)


@pytest.mark.mysql
def test_the_command_enables_each_way_and_says_what_a_server_lacks(binlog_backend, mysql_backend, capsys):
    from airflow_provider_semijoin.cli import main

    table = binlog_backend.make_master(master()).table
    argv = ["changes", "enable", "--master", binlog_backend.url, "--table", table, "--key", "nk"]
    assert main([*argv, "--via", "binlog"]) == 0
    assert f"changes to {table} by any writer are captured from the binary log from " in capsys.readouterr().out
    assert main(["changes", "status", *argv[2:]]) == 0
    assert capsys.readouterr().out.startswith(f"{table}: changes captured from the binary log, version 0")
    assert main(["changes", "disable", *argv[2:]]) == 0
    assert main(["changes", "status", *argv[2:]]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"{table}: changes NOT captured, version 0" in out and "history  no versions (" in out[-3]  # (the log stays)
    shared = mysql_backend.make_master(master()).table  # the shared test server: log_bin OFF
    assert main(["changes", "enable", "--master", mysql_backend.url, "--table", shared, "--key", "nk", "--via", "binlog"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("semijoin: error: ") and "log_bin" in error and "semijoin:semijoin@" not in error
