"""The reconnecting connection, one fault at a time, on the private MariaDB: a killed session
inside and outside R's snapshot, inside a write transaction, and the retry bound's settings."""

from __future__ import annotations

import uuid

import numpy as np
import pyarrow as pa
import pytest
from harness import SELECT, Versions
from harness import mariadb, seed  # noqa: F401 (fixtures)

from airflow_provider_semijoin.cli import main
from airflow_provider_semijoin.core.joins import JoinOutput, StreamBuffer, create
from airflow_provider_semijoin.core.errors import ConfigError, SpecError
from airflow_provider_semijoin.core.stores import DatabaseURL, SnapshotLost, TransactionLost, open_store, write_table
from airflow_provider_semijoin.core.stores.reconnect import RetryPolicy
from airflow_provider_semijoin.job.spec import JobSpec
from airflow_provider_semijoin.workloads.master import master_table


@pytest.fixture
def master(mariadb):
    return Versions(mariadb, 2_000, f"r{uuid.uuid4().hex[:10]}")


def kill(server, connection) -> None:
    with server.root() as root:
        root.cursor().execute(f"KILL CONNECTION {connection.wrapped_connection.thread_id()}")


def test_a_killed_session_is_reopened_and_the_query_answers(mariadb, master):
    with open_store(mariadb.url, master.table, "nk", SELECT) as store:
        page_map = store.page_map(100)
        before = store.load_pages(page_map, 3)
        kill(mariadb, store.connection)
        again = store.load_pages(page_map, 3)
        assert again.rows.equals(before.rows) and np.array_equal(again.keys, before.keys)
        assert store.counters.reconnects == 1 and store.counters.reconnect_wait_s > 0


def test_the_snapshot_is_entered_again_when_r_did_not_move(mariadb, master):
    with open_store(mariadb.url, master.table, "nk", SELECT) as store:
        page_map = store.page_map(100)
        with store.snapshot():
            first = store.load_pages(page_map, 0)
            kill(mariadb, store.connection)
            assert store.load_pages(page_map, 0).rows.equals(first.rows)
            in_transaction = store.bookkeeping_query("SELECT @@in_transaction")[0][0]
        assert in_transaction == 1  # the read went on inside a snapshot, not in autocommit
        assert store.counters.reconnects == 1


def test_a_snapshot_lost_while_r_moved_is_reported_not_mixed(mariadb, master):
    with open_store(mariadb.url, master.table, "nk", SELECT) as store:
        page_map = store.page_map(100)
        with pytest.raises(SnapshotLost, match=r"^the session to the database was lost inside a snapshot of "
                                               rf"'{master.table}' at version 0, and R is at version 1 now$"):
            with store.snapshot():
                store.load_pages(page_map, 0)
                master.install_one(np.random.default_rng(0))
                kill(mariadb, store.connection)
                store.load_pages(page_map, 0)
        with store.snapshot() as changed:  # the next snapshot sees version 1 and its changed keys
            assert store.seen_version == 1 and len(changed) == 5


def test_a_write_transaction_lost_is_raised_for_the_writer_to_redo(mariadb):
    connection = DatabaseURL.parse(mariadb.url).connect()
    table = f"w{uuid.uuid4().hex[:10]}"
    try:
        cursor = connection.cursor()
        cursor.execute(f"CREATE TABLE {table} (a INT)")
        cursor.execute("START TRANSACTION")
        cursor.execute(f"INSERT INTO {table} VALUES (1)")
        kill(mariadb, connection)
        with pytest.raises(TransactionLost, match=rf"^the session to {mariadb.server} was lost inside a write "
                                                  r"transaction \(.*\); its statements were rolled back$"):
            cursor.execute(f"INSERT INTO {table} VALUES (2)")
        cursor.execute(f"SELECT COUNT(*) FROM {table}")  # a new session, in autocommit again
        assert cursor.fetchall()[0][0] == 0
    finally:
        connection.cursor().execute(f"DROP TABLE IF EXISTS {table}")
        connection.close()


