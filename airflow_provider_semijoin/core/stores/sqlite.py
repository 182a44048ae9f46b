"""R in SQLite, the embedded default: no server, runs anywhere."""

from __future__ import annotations

import sqlite3

import pyarrow as pa

from ..errors import StoreError
from ..keys import KeyType
from .base import ColumnInfo, MasterStore
from .collation import SQLITE_COLLATIONS, FoldedCollation
from .sql import SQLITE


def _sqlite_arrow_type(declared: str) -> pa.DataType:
    """SQLite's type affinity rules (sec. 3.1 of its datatype docs) mapped to Arrow."""
    t = (declared or "").upper()
    if "INT" in t:
        return pa.int64()
    if any(s in t for s in ("CHAR", "CLOB", "TEXT")):
        return pa.string()
    if "BLOB" in t or not t:
        return pa.binary()
    if any(s in t for s in ("REAL", "FLOA", "DOUB")):
        return pa.float64()
    if t.startswith("BOOL"):
        return pa.int64()
    if t.startswith(("DEC", "NUMERIC")):
        return pa.float64()
    return pa.string()  # DATE, DATETIME, ...: SQLite keeps them as text


class SqliteStore(MasterStore):
    """R as a SQLite table; ``connection`` is a ``sqlite3.Connection``."""

    dialect = SQLITE

    def __init__(self, connection: sqlite3.Connection, table: str, key: str, select=None):
        super().__init__(connection, table, key, select)

    def _describe(self) -> list[ColumnInfo]:
        rows = self.connection.execute(f"PRAGMA table_info({self.quoted_table})").fetchall()
        return [ColumnInfo(r[1], r[2], _sqlite_arrow_type(r[2]), r[2]) for r in rows]

    def _index_columns(self):
        """``(unique, key columns)`` of every index: ``index_xinfo`` rows (seqno, cid, name,
        desc, collation, key)."""
        for _, name, unique, *_ in self.connection.execute(f"PRAGMA index_list({self.quoted_table})").fetchall():
            info = self.connection.execute(f"PRAGMA index_xinfo({SQLITE.quote_char}{name}{SQLITE.quote_char})")
            yield bool(unique), [row for row in info.fetchall() if row[5]]

    def _indexes(self) -> list[tuple[str, bool]]:
        found = []
        for unique, columns in self._index_columns():
            if columns:
                found.append((columns[0][2], unique and len(columns) == 1))  # UNIQUE (nk, v): nk repeats
        # an INTEGER PRIMARY KEY is the rowid itself: indexed and unique, but not in index_list
        for _, name, declared, _, _, pk in self.connection.execute(f"PRAGMA table_info({self.quoted_table})"):
            if pk == 1 and declared.upper() == "INTEGER":
                found.append((name, True))
        return found

    def leaf_rows(self) -> float:
        """Rows per b-tree page: SQLite's page size over a loaded row's bytes (rows are
        written in key order, so an index lookup's neighbours share pages)."""
        page_bytes = self.connection.execute("PRAGMA page_size").fetchone()[0]
        return max(1.0, float(page_bytes) / self.row_bytes())

    def _key_type(self, column: ColumnInfo) -> KeyType:
        """A string key in ``NOCASE`` or ``RTRIM`` (its index's collation, which is the column's
        unless the index says otherwise) is compared as the collation compares it."""
        key_type = super()._key_type(column)
        names = {cols[0][4].upper() for _, cols in self._index_columns() if cols and cols[0][2] == self.key}
        if key_type.kind != "str" or names <= {"BINARY"}:
            return key_type
        if len(names) > 1 or not names <= set(SQLITE_COLLATIONS):
            raise StoreError(
                f"key: the indexes of {self.table!r} on {self.key!r} have collations {sorted(names)}; "
                f"expected one of {list(SQLITE_COLLATIONS)}"
            )
        return KeyType("str", key_type.width, FoldedCollation(names.pop(), key_type.width))

    def _sibling_connection(self):
        """The database file opened again (None for an in-memory database)."""
        files = [row[2] for row in self.connection.execute("PRAGMA database_list") if row[1] == "main"]
        if not files or not files[0]:
            return None
        return sqlite3.connect(files[0], isolation_level=None, check_same_thread=False)

    def _begin_snapshot(self) -> bool:
        """A read transaction: its snapshot starts with its first read (in WAL mode, installs go
        on meanwhile; :func:`.changes.create_change_tables` switches the database to WAL)."""
        if self.connection.in_transaction:
            return False
        self.bookkeeping_query("BEGIN")
        return True

    def _key_width_sql(self) -> str:
        return f"SELECT MAX(LENGTH(CAST({self.quoted_key} AS BLOB))) FROM {self.source_sql}"
