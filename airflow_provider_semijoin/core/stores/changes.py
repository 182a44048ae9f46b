"""Master-data updates: staging and installing changes to R, with a versioned change log.

SSIJ sec. IV-E ("Handling Updates"): "a correct result in the presence of updates in the
relation is obtained when each stream tuple sees a consistent view of the database: either the
relation instance before or the relation instance after an update is used". Here an update is
a batch of changes installed in ONE transaction, together with the keys it changed, appended
to a change log under the next version number. A join phase (one :func:`..runner.run_join`, a
Spark micro-batch, an SSIJ join phase) reads R inside one snapshot
(:meth:`.base.MasterStore.snapshot`), so it sees R before or after each batch, never a part of
one; the change log read inside that snapshot names the keys whose cached rows are stale.

Side tables per master table R (created idempotently, names validated and quoted), besides
the before-images of :mod:`.versions` (what a read at an older version needs):

* ``<R>__sj_changes(version, <key>, op)``: one row per key changed by an installed batch;
  ``op`` is ``U`` when the key has rows after the batch, ``D`` when it has none;
* ``<R>__sj_pending(seq, op, <key>, <every other column of R>)``: changes upstream systems
  staged and nobody installed yet (``op`` ``U`` = upsert, ``D`` = delete).

What a batch does to a key (changes in order: ``seq`` for pending rows, row order otherwise):
the key's rows in R are replaced by its ``U`` rows that come after its last ``D`` in the batch
(none: the key is deleted). So for a 1:K master an upsert of the key's K rows is K ``U`` rows
and replaces all rows it had; a unique key keeps its last ``U`` row.

SQLite: :func:`create_change_tables` switches the database to WAL, so a join's read
transaction and an install do not block each other ("updates never wait for the stream").
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import pyarrow as pa

from ..checks import check_positive
from ..errors import ConfigError, StoreError
from .base import MasterStore
from .triggers import capture_enabled
from .opening import store_for
from .sql import MYSQL, SQLITE, DatabaseURL, dialect_of, refused_value_errors, side_tables, table_exists, write_transaction
from .horizon import create_readers_table
from .versions import create_before_table, key_version_index, save_before_images

OPS = ("U", "D")
BATCH = 500  # keys per DELETE ... IN (...) statement
LOCK_TIMEOUT_S = 60  # how long an install waits for another install of the same table (MySQL)


@dataclass(frozen=True)
class Installed:
    """An installed batch: its version, the distinct keys it changed, the change rows applied."""

    version: int
    keys: int
    rows: int


@contextlib.contextmanager
def _connected(conn_or_url):
    """The connection given, or a new one to the URL given (closed afterwards)."""
    if not isinstance(conn_or_url, str):
        yield conn_or_url
        return
    connection = DatabaseURL.parse(conn_or_url).connect()
    try:
        yield connection
    finally:
        connection.close()


def _execute(cursor, sql: str, params=()) -> list[tuple]:
    cursor.execute(sql, tuple(params))
    return list(cursor.fetchall() or [])


def _master(connection, table: str, key: str) -> MasterStore:
    return store_for(connection, table, key)


def _create(store: MasterStore) -> tuple[str, str]:
    """Create the change tables of ``store``'s R if missing; their quoted names."""
    d = store.dialect
    log, pending = side_tables(store.table)
    by_name = {c.name.lower(): c for c in store.columns}
    for name, of in (("version", log), ("op", log), ("seq", pending)):
        if name in by_name:
            raise ConfigError(
                f"table: column {by_name[name].name!r} of {store.table!r} has the name of a column of "
                f"its change table {of!r}; rename the column"
            )
    key = next(c for c in store.columns if c.name == store.key)
    others = [c for c in store.columns if c.name != store.key]
    qk = f"{d.quote(key.name)} {key.declaration or key.sql_type}"
    cursor = store.connection.cursor()
    try:
        if d is SQLITE:
            mode = _execute(cursor, "PRAGMA journal_mode=WAL")[0][0]
            if mode.lower() not in ("wal", "memory"):
                raise StoreError(f"master database: SQLite could not switch to WAL (journal mode {mode})")
            seq, engine = "seq INTEGER PRIMARY KEY AUTOINCREMENT", ""
        else:
            seq, engine = "seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY", " ENGINE=InnoDB"
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {d.quote(log)} (version BIGINT NOT NULL, {qk} NOT NULL, "
            f"op CHAR(1) NOT NULL, PRIMARY KEY (version, {d.quote(key.name)})){engine}"
        )
        key_version_index(cursor, store, log)
        columns = "".join(f", {d.quote(c.name)} {c.declaration or c.sql_type}" for c in others)
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {d.quote(pending)} ({seq}, op CHAR(1) NOT NULL, {qk} NOT NULL{columns}){engine}"
        )
        create_before_table(cursor, store)
        create_readers_table(store.connection)  # the readers of its history (:mod:`.horizon`)
    finally:
        cursor.close()
    return d.quote(log), d.quote(pending)


