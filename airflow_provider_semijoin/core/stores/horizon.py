"""How much of R's captured history is kept, and pruning what no reader needs (issue 68).

Every version of R leaves bookkeeping behind: its keys in the change log ``<R>__sj_changes``,
the rows they had in ``<R>__sj_before`` (:mod:`.versions`) and, captured from the binary log,
its position and commit time in ``<R>__sj_binlog``. Under triggers at 1,000 changed rows a
second that is some 86M rows a day. A reader at version ``v`` - a join's store, whose caches
reflect R at ``v`` (SSIJ sec. IV-E: "each stream tuple sees a consistent view of the database")
- needs every later version's log rows (which of its cached keys went stale) and before-images
(R read at a version older than the newest, :class:`.versions.Overlay`). Nothing below the
lowest ``v`` a reader still needs is read again.

* **Readers say what they need.** A store with a change log notes, before a snapshot and at
  most every :data:`NOTE_EVERY_S` seconds, the lowest version it may still read in
  ``semijoin_history_readers(table_name, reader, version, noted_at)`` (:func:`note_reader`).
* **The horizon** (:func:`horizon_of`): the lowest version of the readers noted within
  ``reader_ttl_s`` - a job stopped for a week, or a stream idle that long, no longer holds
  history back - and never above R's newest version less ``keep_versions``.
* **The pruner** (:func:`prune_history`) deletes every row below the horizon from the three
  tables in bounded write transactions, each reading the horizon anew under the write lock
  (SQLite's, or InnoDB's next-key lock on the readers' rows of R), the change log's rows first.
* **A reader below the horizon knows it.** Versions are dense (each has a row in the change
  log: :mod:`.capture`, :mod:`.changes`, :mod:`.binlog` write one at least), so R's history
  from ``oldest`` on is whole exactly when the log's lowest version is ``oldest``; a reader at
  ``v < oldest - 1`` lost versions it needs (:func:`pruned_past`). It notes itself before it
  looks, so a prune either saw its note or committed before the look. Such a store drops its
  page maps and the algorithm its caches, and R is read anew (:class:`.versioned.BelowHorizon`,
  one log line); a read pinned at a pruned version fails in one sentence.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import StoreError
from .binlog_positions import binlog_table
from .sql import MYSQL, SQLITE, dialect_of, side_tables, table_exists, write_transaction
from .versions import before_table

class HistoryPruned(StoreError):
    """Changes asked for are below R's horizon: pruned."""


READERS_TABLE = "semijoin_history_readers"
NOTE_EVERY_S = 30.0  # how often a reader notes the version it needs (before a snapshot)
READER_TTL_S = 3600.0  # a reader not noted for this long no longer holds history back
KEEP_VERSIONS = 100  # the newest versions kept whatever the readers (a replayed micro-batch reads near them)
BATCH_ROWS = 5_000  # rows of one table a prune transaction deletes
NOTE_WAIT_MS = 100  # SQLite: the longest a reader's note waits for another writer's lock


def create_readers_table(connection) -> None:
    """``semijoin_history_readers`` if missing (one for every captured table of the database)."""
    d = dialect_of(connection)
    engine = "" if d is SQLITE else " ENGINE=InnoDB"
    cursor = connection.cursor()
    try:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {d.quote(READERS_TABLE)} (table_name VARCHAR(64) NOT NULL, "
                       f"reader VARCHAR(64) NOT NULL, version BIGINT NOT NULL, noted_at DOUBLE NOT NULL, "
                       f"PRIMARY KEY (table_name, reader)){engine}")
    finally:
        cursor.close()


def note_reader(connection, table: str, reader: str, version: int, now: float) -> None:
    """Reader ``reader`` of R ``table`` may still read from ``version`` on (noted ``now``). On
    SQLite it waits at most :data:`NOTE_WAIT_MS` for another writer's lock (a reader notes before
    its snapshot, on a micro-batch's path: a locked file fails the note, tried again later)."""
    d = dialect_of(connection)
    upsert = "INSERT OR REPLACE" if d is SQLITE else "REPLACE"
    cursor = connection.cursor()
    try:
        if d is SQLITE:
            cursor.execute("PRAGMA busy_timeout")
            waited = cursor.fetchall()[0][0]
            cursor.execute(f"PRAGMA busy_timeout = {NOTE_WAIT_MS}")
        try:
            cursor.execute(f"{upsert} INTO {d.quote(READERS_TABLE)} (table_name, reader, version, noted_at) "
                           f"VALUES ({d.placeholders(4)})", (table, reader, int(version), float(now)))  # (autocommit)
        finally:
            if d is SQLITE:
                cursor.execute(f"PRAGMA busy_timeout = {int(waited)}")
    finally:
        cursor.close()


@dataclass(frozen=True)
class Reader:
    reader: str
    version: int
    noted_at: float


def readers_of(connection, table: str, *, lock: bool = False) -> list[Reader]:
    """The readers noted for R ``table`` (``lock``: inside a write transaction, so that no note
    lands until it ends: MySQL's ``FOR UPDATE``; SQLite's writers take turns anyway)."""
    d = dialect_of(connection)
    if not table_exists(connection, READERS_TABLE):
        return []
    cursor = connection.cursor()
    try:
        cursor.execute(f"SELECT reader, version, noted_at FROM {d.quote(READERS_TABLE)} WHERE table_name = {d.param} "
                       f"ORDER BY version{' FOR UPDATE' if lock and d is MYSQL else ''}", (table,))
        return [Reader(str(r), int(v), float(t)) for r, v, t in cursor.fetchall()]
    finally:
        cursor.close()


