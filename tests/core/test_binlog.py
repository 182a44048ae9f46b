"""Change capture from the binary log (core/stores/binlog.py) on a real MariaDB server with its
binary log on (the ``binlog_server`` fixture, tests/binlog_server.py), and the one-sentence
refusal of a server without it (the shared test server, log_bin=OFF)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_semijoin.core.errors import ConfigError, StoreError
from airflow_provider_semijoin.core.stores import DatabaseURL, install_changes, store_for
from airflow_provider_semijoin.core.stores.binlog import (
    BinlogCapture,
    Position,
    _ddl_on,
    binlog_problems,
    check_binlog,
    snapshot_position,
    wait_captured,
)

pytestmark = pytest.mark.mysql
REPO = Path(__file__).resolve().parents[2]


class Db:
    """A connection to the private server's database and the tables a test made there."""

    def __init__(self, url: str):
        self.url = url
        self.connection = DatabaseURL.parse(url).connect()
        self.tables: list[str] = []

    def sql(self, *statements: str, params=()) -> list[tuple]:
        cursor = self.connection.cursor()
        try:
            for statement in statements:
                cursor.execute(statement, tuple(params))
            return list(cursor.fetchall() or [])
        finally:
            cursor.close()

    def transaction(self, *statements: str) -> None:
        self.sql("START TRANSACTION", *statements, "COMMIT")

    def table(self, columns: str = "nk BIGINT PRIMARY KEY, v VARCHAR(20), n INT UNSIGNED", rows: str = "") -> str:
        name = f"b{uuid.uuid4().hex[:10]}"
        self.tables.append(name)
        self.sql(f"CREATE TABLE {name} ({columns}) ENGINE=InnoDB")
        if rows:
            self.sql(f"INSERT INTO {name} VALUES {rows}")
        return name

    def log(self, table: str) -> list[tuple]:
        return [(v, k, op) for v, k, op in self.sql(f"SELECT version, nk, op FROM {table}__sj_changes ORDER BY version, nk")]

    def before(self, table: str) -> list[tuple]:
        return self.sql(f"SELECT * FROM {table}__sj_before ORDER BY version, nk")

    def close(self) -> None:
        for table in self.tables:
            for suffix in ("", "__sj_changes", "__sj_pending", "__sj_before", "__sj_binlog"):
                self.sql(f"DROP TABLE IF EXISTS {table}{suffix}")
        self.connection.close()


@pytest.fixture
def db(binlog_server):
    d = Db(binlog_server.url())
    yield d
    d.close()


@pytest.fixture
def capture(db):
    made = []

    def make(table: str, key: str = "nk", **kwargs) -> BinlogCapture:
        c = BinlogCapture(db.url, table, key, **kwargs)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def r_at(url: str, table: str, version: int) -> list[tuple]:
    """R at ``version`` as the join reads it: a snapshot through the before-images."""
    store = store_for(DatabaseURL.parse(url).connect(), table, "nk")
    try:
        with store.reading_at(version), store.snapshot():
            page = store.load_range(-(2**62), 10_000)
        return sorted(zip(page.keys.tolist(), *(page.rows[c].to_pylist() for c in page.rows.column_names)))
    finally:
        store.connection.close()


# ------------------------------------------------------------------------------- the server's side


def test_the_private_server_says_what_is_missing_without_mariadbd(monkeypatch, tmp_path):
    import binlog_server

    monkeypatch.setattr(binlog_server, "MARIADBD", str(tmp_path / "no-mariadbd"))
    with pytest.raises(RuntimeError, match=r"^binlog test server: \S+/no-mariadbd and mysql_install_db are needed to "
                       r"start a MariaDB server with its binary log on \(install the Debian package mariadb-server"):
        binlog_server.BinlogServer(tmp_path)


def test_shared_server_without_binlog_is_refused_in_one_sentence(mysql_url):
    with pytest.raises(ConfigError, match=r"^binlog capture: the server 127\.0\.0\.1:3306/\S+ needs log_bin=ON \(it is OFF\), "
                       r"binlog_format=ROW \(it is MIXED\) and the grants REPLICATION SLAVE and REPLICATION CLIENT ON "
                       r"\*\.\* for its user for semijoin to read the changes of R from its binary log \(server settings log_bin, "
                       r"binlog_format=ROW, binlog_row_image=FULL; GRANT REPLICATION SLAVE, "
                       r"REPLICATION CLIENT ON \*\.\* TO the user\)$") as e:
        check_binlog(None, mysql_url)
    assert "semijoin:" not in str(e.value) and "@" not in str(e.value)  # no credentials


