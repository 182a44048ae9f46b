"""Index lookups: INLJ, the papers' baseline, and the micro-batch IN-list lookup.

INLJ (HYBRIDJOIN paper sec. 3.2): one stream tuple per iteration, one index lookup of R per
tuple. Its rate is bounded by the database round trip.

The IN-list baseline is what an engineer writes in Spark's ``foreachBatch`` without a
semi-stream join: take a micro-batch, look its distinct keys up with ``key IN (...)`` queries
of at most ``in_list_max`` keys, hash-join in memory. The batch is sized from the memory budget:
each tuple of the batch costs its key and row id, each distinct key at most K rows of R.
``inlist-lru`` is the same engineer's second version: the same memory budget, a share of it
(``cache_fraction``) spent on an LRU cache of master rows probed before the IN queries; its
entries of keys changed by a master-data update are dropped before the next join reads R
(SSIJ sec. IV-E).
"""

from __future__ import annotations

import math

import numpy as np

from ..keys import sorted_distinct
from ..stores.base import MasterPage
from .base import CacheProbes, JoinAlgorithm, JoinOutput, Param, StreamBuffer, StreamChunk
from .master_cache import MasterCache


class IndexNestedLoopJoin(JoinAlgorithm):
    name = "inlj"
    cost_model = "inlj"
    auto_candidate = True
    paper = "INLJ (HYBRIDJOIN paper, sec. 3.2)"
    params = {}

    def __init__(self, store, memory, **kwargs):
        super().__init__(store, memory, **kwargs)
        # the one tuple in flight and the K rows of its key
        needed = store.key_type.itemsize + 8 + store.result_bytes(None, store.max_rows_per_key)  # no page map: none is read
        if needed > self.memory:
            raise self._budget_error(needed, "one stream tuple with the rows of its key")
        self._held = 0

    def _step(self, buffer: StreamBuffer) -> JoinOutput:
        chunk = self._take(buffer, 1)
        if not len(chunk):
            return JoinOutput.empty(self.schema)
        found = self.store.lookup(chunk.keys[0])
        self.counters.loads += 1
        self._held = found.nbytes
        return self._join(found, chunk.row_ids, chunk.keys)

    @property
    def pending(self) -> int:
        return 0

    @property
    def demand(self) -> int:
        return 1

    @property
    def capacity_tuples(self) -> int:
        return 1

    def structure_bytes(self) -> int:
        return self._held


