"""R in memory: a store with no I/O, shaped like a real one (calibration times the algorithms' CPU
costs over it, :mod:`..calibration`)."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from ..keys import KeyType
from .base import DEFAULT_PAGE_ROWS, IOCounters, MasterPage, MasterStore, unit_costs
from .pagemaps import PageMap

SYNTH_KEYS = 32768  # keys of the in-memory R


class MemoryStore:
    """R in memory: what the join algorithms ask of a store, without any I/O.

    ``keys`` (sorted, distinct) and ``rows`` (aligned with them) are the relation; ``costs`` is
    what :meth:`calibrate` answers (the algorithms size themselves from it).
    """

    key_unique = True
    max_rows_per_key = 1

    def __init__(self, keys: np.ndarray, rows: pa.Table, key_type: KeyType, costs: tuple[float, float]):
        self.keys, self.rows, self.key_type = keys, rows, key_type
        self.schema = rows.schema
        self.select = list(rows.schema.names)
        self.counters = IOCounters()
        self._costs = costs
        self._in_costs = (math.inf, 0.0)  # no IN lookups: an IN query costs more than any page (:meth:`calibrate_in`)
        self._maps: dict[int, PageMap] = {}

    @property
    def n_rows(self) -> int:
        return len(self.keys)

    def calibrate(self, *_, **__) -> tuple[float, float]:
        return self._costs

    def kept_page_rows(self) -> list[int]:
        return []

    def calibrate_in(self, *_, **__) -> tuple[float, float]:
        """No IN lookups here unless assumed: an IN query costs more than any page, so every page is range-loaded."""
        return self._in_costs

    def assume_costs(self, costs: tuple[float, float] | None = None,
                     in_costs: tuple[float, float] | None = None) -> "MemoryStore":
        """As :meth:`.base.MasterStore.assume_costs`."""
        self._costs = self._costs if costs is None else unit_costs(costs, "costs")
        self._in_costs = self._in_costs if in_costs is None else unit_costs(in_costs, "in_costs")
        return self

    def page_map(self, page_rows: int = DEFAULT_PAGE_ROWS) -> PageMap:
        if page_rows not in self._maps:
            keys = self.keys
            self._maps[page_rows] = PageMap(keys[::page_rows], keys[-1], page_rows, len(keys), len(keys))
        return self._maps[page_rows]

    def load_pages(self, page_map: PageMap, first: int, count: int = 1) -> MasterPage:
        lo = first * page_map.page_rows
        hi = min(len(self.keys), (first + count) * page_map.page_rows)
        return MasterPage(self.keys[lo:hi], self.rows.slice(lo, hi - lo))

    def lookup(self, key) -> MasterPage:
        at = int(np.searchsorted(self.keys, key))
        n = int(at < len(self.keys) and self.keys[at] == key)
        return MasterPage(self.keys[at : at + n], self.rows.slice(at, n))

    def row_bytes(self, page_map: PageMap | None = None) -> float:
        return self.rows.nbytes / max(len(self.rows), 1)

    def result_bytes(self, page_map: PageMap | None, rows: int) -> int:
        return int(math.ceil(rows * self.row_bytes(page_map))) + 16 * (2 + len(self.select))

    def close(self) -> None:
        pass


def synthetic_keys(n: int, key_type: KeyType) -> tuple[np.ndarray, KeyType]:
    """``n`` sorted distinct keys of ``key_type`` (a string type at least 8 bytes wide)."""
    if key_type.kind == "int":
        return np.arange(1, 2 * n, 2, dtype=np.int64), key_type
    width = max(key_type.width, 8)
    digits = np.char.zfill(np.arange(n).astype(str), width - 1)
    return np.char.add("K", digits).astype(f"S{width}"), KeyType("str", width)


def first_rows(store: MasterStore, n: int = DEFAULT_PAGE_ROWS) -> MasterPage:
    """R's first ``n`` rows in key order: one index range load, not counted in the store's counters."""
    lowest = np.iinfo(np.int64).min if store.key_type.kind == "int" else b""
    saved = IOCounters(**vars(store.counters))
    try:
        return store.load_range(lowest, n)
    finally:
        store.counters = saved


def memory_store(store: MasterStore | None, key_type: KeyType | None = None, n_keys: int = SYNTH_KEYS) -> MemoryStore:
    """An in-memory R of ``n_keys`` rows shaped like ``store``'s (its columns, its first rows
    repeated), or of ``(sk int64, name string)`` rows without a store."""
    key_type = key_type or (store.key_type if store is not None else KeyType("int"))
    if store is not None:
        costs, sample = store.calibrate(), first_rows(store).rows
    else:
        costs = (1e-4, 1e-6)
        sample = pa.table({"sk": pa.array(np.arange(64)), "name": pa.array([f"item {i}" for i in range(64)])})
    if len(sample) == 0:  # R is empty: rows with its columns
        sample = pa.table([pa.array(np.arange(64), f.type) if pa.types.is_integer(f.type) else pa.nulls(64, f.type)
                           for f in sample.schema], schema=sample.schema)
    keys, key_type = synthetic_keys(n_keys, key_type)
    rows = sample.take(np.arange(n_keys) % len(sample)).combine_chunks()
    return MemoryStore(keys, rows, key_type, costs)