def test_user_without_replication_grants_is_refused(binlog_server):
    url = binlog_server.url(binlog_server.plain_user)
    assert binlog_problems(None, url) == ["the grants REPLICATION SLAVE and REPLICATION CLIENT ON *.* for its user"]
    with pytest.raises(ConfigError, match=r"needs the grants REPLICATION SLAVE and REPLICATION CLIENT ON \*\.\* for its user for"):
        check_binlog(None, url)
    assert binlog_problems(None, binlog_server.url()) == []


def test_one_missing_grant_is_named(binlog_server):
    binlog_server.admin(f"CREATE USER 'sjhalf'@'127.0.0.1' IDENTIFIED BY '{binlog_server.password}'",
                        "GRANT REPLICATION SLAVE ON *.* TO 'sjhalf'@'127.0.0.1'",
                        f"GRANT ALL PRIVILEGES ON {binlog_server.database}.* TO 'sjhalf'@'127.0.0.1'")
    try:
        assert binlog_problems(None, binlog_server.url("sjhalf")) == ["the grant REPLICATION CLIENT ON *.* for its user"]
    finally:
        binlog_server.admin("DROP USER 'sjhalf'@'127.0.0.1'")


def test_non_unique_key_is_refused_with_the_reason_and_the_way(db, capture):
    table = db.table("id BIGINT PRIMARY KEY, nk BIGINT, v VARCHAR(20), KEY (nk)", "(1, 5, 'a'), (2, 5, 'b')")
    with pytest.raises(ConfigError, match=r"needs a unique index on 'nk' alone \(R '\w+' has none: the binary log's "
                       r"before-image of one row is not the whole before-image of a key with several rows, so capture "
                       r"this table with triggers\) for semijoin"):
        capture(table).enable()
    assert not db.sql(f"SHOW TABLES LIKE '{table}__sj_binlog'")


def test_foreign_key_actions_on_r_are_refused_they_are_not_in_the_binary_log(db, capture):
    parent = db.table("id BIGINT PRIMARY KEY")
    r = db.table(f"nk BIGINT PRIMARY KEY, pid BIGINT, CONSTRAINT fk_{parent} FOREIGN KEY (pid) REFERENCES {parent} (id) "
                 "ON DELETE CASCADE")
    db.tables.reverse()  # R is dropped before its parent
    with pytest.raises(ConfigError, match=rf"needs no foreign key of R with an ON DELETE or ON UPDATE action \(R '{r}' has "
                       rf"'fk_{parent}': the server does not log the rows such an action changes\) for semijoin"):
        capture(r).enable()
    plain = db.table(f"nk BIGINT PRIMARY KEY, pid BIGINT, FOREIGN KEY (pid) REFERENCES {parent} (id)")
    db.tables.insert(0, db.tables.pop())
    assert binlog_problems(db.connection, db.url, plain, "nk") == []  # RESTRICT: R's rows change only by statements


TYPED = ("nk BIGINT PRIMARY KEY, d DATETIME(3), dec_ DECIMAL(10, 2), js JSON, tm TIME, yr YEAR, bt BIT(8), "
         "ub BIGINT UNSIGNED, en ENUM('x', 'y'), st SET('p', 'q'), vb VARBINARY(10), bl BLOB, "
         "l1 VARCHAR(10) CHARACTER SET latin1, tx TEXT")
TYPED_ROW = ("(1, '2024-01-02 03:04:05.678', 12.34, '{\"a\": 1}', '10:11:12', 2024, b'101', 18446744073709551615, "
             "'y', 'p,q', x'00ff', x'00ff10', 'é', 'héllo')")


