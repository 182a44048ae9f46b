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
from .plan import Plan, RStats


class IndexNestedLoopJoin(JoinAlgorithm):
    name = "inlj"
    cost_model = "inlj"
    auto_candidate = True
    paper = "INLJ (HYBRIDJOIN paper, sec. 3.2)"
    params = {}

    def __init__(self, store, memory, **kwargs):
        super().__init__(store, memory, **kwargs)
        self._held = 0

    @classmethod
    def plan(cls, stats: RStats, memory: int, settings: dict) -> Plan:
        """The one tuple in flight and the K rows of its key (v_R sampled with no page map: none is read)."""
        needed = cls.min_memory(stats, settings)
        if needed > memory:
            raise cls.budget_error(memory, needed, "one stream tuple with the rows of its key")
        return Plan(cls.name, memory, 1, {"tuple_bytes": needed})

    @classmethod
    def min_memory(cls, stats: RStats, settings: dict) -> int:
        """The tuple's key and row id, and a loaded result of K rows."""
        return stats.key_itemsize + 8 + stats.result_bytes(stats.max_rows_per_key)

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
        self.batch_rows = self.plan_used.capacity_tuples
        self._held = 0

    @classmethod
    def plan(cls, stats: RStats, memory: int, settings: dict) -> Plan:
        """Per tuple of the batch: its key and row id (twice: the batch and the distinct keys) and,
        at worst, K rows of R for its key (v_R sampled with no page map: none is read)."""
        per_tuple, fixed = cls._tuple_bytes(stats), stats.result_overhead
        cache = cls._cache_plan(stats, memory, settings, reserve=cls._batch_bytes(stats, settings["batch_rows"]))
        batch_budget = memory - cache.get("cache_bytes", 0)
        batch_rows = settings["batch_rows"] or int((batch_budget - fixed) // per_tuple)
        needed = cls._batch_bytes(stats, batch_rows)
        if batch_rows < 1 or needed > batch_budget:
            what = f"batch_rows={batch_rows} stream tuples with their master rows" if batch_rows else "one stream tuple with its master rows"
            raise cls.budget_error(memory, needed + memory - batch_budget, what)
        return Plan(cls.name, memory, batch_rows, {"batch_rows": batch_rows, "bytes_per_tuple": per_tuple, **cache})

    @staticmethod
    def _tuple_bytes(stats: RStats) -> float:
        """A tuple of the batch: its key and row id (twice: the batch and the distinct keys) and,
        at worst, K rows of R for its key."""
        return 2 * (stats.key_itemsize + 8) + stats.max_rows_per_key * stats.row_bytes

    @classmethod
    def _batch_bytes(cls, stats: RStats, batch_rows: int) -> int:
        """A batch of ``batch_rows`` tuples (at least one) and the result's per-column overhead."""
        return int(math.ceil(stats.result_overhead + max(batch_rows, 1) * cls._tuple_bytes(stats)))

    @classmethod
    def min_memory(cls, stats: RStats, settings: dict) -> int:
        """The batch of ``batch_rows`` tuples (one, when sized from the budget)."""
        return cls._batch_bytes(stats, settings["batch_rows"])

    @classmethod
    def _cache_plan(cls, stats: RStats, memory: int, settings: dict, reserve: int) -> dict:
        """The keys and bytes of the budget spent on a cache, leaving ``reserve`` for the batch
        (of ``batch_rows`` tuples, or one when sized from the budget)."""
        return {}

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

    @classmethod
    def planned_split(cls, plan: Plan) -> dict:
        return {"batch_rows": plan.capacity_tuples, "bytes_per_tuple": round(plan.sizes["bytes_per_tuple"], 1)}


class InListLRUJoin(InListJoin):
    name = "inlist-lru"
    counters_type = CacheProbes
    cost_model = None  # the LRU cache in front has no model
    paper = "baseline: micro-batch IN-list lookup with an LRU cache of master rows in the same budget"
    params = {
        **InListJoin.params,
        "cache_fraction": Param(float, 0.5, "share of the memory budget for the LRU cache", 0.0),
    }

    def __init__(self, store, memory, **kwargs):
        super().__init__(store, memory, **kwargs)
        self.cache = MasterCache(self.plan_used.sizes["cache_keys"], store.max_rows_per_key, store.key_type.dtype,
                                 self.schema, "lru")

    @classmethod
    def min_memory(cls, stats: RStats, settings: dict) -> int:
        """The batch, and the cache's row log with no key (its per-column overhead)."""
        return super().min_memory(stats, settings) + stats.result_overhead

    @classmethod
    def _cache_plan(cls, stats: RStats, memory: int, settings: dict, reserve: int) -> dict:
        """An LRU cache of ``cache_fraction`` of M, of the keys whose K rows it holds."""
        per_key = MasterCache.bytes_per_key(stats.key_itemsize, stats.max_rows_per_key, stats.row_bytes)
        budget = min(int(memory * min(settings["cache_fraction"], 1.0)), memory - reserve)
        keys = max(0, int((budget - stats.result_overhead) // per_key))
        return {"cache_keys": keys, "cache_bytes": int(math.ceil(keys * per_key)) + stats.result_overhead}

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

    @classmethod
    def planned_split(cls, plan: Plan) -> dict:
        return {**super().planned_split(plan), "cache_keys": plan.sizes["cache_keys"]}

    def stats(self) -> dict:
        out = super().stats()
        out["cache_hit_ratio"] = self.counters.hit_ratio
        return out
