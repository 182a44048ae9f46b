"""Page maps of R, and the copy of them kept beside R so that opening R costs O(pages), not O(R).

A page map (:class:`PageMap`) is SSIJ's pinned upper level of the B+tree (sec. IV-B): the first
key of every page of ``page_rows`` distinct keys, with the rows each page holds. Building it
reads every key of R's index (one window query); at R = 2M rows that is seconds, and every
algorithm instance paid it (each Spark part, each restart, each CLI run; issue 12). So a store
that can tell whether R changed (:meth:`.base.MasterStore.map_stamp`) keeps its maps in the
side table ``<R>__sj_pages`` and reads them back in one query of one row per page:

* ``(page_rows, page, <key>, n_rows, n_keys, version, stamp)``, primary key ``(page_rows, page)``;
  page -1 is the header: R's largest key, its row and key counts, the version of R (its change
  log, :mod:`.changes`) and the stamp the map was built at; page ``p >= 0``: its first key as R
  spells it, and the rows and distinct keys it holds.
* A map kept at an older version is brought up to date from the change log: the pages holding
  keys changed since are counted again (one index range count each). Pages then hold more or
  fewer rows than ``page_rows``: the sizes are exact, and the algorithms budget the largest
  (:attr:`PageMap.max_page_rows`).
* A map kept at the current version whose stamp differs (R was changed without an install) is
  built again and replaced.
* Whatever is loaded is widened to R's smallest and largest key (:meth:`PageMap.cover`), so a
  key of R is never declared absent without I/O.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass

import numpy as np

from .horizon import HistoryPruned
from .sql import MYSQL, check_identifier, table_exists, write_transaction

PAGES_SUFFIX = "__sj_pages"
HEADER = -1  # the page number of the header row
# errors that say the user may not create or write the side table: the map is then not kept
NOT_ALLOWED = (1044, 1142, 1290, 1792)  # access denied (db, table), read-only server, read-only transaction


@dataclass(eq=False)
class PageMap:
    """Page boundaries of R: page ``p`` holds keys in ``[bounds[p], bounds[p+1])``.

    The last page ends at ``max_key``. ``n_keys`` is the number of distinct keys of R. The map
    of an empty R has one page that covers no key (``max_key < bounds[0]``), so that keys
    inserted later (:meth:`cover`) have a page to live on. ``sizes`` are the rows of each page
    (None: ``page_rows`` each); they differ from ``page_rows`` for a key of several rows per
    value and for a map brought up to date from the change log.
    """

    bounds: np.ndarray
    max_key: object
    page_rows: int
    n_keys: int
    n_rows: int
    bound_values: np.ndarray | None = None  # the bounds as R spells them, when keys are sort keys
    sizes: np.ndarray | None = None

    @property
    def n_pages(self) -> int:
        return len(self.bounds)

    @property
    def rows_per_key(self) -> float:
        """K: R's rows per distinct key (the versions per key of a type-2 dimension; 1 for a
        unique key), what a page of ``page_rows`` keys holds rows of each."""
        return self.n_rows / self.n_keys if self.n_keys else 1.0

    @property
    def max_page_rows(self) -> int:
        """The rows of the largest page: what a buffer of one page is sized for."""
        if self.sizes is None or not len(self.sizes):
            return self.page_rows
        return max(int(self.sizes.max()), 1)

    @property
    def nbytes(self) -> int:
        texts = 0 if self.bound_values is None else sum(map(sys.getsizeof, self.bound_values)) + 8 * len(self.bounds)
        return int(self.bounds.nbytes) + texts + (0 if self.sizes is None else int(self.sizes.nbytes))

    def page_of(self, keys: np.ndarray) -> np.ndarray:
        """The page of each key (``int64``); -1 where the key is outside R's key range."""
        pages = np.searchsorted(self.bounds, keys, side="right").astype(np.int64) - 1
        if self.n_pages:
            pages[keys > self.max_key] = -1
        return pages

    def cover(self, lo, hi) -> None:
        """Widen the key range to include ``[lo, hi]`` (keys inserted into R, SSIJ sec. IV-E):
        the first page starts at ``lo`` at the latest, the last ends at ``hi`` at the earliest.
        Changed in place: every algorithm holding this map sees it."""
        if self.max_key < self.bounds[0]:  # covers nothing yet: R was empty
            self.bounds[0], self.max_key = lo, hi
            return
        self.bounds[0] = min(self.bounds[0], lo)
        self.max_key = max(self.max_key, hi)

    def key_range(self, first: int, count: int = 1) -> tuple:
        """``(lo, hi)`` of pages ``first .. first+count-1``; ``hi`` is None for the last page."""
        last = first + count
        return self.bounds[first], (self.bounds[last] if last < self.n_pages else None)


def pages_table(table: str) -> str | None:
    """The name of the side table keeping R's page maps (None: R's name is too long for one)."""
    check_identifier(table, "table")
    return table + PAGES_SUFFIX if len(table) + len(PAGES_SUFFIX) <= 64 else None


def kept_page_rows(store) -> list[int]:
    """The ``page_rows`` of the maps kept beside R."""
    name = pages_table(store.table)
    if name is None or not table_exists(store.connection, name):
        return []
    rows = store.bookkeeping_query(f"SELECT page_rows FROM {store.dialect.quote(name)} WHERE page = {HEADER}")
    return sorted(int(r[0]) for r in rows)


def forget(store) -> bool:
    """Drop every map kept beside R, so that the next opening builds its map from R as a first
    one does (``semijoin bench --cold`` times both); True when there were some."""
    name = pages_table(store.table)
    if name is None or not table_exists(store.connection, name):
        return False
    store.bookkeeping_query(f"DROP TABLE {store.dialect.quote(name)}")
    return True