def test_columns_read_only_with_metadata_need_binlog_row_metadata_full(db, capture, binlog_server):
    r = db.table(TYPED, TYPED_ROW)
    with pytest.raises(ConfigError, match=rf"needs binlog_row_metadata=FULL \(it is NO_LOG; without it the binary log has "
                       rf"no charset or value names for 'en', 'st', 'vb', 'bl', 'l1' of R '{r}'\) for semijoin"):
        capture(r).enable()
    binlog_server.admin("SET GLOBAL binlog_row_metadata = FULL")
    try:
        c = capture(r)
        c.enable()
        original = db.sql(f"SELECT * FROM {r}")
        db.sql(f"UPDATE {r} SET nk = 2 WHERE nk = 1")  # every value's before-image goes through the binary log
        assert c.poll(5.0) == 1
        assert db.sql(f"SELECT * FROM {r}__sj_before")[0][1:] == original[0]
    finally:
        binlog_server.admin("SET GLOBAL binlog_row_metadata = NO_LOG")


# ------------------------------------------------------------------------------- capture


def test_each_transaction_of_r_is_one_version_with_keys_and_first_before_images(db, capture):
    r = db.table(rows="(1, 'a', 1), (2, 'b', 4000000000), (3, 'c', 3)")
    other = db.table()
    c = capture(r)
    start = c.enable()
    assert c.enable() == start  # idempotent
    states = [r_at(db.url, r, 0)]
    db.sql(f"UPDATE {r} SET v = 'a2' WHERE nk = 1")  # 1
    db.transaction(f"UPDATE {r} SET nk = 20 WHERE nk = 2", f"INSERT INTO {r} VALUES (4, 'd', 4)",  # 2: a key change,
                   f"UPDATE {r} SET v = 'd2' WHERE nk = 4", f"UPDATE {r} SET v = 'c2' WHERE nk = 3",  # an insert updated,
                   f"UPDATE {r} SET v = 'c3' WHERE nk = 3", f"INSERT INTO {other} VALUES (9, 'z', 9)")  # 3 twice, another table
    db.sql(f"INSERT INTO {other} VALUES (10, 'y', 1)")  # not R: no version
    db.sql(f"DELETE FROM {r} WHERE nk IN (1, 4)")  # 3: two rows, one statement
    assert c.poll(5.0) == 3
    assert db.log(r) == [(1, 1, "U"), (2, 2, "D"), (2, 3, "U"), (2, 4, "U"), (2, 20, "U"), (3, 1, "D"), (3, 4, "D")]
    assert db.before(r) == [(1, 1, "a", 1), (2, 2, "b", 4000000000), (2, 3, "c", 3), (3, 1, "a2", 1), (3, 4, "d2", 4)]
    recorded = db.sql(f"SELECT version, log_file, log_pos, committed_at, captured_at FROM {r}__sj_binlog ORDER BY version")
    assert [v for v, *_ in recorded] == [0, 1, 2, 3]
    assert [Position(f, p) for _, f, p, *_ in recorded] == sorted(Position(f, p) for _, f, p, *_ in recorded)
    assert all(abs(captured - committed) < 5 for *_, committed, captured in recorded[1:])
    store = store_for(DatabaseURL.parse(db.url).connect(), r, "nk")
    try:  # what the asset events carry as a version's commit time (none for the version capture began at)
        assert [store.committed_at(v) for v in range(4)] == [None, *(committed for *_, committed, _ in recorded[1:])]
    finally:
        store.close()
    assert c.poll(0.05) == 0
    assert r_at(db.url, r, 3) == sorted(db.sql(f"SELECT * FROM {r}")) == [(3, "c3", 3), (20, "b", 4000000000)]
    assert r_at(db.url, r, 0) == states[0]  # R before everything, through the before-images
    assert r_at(db.url, r, 1) == [(1, "a2", 1), (2, "b", 4000000000), (3, "c", 3)]
    assert r_at(db.url, r, 2) == [(1, "a2", 1), (3, "c3", 3), (4, "d2", 4), (20, "b", 4000000000)]


def test_replace_is_a_change_of_the_key_with_its_before_image(db, capture):
    r = db.table("nk BIGINT PRIMARY KEY, v VARCHAR(20), u VARCHAR(20), UNIQUE KEY (u)", "(1, 'a', 'x'), (2, 'b', 'y')")
    c = capture(r)
    c.enable()
    db.sql(f"REPLACE INTO {r} VALUES (1, 'a2', 'x')")  # an update or a delete and an insert, as the server logs it
    db.sql(f"REPLACE INTO {r} VALUES (3, 'c', 'y')")  # replaces key 2 through the other unique key
    db.sql(f"REPLACE INTO {r} VALUES (5, 'e', 'e')")  # a new key: no before-image
    assert c.poll(5.0) == 3
    assert db.log(r) == [(1, 1, "U"), (2, 2, "D"), (2, 3, "U"), (3, 5, "U")]
    assert db.before(r) == [(1, 1, "a", "x"), (2, 2, "b", "y")]