class InListJoin(JoinAlgorithm):
    name = "inlist"
    cost_model = "inlist"
    paper = "baseline: micro-batch IN-list lookup (what foreachBatch code does)"
    params = {
        "batch_rows": Param(int, 0, "stream tuples per micro-batch; 0 = as many as the memory budget holds", 0),
        "in_list_max": Param(int, 1000, "keys per IN (...) query", 1),
    }

    def __init__(self, store, memory, **kwargs):
        super().__init__(store, memory, **kwargs)
        # per tuple of the batch: its key and row id (twice: the batch and the distinct keys)
        # and, at worst, K rows of R for its key (v_R sampled with no page map: none is read)
        per_tuple = 2 * (store.key_type.itemsize + 8) + store.max_rows_per_key * store.row_bytes()
        fixed = store.result_bytes(None, 0)
        self._batch_budget = self.memory - self._cache_bytes(reserve=int(math.ceil(fixed + per_tuple)))
        self.batch_rows = self.settings["batch_rows"] or int((self._batch_budget - fixed) // per_tuple)
        needed = int(math.ceil(fixed + max(self.batch_rows, 1) * per_tuple))
        if self.batch_rows < 1 or needed > self._batch_budget:
            what = f"batch_rows={self.batch_rows} stream tuples with their master rows" if self.batch_rows else "one stream tuple with its master rows"
            raise self._budget_error(needed + self.memory - self._batch_budget, what)
        self._per_tuple = per_tuple
        self._held = 0

    def _cache_bytes(self, reserve: int) -> int:
        """Bytes of the budget spent on a cache, leaving ``reserve`` for the smallest batch."""
        return 0

    def _step(self, buffer: StreamBuffer) -> JoinOutput:
        chunk = self._take(buffer, self.batch_rows)
        if not len(chunk):
            return JoinOutput.empty(self.schema)
        return self._lookup(chunk)

    def _lookup(self, chunk: StreamChunk) -> JoinOutput:
        """Join a batch through ``IN (...)`` queries of its distinct keys."""
        distinct = sorted_distinct(chunk.keys)
        step = self.settings["in_list_max"]
        found = [self.store.lookup_many(distinct[i : i + step]) for i in range(0, len(distinct), step)]
        self.counters.loads += len(found)
        rows = MasterPage.concat(found)  # distinct keys are sorted, so are the IN results
        self._held = int(len(chunk) * 2 * (chunk.keys.itemsize + 8) + rows.nbytes)
        self._found = rows
        return self._join(rows, chunk.row_ids, chunk.keys)

    @property
    def pending(self) -> int:
        return 0

    @property
    def demand(self) -> int:
        return self.batch_rows

    @property
    def capacity_tuples(self) -> int:
        return self.batch_rows

    def structure_bytes(self) -> int:
        return self._held

    def memory_split(self) -> dict:
        return {"batch_rows": self.batch_rows, "bytes_per_tuple": round(self._per_tuple, 1)}


class InListLRUJoin(InListJoin):
    name = "inlist-lru"
    counters_type = CacheProbes
    cost_model = None  # the LRU cache in front has no model
    paper = "baseline: micro-batch IN-list lookup with an LRU cache of master rows in the same budget"
    params = {
        **InListJoin.params,
        "cache_fraction": Param(float, 0.5, "share of the memory budget for the LRU cache", 0.0),
    }

    def _cache_bytes(self, reserve: int) -> int:
        store = self.store
        per_key = MasterCache.bytes_per_key(store.key_type.itemsize, store.max_rows_per_key, store.row_bytes())
        budget = min(int(self.memory * min(self.settings["cache_fraction"], 1.0)), self.memory - reserve)
        fixed = store.result_bytes(None, 0)
        keys = max(0, int((budget - fixed) // per_key))
        self.cache = MasterCache(keys, store.max_rows_per_key, store.key_type.dtype, self.schema, "lru")
        return int(math.ceil(keys * per_key)) + fixed

    def _step(self, buffer: StreamBuffer) -> JoinOutput:
        chunk = self._take(buffer, self.batch_rows)
        if not len(chunk):
            return JoinOutput.empty(self.schema)
        hit, probe_idx, log_rows = self.cache.probe(chunk.keys)
        self.counters.cache_probes += len(chunk)
        self.counters.cache_hits += int(hit.sum())
        hits = JoinOutput(chunk.row_ids[probe_idx], self.cache.rows(log_rows), np.zeros(0, np.int64),
                          np.zeros(0, np.int8), chunk.keys[probe_idx])
        missed = chunk.select(~hit)
        looked_up = self._lookup(missed) if len(missed) else JoinOutput.empty(self.schema)
        if len(missed) and self.cache.capacity and len(self._found):
            keys, counts = np.unique(self._found.keys, return_counts=True)
            self.cache.admit(keys, np.zeros(len(keys)), self._found.rows, counts)
        return JoinOutput.concat([hits, looked_up], self.schema)

    def invalidate(self, keys: np.ndarray) -> int:
        """Drop the LRU cache's entries of changed keys."""
        return self.cache.invalidate(keys)

    def structure_bytes(self) -> int:
        return self._held + self.cache.nbytes

    def memory_split(self) -> dict:
        return {**super().memory_split(), "cache_keys": self.cache.capacity}

    def stats(self) -> dict:
        out = super().stats()
        out["cache_hit_ratio"] = self.counters.hit_ratio
        return out
