"""The disk-based relation R: one store protocol over a SQL table with an index on the join key.

What the papers need from R, and what this module offers:

* the **page map** (:class:`PageMap`): R split into pages of ``page_rows`` consecutive distinct
  join-key values, the first key of every page kept in memory like the pinned upper levels of a
  B+tree (SSIJ sec. IV-B); a stream key is mapped to its page without I/O, and a key below R's
  smallest or above its largest key is known to be absent without I/O;
* **page loads**: a page or a run of pages is one index range query (HYBRIDJOIN Fig. 5 line 8,
  MESHJOIN's cyclic scan of partitions), each run of SSIJ's read plan is one such query;
* **index-range loads** ``key >= k ORDER BY key LIMIT n`` and **point lookups** (INLJ), and
  ``IN`` lookups for the micro-batch baseline;
* **counters** (:class:`IOCounters`): queries, rows read and seconds spent in the database.

A loaded page is a :class:`MasterPage`: its keys as a sorted numpy array (see
:mod:`..keys`) and the selected master columns as an Arrow table aligned with them.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigError, StoreError
from ..keys import KeyType
from . import pagemaps
from .pagemaps import PageMap
from .sql import Dialect
from .versioned import VersionedReads
from .binlog_reads import BinlogOverlay, SideSession
from .system_time import PERIOD_NAMES, period_of, period_sql, system_period
from .versions import Overlay

DEFAULT_PAGE_ROWS = 500
BUILD_CHUNK = 200_000  # distinct keys per query while a page map is built


@dataclass
class IOCounters:
    queries: int = 0
    rows: int = 0
    seconds: float = 0.0
    reconnects: int = 0  # sessions to the database reopened after a lost one (:mod:`.reconnect`)
    reconnect_wait_s: float = 0.0  # seconds spent waiting for the database to come back

    def as_dict(self) -> dict:
        return {
            "disk_queries": self.queries, "disk_rows": self.rows, "disk_s": round(self.seconds, 6),
            "reconnects": self.reconnects, "reconnect_wait_s": round(self.reconnect_wait_s, 6),
        }


@dataclass
class MasterPage:
    """Rows of R in key order: ``keys`` (numpy, sorted) and ``rows`` (the selected columns)."""

    keys: np.ndarray
    rows: pa.Table

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.rows.nbytes)

    @classmethod
    def concat(cls, pages: list["MasterPage"]) -> "MasterPage":
        """Pages in key order -> one page (their keys must not interleave)."""
        if len(pages) == 1:
            return pages[0]
        return cls(np.concatenate([p.keys for p in pages]), pa.concat_tables([p.rows for p in pages]))


@dataclass
class ColumnInfo:
    name: str
    sql_type: str
    arrow_type: pa.DataType
    declaration: str = ""  # the type to declare a copy of the column with (charset, collation)


class MasterStore(VersionedReads):
    """Base class of the SQL stores: SQL generation, page map, conversion, counters; the versions
    of R and snapshots come from :class:`.versioned.VersionedReads`.

    Subclasses say how to connect and how to read the catalogue (:meth:`_describe`,
    :meth:`_indexes`). ``select`` lists the master columns a matched tuple carries; it defaults
    to every column but the key.
    """

    dialect: Dialect
    wall_clock = staticmethod(time.time)  # epoch seconds, for read_at (a store may be given its own)

    def __init__(self, connection, table: str, key: str, select: list[str] | None = None):
        self.connection = connection
        self.table = table
        self.key = key
        self.counters = IOCounters()
        self._in_snapshot = False
        self._reader = None  # a Reader once made (:meth:`reader`), False: the connection cannot be opened again
        if hasattr(connection, "on_reconnect"):  # a ReconnectingConnection (MySQL)
            connection.on_reconnect = self.reconnected
        self.quoted_table = self.dialect.quote(table, "table")
        self.quoted_key = self.dialect.quote(key, "key column")
        columns = self._describe()
        if not columns:
            raise StoreError(f"table: {table!r} does not exist in the master database")
        by_name = {c.name: c for c in columns}
        if key not in by_name:
            raise StoreError(
                f"key: column {key!r} is not in table {table!r} (columns: {sorted(by_name)})"
            )
        if select is None:
            select = [c.name for c in columns if c.name != key]
        for name in select:
            self.dialect.quote(name, "select column")
            if name not in by_name and name not in PERIOD_NAMES:
                raise StoreError(
                    f"select: column {name!r} is not in table {table!r} (columns: {sorted(by_name)})"
                )
        self.columns = columns
        self.select = list(select)
        self.system_period = system_period(connection, table)  # R's period columns when system-versioned
        # a system-versioned R read with its periods: every version (:mod:`.system_time`)
        self.period = self._period() if set(self.select) & set(PERIOD_NAMES) else None
        self.source_sql = self.quoted_table + (" FOR SYSTEM_TIME ALL" if self.period else "")
        self.schema = pa.schema([(n, pa.timestamp("us") if n in PERIOD_NAMES else by_name[n].arrow_type)
                                 for n in self.select])
        self.key_unique = self._check_index(by_name[key]) and self.period is None  # versions share a key
        self.key_type = self._key_type(by_name[key])
        cols = ", ".join([self.page_key_sql()] + [
            period_sql(self, n) if n in PERIOD_NAMES else self.dialect.quote(n) for n in self.select])
        self._cols_sql = cols
        self._select_sql = f"SELECT {cols} FROM {self.source_sql}"
        self.key_range: tuple = (None, None)  # [lo, hi) of R this store sees (:meth:`restrict`)
        self.read_version: int | None = None  # the version snapshots read at (:meth:`reading_at`)
        self._overlay: Overlay | None = None
        self._page_maps: dict[int, PageMap] = {}
        self._costs: tuple[float, float] | None = None
        self._in_costs: tuple[float, float] | None = None
        self._max_rows_per_key: int | None = None
        self._row_bytes: dict[int, float] = {}
        self._has_change_log = False
        self.read_at: float | None = None  # when the version the last snapshot read was R's newest (a bound on staleness)
        self.pinned_at: float | None = None  # reading_at's ``at``
        self._captures_writes = False
        self._binlog = False  # R's changes are captured from the binary log (:mod:`.binlog_reads`)
        self.before_by_key = False  # MySQL: R's before-images have their (key, version) index (.versions)
        self.side = SideSession(self)  # its second session, for the change log of such an R
        self.seen_version = self.version()  # what R's page maps and the caches built on it reflect

    # -- catalogue (per dialect) -------------------------------------------------------------
    def _period(self) -> tuple[str, str]:
        """R's system period columns, which ``select`` names as :data:`.system_time.PERIOD_NAMES`."""
        try:
            return period_of(self.connection, self.table)
        except StoreError as exc:
            raise StoreError(f"select: {list(PERIOD_NAMES)} read a system-versioned table's periods, but {exc}") from None

    def _describe(self) -> list[ColumnInfo]:
        raise NotImplementedError

    def _indexes(self) -> list[tuple[str, bool]]:
        """``(first column, unique)`` of every index of the table."""
        raise NotImplementedError

    def _key_width_sql(self) -> str:
        raise NotImplementedError

    def page_key_sql(self) -> str:
        """The key as a loaded page holds it: the column itself (a collation's sort key in
        :class:`.mysql.MySqlStore`, see :mod:`.collation`)."""
        return self.quoted_key

    def _check_index(self, key_column: ColumnInfo) -> bool:
        firsts = [(col, unique) for col, unique in self._indexes() if col == self.key]
        if not firsts:
            raise StoreError(
                f"key: table {self.table!r} has no index whose first column is {self.key!r} "
                f"(create one: CREATE INDEX ix_{self.table}_{self.key} ON {self.table} ({self.key}))"
            )
        return any(unique for _, unique in firsts)

    def _key_type(self, column: ColumnInfo) -> KeyType:
        t = column.arrow_type
        if pa.types.is_integer(t):
            return KeyType("int")
        if pa.types.is_string(t) or pa.types.is_binary(t):
            width = self._scalar(self._key_width_sql()) or 1
            return KeyType("str", int(width))
        raise StoreError(
            f"key: column {self.key!r} has type {column.sql_type}; expected an integer or string column"
        )

    # -- queries -----------------------------------------------------------------------------
    def _execute(self, sql: str, params=(), raw: bool = False) -> list[tuple]:
        """Run a query, counted. ``raw`` lets a driver that can skip converting values to
        Python objects return them as bytes (:meth:`_raw_values`); :meth:`_to_page` casts
        them column by column in Arrow, which is several times faster for wide pages."""
        started = time.perf_counter()
        with self._raw_values() if raw else contextlib.nullcontext():
            cursor = self.connection.cursor()
            try:
                cursor.execute(sql, tuple(params))
                rows = cursor.fetchall()
            finally:
                cursor.close()
        self.counters.seconds += time.perf_counter() - started
        self.counters.queries += 1
        self.counters.rows += len(rows)
        return rows

    def _raw_values(self):
        """A context in which the driver returns column values as bytes (none by default)."""
        return contextlib.nullcontext()

    def _scalar(self, sql: str, params=()):
        rows = self._execute(sql, params)
        return rows[0][0] if rows else None

    def _page(self, where: str, params=(), suffix: str = "") -> MasterPage:
        where, params = self._within(where, params)
        if isinstance(self._overlay, BinlogOverlay):  # R at an older version, with the side session's log
            return self._to_page(self._overlay.rows(self, where, params, suffix))
        if self._overlay is not None:  # R at an older version than this snapshot's
            sql, params = self._overlay.query(self, self._cols_sql, where, params, suffix)
            return self._to_page(self._execute(sql, params, raw=True))
        rows = self._execute(f"{self._select_sql} WHERE {where} ORDER BY {self.quoted_key}{suffix}", params, raw=True)
        return self._to_page(rows)

    # -- a key range of R (partitions = N: each part sees its own range only) ----------------
    def restrict(self, lo=None, hi=None) -> "MasterStore":
        """See only the keys in ``[lo, hi)`` of R (None: unbounded): page maps, cyclic scans,
        loads, lookups, ``n_rows`` and the changed keys of snapshots cover that range only.
        Call it before anything is built on the store; returns the store."""
        self.key_range = (lo, hi)
        if self._reader:  # its sibling sees the old range
            self._reader.close()
        self._reader = None
        self._page_maps.clear()
        self._max_rows_per_key = self._costs = self._in_costs = None
        self._row_bytes.clear()
        return self

    def _key_range_sql(self) -> tuple[str, list]:
        """The key range as a SQL condition (empty when unrestricted) and its parameters."""
        lo, hi = self.key_range
        terms = [(f"{self.quoted_key} >= {self.dialect.param}", lo), (f"{self.quoted_key} < {self.dialect.param}", hi)]
        kept = [(sql, self.key_param(v)) for sql, v in terms if v is not None]
        return " AND ".join(sql for sql, _ in kept), [v for _, v in kept]

    def _within(self, where: str, params=()) -> tuple[str, list]:
        """``where`` (may be empty) restricted to the key range."""
        extra, extra_params = self._key_range_sql()
        if not extra:
            return where, list(params)
        return (f"({where}) AND {extra}" if where else extra), [*params, *extra_params]

    def _to_page(self, rows: list[tuple]) -> MasterPage:
        if rows and all(isinstance(v, bytes) or v is None for v in rows[0]):
            try:  # the raw bytes of every value (``_execute(raw=True)``): read into Arrow in one pass
                columns = pa.array(rows, self._raw_struct).flatten()
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):  # not all bytes after all
                pass
            else:
                return self._page_of(self.key_type.from_db(columns[0]), columns[1:])
        columns = list(zip(*rows)) if rows else [()] * (1 + len(self.select))
        return self._page_of(self.key_type.from_db(columns[0]), columns[1:])

    @functools.cached_property
    def _raw_struct(self) -> pa.StructType:
        """A result row of raw values (bytes or None) as one Arrow struct: a page's rows go into
        it in one pass, several times faster than transposed and converted column by column in
        Python, time the thread reading pages ahead holds the GIL (``docs/measurements.md``)."""
        return pa.struct([pa.field(f"c{i}", pa.binary()) for i in range(1 + len(self.select))])

    def _page_of(self, keys: np.ndarray, columns) -> MasterPage:
        """The key array and the selected columns as the driver returned them (``_column``)."""
        arrays = []
        for field, values in zip(self.schema, columns):
            try:
                arrays.append(_column(values, field.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
                raise StoreError(
                    f"select: column {field.name!r} of {self.table!r} holds a value that is not "
                    f"{field.type} ({exc})"
                ) from None
        return MasterPage(keys, pa.Table.from_arrays(arrays, schema=self.schema))

    def key_param(self, key):
        """One key (numpy scalar, int, str or bytes) as a SQL parameter."""
        if self.key_type.kind == "int":
            return int(key)
        return key.decode("utf-8") if isinstance(key, (bytes, np.bytes_)) else str(key)

    # -- the store protocol ------------------------------------------------------------------
    @property
    def n_rows(self) -> int:
        """The rows of R (in the key range): from a page map (built if none is)."""
        maps = list(self._page_maps.values()) or [self.page_map()]
        return maps[0].n_rows

    @property
    def max_rows_per_key(self) -> int:
        """K: the most rows of R sharing one key (1 for a unique key; one query otherwise)."""
        if self._max_rows_per_key is None:
            if self.key_unique:
                self._max_rows_per_key = 1
            else:
                where, params = self._within("")
                self._max_rows_per_key = int(self._scalar(
                    f"SELECT COALESCE(MAX(c), 1) FROM (SELECT COUNT(*) AS c FROM {self.source_sql}"
                    f"{' WHERE ' + where if where else ''} GROUP BY {self.quoted_key}) g", params
                ))
        return self._max_rows_per_key

    def page_map(self, page_rows: int = DEFAULT_PAGE_ROWS) -> PageMap:
        """The page map for pages of ``page_rows`` distinct keys, cached: read from the map kept
        beside R when it is current (O(pages), :mod:`.pagemaps`), else built by one query over
        R's index and kept there for the next opening."""
        if not isinstance(page_rows, int) or page_rows < 1:
            raise ConfigError(f"page_rows: {page_rows!r} must be a positive integer")
        if page_rows not in self._page_maps:
            # kept maps: for the whole of R, and not inside a snapshot (whose transaction a write would end)
            # (not of every version of a system-versioned R: a store of its current rows keeps R's)
            kept = self.key_range == (None, None) and not self._in_snapshot and self.period is None
            stamp = self.map_stamp() if kept else None
            page_map = None if stamp is None else pagemaps.load(self, page_rows, stamp)
            if page_map is None:
                version = self.version()  # read before R is: a change meanwhile makes the kept map old
                page_map = self._build_page_map(page_rows)
                if stamp is not None:
                    pagemaps.save(self, page_map, version, stamp)
            self._page_maps[page_rows] = page_map
        return self._page_maps[page_rows]

    def forget_page_maps(self) -> None:
        """Drop the page maps built so far: the next ones are read from R (or its kept copy,
        :mod:`.pagemaps`, when that is still current) anew."""
        self._page_maps.clear()

    def kept_page_rows(self) -> list[int]:
        """The page sizes whose maps are kept beside R (:mod:`.pagemaps`; none for a key range)."""
        return pagemaps.kept_page_rows(self) if self.key_range == (None, None) and self.period is None else []

    def _build_page_map(self, page_rows: int) -> PageMap:
        """One pass over R's index in key order, ``BUILD_CHUNK`` distinct keys per keyset query
        (each short: none nears the driver's read timeout, and no window function sorts R in a
        temporary table): every ``page_rows``-th distinct key starts a page, and the rows of
        each key are counted, so the rows of every page are known."""
        texts = "" if self.page_key_sql() == self.quoted_key else f", {self.quoted_key}"  # sort keys: their text too
        count, group = ("1", "") if self.key_unique else ("COUNT(*)", f" GROUP BY {self.quoted_key}")
        bounds, values, first_rows = [], [], []
        n_keys = n_rows = 0
        last, max_key = None, None
        while True:
            where, params = self._within("" if last is None else f"{self.quoted_key} > {self.dialect.param}",
                                         [] if last is None else [last])
            rows = self._execute(
                f"SELECT {self.page_key_sql()}, {count}{texts} FROM {self.source_sql}{' WHERE ' + where if where else ''}"
                f"{group} ORDER BY {self.quoted_key} LIMIT {BUILD_CHUNK}", params,
            )
            if not rows:
                break
            counts = np.fromiter((r[1] for r in rows), np.int64, len(rows))
            starts = np.flatnonzero((n_keys + np.arange(len(rows))) % page_rows == 0)
            bounds.append(self.key_type.from_db([rows[i][0] for i in starts]))
            values += [rows[i][2] for i in starts] if texts else []
            first_rows.append(n_rows + (np.cumsum(counts) - counts)[starts])
            n_keys, n_rows = n_keys + len(rows), n_rows + int(counts.sum())
            last, max_key = rows[-1][2 if texts else 0], self.key_type.from_db([rows[-1][0]])[0]  # the key as R spells it
            if len(rows) < BUILD_CHUNK:
                break
        if not n_keys:  # an empty R: one page covering no key
            nothing = self.key_type.dtype.type(0 if self.key_type.kind == "int" else b"")
            first = nothing + 1 if self.key_type.kind == "int" else b"\x01"
            return PageMap(np.array([first], self.key_type.dtype), nothing, page_rows, 0, 0)
        first_rows = np.concatenate(first_rows)
        return PageMap(
            bounds=np.concatenate(bounds),
            max_key=max_key,
            page_rows=page_rows,
            n_keys=n_keys,
            n_rows=n_rows,
            bound_values=np.array(values, dtype=object) if texts else None,
            sizes=np.diff(np.append(first_rows, n_rows)),
        )

    def map_stamp(self) -> str | None:
        """What tells a page map kept beside R whether R changed since (None: maps are not kept)."""
        return None

    def key_ends(self, text: bool = False) -> tuple:
        """R's smallest and largest key (two index dives): as page keys, or ``text``: as R spells them."""
        column = self.quoted_key if text else self.page_key_sql()
        rows = self.bookkeeping_query(
            f"SELECT {column} FROM (SELECT MIN({self.quoted_key}) AS {self.quoted_key} FROM {self.source_sql} "
            f"UNION ALL SELECT MAX({self.quoted_key}) FROM {self.source_sql}) m"
        )
        if rows[0][0] is None:
            return None, None
        return (rows[0][0], rows[1][0]) if text else tuple(self.key_type.from_db([rows[0][0], rows[1][0]]))

    def load_pages(self, page_map: PageMap, first: int, count: int = 1) -> MasterPage:
        """Pages ``first .. first+count-1`` in one index range query."""
        return self._page(*self.pages_sql(page_map, first, count))

    def pages_sql(self, page_map: PageMap, first: int, count: int) -> tuple[str, list]:
        """The condition on the key selecting pages ``first .. first+count-1``, and its parameters."""
        p = self.dialect.param
        terms, params = [], []
        for index, op in ((first, ">="), (first + count, "<")):
            value = self._bound_value(page_map, index)
            if value is not None:
                terms.append(f"{self.quoted_key} {op} {p}")
                params.append(value)
        return " AND ".join(terms) or "1 = 1", params

    def _bound_value(self, page_map: PageMap, index: int):
        """Bound ``index`` of ``page_map`` as a SQL parameter; None: no bound (after the last page)."""
        return self.key_param(page_map.bounds[index]) if index < page_map.n_pages else None

    def load_range(self, start_key, limit: int) -> MasterPage:
        """``key >= start_key ORDER BY key LIMIT limit``: the index-range load of the papers."""
        p = self.dialect.param
        return self._page(f"{self.quoted_key} >= {p}", (self.key_param(start_key),), f" LIMIT {int(limit)}")

    def lookup(self, key) -> MasterPage:
        """Every row of ``key``: INLJ's point query."""
        return self._page(f"{self.quoted_key} = {self.dialect.param}", (self.key_param(key),))

    def lookup_many(self, keys: np.ndarray) -> MasterPage:
        """Every row of the given keys in one ``IN (...)`` query. Integer keys are written into
        the query as numbers (an int64 array's values: nothing to quote or escape), not bound one
        parameter each: mysqlclient escapes every parameter in Python, a sizeable share of an IN
        query's time on MariaDB (``docs/measurements.md``)."""
        if len(keys) == 0:
            return self._to_page([])
        if self.key_type.kind == "int":
            return self._page(f"{self.quoted_key} IN ({_int_list(keys)})")
        where = f"{self.quoted_key} IN ({self.dialect.placeholders(len(keys))})"
        return self._page(where, self.key_type.to_db(np.asarray(keys)))

    def calibrate(self, rows: int = 2000, repeat: int = 3) -> tuple[float, float]:
        """Measure S (seconds per query) and T (seconds per row read) of this store.

        The papers' cost models and SSIJ's maxDist = 1 + S/T need them; they depend on the
        machine, the server and the driver, so they are measured at start-up (the best of
        ``repeat`` small and large index range loads) and never hard-coded. The calibration's
        queries are not counted in :attr:`counters`.
        """
        if self._costs is None:
            saved = IOCounters(**vars(self.counters))
            t0 = time.perf_counter()
            where, params = self._within("")
            start = self._scalar(f"SELECT MIN({self.quoted_key}) FROM {self.source_sql}{' WHERE ' + where if where else ''}", params)
            if start is None:  # R is empty: no row to time, and no row will ever be read
                self.counters = saved
                self._costs = (time.perf_counter() - t0, 1e-6)
                return self._costs
            small = large = float("inf")
            got = 1
            for _ in range(repeat):
                t0 = time.perf_counter()
                self.load_range(start, 1)
                t1 = time.perf_counter()
                got = len(self.load_range(start, rows))
                t2 = time.perf_counter()
                small, large = min(small, t1 - t0), min(large, t2 - t1)
            per_row = max(large - small, 0.0) / max(got - 1, 1)
            self._costs = (small, max(per_row, 1e-9))
            self.counters = saved
        return self._costs

    def assume_costs(self, costs: tuple[float, float] | None = None,
                     in_costs: tuple[float, float] | None = None) -> "MasterStore":
        """Take these as measured, instead of :meth:`calibrate` (S, T) and :meth:`calibrate_in`
        (an IN query's seconds and seconds a key): a choice priced with them is then the same on
        any machine (tests of a cost-based choice; costs measured once on a quiet machine).
        Returns the store."""
        self._costs = self._costs if costs is None else unit_costs(costs, "costs")
        self._in_costs = self._in_costs if in_costs is None else unit_costs(in_costs, "in_costs")
        return self

    def calibrate_in(self, keys: int = 200, repeat: int = 3) -> tuple[float, float]:
        """Measure an ``IN (...)`` lookup of this store: ``(seconds per query, seconds per key)``,
        from the best of ``repeat`` lookups of R's first key and of its first ``keys`` keys
        (neighbours, as the keys of one page are). HYBRIDJOIN's per-page choice of access path
        and the IN-list cost model need them; not counted in :attr:`counters`."""
        if self._in_costs is None:
            saved = IOCounters(**vars(self.counters))
            where, params = self._within("")
            start = self._scalar(f"SELECT MIN({self.quoted_key}) FROM {self.source_sql}{' WHERE ' + where if where else ''}", params)
            chosen = np.unique(self.load_range(start, keys).keys) if start is not None else np.zeros(0)
            if len(chosen) < 2:
                self.counters = saved
                self._in_costs = self.calibrate()
                return self._in_costs
            few = many = float("inf")
            for _ in range(repeat):
                t0 = time.perf_counter()
                self.lookup_many(chosen[:1])
                t1 = time.perf_counter()
                self.lookup_many(chosen)
                t2 = time.perf_counter()
                few, many = min(few, t1 - t0), min(many, t2 - t1)
            per_key = max(many - few, 0.0) / (len(chosen) - 1)
            self._in_costs = (max(few - per_key, 1e-9), max(per_key, 1e-9))
            self.counters = saved
        return self._in_costs

    def row_bytes(self, page_map: PageMap | None = None) -> float:
        """v_R: bytes one loaded row of R takes in memory (key + selected columns), sampled from
        page 0 of ``page_map``; with no map, from R's first ``DEFAULT_PAGE_ROWS`` rows by one
        range load. The algorithms that read no pages (INLJ, the IN-list joins) size themselves
        so, and opening R for them builds no page map: a first join of R would read all of R's
        index for one."""
        page_rows = 0 if page_map is None else page_map.page_rows
        if page_map is not None and page_map.n_keys == 0:
            return float(self.key_type.itemsize)
        if page_rows not in self._row_bytes:
            saved = IOCounters(**vars(self.counters))
            sample = self.load_pages(page_map, 0) if page_map is not None else self._page(
                "1 = 1", (), f" LIMIT {DEFAULT_PAGE_ROWS}")
            self.counters = saved
            if not len(sample):  # R is empty (for now): nothing to sample
                return float(self.key_type.itemsize)
            self._row_bytes[page_rows] = sample.nbytes / len(sample)
        return self._row_bytes[page_rows]

    def leaf_rows(self) -> float:
        """Rows of R per leaf of the index its key is looked up in: the keys of one ``IN (...)``
        query that lie on one leaf are read together, scattered keys each read a leaf of their
        own, and on MariaDB a leaf read costs several times a key
        (:class:`..unitcosts.ComponentCosts`). Here
        the unknown layout's worst case, one row a leaf; a dialect that knows better says so."""
        return 1.0

    def result_bytes(self, page_map: PageMap | None, rows: int) -> int:
        """Bytes a loaded result of ``rows`` rows may take: v_R per row plus the per-column
        overhead of a small Arrow table (offsets and validity buffers)."""
        return int(math.ceil(rows * self.row_bytes(page_map))) + 16 * (2 + len(self.select))

    @property
    def in_snapshot(self) -> bool:
        """Inside :meth:`snapshot`: R is read at one version, on this store's own session."""
        return self._in_snapshot

    def reader(self, sessions: int = 1):
        """A :class:`.reader.Reader`: R read on other sessions, each on its own thread (made once,
        widened to ``sessions`` when asked for more, closed with the store). None inside a
        snapshot, which another session would not share (R is read on this session there), and
        where the connection cannot be opened again (a DB-API connection handed in, an
        in-memory SQLite database)."""
        if self._in_snapshot:
            return None
        if self._reader is None:
            from .reader import Reader

            sibling = self._sibling()
            self._reader = False if sibling is None else Reader(self._sibling, sibling)
        if self._reader:
            self._reader.widen(sessions)
        return self._reader or None

    def _sibling(self) -> "MasterStore | None":
        """This store over a new session, built as this one was: the same table, key, selected
        columns and key range, with page maps, counters and snapshot state of its own (nothing
        its thread shares with this store's); None where the connection cannot be opened again."""
        connection = self._sibling_connection()
        if connection is None:
            return None
        return type(self)(connection, self.table, self.key, self.select).restrict(*self.key_range)

    def _sibling_connection(self):
        """A new session to the same database, or None (see :meth:`reader`)."""
        reopen = getattr(self.connection, "sibling", None)  # a ReconnectingConnection (MySQL)
        return reopen() if reopen is not None else None

    def read_result(self, future) -> MasterPage:
        """The page a read handed to :meth:`reader` returns, taken on this store's thread: what
        the reader's session counted meanwhile is added to :attr:`counters`, and after a
        reconnect of that session the page maps are widened to R as after one of this
        session's own (:meth:`.versioned.VersionedReads.reconnected`)."""
        page = future.result()
        if self._reader.hand_over(self.counters):
            self.cover_r()
        return page

    def wait_for_reads(self) -> None:
        """Return once every read handed to :meth:`reader` so far has finished (none made: at
        once). A benchmark that times steps alone waits inside its timing, so no read runs in
        time it does not count."""
        if self._reader:
            self._reader.wait()

    def close(self) -> None:
        if self._reader:
            self._reader.close()
        self.side.close()
        self.connection.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _int_list(keys: np.ndarray) -> str:
    """Integer keys as SQL text, ``1,2,3``: formatted and joined in Arrow, not by
    ``','.join(map(str, ...))``, which holds the GIL a few times longer in the thread that loads
    pages (``docs/measurements.md``)."""
    text = pa.array(np.asarray(keys, np.int64)).cast(pa.string())
    return pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(text)], pa.int32()), text), ",")[0].as_py()


