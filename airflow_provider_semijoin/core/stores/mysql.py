"""R in MySQL / MariaDB (InnoDB), through mysqlclient: the production master-data store."""

from __future__ import annotations

import contextlib

from ..errors import StoreError
from .base import ColumnInfo, MasterStore, arrow_type_for
from .sql import MYSQL, NOPAD_BINARY_COLLATIONS


class MySqlStore(MasterStore):
    """R as a MySQL/MariaDB table.

    ``connection`` is a DB-API connection (``MySQLdb.connect(...)``, or Airflow's
    ``MySqlHook.get_conn()``); it should be in autocommit mode, so that every query sees the
    latest committed version of R rather than one REPEATABLE READ snapshot forever. A string
    key needs a binary NO PAD collation (``utf8mb4_nopad_bin`` on MariaDB, ``utf8mb4_0900_bin`` on
    MySQL 8) or a ``VARBINARY`` type: the join compares keys byte
    for byte, and only then does the index order agree with it.
    """

    dialect = MYSQL

    def _describe(self) -> list[ColumnInfo]:
        rows = self._catalogue(
            "SELECT COLUMN_NAME, COLUMN_TYPE, DATA_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE, "
            "COLLATION_NAME, CHARACTER_SET_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        )
        columns = []
        for name, column_type, data_type, precision, scale, collation, charset in rows:
            if name == self.key and collation and collation not in NOPAD_BINARY_COLLATIONS:
                raise StoreError(
                    f"key: column {name!r} of {self.table!r} has collation {collation}; expected a "
                    f"binary NO PAD collation {list(NOPAD_BINARY_COLLATIONS)} (ALTER TABLE {self.table} "
                    f"MODIFY {name} {column_type} COLLATE utf8mb4_nopad_bin) so that keys compare and "
                    "sort byte for byte"
                )
            declaration = f"{column_type} CHARACTER SET {charset} COLLATE {collation}" if collation else column_type
            columns.append(ColumnInfo(name, column_type, arrow_type_for(data_type, precision, scale), declaration))
        return columns

    def _indexes(self) -> list[tuple[str, bool]]:
        rows = self._catalogue(
            "SELECT COLUMN_NAME, NON_UNIQUE, INDEX_NAME FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s AND SEQ_IN_INDEX = 1",
        )
        found = []
        for column, non_unique, index_name in rows:
            # a unique index is only unique on its first column if it has no second one
            columns = self._catalogue(
                "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
                "AND TABLE_NAME = %s AND INDEX_NAME = %s",
                (index_name,),
            )[0][0]
            found.append((column, int(non_unique) == 0 and int(columns) == 1))
        return found

    def _catalogue(self, sql: str, extra=()) -> list[tuple]:
        cursor = self.connection.cursor()
        try:
            cursor.execute(sql, (self.table, *extra))
            return list(cursor.fetchall())
        finally:
            cursor.close()

    @contextlib.contextmanager
    def _raw_values(self):
        """mysqlclient converts every field to a Python object through ``connection.converter``;
        without converters it hands over the bytes, and Arrow casts whole columns instead."""
        converter = getattr(self.connection, "converter", None)
        if not isinstance(converter, dict):  # another driver: leave it as it is
            yield
            return
        self.connection.converter = {}
        try:
            yield
        finally:
            self.connection.converter = converter

    def _begin_snapshot(self) -> bool:
        """A REPEATABLE READ transaction whose read view starts now (InnoDB's consistent read)."""
        self._query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        self._query("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        return True

    def _key_width_sql(self) -> str:
        return f"SELECT MAX(LENGTH({self._qk})) FROM {self._qt}"