def test_keys_a_collation_calls_equal_are_one_changed_key(db, capture):
    r = db.table("nk VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci PRIMARY KEY, v INT", "('abc', 1), ('x', 2)")
    c = capture(r)
    c.enable()
    db.sql(f"UPDATE {r} SET nk = 'ABC ' WHERE nk = 'abc'")  # the same key in this collation
    db.transaction(f"DELETE FROM {r} WHERE nk = 'x'", f"INSERT INTO {r} VALUES ('X', 3)")
    assert c.poll(5.0) == 2
    assert [(v, op) for v, _, op in db.log(r)] == [(1, "U"), (2, "U")]  # one key each
    assert db.sql(f"SELECT version, nk, v FROM {r}__sj_before ORDER BY version") == [(1, "abc", 1), (2, "x", 2)]
    store = store_for(db.connection, r, "nk")
    assert store.changes_since(0)[1].tolist() == store.load_range("", 10).keys.tolist()  # R's keys, 'ABC ' and 'X'


def test_a_restarted_capture_resumes_where_the_last_one_wrote(db, capture):
    r = db.table(rows="(1, 'a', 1)")
    first = capture(r)
    first.enable()
    db.sql(f"UPDATE {r} SET v = 'b' WHERE nk = 1")
    assert first.poll(5.0) == 1
    first.close()
    db.sql(f"UPDATE {r} SET v = 'c' WHERE nk = 1")
    db.sql(f"INSERT INTO {r} VALUES (2, 'd', 2)")
    second = capture(r)
    assert second.enable() == Position(*db.sql(f"SELECT log_file, log_pos FROM {r}__sj_binlog WHERE version = 1")[0])
    assert second.poll(5.0) == 2
    assert db.log(r) == [(1, 1, "U"), (2, 1, "U"), (3, 2, "U")]
    assert [row[:3] for row in db.before(r)] == [(1, 1, "a"), (2, 1, "b")]


def test_the_capture_follows_the_binary_log_into_its_next_file(db, capture, binlog_server):
    r = db.table(rows="(1, 'a', 1)")
    c = capture(r)
    c.enable()
    db.sql(f"UPDATE {r} SET v = 'b' WHERE nk = 1")
    binlog_server.admin("FLUSH BINARY LOGS")
    db.sql(f"UPDATE {r} SET v = 'c' WHERE nk = 1")
    assert c.poll(5.0) == 2
    files = [f for (f,) in db.sql(f"SELECT log_file FROM {r}__sj_binlog ORDER BY version")]
    assert files[0] == files[1] < files[2]
    db.sql(f"INSERT INTO {db.table()} VALUES (1, 'x', 1)")  # another table only: R is known unchanged past it
    c.poll(1.0)
    (log_pos, read_pos), = db.sql(f"SELECT log_pos, read_pos FROM {r}__sj_binlog WHERE version = 2")
    assert read_pos > log_pos
    c.close()
    binlog_server.admin("FLUSH BINARY LOGS")
    db.sql(f"DELETE FROM {r} WHERE nk = 1")
    assert capture(r).poll(5.0) == 1  # a new capturer, from the position recorded in the file before
    assert db.log(r) == [(1, 1, "U"), (2, 1, "U"), (3, 1, "D")]


def test_a_second_capturer_of_the_table_captures_nothing_and_says_so(db, capture):
    r = db.table(rows="(1, 'a', 1)")
    first, second = capture(r), capture(r)
    first.enable()
    db.sql(f"UPDATE {r} SET v = 'b' WHERE nk = 1")
    assert first.poll(5.0) == 1 and first.owner and first.blocked is None
    db.sql(f"UPDATE {r} SET v = 'c' WHERE nk = 1")
    assert second.poll(0.05) == 0
    assert not second.owner
    assert f"another capturer of sj_binlog.{r} holds the lock 'sj-binlog:sj_binlog.{r}'" in second.blocked
    assert db.log(r) == [(1, 1, "U")]
    first.close()  # its session ends: the lock is free
    assert second.poll(5.0) == 1 and second.owner and second.blocked is None
    assert db.log(r) == [(1, 1, "U"), (2, 1, "U")]