def test_a_killed_read_ahead_session_is_reopened_and_the_join_stays_exact(mariadb):
    """HYBRIDJOIN reads ahead on two other sessions of the store's (:mod:`...stores.reader`), in
    turn; killing the first between steps costs one reconnect, counted on the store, and no tuple. A key R
    gained above its largest meanwhile (as a server restarted with R changed) is found: the
    store widens its page maps, on its own thread, when it takes the reconnected session's read.
    R has no change log here (with one, R is read in snapshots and never ahead)."""
    table, initial = f"p{uuid.uuid4().hex[:10]}", master_table(2_000)
    with mariadb.root() as root:
        root.select_db(mariadb.DATABASE)
        write_table(root, table, initial, primary_key="nk")
    in_r = set(initial.column("nk").to_pylist())
    new_key = 10 * max(in_r)
    rng = np.random.default_rng(5)
    keys = rng.integers(-50, 2_050, 4_000).tolist()
    with open_store(mariadb.url, table, "nk", SELECT) as store:
        algorithm = create("hybridjoin", store, 1 << 20, {"page_rows": 50})
        buffer = StreamBuffer(store.key_type)
        buffer.append(np.arange(len(keys)), np.array(keys))
        outputs, steps = [], 0
        while not (buffer.exhausted and algorithm.pending == 0):
            outputs.append(algorithm.step(buffer))
            steps += 1
            if steps == 5:  # between two reads of that session (its connection is not touched while one runs)
                store.wait_for_reads()
                kill(mariadb, store.reader().sibling.connection)
                with mariadb.root() as root:
                    columns = ", ".join(str(new_key) if c == "nk" else f"`{c}`" for c in initial.column_names)
                    root.cursor().execute(f"INSERT INTO {mariadb.DATABASE}.{table} SELECT {columns} "
                                          f"FROM {mariadb.DATABASE}.{table} ORDER BY nk LIMIT 1")
            if steps == 10:  # its next read (turn 6 of two sessions) went out in step 7, taken in step 9
                buffer.append(np.array([len(keys)]), np.array([new_key]))
                keys.append(new_key)
                buffer.close()
        out = JoinOutput.concat(outputs, algorithm.schema)
        assert store.counters.reconnects == 1 and store.reader().sibling.counters.reconnects == 1
    left = np.concatenate([np.unique(out.matched_ids), out.unmatched_ids])
    assert np.array_equal(np.sort(left), np.arange(len(keys)))  # exactly once
    expected = [i for i, k in enumerate(keys) if k in in_r or k == new_key]
    assert np.array_equal(np.unique(out.matched_ids), expected) and expected[-1] == len(keys) - 1


@pytest.mark.parametrize("bad", [0, -1, "soon", float("inf"), True])
def test_the_retry_bound_must_be_a_positive_number(bad):
    with pytest.raises(ConfigError, match=r"^db_retry_max_s: .* is not a positive number of seconds"):
        RetryPolicy(bad)


def test_the_cli_and_the_job_spec_check_the_bound_before_any_work(tmp_path, capsys):
    stream = tmp_path / "s.csv"
    stream.write_text("nk\n1\n")
    status = main(["join", "--algorithm", "hybridjoin", "--master", "mysql://u:secret@127.0.0.1:1/db", "--table", "t",
                   "--key", "nk", "--stream", str(stream), "--stream-key", "nk", "--out", str(tmp_path / "o.csv"),
                   "--db-retry-max-s", "-3"])
    assert status == 2
    assert capsys.readouterr().err == ("semijoin: error: --db-retry-max-s: '-3' is not a positive number of seconds "
                                       "(how long to retry a lost database)\n")
    with pytest.raises(SpecError, match=r"^db_retry_max_s: 0 is not a positive number$"):
        JobSpec.from_dict({"source": {"kind": "generator", "total_rows": 10}, "checkpoint": str(tmp_path),
                           "steps": [{"column": "nk", "master_static": True, "master": {"url": "sqlite:///m.db", "table": "t", "key": "nk"}}],
                           "sinks": {"matched": {"path": "m"}, "dead_letter": {"path": "d"}}, "db_retry_max_s": 0})


def test_installed_rows_reach_arrow_the_same_after_a_reconnect(mariadb, master):
    """Raw page loads switch the driver's converters off; a new session gets the same ones."""
    with open_store(mariadb.url, master.table, "nk", SELECT) as store:
        converter = store.connection.converter
        kill(mariadb, store.connection)
        store.lookup(np.int64(1))
        assert store.connection.converter is converter
        assert store.lookup(np.int64(1)).rows.schema == pa.schema([("name", pa.string()), ("category", pa.string())])


def test_backoff_doubles_up_to_its_cap_and_stops_at_the_bound():
    """The schedule of the backoff, on a fake clock: a refused connect is produced by a connect
    function raising the driver's own error (a real refusal's timing cannot be observed)."""
    import MySQLdb

    now = [0.0]
    slept = []

    def sleep(s):
        slept.append(round(s, 3))
        now[0] += s

    calls = []

    def connect():
        calls.append(now[0])
        if len(calls) == 1:  # the first session opens; every later attempt is refused
            return object()  # a session the test never queries
        raise MySQLdb.OperationalError(2003, "Can't connect to server on '127.0.0.1' (111)")

    from airflow_provider_semijoin.core.stores.reconnect import ReconnectingConnection, StoreUnavailable

    policy = RetryPolicy(10.0, first_s=0.5, factor=2.0, cap_s=2.0, clock=lambda: now[0], sleep=sleep)
    connection = ReconnectingConnection(connect, "db.example:3306/r", policy)
    with pytest.raises(StoreUnavailable, match=r"^the database server db\.example:3306/r stayed unreachable for 10\.0 s "
                                               r"\(8 reconnect attempts, last error: Can't connect"):
        connection._reconnect(MySQLdb.OperationalError(2013, "Lost connection"), [])
    assert slept == [0.5, 1.0, 2.0, 2.0, 2.0, 2.0, 0.5]  # at once, then doubling, capped, cut at the bound