def create_change_tables(conn_or_url, table: str, key: str) -> None:
    """Create R's change log and pending-changes tables (nothing happens when they exist)."""
    with _connected(conn_or_url) as connection:
        _create(_master(connection, table, key))


def _rows_of(store: MasterStore, changes) -> tuple[list[str], list[tuple]]:
    """Validated changes -> (column names after ``op``, rows ``(op, key, other values...)``)."""
    names = [c.name for c in store.columns]
    if not isinstance(changes, pa.Table):
        raise ConfigError(
            f"changes: expected a pyarrow Table with columns op, {store.key} and columns of "
            f"{store.table!r}; got {type(changes).__name__}"
        )
    for required in ("op", store.key):
        if required not in changes.column_names:
            raise ConfigError(f"changes: no column {required!r} (columns: {changes.column_names})")
    others = [n for n in changes.column_names if n not in ("op", store.key)]
    for name in others:
        if name not in names:
            raise ConfigError(f"changes: column {name!r} is not a column of {store.table!r} (columns: {names})")
    ops = changes["op"].to_pylist()
    bad = next((i for i, op in enumerate(ops) if op not in OPS), None)
    if bad is not None:
        raise ConfigError(f"changes: row {bad} has op {ops[bad]!r}; expected 'U' (upsert) or 'D' (delete)")
    keys = changes[store.key].to_pylist()
    missing = next((i for i, k in enumerate(keys) if k is None), None)
    if missing is not None:
        raise ConfigError(f"changes: row {missing} has no {store.key}")
    columns = [store.key, *others]
    return columns, list(zip(ops, keys, *(changes[n].to_pylist() for n in others)))


def stage_changes(conn_or_url, table: str, key: str, changes: pa.Table) -> int:
    """Append ``changes`` (columns ``op``, the key, other columns of R; missing ones are NULL)
    to R's pending changes, in one transaction; returns the rows staged."""
    with _connected(conn_or_url) as connection:
        store = _master(connection, table, key)
        columns, rows = _rows_of(store, changes)
        _, pending = _create(store)
        d = store.dialect
        cursor = connection.cursor()
        try:
            with write_transaction(connection, cursor):
                cursor.executemany(
                    f"INSERT INTO {pending} (op, {', '.join(d.quote(c) for c in columns)}) "
                    f"VALUES ({d.placeholders(len(columns) + 1)})",
                    rows,
                )
        except refused_value_errors() as exc:  # a key longer than R's column, a string for a number...
            raise ConfigError(f"changes: the database refused them for {table!r} ({exc.args[-1]})") from None
        finally:
            cursor.close()
        return len(rows)


def pending_changes(conn_or_url, table: str) -> int:
    """How many changes to R wait in its pending table (0 when there is no such table)."""
    with _connected(conn_or_url) as connection:
        _, pending = side_tables(table)
        if not table_exists(connection, pending):
            return 0
        cursor = connection.cursor()
        try:
            return int(_execute(cursor, f"SELECT COUNT(*) FROM {dialect_of(connection).quote(pending)}")[0][0])
        finally:
            cursor.close()


@contextlib.contextmanager
def writer_lock(connection, cursor, table: str, what: str = "install"):
    """MySQL: the provider's writes into one table take turns - installs (each reads the last
    version and writes the next) and inferred members (:mod:`.inferred`: each reads which keys
    are missing and inserts them); SQLite's BEGIN IMMEDIATE already serialises writers."""
    if dialect_of(connection) is not MYSQL:
        yield
        return
    name = f"sj:{table}"
    if _execute(cursor, "SELECT GET_LOCK(%s, %s)", (name, LOCK_TIMEOUT_S))[0][0] != 1:
        raise StoreError(f"{what}: another writer of {table!r} held its lock for {LOCK_TIMEOUT_S} s")
    try:
        yield
    finally:
        _execute(cursor, "SELECT RELEASE_LOCK(%s)", (name,))


