"""R in SQLite, the embedded default: no server, runs anywhere."""

from __future__ import annotations

import sqlite3

import pyarrow as pa

from .base import ColumnInfo, MasterStore
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
        rows = self.connection.execute(f"PRAGMA table_info({self._qt})").fetchall()
        return [ColumnInfo(r[1], r[2], _sqlite_arrow_type(r[2]), r[2]) for r in rows]

    def _indexes(self) -> list[tuple[str, bool]]:
        found = []
        for _, name, unique, *_ in self.connection.execute(f"PRAGMA index_list({self._qt})"):
            info = self.connection.execute(f"PRAGMA index_info({SQLITE.quote_char}{name}{SQLITE.quote_char})").fetchall()
            if info:
                found.append((info[0][2], bool(unique) and len(info) == 1))  # UNIQUE (nk, v): nk repeats
        # an INTEGER PRIMARY KEY is the rowid itself: indexed and unique, but not in index_list
        for _, name, declared, _, _, pk in self.connection.execute(f"PRAGMA table_info({self._qt})"):
            if pk == 1 and declared.upper() == "INTEGER":
                found.append((name, True))
        return found

    def _begin_snapshot(self) -> bool:
        """A read transaction: its snapshot starts with its first read (in WAL mode, installs go
        on meanwhile; :func:`.changes.create_change_tables` switches the database to WAL)."""
        if self.connection.in_transaction:
            return False
        self._query("BEGIN")
        return True

    def _key_width_sql(self) -> str:
        return f"SELECT MAX(LENGTH(CAST({self._qk} AS BLOB))) FROM {self._qt}"
