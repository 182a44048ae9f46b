"""Change capture from MySQL/MariaDB's binary log: R's changes as versions, no change to how users write R.

SSIJ sec. IV-E: "each stream tuple sees a consistent view of the database: either the relation
instance before or the relation instance after an update". Here an update is a transaction:
:class:`BinlogCapture` reads R's row events from the binary log (``pymysqlreplication``'s
``BinLogStreamReader``, a replica's protocol), groups them by transaction (up to its XID), and
writes each transaction that touched R, in ONE transaction, as R's next version into the
tables the installs use: its keys into ``<R>__sj_changes`` (:mod:`.changes`), each key's first
before-image into ``<R>__sj_before`` (:mod:`.versions`; none for a key it inserted), and into
``<R>__sj_binlog(version, log_file, log_pos, committed_at, captured_at, read_file, read_pos)``
the position after it and its commit time (whole seconds: the binlog's clock). A join sees a
version whole or not at all: each tuple sees R before or after a transaction, never between.

* Where it resumes: the last recorded position; a capturer killed before its write committed
  left nothing, one killed after left the version and its position: nothing missed or twice.
* One capturer per table writes: it holds ``GET_LOCK('sj-binlog:<db>.<table>', 0)`` (a name
  over 64 characters is hashed); another one captures nothing and says why
  (:attr:`BinlogCapture.blocked`). Each write also checks that the last recorded position is
  the one it read from, so a lock lost with a session cannot make two writers.
* ``read_file, read_pos`` of the newest row: the capture read that far and found nothing of R
  after its version (updated at most every :data:`REACH_EVERY_S` s while other tables change).
* Keys as the store sees them (:func:`.opening.store_for`): ``'abc'`` and ``'ABC '`` are one
  changed key in a collation that calls them equal (:mod:`.collation`). An UPDATE of the key
  changes both keys; REPLACE is a delete and an insert, or an update, as the server logs it.
* DDL on R (ALTER, DROP, RENAME, TRUNCATE, CREATE, DROP DATABASE), or a change of R logged as
  a statement, has no row images: the poll that meets it fails with one sentence, every time,
  until ``enable(restart=True)`` (the joins of R restart too).
* Reader side (MariaDB): a snapshot's binlog position (:func:`snapshot_position`) names the
  version R has in it (:func:`wait_captured`).

What the server and R must have is named in one sentence by :func:`check_binlog`
(:mod:`.binlog_checks`); a key with several rows is captured with triggers instead.
Nothing else may write versions of a captured table (:func:`.changes.install_changes`): the
write fails with one sentence when the change log has versions the capture did not write.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import zlib
from dataclasses import dataclass

from ..errors import ConfigError, StoreError, shown
from .binlog_checks import binlog_problems, check_binlog  # noqa: F401 (binlog_problems: this API too)
from .binlog_positions import (  # noqa: F401 (snapshot_position, wait_captured: this API too)
    Position,
    _ddl_on,
    binlog_table,
    server_position,
    snapshot_position,
    wait_captured,
)
from .changes import create_change_tables
from .opening import store_for
from .sql import MYSQL, DatabaseURL, query_rows, refused_value_errors, side_tables, write_transaction
from .versions import KEEP_CAPTURED_VERSIONS, before_table

LOCK_PREFIX = "sj-binlog:"
HEARTBEAT_S = 0.05  # the server says "nothing new" after this long idle: a poll is caught up
REACH_EVERY_S = 1.0  # how often the newest row's read position follows other tables' changes
FOLLOW_POLL_S = 0.2  # one poll of a follower (it returns as soon as it is caught up)
BLOCKED_RETRY_S = 1.0  # a follower whose table another process captures looks again after this
_UNSIGNED_BYTES = {"tinyint": 1, "smallint": 2, "mediumint": 3, "int": 4, "bigint": 8}


def _without_metadata_advice(record: logging.LogRecord) -> bool:
    """The library's advice to set binlog_row_metadata=FULL, logged at every connection: the
    capture takes columns by position and needs no names (see :meth:`BinlogCapture._row`)."""
    return "BINLOG_ROW_METADATA = FULL" not in record.getMessage()


logging.getLogger("pymysqlreplication").addFilter(_without_metadata_advice)


@dataclass
class _Transaction:
    """One transaction of the binary log, as far as R is concerned."""

    changes: list  # (before row or None, after row or None) of R, in log order
    own: bool = False  # it wrote the capture's table: the capture's own write


class BinlogCapture:
    """Reads R's row events from the binary log and writes them as versions (see the module).

    ``url``: ``mysql://user:password@host:port/db`` of R's database (a user with the grants of
    :func:`check_binlog`); ``server_id``: the replica id this reader registers with, unique
    among the server's replicas (default: derived from the database and table, above 2**30).
    :meth:`enable` once (idempotent), then :meth:`poll` as often as changes should be seen.
    """

    def __init__(self, url: str, table: str, key: str, *, server_id: int | None = None):
        self.url, self._url = DatabaseURL.parse(url), url  # check_binlog names the server only, never credentials
        if self.url.dialect is not MYSQL:
            raise ConfigError(f"binlog capture: {self.url.server} is not a MySQL or MariaDB database "
                              "(SQLite is captured with triggers)")
        self.table, self.key = table, key
        self._qbin = MYSQL.quote(binlog_table(table))
        self._qlog = MYSQL.quote(side_tables(table)[0])
        self._qbefore = MYSQL.quote(before_table(table))
        ident = f"{self.url.database}.{table}"
        self.server_id = server_id if server_id is not None else (1 << 30) + zlib.crc32(ident.encode()) % (1 << 30)
        name = LOCK_PREFIX + ident
        self.lock_name = name if len(name) <= 64 else LOCK_PREFIX + hashlib.sha1(ident.encode()).hexdigest()
        self.connection = self.url.connect()
        self.store = store_for(self.connection, table, key)
        kinds = [(at, c.sql_type.lower(), c.sql_type.lower().split("(")[0].split()[0])
                 for at, c in enumerate(self.store.columns)]
        self._unsigned = [(at, 8 * _UNSIGNED_BYTES[base]) for at, kind, base in kinds  # unsigned integers: (position, bits)
                          if "unsigned" in kind and base in _UNSIGNED_BYTES]
        self._bits = [at for at, _, base in kinds if base == "bit"]  # BIT: the library gives '0'/'1' text
        self.owner = False  # holds the lock: the one capturer of R that writes
        self.blocked: str | None = None  # why the last poll captured nothing it could have
        self.rows_read = 0  # row changes of R read from the binary log
        self._last: tuple[int, Position] | None = None  # the newest version written and its position
        self._at: Position | None = None  # the end of the last transaction taken: where a new stream starts
        self._stream = None  # the open BinLogStreamReader
        self._txn: _Transaction | None = None  # the transaction being read
        self._others = False  # transactions of other tables only since the read position was recorded
        self._reach_written = 0.0

    def close(self) -> None:
        self._close_stream()
        self.connection.close()

    def __enter__(self) -> "BinlogCapture":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- starting ------------------------------------------------------------------------------
    def enable(self, restart: bool = False) -> Position:
        """Check the server (:func:`check_binlog`), create R's change tables and the capture's
        table, and record the server's current position as where capture starts (nothing
        happens when it is recorded already). ``restart``: after DDL on R (or a purged binary
        log), move the newest version's position to the current one: the changes in between
        are not captured, so the joins of R must restart. Returns the recorded position."""
        check_binlog(self.connection, self._url, self.table, self.key)
        create_change_tables(self.connection, self.table, self.key)
        cursor = self.connection.cursor()
        try:
            cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {self._qbin} (version BIGINT NOT NULL PRIMARY KEY, "
                "log_file VARCHAR(255) NOT NULL, log_pos BIGINT NOT NULL, committed_at DOUBLE, "
                "captured_at DOUBLE NOT NULL, read_file VARCHAR(255) NOT NULL, read_pos BIGINT NOT NULL) ENGINE=InnoDB"
            )
            with write_transaction(self.connection, cursor):
                cursor.execute(f"SELECT version, log_file, log_pos FROM {self._qbin} "
                               "ORDER BY version DESC LIMIT 1 FOR UPDATE")
                newest = cursor.fetchall()
                if newest and not restart:
                    return Position(newest[0][1], int(newest[0][2]))
                at = server_position(cursor)
                if not newest:  # the capture starts at R's version now (0, or the last install's)
                    cursor.execute(f"SELECT COALESCE(MAX(version), 0) FROM {self._qlog}")
                version = int((newest or cursor.fetchall())[0][0])
                cursor.execute(f"REPLACE INTO {self._qbin} VALUES (%s, %s, %s, NULL, %s, %s, %s)",
                               (version, at.file, at.pos, time.time(), at.file, at.pos))
                self._last = None
                self._close_stream()
                return at
        finally:
            cursor.close()

    # -- polling -------------------------------------------------------------------------------
    def poll(self, max_wait_s: float = 1.0) -> int:
        """Capture the transactions logged since the capture's position: returns once it is
        caught up (the server had nothing more for :data:`HEARTBEAT_S`) with versions written,
        or after ``max_wait_s`` seconds (give or take a heartbeat). Returns the versions written
        (0: none, or another capturer held R's lock all that time, :attr:`blocked` says so: a
        lock freed by a session that just ended is taken within the wait). The binary log
        stream stays open between polls; a failed poll reopens it at the last transaction's end."""
        import pymysql
        from pymysqlreplication.event import HeartbeatLogEvent

        deadline = time.monotonic() + max_wait_s
        if not self._acquire(max_wait_s):
            return 0
        written = 0
        try:
            while True:
                if self._stream is None:
                    self._stream = self._reader(self._resume()[1])
                event = self._stream.fetchone()
                if event is None or isinstance(event, HeartbeatLogEvent):  # caught up
                    if event is None:
                        self._close_stream()
                    self._note_reach()
                    if written:
                        return written
                else:
                    written += self._take(event)
                if time.monotonic() >= deadline:
                    return written
        except pymysql.MySQLError as exc:
            self._close_stream()
            raise self._read_error(exc, self._at) from None
        except BaseException:
            self._close_stream()
            raise

    def _close_stream(self) -> None:
        """Forget the open stream and a transaction half read: the next read starts at the end
        of the last transaction taken (:attr:`_at`)."""
        if self._stream is not None:
            self._stream.close()
        self._stream = self._txn = None

    def _acquire(self, wait_s: float) -> bool:
        """Hold R's capture lock (again, after a lost session), waiting up to ``wait_s`` s for it
        (MariaDB takes fractions of a second); False: another capturer has it."""
        if query_rows(self.connection, "SELECT IS_USED_LOCK(%s) = CONNECTION_ID()", (self.lock_name,))[0][0] == 1:
            return True
        self.owner = query_rows(self.connection, "SELECT GET_LOCK(%s, %s)", (self.lock_name, max(0.0, wait_s)))[0][0] == 1
        self._last = None  # where to resume: read again from the table
        self._close_stream()
        if self.owner:
            self.blocked = None
            return True
        holder = query_rows(self.connection, "SELECT IS_USED_LOCK(%s)", (self.lock_name,))[0][0]
        self.blocked = (f"another capturer of {self.url.database}.{self.table} holds the lock {self.lock_name!r} "
                        f"(connection {holder}), so this one captures nothing")
        return False

    def _resume(self) -> tuple[int, Position]:
        """The newest version written and the position to read from (its read position)."""
        if self._last is None:
            rows = query_rows(self.connection, f"SELECT version, log_file, log_pos, read_file, read_pos FROM {self._qbin} "
                                          "ORDER BY version DESC LIMIT 1")
            if not rows:
                raise StoreError(f"binlog capture: capture of {self.table!r} is not enabled (call enable() first)")
            version, file, pos, read_file, read_pos = rows[0]
            self._close_stream()
            self._last = (int(version), Position(file, int(pos)))
            self._at = Position(read_file, int(read_pos))
        return self._last[0], self._at

    def _take(self, event) -> int:
        """One event of the stream: a transaction's start, rows, end. At the end of one that
        touched R its version is written (returns 1); else 0."""
        from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent, XidEvent
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

        stream = self._stream
        if isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
            if self._txn is None:  # the stream starts at a transaction's end: its start comes first
                raise StoreError(f"binlog capture: row events of {event.table!r} at {stream.log_file}:{stream.log_pos} "
                                 "outside a transaction")
            if event.table == self.table:
                self._txn.changes.extend(self._row_changes(event))
            else:
                self._txn.own = True
            return 0
        if isinstance(event, QueryEvent):
            statement = event.query.strip()
            if statement.upper() == "BEGIN":
                self._txn = _Transaction([])
                return 0
            self._refuse_statement(statement, event, stream)  # else a COMMIT, or a statement: its own transaction
        elif isinstance(event, (MariadbGtidEvent, GtidEvent)):  # a transaction begins
            self._txn = _Transaction([])
            return 0
        elif not isinstance(event, XidEvent):  # a rotation to the next file: the stream's position follows it
            return 0
        end, txn = Position(stream.log_file, stream.log_pos), self._txn  # the transaction ends here
        written = 0
        if txn is not None and txn.changes:
            self._write(txn.changes, end, float(event.timestamp))
            written = 1
        elif not (txn is not None and txn.own):
            self._others = True
        self._at, self._txn = end, None
        return written

    def _note_reach(self) -> None:
        if self._others and time.monotonic() - self._reach_written >= REACH_EVERY_S:
            self._write_reach()
            self._others = False

    def _reader(self, start: Position):
        from pymysqlreplication import BinLogStreamReader
        from pymysqlreplication.event import (GtidEvent, HeartbeatLogEvent, MariadbGtidEvent, QueryEvent, RotateEvent,
                                              XidEvent)
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

        u = self.url
        settings = {"host": u.host, "port": u.port, "user": u.user, "password": u.password, "charset": "utf8mb4",
                    "connect_timeout": 10}
        return BinLogStreamReader(
            connection_settings=settings, server_id=self.server_id, resume_stream=True, blocking=True,
            slave_heartbeat=HEARTBEAT_S, log_file=start.file, log_pos=start.pos, only_schemas=[u.database],
            only_tables=[self.table, binlog_table(self.table)], enable_logging=False,
            only_events=[MariadbGtidEvent, GtidEvent, QueryEvent, XidEvent, RotateEvent, HeartbeatLogEvent,
                         WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        )

    def _read_error(self, exc, start: Position) -> StoreError:
        code = exc.args[0] if exc.args else None
        if code == 1236:  # the dump could not start or go on: a purged or missing binary log file
            return StoreError(
                f"binlog capture: the server cannot send its binary log from {start}, where the capture of "
                f"{self.table!r} stands ({exc.args[-1]}); call enable(restart=True) and restart the joins of R"
            )
        return StoreError(f"binlog capture: reading the binary log of {self.url.server} from {start} failed "
                          f"({exc.args[-1]})")

    def _refuse_statement(self, statement: str, event, reader) -> None:
        """A logged statement on R has no row images: stop before it (see the module)."""
        schema = event.schema.decode("utf-8", "replace") if isinstance(event.schema, bytes) else str(event.schema)
        if statement.upper().startswith("XA ") and self._txn is not None and self._txn.changes:
            raise StoreError(f"binlog capture: an XA transaction changed {self.table!r} at {reader.log_file}:"
                             f"{reader.log_pos}; the capture takes plain transactions only (XA ones are not supported)")
        if statement.upper() != "COMMIT" and _ddl_on(statement, schema, self.url.database, self.table):
            raise StoreError(
                f"binlog capture: the binary log has the statement {shown(statement)} on {self.table!r} at "
                f"{reader.log_file}:{reader.log_pos}, with no row images, so the capture stops before it; call "
                "enable(restart=True) and restart the joins of R"
            )

    def _row_changes(self, event) -> list[tuple]:
        """A row event of R -> ``(before row, after row)`` pairs, rows as tuples in R's column order."""
        from pymysqlreplication.row_event import UpdateRowsEvent, WriteRowsEvent

        columns = self.store.columns
        if event.number_of_columns != len(columns):
            raise StoreError(
                f"binlog capture: a row event of {self.table!r} has {event.number_of_columns} columns where R has "
                f"{len(columns)} (R was altered); call enable(restart=True) and restart the joins of R"
            )
        self.rows_read += len(event.rows)
        if isinstance(event, UpdateRowsEvent):
            return [(self._row(r["before_values"]), self._row(r["after_values"])) for r in event.rows]
        if isinstance(event, WriteRowsEvent):
            return [(None, self._row(r["values"])) for r in event.rows]
        return [(self._row(r["values"]), None) for r in event.rows]

    def _row(self, values: dict) -> tuple:
        """The values of a row image by position (column names are in the binary log only with
        binlog_row_metadata=FULL); unsigned integers the log gave as signed ones made unsigned, BIT
        values numbers again."""
        row = list(values.values())
        for at, bits in self._unsigned:
            if row[at] is not None and row[at] < 0:
                row[at] += 1 << bits
        for at in self._bits:
            if isinstance(row[at], str):
                row[at] = int(row[at], 2)
        return tuple(row)

    def _net(self, changes: list[tuple]) -> tuple[list[tuple], list[tuple]]:
        """A transaction's row changes -> its changed keys ``(key, op)`` and the before-images of
        the keys it did not insert (each key's first one). Keys the store calls equal (a
        collation's sort key) are one key, spelled as last seen."""
        at = next(i for i, c in enumerate(self.store.columns) if c.name == self.key)
        keys = [row[at] for pair in changes for row in pair if row is not None]
        collation = self.store.key_type.collation
        classes = iter(keys if collation is None else collation.sort_keys(keys))
        state: dict = {}
        before: dict = {}
        for pair in changes:
            for row, exists in zip(pair, (False, True)):
                if row is None:
                    continue
                cls = next(classes)
                if cls not in state and not exists:  # first seen as a row it had: its before-image
                    before[cls] = row
                state[cls] = (row[at], exists)
        return [(key, "U" if exists else "D") for key, exists in state.values()], list(before.values())

    def _write(self, changes: list[tuple], end: Position, committed_at: float) -> None:
        """One transaction of R -> the next version, in ONE transaction (see the module)."""
        keys, before = self._net(changes)
        version, _ = self._resume()
        cursor = self.connection.cursor()
        try:
            with write_transaction(self.connection, cursor):
                self._check_newest(cursor)
                self._insert(cursor, version, keys, before, end, committed_at)
        except refused_value_errors() as exc:  # a value the before-images' copy of R's columns refuses
            raise StoreError(f"binlog capture: the database refused version {version + 1} of {self.table!r} "
                             f"({exc.args[-1]})") from None
        finally:
            cursor.close()
        self._last = (version + 1, end)

    def _insert(self, cursor, version: int, keys: list, before: list, end: Position, committed_at: float) -> None:
        """The rows of version ``version + 1`` (inside :meth:`_write`'s transaction)."""
        new, q = version + 1, MYSQL.quote
        columns = ", ".join(q(c.name) for c in self.store.columns)
        cursor.execute(f"SELECT COALESCE(MAX(version), 0) FROM {self._qlog}")
        logged = int(cursor.fetchall()[0][0])
        if logged != version:
            raise StoreError(
                f"binlog capture: the change log of {self.table!r} is at version {logged}, not at the capture's "
                f"{version}; nothing but the capture may write versions of a captured table (install_changes?)"
            )
        cursor.executemany(f"INSERT INTO {self._qlog} (version, {q(self.key)}, op) VALUES (%s, %s, %s)",
                           [(new, key, op) for key, op in keys])
        if before:
            cursor.executemany(
                f"INSERT INTO {self._qbefore} (version, {columns}) "
                f"VALUES ({MYSQL.placeholders(len(before[0]) + 1)})",
                [(new, *row) for row in before],
            )
        cursor.execute(f"DELETE FROM {self._qbefore} WHERE version <= %s", (new - KEEP_CAPTURED_VERSIONS,))
        cursor.execute(f"INSERT INTO {self._qbin} VALUES (%s, %s, %s, %s, %s, %s, %s)",
                       (new, end.file, end.pos, committed_at, time.time(), end.file, end.pos))

    def _check_newest(self, cursor) -> None:
        """Inside a write: the newest recorded version is still the one this capturer resumed
        from (else another writer moved it: the lock was lost with a session)."""
        cursor.execute(f"SELECT version, log_file, log_pos FROM {self._qbin} ORDER BY version DESC LIMIT 1 FOR UPDATE")
        version, file, pos = cursor.fetchall()[0]
        if (int(version), Position(file, int(pos))) != self._last:
            expected = self._last
            self._last = None
            raise StoreError(
                f"binlog capture: version {version} of {self.table!r} at {file}:{pos} was recorded by another writer "
                f"while this capturer stood at version {expected[0]} ({expected[1]}); poll again to resume after it"
            )

    def _write_reach(self) -> None:
        """Only other tables' transactions since the newest version: record how far R is known."""
        cursor = self.connection.cursor()
        try:
            with write_transaction(self.connection, cursor):
                self._check_newest(cursor)
                cursor.execute(f"UPDATE {self._qbin} SET read_file = %s, read_pos = %s WHERE version = %s",
                               (self._at.file, self._at.pos, self._last[0]))
        finally:
            cursor.close()
        self._reach_written = time.monotonic()


class BinlogFollower:
    """Keeps R's binlog capture going while a job runs: a daemon thread polling
    :class:`.binlog.BinlogCapture` (``url``, ``table``, ``key``). When another process holds the
    table's capture, it looks again every :data:`BLOCKED_RETRY_S` s; when the capture fails
    (DDL on R, a lost server past its retries), :attr:`error` says why and the thread ends, and
    snapshots that wait for it say so (:func:`.binlog.wait_captured`'s time-out)."""

    def __init__(self, url: str, table: str, key: str):
        self.url, self.table, self.key = url, table, key
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"binlog-{table}", daemon=True)

    def start(self) -> "BinlogFollower":
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            with BinlogCapture(self.url, self.table, self.key) as capture:
                while not self._stop.is_set():
                    capture.poll(FOLLOW_POLL_S)
                    if capture.blocked:
                        self._stop.wait(BLOCKED_RETRY_S)
        except Exception as exc:  # noqa: BLE001 - kept for the job to report
            self.error = exc

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
