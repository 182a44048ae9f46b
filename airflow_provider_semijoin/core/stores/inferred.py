"""Inferred members: placeholder rows for natural keys that reach the join before their dimension row.

Kimball's answer to a late-arriving dimension (The Data Warehouse Toolkit, 3rd ed., ch. 19,
"Late Arriving Dimensions"): a fact whose natural key the dimension does not hold yet gets a
placeholder row - the *inferred member* - inserted with that natural key, a surrogate key of its
own and a flag saying it is inferred; the fact carries that surrogate key, and the dimension's
later load UPDATEs the placeholder in place (clears the flag, fills the columns), so the key the
fact holds stays valid.

:class:`InferredMembers` writes them for one step, on a session of its own (the store's session
reads R inside snapshots):

* **one transaction per micro-batch**: every new key of the batch is inserted in one write
  transaction, and R's rows for all of the batch's unknown keys are read back in it, columnar
  (the key and the step's ``select``: the surrogate key and the placeholder's defaults);
* **idempotent by natural key**: inside that transaction it first reads which of the keys R
  holds and inserts only the others; writers take turns (MySQL/MariaDB: the provider's named
  lock of the table, :func:`.changes.writer_lock`; SQLite: ``BEGIN IMMEDIATE``), so two
  writers of one key make one placeholder, and a micro-batch replayed after a crash (its
  placeholders committed, the batch not) reads back the same keys instead of inserting again;
* **keys as R compares them**: in a collation that folds case or pads (``utf8mb4_general_ci``,
  SQLite's ``NOCASE``), spellings R calls equal are one key - one placeholder, spelled as the
  first tuple spelled it, whose row every spelling gets;
* **the surrogate key** comes from the table's own auto-increment (MySQL ``AUTO_INCREMENT``,
  SQLite's ``INTEGER PRIMARY KEY``) or, on MariaDB, from a configured ``sequence``
  (``NEXTVAL``) into the named ``surrogate_key`` column;
* **a type-2 dimension** (an as-of lookup, :mod:`..asof`): the placeholder is the key's one
  version, valid from the beginning of time (the earliest its ``valid_from`` column's type
  holds) and open-ended (``valid_to`` NULL, or the latest its type holds where it is NOT NULL) -
  Kimball's inferred member is for a natural key that does not exist yet, and the later load
  fills this row in place; a key R holds whose versions miss the event time is never inferred
  (its tuple is ``no_version_valid``). R's rows are read back with every version of a key, and
  the step keeps the one valid at each tuple's event time.

The placeholder INSERT is a change of R like any other writer's: a join that captures R's
changes (:mod:`.capture`) sees the key from then on; until it does, a tuple of that key leaves
the join unmatched again and this reads back the same placeholder (never a second one).

Checked when the step starts (:meth:`InferredMembers.check`), each failure one sentence naming
the field: the flag and default columns exist, every NOT NULL column without a default is
given a value (a type-2 placeholder's version columns are), the surrogate key is an
auto-increment column among the step's ``select`` or a sequence is configured, and the user may
insert into the table.
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigError, StoreError, shown
from .changes import writer_lock
from .reconnect import TransactionLost
from .sql import MYSQL, SQLITE, DatabaseURL, query_rows, write_transaction

KEYS_PER_QUERY = 500  # natural keys per ``IN (...)`` (SQLite's bound parameters, a MySQL packet)
ATTEMPTS = 5  # transactions redone after a lost session or a deadlock (MySQL)
DEADLOCK = 1213  # ER_LOCK_DEADLOCK: InnoDB rolled the transaction back; it is redone
# a type-2 placeholder's version: (the beginning of time, the end of time) of MariaDB's time types
# (TIMESTAMP's range, a day inside it: whatever the session's time zone), text (SQLite's ISO
# times) and epoch numbers
MYSQL_TIME_BOUNDS = {"datetime": ("1000-01-01 00:00:00", "9999-12-31 23:59:59"), "date": ("1000-01-01", "9999-12-31"),
                     "timestamp": ("1970-01-02 00:00:00", "2038-01-18 00:00:00")}
TEXT_TIME_BOUNDS = ("0001-01-01 00:00:00", "9999-12-31 23:59:59")
EPOCH_BOUNDS = (0, 2**31 - 1)


class ColumnFacts(NamedTuple):
    required: bool  # NOT NULL without a default
    filled: bool  # filled by the database: auto-increment
    nullable: bool
    sql_type: str  # lower case: MariaDB's DATA_TYPE, SQLite's declared type


def time_bounds(column: ColumnFacts, dialect) -> tuple:
    """The earliest and latest instant a version column of this type holds, as the value to insert:
    a MariaDB time type's, else epoch numbers' for a numeric type, else ISO text's (SQLite's
    DATETIME, a VARCHAR)."""
    if dialect is MYSQL and column.sql_type in MYSQL_TIME_BOUNDS:
        return MYSQL_TIME_BOUNDS[column.sql_type]
    numeric = any(word in column.sql_type for word in ("int", "dec", "num", "real", "floa", "doub"))
    return EPOCH_BOUNDS if numeric else TEXT_TIME_BOUNDS


def _driver_errors() -> tuple[type[Exception], ...]:
    try:
        import MySQLdb
    except ImportError:  # pragma: no cover - SQLite-only installs
        return (sqlite3.Error,)
    return sqlite3.Error, MySQLdb.Error


def _is_deadlock(exc: BaseException) -> bool:
    return bool(getattr(exc, "args", None)) and exc.args[0] == DEADLOCK


class InferredMembers:
    """The inferred members of one step's dimension R (``store``: the step's store of R, whose
    catalogue and ``select`` it reads); ``options``: the step's normalised ``inferred_member``
    (:func:`..job.spec.inferred_member_options`); ``where``: the field path errors start with;
    ``as_of``: the step's as-of lookup (:class:`..asof.AsOf`) on a type-2 R, or None."""

    def __init__(self, store, url: str, options: dict, where: str, retry_max_s: float | None = None, as_of=None):
        self.store, self.where, self.as_of = store, where, as_of
        self.flag_column = options["flag_column"]
        self.defaults = dict(options["defaults"])
        self.sequence, self.surrogate_key = options.get("sequence"), options.get("surrogate_key")
        self.inserted = 0  # placeholders this step inserted (replays that found them: not counted)
        self._versions = {}  # as_of: the placeholder's version columns and their values (:meth:`check`)
        self.connection = DatabaseURL.parse(url).connect(retry_max_s)
        try:
            self.check()
        except BaseException:
            self.connection.close()
            raise
        d = store.dialect
        values = [d.param] * (len(self._columns) - (self.sequence is not None))
        if self.sequence is not None:
            values.append(f"NEXTVAL({d.quote(self.sequence, 'sequence')})")
        self._insert_sql = (f"INSERT INTO {store.quoted_table} ({', '.join(d.quote(c) for c in self._columns)}) "
                            f"VALUES ({', '.join(values)})")
        # after the key: the flag, the defaults, the version
        self._row_values = (1, *self.defaults.values(), *self._versions.values())

    @property
    def _columns(self) -> list[str]:
        """The columns the placeholder's INSERT names: the key, the flag, the defaults, the version
        (as_of), and the surrogate key a sequence fills."""
        return [self.store.key, self.flag_column, *self.defaults, *self._versions,
                *([self.surrogate_key] if self.sequence else [])]

    # -- at start -------------------------------------------------------------------------------
    def check(self) -> None:
        """What the step needs of R to infer members (see the module); one sentence each."""
        store, where = self.store, self.where
        names = [c.name for c in store.columns]
        for field, column in (("flag_column", self.flag_column),
                              *((f"defaults.{name}", name) for name in self.defaults)):
            if column not in names:
                raise ConfigError(f"{where}.{field}: column {shown(column)} is not in table {store.table!r} "
                                  f"(columns: {names})")
        facts = self._column_facts()
        self._check_surrogate_key(facts)
        if self.as_of is not None:
            self._versions = self._placeholder_version(facts)
        lacking = [name for name, column in facts.items()
                   if column.required and not column.filled and name not in self._columns]
        if lacking:
            raise ConfigError(f"{where}.defaults: gives no value for column {lacking[0]!r} of {store.table!r}, "
                              "which is NOT NULL without a default; expected a value for it in defaults")
        self._check_may_insert()

    def _column_facts(self) -> dict[str, ColumnFacts]:
        """What the placeholder's INSERT must know of each column of R."""
        store = self.store
        if store.dialect is SQLITE:
            info = query_rows(self.connection, f"PRAGMA table_info({store.quoted_table})")
            keys = [row for row in info if row[5]]
            rowid = keys[0][1] if len(keys) == 1 and keys[0][2].upper() == "INTEGER" else None
            return {row[1]: ColumnFacts(bool(row[3]) and row[4] is None, row[1] == rowid, not row[3], row[2].lower())
                    for row in info}
        rows = query_rows(
            self.connection, "SELECT COLUMN_NAME, IS_NULLABLE, COLUMN_DEFAULT, EXTRA, DATA_TYPE FROM "
            "information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s", (store.table,))
        return {name: ColumnFacts(nullable == "NO" and default is None, "auto_increment" in (extra or "").lower(),
                                  nullable == "YES", sql_type.lower())
                for name, nullable, default, extra, sql_type in rows}

    def _placeholder_version(self, facts: dict[str, ColumnFacts]) -> dict:
        """A type-2 placeholder's ``{valid_from: the beginning of time, valid_to: NULL}`` (``valid_to``
        NOT NULL: the end of time), in the columns' types (the columns are R's: checked by the step)."""
        start, end = facts[self.as_of.valid_from], facts[self.as_of.valid_to]
        dialect = self.store.dialect
        return {self.as_of.valid_from: time_bounds(start, dialect)[0],
                self.as_of.valid_to: None if end.nullable else time_bounds(end, dialect)[1]}

    def _check_surrogate_key(self, facts: dict) -> None:
        store, where = self.store, self.where
        if self.sequence is None:
            auto = [name for name, column in facts.items() if column.filled]
            if not auto:
                raise ConfigError(f"{where}: table {store.table!r} has no auto-increment column for the placeholders' "
                                  "surrogate key; expected an AUTO_INCREMENT (SQLite: INTEGER PRIMARY KEY) column, or "
                                  "sequence and surrogate_key (MariaDB)")
            if auto[0] not in store.select:
                raise ConfigError(f"{where}: the surrogate key {auto[0]!r} (auto-increment) is not among the step's "
                                  f"master.select {store.select}; expected it there, so that the tuple gets its key")
            return
        if store.dialect is not MYSQL:
            raise ConfigError(f"{where}.sequence: {shown(self.sequence)} given, but SQLite has no sequences; expected "
                              "an INTEGER PRIMARY KEY surrogate key instead")
        if self.surrogate_key not in facts:
            raise ConfigError(f"{where}.surrogate_key: column {shown(self.surrogate_key)} is not in table "
                              f"{store.table!r} (columns: {list(facts)})")
        kind = query_rows(self.connection, "SELECT TABLE_TYPE FROM information_schema.TABLES "
                          "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s", (self.sequence,))
        if not kind or kind[0][0] != "SEQUENCE":
            raise ConfigError(f"{where}.sequence: {shown(self.sequence)} is not a sequence of the database; expected "
                              "one made by CREATE SEQUENCE")

    def _check_may_insert(self) -> None:
        """The placeholders' INSERT of no row: the database checks the user's right to insert these
        columns into R (and, strict, that the others have defaults), and writes nothing."""
        store = self.store
        columns = ", ".join(store.dialect.quote(c) for c in self._columns)
        try:
            query_rows(self.connection, f"INSERT INTO {store.quoted_table} ({columns}) "
                                        f"SELECT {columns} FROM {store.quoted_table} WHERE 1 = 0")
        except _driver_errors() as exc:
            raise ConfigError(f"{self.where}: cannot insert placeholders into {store.table!r} "
                              f"({exc.args[-1] if exc.args else exc}); expected a user who may write the table") from None

    # -- per micro-batch ------------------------------------------------------------------------
    def can_hold(self, keys) -> pa.Array:
        """Where a placeholder may be inferred for ``keys``: any integer key; a string key of at
        most the bytes of R's longest key when the join started (in a collation: its sort key;
        the join holds string keys at that width, and a captured insert of a longer one would
        stop it: such a tuple goes to the dead letter, ``not_in_master``)."""
        key_type = self.store.key_type
        if key_type.kind != "str":
            return pa.array(np.ones(len(keys), bool))
        if not (pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type) or pa.types.is_binary(keys.type)):
            return pa.array(np.zeros(len(keys), bool))  # no string: never R's key (bad_key)
        if key_type.collation is None:
            return pc.fill_null(pc.less_equal(pc.binary_length(keys), key_type.width), False)
        texts = keys.to_pylist()
        given = [t for t in texts if t is not None]
        widths = iter(len(k) for k in self._compared(given))
        return pa.array([t is not None and next(widths) <= key_type.width for t in texts], pa.bool_())

    def _compared(self, values: list) -> list:
        """Keys as R compares them: a collation's sort keys (bytes), else UTF-8 bytes or integers."""
        key_type = self.store.key_type
        if key_type.collation is not None:
            return [k.encode("utf-8") if isinstance(k, str) else bytes(k) for k in key_type.collation.sort_keys(values)]
        if key_type.kind == "str":
            return [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in values]
        return [int(v) for v in values]

    def rows_of(self, keys: pa.Array) -> pa.Table:
        """R's row for each of the distinct, non-null natural ``keys`` of a micro-batch's tuples that
        left the join unmatched, aligned with them (the key as R spells it, named as R names it,
        then the step's ``select``), placeholders inserted for the keys R lacks, all in one
        transaction (see the module). A key of several rows (1:K): its first."""
        rows, _ = self._rows_of(keys, every_row=False)
        return rows

    def versions_of(self, keys: pa.Array) -> tuple[pa.Table, np.ndarray]:
        """As :meth:`rows_of`, for an as-of lookup: every row (version) of each key, and the
        position in ``keys`` of each row's key; a placeholder is a key's one version."""
        return self._rows_of(keys, every_row=True)

    def _rows_of(self, keys: pa.Array, every_row: bool) -> tuple[pa.Table, np.ndarray]:
        values = keys.to_pylist()
        for attempt in range(ATTEMPTS):
            try:
                rows, inserted = self._infer_once(values)
                break
            except TransactionLost:  # the session went down inside the transaction: nothing of it stayed
                if attempt == ATTEMPTS - 1:
                    raise
            except _driver_errors() as exc:
                if not _is_deadlock(exc) or attempt == ATTEMPTS - 1:
                    raise
        self.inserted += inserted
        store = self.store
        found: dict = {}
        for key, row in zip(self._compared([row[0] for row in rows]), rows):
            found.setdefault(key, []).append(row)
        compared = self._compared(values)
        lost = [v for k, v in zip(compared, values) if k not in found]
        if lost:  # every key has its row, R's or its placeholder, unless the database compares otherwise
            raise StoreError(f"{self.where}: {store.table!r} returned no row for the inferred keys {lost[:3]}")
        of_key = [found[k] if every_row else found[k][:1] for k in compared]
        rows = [row for key_rows in of_key for row in key_rows]
        columns = list(zip(*rows)) if rows else [()] * (1 + len(store.select))
        arrays = [pa.array(columns[0], keys.type)]
        arrays += [pa.array(column, field.type) for column, field in zip(columns[1:], store.schema)]
        positions = np.repeat(np.arange(len(values)), [len(key_rows) for key_rows in of_key])
        return pa.Table.from_arrays(arrays, names=[store.key, *store.select]), positions

    def _infer_once(self, values: list) -> tuple[list[tuple], int]:
        store, d = self.store, self.store.dialect
        cursor = self.connection.cursor()
        try:
            with writer_lock(self.connection, cursor, store.table, "inferred_member"), \
                    write_transaction(self.connection, cursor):
                present = set(self._compared([row[0] for row in self._rows(cursor, store.quoted_key, values)]))
                new: dict = {}
                for key, value in zip(self._compared(values), values):
                    if key not in present:
                        new.setdefault(key, value)  # spellings R calls equal: one placeholder, the first's
                if new:
                    cursor.executemany(self._insert_sql, [(v, *self._row_values) for v in new.values()])
                columns = ", ".join([store.quoted_key, *(d.quote(c) for c in store.select)])
                return self._rows(cursor, columns, values), len(new)
        finally:
            cursor.close()

    def _rows(self, cursor, columns: str, values: list) -> list[tuple]:
        """``SELECT columns`` of R's rows with these keys as R compares them (SQLite: in the key
        index's collation, which may not be the column's), in key order per chunk of keys."""
        store, d = self.store, self.store.dialect
        collation = store.key_type.collation
        key = f"{store.quoted_key} COLLATE {collation.name}" if collation is not None and d is SQLITE else store.quoted_key
        found = []
        for at in range(0, len(values), KEYS_PER_QUERY):
            part = values[at:at + KEYS_PER_QUERY]
            cursor.execute(f"SELECT {columns} FROM {store.quoted_table} WHERE {key} IN "
                           f"({d.placeholders(len(part))}) ORDER BY {store.quoted_key}", tuple(part))
            found.extend(cursor.fetchall() or [])
        return found

    def close(self) -> None:
        with contextlib.suppress(*_driver_errors()):
            self.connection.close()
