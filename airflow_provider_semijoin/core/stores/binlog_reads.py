"""Reading an R whose changes the binary log's capture writes (:mod:`.binlog`): one version a snapshot.

SSIJ sec. IV-E: "each stream tuple sees a consistent view of the database: either the relation
instance before or the relation instance after an update". The capture writes a version only
after its transaction committed, so inside a consistent snapshot of R the change log may lack
the newest versions that R already shows. A snapshot therefore learns its version from its own
binary log position (MariaDB's ``binlog_snapshot_position``, :func:`.binlog.wait_captured`), and
reads the change log and the before-images on a second session, outside the snapshot: the log
only grows, so the versions up to the snapshot's are final there (:class:`SideSession`).

R at an older version (the parts of a micro-batch, a slice after the stepping ahead,
:meth:`.versioned.VersionedReads.reading_at`) is R in the snapshot with the rows of the keys
changed since replaced by their before-images, merged in Python (:class:`BinlogOverlay`): the
SQL overlay of :mod:`.versions` reads the log inside the snapshot, where it may be incomplete.

The capture itself, a writer of R's change tables, is :mod:`.binlog` (and its
:class:`.binlog.BinlogFollower`, the capturer thread of a running job).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from ..errors import StoreError
from .binlog_positions import snapshot_position, wait_captured
from .sql import query_rows
from .versions import first_before_images_sql

WAIT_CAPTURED_S = 30.0  # how long a snapshot waits for the capture to reach its position


class SideSession:
    """The store's second session (autocommit: each query sees the newest committed rows), for
    the change log and before-images of a binlog-captured R, made on first use."""

    def __init__(self, store):
        self._store = store
        self._connection = None

    @property
    def connection(self):
        if self._connection is None:
            self._connection = self._store._sibling_connection()
            if self._connection is None:
                raise StoreError(
                    f"binlog capture: the reads of {self._store.table!r} need a second session to its database; "
                    "open the store from a URL (open_store), not from a connection handed in"
                )
        return self._connection

    def query(self, sql: str, params=(), raw: bool = False) -> list[tuple]:
        connection = self.connection
        converter = getattr(connection, "converter", None)
        if raw and isinstance(converter, dict):  # bytes, as the store's own raw reads (:meth:`.mysql.MySqlStore._raw_values`)
            connection.converter = {}
        try:
            return query_rows(connection, sql, params)
        finally:
            if raw and isinstance(converter, dict):
                connection.converter = converter

    def close(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(Exception):
                self._connection.close()
            self._connection = None


def snapshot_version(store) -> int:
    """Inside a consistent snapshot just begun on ``store``'s session: the version of R in it."""
    cursor = store.connection.cursor()
    try:
        position = snapshot_position(cursor)
    finally:
        cursor.close()
    return wait_captured(store.side.connection, store.table, position.file, position.pos, WAIT_CAPTURED_S)


@dataclass(frozen=True)
class BinlogOverlay:
    """R at ``version`` read inside a snapshot at ``newest``: R's rows but those of the keys
    changed in between, plus each such key's before-image of its first change after ``version``
    (none: the key was inserted since), read on the side session."""

    version: int
    newest: int

    def rows(self, store, where: str, params: list, suffix: str = "") -> list[tuple]:
        """The rows of R at ``version`` that satisfy ``where``, in key order, raw as
        :meth:`.base.MasterStore._execute` returns them (the key, or its sort key, first);
        ``suffix``: nothing or `` LIMIT n`` (the first n of them)."""
        limit = _limit(suffix)
        d, qlog = store.dialect, store._qlog
        span = [self.version, self.newest]
        changed = {r[0] for r in store.side.query(
            f"SELECT DISTINCT {store.page_key_sql()} FROM {qlog} WHERE version > {d.param} AND version <= {d.param}",
            span, raw=True)}
        more = "" if limit is None else f" ORDER BY {store.page_key_sql()} LIMIT {limit + len(changed)}"  # n left once they go
        own = [r for r in store._execute(f"{store._select_sql} WHERE {where}{more}", params, raw=True) if r[0] not in changed]
        before = store.side.query(first_before_images_sql(store, store._cols_sql, where), [*params, *span, *span], raw=True)
        order = (lambda r: int(r[0])) if store.key_type.kind == "int" else (lambda r: bytes(r[0]))
        return sorted(own + before, key=order)[:limit]


def _limit(suffix: str) -> int | None:
    """The n of a query suffix `` LIMIT n`` (None: no suffix)."""
    words = suffix.split()
    if not words:
        return None
    if len(words) != 2 or words[0].upper() != "LIMIT" or not words[1].isdigit():
        raise StoreError(f"binlog overlay: a read of R ending {suffix!r} (expected nothing or ' LIMIT n')")
    return int(words[1])


def binlog_overlay(store, version: int, newest: int, keep: int) -> BinlogOverlay | None:
    """How to read R at ``version`` inside a snapshot at ``newest`` (None: R itself is it);
    versions more than ``keep`` old have lost their before-images (the capture prunes them)."""
    if version == newest:
        return None
    if version > newest:
        raise StoreError(f"version: R {store.table!r} is at version {newest} in this snapshot, older than the "
                         f"version {version} the micro-batch reads at (does every part read the same database?)")
    if version < newest - keep:
        raise StoreError(f"version: R {store.table!r} is at version {newest}; version {version} is more than "
                         f"{keep} captured transactions old and its before-images are pruned")
    return BinlogOverlay(version, newest)
