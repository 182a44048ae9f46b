"""Reading R at a version chosen by someone else: the before-images of installed changes.

With ``partitions = N`` the parts of one micro-batch run in N Spark tasks, each with its own
connection and its own snapshot of R, at moments the driver does not control. SSIJ sec. IV-E
asks that "each stream tuple sees a consistent view of the database: either the relation
instance before or the relation instance after an update": for one micro-batch that means
every part reads the SAME version ``V``, chosen once by the driver
(:meth:`.base.MasterStore.reading_at`). A part whose snapshot shows a newer version ``V'``
(a batch was installed after the driver chose ``V``) cannot ask the database for an older
snapshot - neither InnoDB nor SQLite can share or rewind one - so the install keeps what it
overwrites:

* ``<R>__sj_before(version, <every column of R>)``: the rows each key had just before the
  batch of ``version`` changed it (none for a key the batch inserted), written by
  :func:`.changes.install_changes` in the same transaction;

and R at ``V`` is, for the keys changed in ``(V, V']``, the before-images of their first change
after ``V``, and R itself for every other key (:class:`Overlay`, one ``UNION ALL`` query).
Before-images older than :data:`KEEP_VERSIONS` versions are pruned by the install; a read at a
version that old fails with one sentence.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..errors import StoreError
from .sql import SQLITE
from .system_time import add_history_columns, current_rows_sql, history_columns

BEFORE_SUFFIX = "__sj_before"
KEEP_VERSIONS = 100  # installs whose before-images are kept: a micro-batch's parts read within them
KEEP_CAPTURED_VERSIONS = 10_000  # binlog-captured transactions whose before-images are kept (one each: more of them)
BATCH = 500  # keys per INSERT ... SELECT


def before_table(table: str) -> str:
    """The name of R's before-images table (valid whenever R can have change tables)."""
    return table + BEFORE_SUFFIX


def key_version_index_name(table: str) -> str:
    """The name of the ``(<key>, version)`` index on R's side table ``table``."""
    return f"ix_kv_{table}" if len(table) <= 58 else f"ix_kv_{hashlib.sha1(table.encode()).hexdigest()[:20]}"


def key_version_index(cursor, store, table: str) -> None:
    """An index ``(<key>, version)`` on R's side table ``table`` if missing: a read of R at an
    older version looks up, for each row it reads, that key's changes after the version
    (:class:`Overlay`), and reads the before-images of a page's key range; ordered by version
    alone, each is a scan of every version since, growing with every before-image kept (found
    by ``semijoin bench --changes``; the timings: ``docs/measurements.md``)."""
    d = store.dialect
    name = key_version_index_name(table)
    if d is SQLITE:
        cursor.execute(f"CREATE INDEX IF NOT EXISTS {d.quote(name)} ON {d.quote(table)} ({d.quote(store.key)}, version)")
        return
    cursor.execute(*key_version_index_lookup(table))
    if not cursor.fetchall():
        cursor.execute(f"CREATE INDEX {d.quote(name)} ON {d.quote(table)} ({d.quote(store.key)}, version)")


def key_version_index_lookup(table: str) -> tuple[str, tuple]:
    """The query (SQL, parameters) whose rows say whether MySQL's side table ``table`` has its
    ``(<key>, version)`` index: none, not yet (tables made before it existed get it when their
    change tables are next created: an install, a capture enabled)."""
    return ("SELECT 1 FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s "
            "AND INDEX_NAME = %s", (table, key_version_index_name(table)))


def create_before_table(cursor, store) -> str:
    """Create R's before-images table if missing; its quoted name."""
    d = store.dialect
    name = d.quote(before_table(store.table))
    columns = ", ".join([f"{d.quote(c.name)} {c.declaration or c.sql_type}" for c in store.columns]
                        + [f"{d.quote(c)} TIMESTAMP(6) NULL" for c in history_columns(store)])
    engine = "" if d is SQLITE else " ENGINE=InnoDB"
    if d is SQLITE:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {name} (version BIGINT NOT NULL, {columns})")
        index = d.quote(f"ix_{before_table(store.table)}"[:64])
        cursor.execute(f"CREATE INDEX IF NOT EXISTS {index} ON {name} (version, {d.quote(store.key)})")
    else:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {name} (version BIGINT NOT NULL, {columns}, "
            f"KEY (version, {d.quote(store.key)})){engine}"
        )
    add_history_columns(cursor, store, name)
    key_version_index(cursor, store, before_table(store.table))
    return name


