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

from dataclasses import dataclass

from ..errors import StoreError
from .sql import SQLITE

BEFORE_SUFFIX = "__sj_before"
KEEP_VERSIONS = 100  # installs whose before-images are kept: a micro-batch's parts read within them
BATCH = 500  # keys per INSERT ... SELECT


def before_table(table: str) -> str:
    """The name of R's before-images table (valid whenever R can have change tables)."""
    return table + BEFORE_SUFFIX


def create_before_table(cursor, store) -> str:
    """Create R's before-images table if missing; its quoted name."""
    d = store.dialect
    name = d.quote(before_table(store.table))
    columns = ", ".join(f"{d.quote(c.name)} {c.declaration or c.sql_type}" for c in store.columns)
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
    return name


def save_before_images(cursor, store, version: int, keys: list) -> None:
    """Inside an install's transaction, before it changes ``keys``: copy their rows under
    ``version`` and drop the before-images no read may need any more."""
    d = store.dialect
    name = d.quote(before_table(store.table))
    columns = ", ".join(d.quote(c.name) for c in store.columns)
    for at in range(0, len(keys), BATCH):
        part = keys[at : at + BATCH]
        cursor.execute(
            f"INSERT INTO {name} (version, {columns}) SELECT {d.param}, {columns} FROM {d.quote(store.table)} "
            f"WHERE {d.quote(store.key)} IN ({d.placeholders(len(part))})",
            (version, *part),
        )
    cursor.execute(f"DELETE FROM {name} WHERE version <= {d.param}", (version - KEEP_VERSIONS,))


@dataclass(frozen=True)
class Overlay:
    """R at ``version`` seen from a snapshot at ``newest``: ``firsts`` holds, per key changed in
    between, the version of its first change after ``version`` (keys as SQL parameters)."""

    version: int
    newest: int
    firsts: list[tuple]  # (key, first version after ``version``)

    def query(self, store, columns: str, where: str, params: list, suffix: str) -> tuple[str, list]:
        """The rows of R at ``version`` that satisfy ``where``, in key order."""
        d, qk = store.dialect, store._qk
        keys = [k for k, _ in self.firsts]
        pairs = " OR ".join([f"(version = {d.param} AND {qk} = {d.param})"] * len(self.firsts))
        sql = (
            f"SELECT {columns} FROM {store._qt} WHERE ({where}) AND {qk} NOT IN ({d.placeholders(len(keys))}) "
            f"UNION ALL SELECT {columns} FROM {d.quote(before_table(store.table))} WHERE ({where}) AND ({pairs}) "
            f"ORDER BY 1{suffix}"
        )
        return sql, [*params, *keys, *params, *(v for k, v in self.firsts for v in (v, k))]


def overlay(store, version: int, newest: int, range_sql: str, range_params: list) -> Overlay | None:
    """Inside a snapshot at ``newest``: how to read R at ``version`` (None: R itself is it)."""
    if newest == version:
        return None
    if version > newest:
        raise StoreError(
            f"version: R {store.table!r} is at version {newest} in this snapshot, older than the version "
            f"{version} the micro-batch reads at (does every part read the same database?)"
        )
    if version < newest - KEEP_VERSIONS:
        raise StoreError(
            f"version: R {store.table!r} is at version {newest}; version {version} is more than "
            f"{KEEP_VERSIONS} installs old and its before-images are pruned"
        )
    p = store.dialect.param
    rows = store._query(
        f"SELECT {store._qk}, MIN(version) FROM {store._qlog} WHERE version > {p} AND version <= {p}"
        f"{' AND ' + range_sql if range_sql else ''} GROUP BY {store._qk}",
        (version, newest, *range_params),
    )
    return Overlay(version, newest, [(k, int(v)) for k, v in rows]) if rows else None