def load(store, page_rows: int, stamp: str) -> PageMap | None:
    """The map of ``page_rows`` kept beside R, brought up to date; None when there is none
    usable (not kept, R changed without an install, or R is at an older version than it)."""
    name = pages_table(store.table)
    if name is None or not table_exists(store.connection, name):
        return None
    q = store.dialect.quote
    p = store.dialect.param
    texts = "" if store.page_key_sql() == store.quoted_key else f", {store.quoted_key}"
    rows = store.bookkeeping_query(
        f"SELECT page, {store.page_key_sql()}, n_rows, n_keys, version, stamp{texts} FROM {q(name)} "
        f"WHERE page_rows = {p} ORDER BY page",
        (page_rows,),
    )
    version = store.version()
    if len(rows) < 2 or rows[0][0] != HEADER or rows[0][4] > version or len(rows) - 1 != rows[-1][0] + 1:
        return None
    if rows[0][4] == version and rows[0][5] != stamp:
        return None
    header, pages = rows[0], rows[1:]
    keys = store.key_type.from_db([r[1] for r in pages] + [header[1]])
    sizes = np.array([int(r[2]) for r in pages], np.int64)
    page_keys = np.array([int(r[3]) for r in pages], np.int64)
    page_map = PageMap(
        bounds=keys[:-1], max_key=keys[-1], page_rows=page_rows, n_keys=int(page_keys.sum()), n_rows=int(sizes.sum()),
        bound_values=np.array([r[6] for r in pages], dtype=object) if texts else None, sizes=sizes,
    )
    if rows[0][4] < version:
        try:
            _refresh(store, page_map, page_keys, int(rows[0][4]), version)
        except HistoryPruned:  # kept at a version R's history no longer reaches: built from R anew
            return None
        with _where_allowed():
            _write(store, name, page_map, page_keys, version, stamp)
    lo, hi = store.key_ends()
    if lo is not None:
        page_map.cover(lo, hi)
    return page_map


def _refresh(store, page_map: PageMap, page_keys: np.ndarray, since: int, version: int) -> None:
    """Count again the pages holding keys changed after ``since`` (the change log, :mod:`.changes`)."""
    changed = store.changes_since(since, version)[1]
    if not len(changed):
        return
    ordered = np.sort(changed)
    page_map.cover(ordered[0], ordered[-1])
    touched = np.unique(page_map.page_of(changed))
    for page in touched[touched >= 0]:
        where, params = store.pages_sql(page_map, int(page), 1)
        n_rows, n_keys = store.bookkeeping_query(
            f"SELECT COUNT(*), COUNT(DISTINCT {store.quoted_key}) FROM {store.source_sql} WHERE {where}", params
        )[0]
        page_map.sizes[page], page_keys[page] = int(n_rows), int(n_keys)
    page_map.n_rows, page_map.n_keys = int(page_map.sizes.sum()), int(page_keys.sum())


def save(store, page_map: PageMap, version: int, stamp: str) -> None:
    """Keep ``page_map`` (just built from R at ``version`` and ``stamp``, read before it, so
    ``page_rows`` keys on each page but the last) beside R for the next opening."""
    name = pages_table(store.table)
    if name is None or not page_map.n_keys:
        return
    page_keys = np.full(page_map.n_pages, page_map.page_rows, np.int64)
    page_keys[-1] = page_map.n_keys - page_map.page_rows * (page_map.n_pages - 1)
    with _where_allowed():
        _create(store, name)
        _write(store, name, page_map, page_keys, version, stamp)


@contextlib.contextmanager
def _where_allowed():
    """Writes a user without the rights for them (or a read-only server) refuses are skipped:
    the map is then built on every opening, as it was before maps were kept."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - the driver's error classes; any other error is raised again
        if not (exc.args and exc.args[0] in NOT_ALLOWED):
            raise


def _create(store, name: str) -> None:
    key = next(c for c in store.columns if c.name == store.key)
    engine = " ENGINE=InnoDB" if store.dialect is MYSQL else ""
    store.bookkeeping_query(
        f"CREATE TABLE IF NOT EXISTS {store.dialect.quote(name)} (page_rows INT NOT NULL, page BIGINT NOT NULL, "
        f"{store.quoted_key} {key.declaration or key.sql_type}, n_rows BIGINT NOT NULL, n_keys BIGINT NOT NULL, "
        f"version BIGINT, stamp VARCHAR(400), PRIMARY KEY (page_rows, page)){engine}"
    )


def _write(store, name: str, page_map: PageMap, page_keys: np.ndarray, version: int, stamp: str) -> None:
    """Replace the kept map of ``page_map.page_rows`` in one transaction (parts opening R at
    once write one after the other: the DELETE locks the map's rows)."""
    texts = page_map.bound_values if page_map.bound_values is not None else [store.key_param(b) for b in page_map.bounds]
    max_text = store.key_ends(text=True)[1]
    rows = [(page_map.page_rows, HEADER, max_text, page_map.n_rows, page_map.n_keys, version, stamp)]
    rows += [(page_map.page_rows, i, t, int(s), int(k), None, None) for i, (t, s, k) in enumerate(zip(texts, page_map.sizes, page_keys))]
    p = store.dialect.param
    cursor = store.connection.cursor()
    try:
        with write_transaction(store.connection, cursor):
            cursor.execute(f"DELETE FROM {store.dialect.quote(name)} WHERE page_rows = {p}", (page_map.page_rows,))
            cursor.executemany(
                f"INSERT INTO {store.dialect.quote(name)} (page_rows, page, {store.quoted_key}, n_rows, n_keys, version, stamp) "
                f"VALUES ({store.dialect.placeholders(7)})", rows,
            )
    finally:
        cursor.close()