def save_before_images(cursor, store, version: int, keys: list) -> None:
    """Inside an install's transaction, before it changes ``keys``: copy their rows under
    ``version`` and drop the before-images no read may need any more."""
    d = store.dialect
    name = d.quote(before_table(store.table))
    columns = ", ".join(d.quote(n) for n in [c.name for c in store.columns] + history_columns(store))
    every_version = " FOR SYSTEM_TIME ALL" if store.system_period else ""  # a system-versioned R's history too
    for at in range(0, len(keys), BATCH):
        part = keys[at : at + BATCH]
        cursor.execute(
            f"INSERT INTO {name} (version, {columns}) SELECT {d.param}, {columns} FROM {d.quote(store.table)}{every_version} "
            f"WHERE {d.quote(store.key)} IN ({d.placeholders(len(part))})",
            (version, *part),
        )
    cursor.execute(f"DELETE FROM {name} WHERE version <= {d.param}", (version - KEEP_VERSIONS,))


@dataclass(frozen=True)
class Overlay:
    """R at ``version`` seen from a snapshot at ``newest``: each key changed in between as the
    before-image of its first change after ``version`` (none: the key was inserted since), every
    other key as R has it. The changed keys are looked up in the change log inside the query,
    one correlated look-up per row read, so an install of any size makes a query of one size
    (it used to inline every changed key: thousands of them passed SQLite's expression depth)."""

    version: int
    newest: int

    def query(self, store, columns: str, where: str, params: list, suffix: str) -> tuple[str, list]:
        """The rows of R at ``version`` that satisfy ``where``, in key order. The before-images
        read are those of ``(version, newest]`` only, by the ``(<key>, version)`` index: a hot
        key changed all day has thousands of before-images (the change bench's hottest key,
        changed 80 times a second: 8,876 after two of its runs), and a read that took all of them
        to keep the one the look-up names grew with the table's history, not with the span it
        reads across (``docs/measurements.md``)."""
        d, qk = store.dialect, store.quoted_key
        sql = (
            f"SELECT {columns} FROM {store.source_sql} r WHERE ({where}) AND NOT EXISTS (SELECT 1 FROM {store._qlog} l "
            f"WHERE l.version > {d.param} AND l.version <= {d.param} AND l.{qk} = r.{qk}) "
            f"UNION ALL {first_before_images_sql(store, columns, where)}{current_rows_sql(store, 'b')} ORDER BY 1{suffix}"
        )
        span = [self.version, self.newest]
        return sql, [*params, *span, *params, *span, *span]


def first_before_images_sql(store, columns: str, where: str) -> str:
    """The before-images (alias ``b``) that satisfy ``where``, each of its key's first change in
    ``(V, V']``; its parameters: ``where``'s, then ``V, V'`` twice. Only the before-images of that
    span are read, by the ``(<key>, version)`` index (:meth:`Overlay.query`; MariaDB is told to, its
    optimiser took the ``(version, <key>)`` one: 0.22 s against 0.04 s for the change bench's page)."""
    d, qk = store.dialect, store.quoted_key
    before = before_table(store.table)
    by_key = f" FORCE INDEX ({d.quote(key_version_index_name(before))})" if store.before_by_key else ""  # (SQLite: by itself)
    return (
        f"SELECT {columns} FROM {d.quote(before)} b{by_key} WHERE ({where}) AND b.version > {d.param} "
        f"AND b.version <= {d.param} AND b.version = (SELECT MIN(l.version) FROM {store._qlog} l "
        f"WHERE l.version > {d.param} AND l.version <= {d.param} AND l.{qk} = b.{qk})"
    )


def overlay(store, version: int, newest: int, range_sql: str, range_params: list, *, pruned: bool = True) -> Overlay | None:
    """Inside a snapshot at ``newest``: how to read R at ``version`` (None: R itself is it).
    ``pruned``: installs prune the before-images older than :data:`KEEP_VERSIONS` versions
    (captured writes, :mod:`.capture`, are a version a row and keep theirs)."""
    if newest == version:
        return None
    if version > newest:
        raise StoreError(
            f"version: R {store.table!r} is at version {newest} in this snapshot, older than the version "
            f"{version} the micro-batch reads at (does every part read the same database?)"
        )
    if pruned and version < newest - KEEP_VERSIONS:
        raise StoreError(
            f"version: R {store.table!r} is at version {newest}; version {version} is more than "
            f"{KEEP_VERSIONS} installs old and its before-images are pruned"
        )
    p = store.dialect.param
    changed = store.bookkeeping_query(
        f"SELECT 1 FROM {store._qlog} WHERE version > {p} AND version <= {p}"
        f"{' AND ' + range_sql if range_sql else ''} LIMIT 1",
        (version, newest, *range_params),
    )
    return Overlay(version, newest) if changed else None