def _column(values, arrow_type: pa.DataType) -> pa.Array:
    """A column as the driver returned it -> Arrow: Python objects directly, raw bytes (see
    ``_execute(raw=True)``; a list, or a binary Arrow array) through a vectorised cast of their text."""
    if not isinstance(values, pa.Array):
        first = next((v for v in values if v is not None), None)
        if not isinstance(first, (bytes, bytearray)):
            return pa.array(values, type=arrow_type)
        values = pa.array(values, pa.binary())
    return values if pa.types.is_binary(arrow_type) else values.cast(pa.string()).cast(arrow_type)


def arrow_type_for(sql_type: str, precision: int | None = None, scale: int | None = None) -> pa.DataType:
    """Arrow type of a column from its declared SQL type (MySQL names, SQLite affinities)."""
    t = (sql_type or "").upper()
    if "INT" in t or t.startswith("BOOL"):
        return pa.int64()
    if any(s in t for s in ("CHAR", "TEXT", "CLOB", "ENUM", "SET")):
        return pa.string()
    if any(s in t for s in ("DOUB", "FLOA", "REAL")):
        return pa.float64()
    if t.startswith(("DEC", "NUMERIC")):
        if precision:
            return pa.decimal128(int(precision), int(scale or 0))
        return pa.float64()
    if "BLOB" in t or "BINARY" in t:
        return pa.binary()
    if t == "DATE":
        return pa.date32()
    if t.startswith(("DATETIME", "TIMESTAMP")):
        return pa.timestamp("us")
    return pa.string()


def unit_costs(costs, name: str) -> tuple[float, float]:
    """``costs`` as two non-negative seconds (a fixed and a per-unit cost)."""
    if len(costs) != 2 or any(not isinstance(c, (int, float)) or c < 0 or c != c for c in costs):
        raise ValueError(f"{name}: {costs!r} is not two non-negative seconds (a query's and a row's or key's)")
    return float(costs[0]), float(costs[1])
