"""The versions of R and the snapshots the joins read it in (SSIJ sec. IV-E), for the SQL stores.

R's change log (``<R>__sj_changes``, :mod:`.changes`) numbers the installed change batches; a
snapshot is one consistent read of R for everything loaded inside it, at the newest version or
at the version a micro-batch chose for all its parts (:meth:`VersionedReads.reading_at`, read
through the before-images of :mod:`.versions`). :class:`VersionedReads` is the half of
:class:`.base.MasterStore` that does this; the other half pages R.
"""

from __future__ import annotations

import contextlib
import logging
import uuid

import numpy as np

from ..errors import ConfigError, StoreError
from ..keys import sorted_distinct
from .binlog_positions import binlog_table
from .binlog_reads import binlog_overlay, snapshot_version
from .horizon import (NOTE_EVERY_S, READERS_TABLE, HistoryPruned, create_readers_table, log_span, note_reader,
                      pruned_past)
from .sql import MYSQL, side_tables, table_exists
from .triggers import capture_enabled
from .versions import KEEP_CAPTURED_VERSIONS, before_table, key_version_index_lookup, overlay


log = logging.getLogger(__name__)


class SnapshotLost(StoreError):
    """A lost session ended a snapshot of R and the version of R moved meanwhile."""


class BelowHorizon(SnapshotLost):
    """R's history was pruned past the version a store's caches reflect (:mod:`.horizon`): which
    of its keys went stale since cannot be known. The store has dropped its page maps and moved
    to R's newest version; the caller drops what it cached and reads R anew (as after a
    :class:`SnapshotLost`)."""