def _history_tables(connection, table: str) -> list[str]:
    """R's tables of history that exist, the change log first (:func:`prune_history`'s order)."""
    names = [side_tables(table)[0], before_table(table)]
    if dialect_of(connection) is MYSQL:
        names.append(binlog_table(table))
    return [n for n in names if table_exists(connection, n)]


def log_span(connection, table: str) -> tuple[int | None, int]:
    """The change log's lowest and highest version (None, 0: an empty log)."""
    d = dialect_of(connection)
    cursor = connection.cursor()
    try:
        cursor.execute(f"SELECT MIN(version), COALESCE(MAX(version), 0) FROM {d.quote(side_tables(table)[0])}")
        oldest, newest = cursor.fetchall()[0]
    finally:
        cursor.close()
    return (None if oldest is None else int(oldest)), int(newest)


def pruned_past(version: int, oldest: int | None) -> bool:
    """Whether a reader at ``version`` lost versions it needs: the log starts above ``version + 1``."""
    return oldest is not None and version < oldest - 1


@dataclass(frozen=True)
class Horizon:
    """R's history and how far it may go: every version below ``version`` may be pruned."""

    version: int
    oldest: int | None  # the log's lowest version now
    newest: int
    live: list[Reader]  # the readers that hold history back
    stale: list[Reader]  # noted longer than reader_ttl_s ago: they no longer do

    def as_dict(self) -> dict:
        return {"horizon": self.version, "oldest": self.oldest, "newest": self.newest,
                "live_readers": len(self.live), "stale_readers": len(self.stale),
                "lowest_live_reader": min((r.version for r in self.live), default=None)}


def horizon_of(connection, table: str, now: float, *, reader_ttl_s: float = READER_TTL_S,
               keep_versions: int = KEEP_VERSIONS, lock: bool = False) -> Horizon:
    """The horizon of R ``table`` at ``now`` (module docstring)."""
    oldest, newest = log_span(connection, table)
    readers = readers_of(connection, table, lock=lock)
    live = [r for r in readers if now - r.noted_at <= reader_ttl_s]
    stale = [r for r in readers if now - r.noted_at > reader_ttl_s]
    # a reader at v needs versions v + 1 on: everything below v + 1 may go
    bound = min([newest - keep_versions + 1, *(r.version + 1 for r in live)])
    return Horizon(max(bound, oldest or 0), oldest, newest, live, stale)


@dataclass(frozen=True)
class Pruned:
    horizon: Horizon
    rows: dict[str, int]  # rows deleted, by table
    transactions: int
    done: bool  # nothing below the horizon is left (False: max_transactions ended it first)


def prune_history(connection, table: str, now: float, *, reader_ttl_s: float = READER_TTL_S,
                  keep_versions: int = KEEP_VERSIONS, batch_rows: int = BATCH_ROWS,
                  max_transactions: int | None = None) -> Pruned:
    """Delete R's history below its horizon, ``batch_rows`` rows of a table a transaction, the
    horizon read anew under each transaction's write lock, the change log's rows first (so the
    log's lowest version says what is gone before any before-image of it goes); stale readers'
    notes go at the end. Off any join's critical path: a connection of its own."""
    if keep_versions < 1 or batch_rows < 1:
        raise StoreError(f"prune: keep_versions ({keep_versions}) and batch_rows ({batch_rows}) must be at least 1")
    d = dialect_of(connection)
    tables = _history_tables(connection, table)
    if not tables or tables[0] != side_tables(table)[0]:
        raise StoreError(f"prune: {table!r} has no change log; nothing captures its history")
    deleted, transactions, horizon = dict.fromkeys(tables, 0), 0, None
    cursor = connection.cursor()
    try:
        while max_transactions is None or transactions < max_transactions:
            with write_transaction(connection, cursor):
                horizon = horizon_of(connection, table, now, reader_ttl_s=reader_ttl_s,
                                     keep_versions=keep_versions, lock=True)
                for name in tables:  # the first table with rows below: its oldest batch_rows go
                    rows = _delete_below(cursor, d, name, horizon.version, batch_rows)
                    deleted[name] += rows
                    if rows:
                        break
            transactions += 1
            if not rows:  # nothing below the horizon was left
                break
        else:
            return Pruned(horizon, deleted, transactions, done=False)
        if horizon.stale:
            with write_transaction(connection, cursor):
                cursor.execute(f"DELETE FROM {d.quote(READERS_TABLE)} WHERE table_name = {d.param} "
                               f"AND noted_at < {d.param}", (table, now - reader_ttl_s))
    finally:
        cursor.close()
    return Pruned(horizon, deleted, transactions, done=True)


def _delete_below(cursor, d, name: str, version: int, batch_rows: int) -> int:
    """At most ``batch_rows`` of table ``name``'s rows below ``version``, the oldest first."""
    if d is SQLITE:  # (DELETE ... LIMIT needs a compile-time option)
        cursor.execute(f"DELETE FROM {d.quote(name)} WHERE rowid IN (SELECT rowid FROM {d.quote(name)} "
                       f"WHERE version < ? ORDER BY version LIMIT ?)", (version, batch_rows))
    else:
        cursor.execute(f"DELETE FROM {d.quote(name)} WHERE version < %s ORDER BY version LIMIT %s", (version, batch_rows))
    return int(cursor.rowcount)


def history_rows(connection, table: str) -> dict[str, int]:
    """The rows of each of R's tables of history (``semijoin changes status``)."""
    d = dialect_of(connection)
    counts = {}
    cursor = connection.cursor()
    try:
        for name in _history_tables(connection, table):
            cursor.execute(f"SELECT COUNT(*) FROM {d.quote(name)}")
            counts[name] = int(cursor.fetchall()[0][0])
    finally:
        cursor.close()
    return counts