def _net_rows(rows: list[tuple], unique: bool, collation=None) -> dict:
    """Per key, the rows it has after the batch: its U rows after its last D (see the module).
    In a collation (``KeyType.collation``), keys it calls equal (``'abc'``, ``'ABC '``) are one
    key, named by its last spelling."""
    classes = [r[1] for r in rows] if collation is None else collation.sort_keys([r[1] for r in rows])
    after: dict = {}
    spelled: dict = {}
    for (op, key, *values), cls in zip(rows, classes):
        spelled[cls] = key
        if op == "D":
            after[cls] = []
        else:
            after.setdefault(cls, []).append((key, *values))
    return {spelled[cls]: kept[-1:] if unique else kept for cls, kept in after.items()}


def install_changes(
    conn_or_url, table: str, key: str, changes: pa.Table | None = None, max_rows: int | None = None
) -> Installed:
    """Apply ``changes`` (or the pending changes, oldest first, at most ``max_rows``, deleting
    them from pending) to R and append their keys to the change log under the next version,
    all in ONE transaction: a reader sees all of the batch or none of it (SSIJ sec. IV-E).
    When R's writes are captured (:mod:`.capture`) its triggers write the log and the
    before-images, a version a row, and the batch is the versions up to the one returned.
    An empty batch installs nothing and returns the current version."""
    check_positive("max_rows", max_rows, integer=True, optional=True)
    with _connected(conn_or_url) as connection:
        store = _master(connection, table, key)
        given = None if changes is None else _rows_of(store, changes)
        log, pending = _create(store)
        captured = capture_enabled(store)
        d = store.dialect
        qt, qk = d.quote(table), d.quote(key)
        p = d.param
        cursor = connection.cursor()
        try:
            with writer_lock(connection, cursor, table), write_transaction(connection, cursor):
                if given is not None:
                    columns, rows = given
                    seqs = []
                else:
                    columns = [c.name for c in store.columns]
                    others = "".join(f", {d.quote(c)}" for c in columns if c != key)
                    limit = "" if max_rows is None else f" LIMIT {int(max_rows)}"
                    fetched = _execute(cursor, f"SELECT seq, op, {qk}{others} FROM {pending} ORDER BY seq{limit}")
                    seqs = [r[0] for r in fetched]
                    rows = [r[1:] for r in fetched]
                    columns = [key] + [c for c in columns if c != key]
                version = int(_execute(cursor, f"SELECT COALESCE(MAX(version), 0) FROM {log}")[0][0])
                if not rows:
                    return Installed(version, 0, 0)
                version += 1
                after = _net_rows(rows, store.key_unique, store.key_type.collation)
                keys = list(after)
                if not captured:  # the triggers write the before-images and the log, row by row
                    save_before_images(cursor, store, version, keys)  # R at older versions stays readable
                for at in range(0, len(keys), BATCH):
                    part = keys[at : at + BATCH]
                    cursor.execute(f"DELETE FROM {qt} WHERE {qk} IN ({d.placeholders(len(part))})", part)
                inserted = [row for kept in after.values() for row in kept]
                if inserted:
                    cursor.executemany(
                        f"INSERT INTO {qt} ({', '.join(d.quote(c) for c in columns)}) VALUES ({d.placeholders(len(columns))})",
                        inserted,
                    )
                if captured:
                    version = int(_execute(cursor, f"SELECT COALESCE(MAX(version), 0) FROM {log}")[0][0])
                else:
                    cursor.executemany(
                        f"INSERT INTO {log} (version, {qk}, op) VALUES ({p}, {p}, {p})",
                        [(version, k, "U" if kept else "D") for k, kept in after.items()],
                    )
                for at in range(0, len(seqs), BATCH):
                    part = seqs[at : at + BATCH]
                    cursor.execute(f"DELETE FROM {pending} WHERE seq IN ({d.placeholders(len(part))})", part)
        finally:
            cursor.close()
        return Installed(version, len(keys), len(rows))