class VersionedReads:
    """The change log and snapshots of a SQL store. Mixed into :class:`.base.MasterStore`, whose
    connection, dialect, key type, key range and page maps (``_page_maps``) it uses."""

    reader_id: str = ""  # this store as a reader of R's history (:mod:`.horizon`), set on the first note
    _noted_at = float("-inf")  # when it last noted the version it needs
    _note_failed = False  # a note was refused (said once in the log)

    def _log_query(self, sql: str, params=()) -> list[tuple]:
        """A query of R's change log: on the side session when the binary log's capture writes
        it (inside a snapshot it may lack versions R already shows, :mod:`.binlog_reads`)."""
        return self.side.query(sql, params) if self._binlog else self.bookkeeping_query(sql, params)

    def bookkeeping_query(self, sql: str, params=()) -> list[tuple]:
        """A bookkeeping query (change log, transactions): not counted as I/O on R."""
        cursor = self.connection.cursor()
        try:
            cursor.execute(sql, tuple(params))
            return list(cursor.fetchall() or [])
        finally:
            cursor.close()

    def has_change_log(self) -> bool:
        """Whether R has a change log (``<R>__sj_changes``, see :mod:`.changes`)."""
        if not self._has_change_log:
            try:
                log, _ = side_tables(self.table)
            except ConfigError:  # a name too long for change tables: R cannot have them
                return False
            self._has_change_log = table_exists(self.connection, log)
            self._qlog = self.dialect.quote(log)
            if self._has_change_log and self.dialect is MYSQL:
                self._binlog = table_exists(self.connection, binlog_table(self.table))
                self.before_by_key = bool(self.bookkeeping_query(*key_version_index_lookup(before_table(self.table))))
        return self._has_change_log

    def captured_from_binlog(self) -> bool:
        """Whether R's change log is written by its binary log's capture (:mod:`.binlog`)."""
        return self.has_change_log() and self._binlog

    def look_for_change_tables(self) -> None:
        """Forget that R had no change tables or capture (kept once found): after a capture was
        enabled on R, the next look finds them."""
        self._has_change_log = self._captures_writes = False

    def captures_writes(self) -> bool:
        """Whether every writer's changes to R become versions (:mod:`.capture`'s triggers);
        checked until they are there, then kept."""
        if not self._captures_writes and self.has_change_log():
            self._captures_writes = self._binlog or capture_enabled(self)
        return self._captures_writes

    def version(self) -> int:
        """The version of R: how many change batches were installed (0 without a change log)."""
        if not self.has_change_log():
            return 0
        return int(self._log_query(f"SELECT COALESCE(MAX(version), 0) FROM {self._qlog}")[0][0])

    def committed_at(self, version: int) -> float | None:
        """When the transaction of ``version`` committed (seconds since the epoch; the binary
        log's clock, whole seconds) for an R captured from the binary log; None otherwise: the
        capture triggers and the installs record no time."""
        if version <= 0 or not self.captured_from_binlog():
            return None
        rows = self._log_query(f"SELECT committed_at FROM {self.dialect.quote(binlog_table(self.table))} "
                               f"WHERE version = {self.dialect.param}", (int(version),))
        return float(rows[0][0]) if rows and rows[0][0] is not None else None

    def changes_since(self, version: int, upto: int | None = None, *, horizon_checked: bool = False) -> tuple[int, np.ndarray]:
        """``(new version, distinct keys changed after version)``, the keys in R's key dtype;
        ``upto``: the keys changed in ``(version, upto]`` (and ``upto`` as the new version).
        A restricted store (:meth:`restrict`) hands out the keys of its range only. Changes
        pruned from R's history (:mod:`.horizon`) raise :class:`.horizon.HistoryPruned` (unless
        the caller looked already: ``horizon_checked``)."""
        new = self.version() if upto is None else upto
        if new <= version:
            return new, np.zeros(0, self.key_type.dtype)
        if not horizon_checked and pruned_past(version, oldest := self._log_oldest()):
            raise HistoryPruned(f"changes: the history of {self.table!r} is kept from version {oldest - 1} on; "
                                f"the changes after version {version} were pruned")
        p = self.dialect.param
        in_range, range_params = self._key_range_sql()
        texts = "" if self.page_key_sql() == self.quoted_key else f", {self.quoted_key}"  # sort keys: their text too
        rows = self._log_query(
            f"SELECT DISTINCT {self.page_key_sql()}, op{texts} FROM {self._qlog} WHERE version > {p} AND version <= {p}"
            f"{' AND ' + in_range if in_range else ''}",
            (int(version), new, *range_params),
        )
        return new, self._changed_keys(rows)

    def _changed_keys(self, rows: list[tuple]) -> np.ndarray:
        """Rows ``(key, op)`` of the change log -> R's distinct changed keys, in its key dtype."""
        keys = [r[0] for r in rows]
        if self.key_type.kind == "str":
            encoded = [k.encode("utf-8") if isinstance(k, str) else bytes(k) for k in keys]
            too_long = [(k, op) for k, (_, op) in zip(encoded, rows) if len(k) > self.key_type.width]
            inserted = [k for k, op in too_long if op == "U"]
            if inserted:
                raise StoreError(
                    f"key: an installed change puts key {inserted[0].decode('utf-8')!r} into {self.table!r}, "
                    f"longer than the {self.key_type.width} bytes of its longest key when the join started; "
                    "string keys are held at that width, so restart the join to see it"
                )
            gone = {k for k, _ in too_long}  # deleted keys longer than any key R had: never cached
            keys = [k for k in encoded if k not in gone]
        return sorted_distinct(self.key_type.from_db(keys))

    def note_changes(self, keys: np.ndarray) -> None:
        """Keys of R changed: every page map keeps covering R, so a key inserted below R's
        smallest or above its largest key is not declared absent without I/O."""
        if len(keys):
            ordered = np.sort(keys)  # (numpy has no min/max of byte strings)
            for page_map in self._page_maps.values():
                page_map.cover(ordered[0], ordered[-1])

    @contextlib.contextmanager
    def snapshot(self):
        """One consistent read of R for everything loaded inside (SSIJ sec. IV-E: "each stream
        tuple sees a consistent view of the database: either the relation instance before or
        the relation instance after an update").

        Yields the keys changed since :attr:`seen_version`, read from the change log inside the
        snapshot, after the page maps were widened for them (:meth:`note_changes`); the caller
        drops what it cached of them before any probe. :attr:`seen_version` becomes the
        snapshot's version: the newest one, or :attr:`read_version` when set
        (:meth:`reading_at`; R at that version through the before-images, :mod:`.versions`).
        Re-entrant: an inner snapshot is part of the outer one and yields no keys. One store
        serves one algorithm: the changed keys are handed out once.
        """
        if self._in_snapshot:
            yield np.zeros(0, self.key_type.dtype)
            return
        began_at = self.wall_clock()
        self._note_horizon(began_at)  # before the look (:mod:`.horizon`): a prune saw the note, or ended before
        began = self._begin_snapshot()
        self._in_snapshot = True
        try:
            oldest, newest = self._log_ends()
            version = newest if self.read_version is None else self.read_version
            self._check_horizon(oldest, newest)
            if self._binlog:
                self._overlay = binlog_overlay(self, version, newest, KEEP_CAPTURED_VERSIONS)
            else:
                self._overlay = overlay(self, version, newest, *self._key_range_sql(), pruned=not self.captures_writes())
            low, high = sorted((self.seen_version, version))
            changed = self.changes_since(low, high, horizon_checked=True)[1]
            if self._overlay is not None:  # keys R has at version but not at newest stay covered
                self.note_changes(self.changes_since(version, newest, horizon_checked=True)[1])
            self.note_changes(changed)
            self.seen_version = version
            self.read_at = began_at if self.read_version is None else self.pinned_at
            yield changed
        finally:
            self._in_snapshot = False
            self._overlay = None
            if began:
                self.bookkeeping_query("COMMIT")

    def _log_ends(self) -> tuple[int | None, int]:
        """Inside a snapshot just begun: the change log's lowest version (None: an empty log) and
        R's version in the snapshot - one query, two for an R captured from the binary log."""
        if self._binlog:
            newest = snapshot_version(self)
            return self._log_oldest(), newest
        if not self.has_change_log():
            return None, 0
        return log_span(self.connection, self.table)

    def _log_oldest(self) -> int | None:
        """The change log's lowest version (None: an empty log)."""
        oldest = self._log_query(f"SELECT MIN(version) FROM {self._qlog}")[0][0]
        return None if oldest is None else int(oldest)

    def _check_horizon(self, oldest: int | None, newest: int) -> None:
        """A read pinned at a pruned version fails in one sentence; a store whose caches reflect
        a pruned version moves to ``newest`` and raises :class:`BelowHorizon` (:mod:`.horizon`)."""
        if self.read_version is not None and pruned_past(self.read_version, oldest):
            raise StoreError(
                f"version: the history of {self.table!r} is kept from version {oldest - 1} on; version "
                f"{self.read_version}, which this read is pinned at (a replayed micro-batch), was pruned "
                "(`semijoin changes status` shows the horizon)")
        if pruned_past(self.seen_version, oldest):
            seen, self.seen_version = self.seen_version, newest
            self.forget_page_maps()
            log.warning("%s: R's history was pruned past version %d, which this reader's caches reflect "
                        "(kept from version %d on); reading R anew at version %d", self.table, seen, oldest - 1, newest)
            raise BelowHorizon(f"the history of {self.table!r} was pruned past version {seen}, which this "
                               f"reader's caches reflect; R is read anew at version {newest}")

    def _note_horizon(self, now: float) -> None:
        """Note, at most every NOTE_EVERY_S seconds and outside any transaction, the lowest version
        this store may still read (:mod:`.horizon`); a refused note is said once in the log and
        tried again later (the store still knows when it is below the horizon)."""
        if now - self._noted_at < NOTE_EVERY_S or getattr(self.connection, "in_transaction", False) \
                or not self.has_change_log():
            return
        needs = self.seen_version if self.read_version is None else min(self.seen_version, self.read_version)
        try:
            if not self.reader_id:
                if not table_exists(self.connection, READERS_TABLE):  # (a database captured before it existed)
                    create_readers_table(self.connection)
                self.reader_id = uuid.uuid4().hex[:16]
            note_reader(self.connection, self.table, self.reader_id, needs, now)
        except Exception as exc:  # noqa: BLE001 - a read-only user, a locked SQLite file: the join goes on
            if not self._note_failed:
                log.warning("%s: could not note the version this reader needs (%s); a pruner will not wait for it",
                            self.table, str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
            self._note_failed = True
            return
        self._noted_at = now

    @contextlib.contextmanager
    def reading_at(self, version: int, at: float | None = None):
        """Snapshots inside read R at ``version`` (chosen once for all parts of a micro-batch),
        even when a newer one was installed meanwhile (:mod:`.versions`); ``at``: when
        ``version`` was R's newest (:attr:`read_at` of the snapshots inside; None: unknown)."""
        saved = self.read_version, self.pinned_at
        self.read_version, self.pinned_at = int(version), at
        try:
            yield self
        finally:
            self.read_version, self.pinned_at = saved

    def _begin_snapshot(self) -> bool:
        """Start a read transaction (True) or join one the connection already has (False)."""
        raise NotImplementedError

    def reconnected(self, waited_s: float, in_snapshot: bool) -> None:
        """The connection lost its session and opened a new one (:mod:`.reconnect`), after
        ``waited_s`` seconds. Inside a snapshot the new session entered a new one: it must see
        the version of R this one saw, or the tuples of the run would see two
        (:class:`SnapshotLost`; :func:`..runner.run_join` then runs again from the start). The
        server may have restarted with R changed: the page maps are widened to R's key range."""
        self.counters.reconnects += 1
        self.counters.reconnect_wait_s += waited_s
        if in_snapshot and self._in_snapshot and self.has_change_log():
            version = self.version()
            if version != self.seen_version:
                raise SnapshotLost(
                    f"the session to the database was lost inside a snapshot of {self.table!r} at version "
                    f"{self.seen_version}, and R is at version {version} now"
                )
        self.cover_r()

    def cover_r(self) -> None:
        """Widen the page maps to R's smallest and largest key now (after a reconnect: the
        server may have restarted with R changed)."""
        if self._page_maps:
            lo, hi = self.key_ends()  # as page keys (a collation's sort keys, :mod:`.collation`)
            if lo is not None:
                self.note_changes(np.array([lo, hi], dtype=self.key_type.dtype))