def test_a_capturer_whose_session_was_killed_takes_its_lock_again_and_goes_on(db, capture, binlog_server):
    r = db.table(rows="(1, 'a', 1)")
    c = capture(r)
    c.enable()
    db.sql(f"UPDATE {r} SET v = 'b' WHERE nk = 1")
    assert c.poll(5.0) == 1
    cursor = c.connection.cursor()
    cursor.execute("SELECT CONNECTION_ID()")
    (session,), = cursor.fetchall()
    cursor.close()
    binlog_server.admin(f"KILL CONNECTION {session}")  # the lock goes with the session
    db.sql(f"UPDATE {r} SET v = 'c' WHERE nk = 1")
    assert c.poll(5.0) == 1 and c.owner  # a new session, the lock taken again
    assert capture(r).poll(0.05) == 0  # and held: a second capturer is kept out
    assert db.log(r) == [(1, 1, "U"), (2, 1, "U")]


def test_ddl_on_r_stops_the_capture_before_it_until_restarted(db, capture):
    r = db.table(rows="(1, 'a', 1), (2, 'b', 2)")
    c = capture(r)
    c.enable()
    db.sql(f"UPDATE {r} SET v = 'b' WHERE nk = 1")
    db.sql(f"TRUNCATE TABLE {r}")
    db.sql(f"INSERT INTO {r} VALUES (3, 'c', 3)")
    for _ in range(2):  # every poll: the version before it is written, nothing after
        with pytest.raises(StoreError, match=rf"^binlog capture: the binary log has the statement 'TRUNCATE TABLE {r}' on "
                           rf"'{r}' at binlog\.\d+:\d+, with no row images, so the capture stops before it; call "
                           r"enable\(restart=True\) and restart the joins of R$"):
            c.poll(2.0)
        assert db.log(r) == [(1, 1, "U")]
    c.enable(restart=True)
    db.sql(f"UPDATE {r} SET v = 'd' WHERE nk = 3")
    assert c.poll(5.0) == 1
    assert db.log(r) == [(1, 1, "U"), (2, 3, "U")]


def test_altered_r_is_refused_by_the_capture_that_knew_its_columns(db, capture):
    r = db.table(rows="(1, 'a', 1)")
    c = capture(r)
    c.enable()
    other = db.table()
    db.sql(f"ALTER TABLE `sj_binlog`.`{other}` ADD COLUMN w INT")  # another table: no matter
    db.sql(f"ALTER TABLE `sj_binlog`.`{r}` ADD COLUMN w INT")
    with pytest.raises(StoreError, match=rf"statement 'ALTER TABLE `sj_binlog`.`{r}` ADD COLUMN w INT' on '{r}'"):
        c.poll(2.0)


def test_an_xa_transaction_on_r_is_refused_not_taken_before_its_commit(db, capture):
    r = db.table(rows="(1, 'a', 1)")
    c = capture(r)
    c.enable()
    db.sql("XA START 'sjx'", f"UPDATE {r} SET v = 'b' WHERE nk = 1", "XA END 'sjx'", "XA PREPARE 'sjx'")
    db.sql("XA COMMIT 'sjx'")
    with pytest.raises(StoreError, match=rf"^binlog capture: an XA transaction changed '{r}' at binlog\.\d+:\d+; the "
                       r"capture takes plain transactions only \(XA ones are not supported\)$"):
        c.poll(2.0)
    assert db.log(r) == []


def test_versions_installed_into_a_captured_table_stop_the_capture(db, capture):
    r = db.table(rows="(1, 'a', 1)")
    c = capture(r)
    c.enable()
    install_changes(db.connection, r, "nk", pa.table({"op": ["U"], "nk": [2], "v": ["b"], "n": [2]}))  # version 1
    with pytest.raises(StoreError, match=rf"^binlog capture: the change log of '{r}' is at version 1, not at the "
                       r"capture's 0; nothing but the capture may write versions of a captured table \(install_changes\?\)$"):
        c.poll(2.0)


