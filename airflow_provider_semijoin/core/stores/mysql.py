"""R in MySQL / MariaDB (InnoDB), through mysqlclient: the production master-data store."""

from __future__ import annotations

import contextlib

import numpy as np

from ..errors import StoreError
from ..keys import KeyType, sorted_distinct
from .base import ColumnInfo, MasterPage, MasterStore, PageMap, arrow_type_for
from .collation import Collation, probe
from .sql import MYSQL, NOPAD_BINARY_COLLATIONS


class MySqlStore(MasterStore):
    """R as a MySQL/MariaDB table.

    ``connection`` is a DB-API connection (``MySQLdb.connect(...)``, or Airflow's
    ``MySqlHook.get_conn()``); it should be in autocommit mode, so that every query sees the
    latest committed version of R rather than one REPEATABLE READ snapshot forever. A string
    key in a binary NO PAD collation (``utf8mb4_nopad_bin`` on MariaDB, ``utf8mb4_0900_bin`` on
    MySQL 8) or of a ``VARBINARY`` type is compared byte for byte, as the index orders it; in any
    other collation (``utf8mb4_general_ci``, ``utf8mb4_unicode_ci``, ``utf8mb4_0900_ai_ci``, ...)
    keys are the collation's sort keys, so a match means what ``s.key = r.key`` means in the
    database (see :mod:`.collation`).
    """

    dialect = MYSQL
    _collation: Collation | None = None

    def _describe(self) -> list[ColumnInfo]:
        rows = self._catalogue(
            "SELECT COLUMN_NAME, COLUMN_TYPE, DATA_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE, "
            "COLLATION_NAME, CHARACTER_SET_NAME FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        )
        columns = []
        for name, column_type, data_type, precision, scale, collation, charset in rows:
            if name == self.key and collation and collation not in NOPAD_BINARY_COLLATIONS:
                self._collation = probe(self.bookkeeping_query, self.table, name, collation, charset)
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

    def leaf_rows(self) -> float:
        """Rows per leaf of InnoDB's clustered index when the key leads the primary key (the
        page size over InnoDB's estimate of a row's bytes, ``AVG_ROW_LENGTH``: no scan); a
        secondary index reaches each row through the primary key, one leaf a row."""
        primary = self._catalogue(
            "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
            "AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' AND SEQ_IN_INDEX = 1",
        )
        length = self._catalogue(
            "SELECT AVG_ROW_LENGTH FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
        )
        if not (primary and primary[0][0] == self.key and length and length[0][0]):
            return 1.0
        page_bytes = self._scalar("SELECT @@innodb_page_size") or 16384
        return max(1.0, float(page_bytes) / float(length[0][0]))

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
        self.bookkeeping_query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        self.bookkeeping_query("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        return True

    def map_stamp(self) -> str:
        """InnoDB's last change of R (kept in memory by the server) and R's smallest and largest
        key: a map kept beside R (:mod:`.pagemaps`) at R's version but another stamp is rebuilt."""
        updated = self.bookkeeping_query(
            "SELECT UPDATE_TIME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
            (self.table,),
        )
        lo, hi = self.key_ends(text=True)
        return f"{updated[0][0] if updated else None}|{lo!r}|{hi!r}"[:400]

    def _key_width_sql(self) -> str:
        return f"SELECT MAX(LENGTH({self.page_key_sql()})) FROM {self.source_sql}"

    # -- a key in a collation: keys are its sort keys (see .collation) ------------------------
    def page_key_sql(self) -> str:
        return f"WEIGHT_STRING({self.quoted_key})" if self._collation else self.quoted_key

    def _key_type(self, column: ColumnInfo) -> KeyType:
        key_type = super()._key_type(column)
        if not self._collation:
            return key_type
        self._collation.width = max(key_type.width, len(self._collation.pad_unit))
        return KeyType("str", self._collation.width, self._collation)

    def _bound_value(self, page_map: PageMap, index: int):
        if not self._collation or index >= page_map.n_pages:
            return super()._bound_value(page_map, index)
        # the first page has no lower bound: keys inserted below R's smallest widen it (PageMap.cover)
        return None if index == 0 else page_map.bound_values[index]

    def key_param(self, key):
        """A sort key (R's page bound, a stream key weighed lately) -> a text with that sort key."""
        if not self._collation or not isinstance(key, (bytes, np.bytes_)):
            return super().key_param(key)
        text = self._collation.texts_of([key])[0]
        for page_map in self._page_maps.values() if text is None else ():
            at = int(np.searchsorted(page_map.bounds, key, side="right")) - 1
            if at < 0 or (at == 0 and page_map.bounds[0] == key):
                return ""  # R's first key or below: from the start
            if page_map.bounds[at] == key:
                return page_map.bound_values[at]
        if text is None:
            raise StoreError(f"key: no text with sort key {bytes(key).hex()} is known for {self.table!r}")
        return text

    def lookup(self, key) -> MasterPage:
        if self._collation and self._collation.texts_of([key])[0] is None:
            return self._lookup_by_page(np.asarray([key], self.key_type.dtype))
        return super().lookup(key)

    def lookup_many(self, keys: np.ndarray) -> MasterPage:
        if not self._collation or not len(keys):
            return super().lookup_many(keys)
        texts = self._collation.texts_of(keys)
        known = texts != None  # noqa: E711 (elementwise)
        found = [self._lookup_by_page(keys[~known])] if not known.all() else []
        if known.any():
            where = f"{self.quoted_key} IN ({self.dialect.placeholders(int(known.sum()))})"
            found.append(self._page(where, texts[known].tolist()))
        page = MasterPage.concat(found)
        order = np.argsort(page.keys, kind="stable")  # two results: back into key order
        return MasterPage(page.keys[order], page.rows.take(order))

    def _lookup_by_page(self, keys: np.ndarray) -> MasterPage:
        """Rows of sort keys whose text is not known: their pages, filtered by sort key."""
        page_map = self.page_map()
        pages = np.unique(page_map.page_of(keys))
        loaded = MasterPage.concat([self.load_pages(page_map, int(p)) for p in pages[pages >= 0]] or [self._to_page([])])
        keep = np.isin(loaded.keys, keys)
        return MasterPage(loaded.keys[keep], loaded.rows.filter(keep))

    def _changed_keys(self, rows: list[tuple]) -> np.ndarray:
        if not self._collation:
            return super()._changed_keys(rows)
        keys, too_long = self._collation.padded([r[0] for r in rows])
        inserted = [r[2] for r, long in zip(rows, too_long) if long and r[1] == "U"]
        if inserted:
            raise StoreError(
                f"key: an installed change puts key {inserted[0]!r} into {self.table!r}, whose sort key in "
                f"{self._collation.name} is longer than the {self.key_type.width} bytes of the longest when "
                "the join started; keys are held at that width, so restart the join to see it"
            )
        return sorted_distinct(keys[~too_long])  # deleted keys longer than any key R had: never cached