def test_statements_naming_r(db):
    assert _ddl_on("ALTER TABLE r ADD x INT", "d", "d", "r")
    assert _ddl_on("DROP TABLE IF EXISTS t1, `d`.`r`", "other", "d", "r")
    assert _ddl_on("RENAME TABLE r TO r_old", "d", "d", "r")
    assert _ddl_on("DROP DATABASE `d`", "x", "d", "r")
    assert not _ddl_on("ALTER TABLE r ADD x INT", "other", "d", "r")  # another database's r
    assert not _ddl_on("ALTER TABLE e.r ADD x INT", "d", "d", "r")
    assert not _ddl_on("CREATE TABLE IF NOT EXISTS `r__sj_changes` (version BIGINT)", "d", "d", "r")
    assert not _ddl_on("DROP TABLE rr", "d", "d", "r")


# ------------------------------------------------------------------------------- a killed capturer

KILLED_CAPTURER = """
import sys, time
from airflow_provider_semijoin.core.stores.binlog import BinlogCapture
c = BinlogCapture(sys.argv[1], sys.argv[2], "nk")
print("ready", flush=True)
while True:
    c.poll(0.2)
"""


@pytest.mark.slow
def test_a_capturer_killed_at_any_moment_misses_nothing_and_writes_nothing_twice(db, binlog_server):
    r = db.table(rows=", ".join(f"({k}, 'v0', 0)" for k in range(200)))
    BinlogCapture(db.url, r, "nk").enable()
    transactions = 60
    rng = random.Random(7)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}

    def writer():
        for t in range(1, transactions + 1):  # each: 200 rows, their v = 'v<t>' (several row events)
            db2.transaction(f"UPDATE {r} SET v = 'v{t}', n = {t}")
            time.sleep(0.01)

    db2 = Db(db.url)
    thread = threading.Thread(target=writer)
    thread.start()
    kills = 0
    try:
        while thread.is_alive() or kills < 3:
            p = subprocess.Popen([sys.executable, "-c", KILLED_CAPTURER, db.url, r], env=env, stdout=subprocess.PIPE, text=True)
            assert p.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.02, 0.3))
            os.kill(p.pid, signal.SIGKILL)  # mid-read, mid-write or between polls
            p.wait()
            kills += 1
    finally:
        thread.join()
        db2.connection.close()
    with BinlogCapture(db.url, r, "nk") as last:
        deadline = time.monotonic() + 60
        while (last.poll(2.0) or not last.owner) and time.monotonic() < deadline:
            pass  # (a killed capturer's session may hold the lock a moment longer)
    versions = db.sql(f"SELECT version, COUNT(*), MIN(nk), MAX(nk) FROM {r}__sj_changes GROUP BY version ORDER BY version")
    assert versions == [(t, 200, 0, 199) for t in range(1, transactions + 1)], f"after {kills} kills"
    befores = db.sql(f"SELECT version, MIN(v), MAX(v), COUNT(*) FROM {r}__sj_before GROUP BY version ORDER BY version")
    assert befores == [(t, f"v{t - 1}", f"v{t - 1}", 200) for t in range(1, transactions + 1)]
    assert kills >= 3


# ------------------------------------------------------------------------------- reader consistency


def test_snapshot_reads_the_version_before_or_after_a_commit_never_between(db, capture):
    r = db.table(rows="(1, 'a', 0), (2, 'b', 0)")
    other = db.table()
    c = capture(r)
    c.enable()
    reader = DatabaseURL.parse(db.url).connect()  # the join's session
    outside = DatabaseURL.parse(db.url).connect()  # wait_captured's
    stop = threading.Event()
    poller = threading.Thread(target=lambda: [c.poll(0.05) for _ in iter(stop.is_set, True)])
    poller.start()
    try:
        seen = []
        for t in range(1, 41):
            cursor = reader.cursor()
            cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            at = snapshot_position(cursor)
            db.transaction(f"UPDATE {r} SET n = {t} WHERE nk = 1", f"UPDATE {r} SET n = {t} WHERE nk = 2")  # version t
            if t % 3 == 0:
                db.sql(f"INSERT INTO {other} VALUES ({t}, 'o', 0)")  # other tables between
            cursor.execute(f"SELECT n FROM {r} ORDER BY nk")
            in_snapshot = {n for (n,) in cursor.fetchall()}
            cursor.execute("COMMIT")
            version = wait_captured(outside, r, at.file, at.pos, 10)
            assert in_snapshot == {t - 1} and version == t - 1  # began before the commit: the version before it
            cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            after = snapshot_position(cursor)
            cursor.execute(f"SELECT n FROM {r} ORDER BY nk")
            assert {n for (n,) in cursor.fetchall()} == {t}
            cursor.execute("COMMIT")
            assert wait_captured(outside, r, after.file, after.pos, 10) == t  # after it: the version including it
            seen.append(version)
            cursor.close()
        assert seen == list(range(40))
    finally:
        stop.set()
        poller.join()
        reader.close()
        outside.close()


def test_wait_captured_without_a_capturer_says_so_in_one_sentence(db, capture):
    r = db.table(rows="(1, 'a', 0)")
    capture(r).enable()
    db.sql(f"UPDATE {r} SET v = 'b' WHERE nk = 1")
    cursor = db.connection.cursor()
    cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    at = snapshot_position(cursor)
    cursor.execute("COMMIT")
    with pytest.raises(StoreError, match=rf"^wait captured: the binlog capture of '{r}' did not reach position "
                       r"binlog\.\d+:\d+ within 0\.2 s \(it read to binlog\.\d+:\d+; is a capturer polling\?\)$"):
        wait_captured(db.connection, r, at.file, at.pos, 0.2)
    db.sql(f"INSERT INTO {db.table()} VALUES (1, 'x', 1)")  # only another table after the last version
    capture(r).poll(2.0)
    cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    later = snapshot_position(cursor)
    cursor.execute("COMMIT")
    assert wait_captured(db.connection, r, later.file, later.pos, 5) == 1
    assert wait_captured(db.connection, r, at.file, at.pos, 5) == 1


DYING_CAPTURER = """
import os, signal, sys
from airflow_provider_semijoin.core.stores import reconnect
from airflow_provider_semijoin.core.stores.binlog import BinlogCapture

class Dying(BinlogCapture):
    def _row_changes(self, event):  # 'event': killed after the first row event of a transaction, before its others
        changes = super()._row_changes(event)
        if sys.argv[3] == "event":
            os.kill(os.getpid(), signal.SIGKILL)
        return changes

    def _write(self, *args):  # 'write': killed inside the write, the change log's rows in, not committed
        if sys.argv[3] == "write":
            many = reconnect._Cursor.executemany
            def executemany(cursor, sql, rows):
                many(cursor, sql, rows)
                os.kill(os.getpid(), signal.SIGKILL)
            reconnect._Cursor.executemany = executemany
        super()._write(*args)

Dying(sys.argv[1], sys.argv[2], "nk").poll(5)
"""


@pytest.mark.parametrize("point", ["event", "write"])
def test_a_capturer_killed_between_events_or_inside_its_write_leaves_nothing_half_done(db, capture, point):
    r = db.table(rows=", ".join(f"({k}, 'v0', 0)" for k in range(1000)))
    capture(r).enable()
    for t in (1, 2):
        db.transaction(f"UPDATE {r} SET v = 'v{t}', n = {t}")  # 1,000 rows: several row events
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    died = subprocess.run([sys.executable, "-c", DYING_CAPTURER, db.url, r, point], env=env, timeout=120)
    assert died.returncode == -signal.SIGKILL
    assert db.log(r) == [] and db.before(r) == []
    again, written = capture(r), 0
    deadline = time.monotonic() + 60
    while not again.owner and time.monotonic() < deadline:  # the killed session may hold the lock a moment longer
        written += again.poll(5.0)
    assert written == 2
    assert db.sql(f"SELECT version, COUNT(*), MIN(op), MAX(op) FROM {r}__sj_changes GROUP BY version") == [
        (1, 1000, "U", "U"), (2, 1000, "U", "U")]
    assert db.sql(f"SELECT version, COUNT(*), MIN(v), MAX(v) FROM {r}__sj_before GROUP BY version") == [
        (1, 1000, "v0", "v0"), (2, 1000, "v1", "v1")]
