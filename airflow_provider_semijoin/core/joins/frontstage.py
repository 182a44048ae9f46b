"""The cache front-stage, and the algorithms made of it: SSJ, CMESHJOIN, CACHEJOIN, -L, -PQ.

CMESHJOIN paper (Naeem, Dobbie, Weber, Lutteroth), sec. 3 and Algorithm 1: "a generic cache
component that can be used as a front-stage for an arbitrary semi-stream join algorithm". A
hash table H_R holds the most frequently used master tuples (tuple level, not pages). Every
arriving stream tuple probes H_R first (the stream-probing phase, lines 2-11); a hit is joined
at once and never enters the wrapped algorithm; a miss goes on to it (the disk-probing phase,
lines 12-22). When a master tuple matched ``f`` stream tuples in one disk-probing step and f
passes the frequency threshold (SSJ Algorithm 1 line 15: f >= threshold; CMESHJOIN line 17:
f > threshold), it is switched into H_R, overwriting the least frequent entry (the frequency
recorder; SSCJ) or a random one (CACHEJOIN) when H_R is full. The threshold adapts: lowered
while H_R is not full, raised when H_R evicts too often (CMESHJOIN sec. 3.1, SSJ sec. IV).

Compositions in the registry (not copies): ``ssj`` and ``cmeshjoin`` wrap MESHJOIN (SSJ's
disk-probing phase reads R in segments and expires the oldest chunk, like MESHJOIN),
``cachejoin`` wraps HYBRIDJOIN, ``cachejoin-l`` HYBRIDJOIN-L and ``cachejoin-pq`` HYBRIDJOIN-PQ
(the pq paper's "three-stage approach").

Engineering the papers leave open, decided here:

* every composition overwrites the least frequent entry by default, CACHEJOIN(-L, -PQ) too
  (``eviction=random`` is the pq paper's random overwrite): measured at the standard size
  (R = 2M rows, 50 MiB, Zipf 1), random overwrite held a hit ratio of 0.27-0.36 on the
  randomly permuted stream where LFU holds 0.63-0.64 (CACHEJOIN 1.31x, -PQ 1.55x the
  tuples/s), and the same rate on NoPerm (0.98-1.02x) with hits 0.58-0.64 -> 0.70;
* frequencies halve every ``32 * h_R`` probed stream tuples (``decay_every``), so a key that was hot once does
  not hold its slot forever when the hot set shifts;
* the memory split between H_R and the wrapped algorithm comes from the cost model
  (:func:`..costmodel.best_cache_size`, CMESHJOIN eq. 1-4) unless ``cache_keys`` is given;
* a key with K rows in R is cached with all K of them, so 1:K joins stay exact;
* master-data updates (SSIJ sec. IV-E semantics): before a join reads a new version of R,
  :meth:`FrontStage.invalidate` drops the H_R entries of the keys that changed, so a tuple never
  meets a cached row of an older version;
* the same object joins stream after stream (Spark micro-batches): H_R lives on between them.

Everything is columnar: H_R (:mod:`.master_cache`) is a sorted key array probed with
``searchsorted``, its master rows live in an Arrow row log.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..costmodel import PROBE_LOOK_MARGIN, best_cache_size
from ..errors import ConfigError
from ..stores.base import MasterStore
from .base import CacheProbes, Clock, JoinAlgorithm, JoinOutput, Param, StreamBuffer, StreamChunk, ranges, runs_of
from .hybridjoin import HybridJoin, HybridJoinL, HybridJoinPQ
from .master_cache import POLICIES, MasterCache
from .meshjoin import MeshJoin

DECAY_PER_KEY = 32  # default halving period: 32 probed tuples per cached key
ADAPT_STEPS = 32  # disk-probing steps between threshold adjustments
PROBE_ROUNDS = 64  # stream-probing rounds per step at most (Algorithm 1's inner loop)
MIN_MISS_RATIO = 1 / 64  # a round looks at no more than 80x the misses wanted (PROBE_LOOK_MARGIN x 64)
MAX_LOOK = 1 << 17  # ... nor at more than 128k tuples beyond them


@dataclass
class FrontStageCounters(CacheProbes):
    """A front stage's: stream tuples probed against H_R and found there, master tuples
    admitted to H_R (Algorithm 1 lines 16-18), stream-probing rounds (its inner loop)."""

    cache_admissions: int = 0
    cache_rounds: int = 0


class FrontStage(JoinAlgorithm):
    """A tuple-level cache in front of the algorithm ``inner`` (a class of the registry)."""

    inner: type[JoinAlgorithm]
    counters_type = FrontStageCounters
    strict = False  # True: f > threshold (CMESHJOIN), False: f >= threshold (SSJ)
    cost_model = "front-stage"  # SSJ eq. 2-10 / CMESHJOIN eq. 4 over the inner join's model
    params = {
        "cache_keys": Param(int, 0, "h_R: master tuples (keys) the cache holds; 0 = from the cost model", 0),
        "threshold": Param(int, 2, "frequency threshold: matches in one disk step that admit a tuple to H_R", 1),
        "adaptive": Param(int, 1, "1 = lower the threshold while H_R is not full, raise it when H_R evicts often", 0),
        "eviction": Param(str, "lfu", "which entry a full H_R overwrites: lfu (frequency recorder), random or lru",
                          choices=POLICIES),
        "skew": Param(float, 1.0, "Zipf exponent the cost model assumes when it sizes H_R", 0.0),
        "seed": Param(int, 0, "seed of the random overwrite policy", 0),
        "decay_every": Param(int, 0, "probed stream tuples between halvings of all frequencies; 0 = 32 * h_R", 0),
    }

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.params = {**FrontStage.params, **cls.inner.params}  # the cache's and the wrapped algorithm's

    def __init__(self, store: MasterStore, memory: int, *, clock: Clock = time.perf_counter, **params):
        super().__init__(store, memory, clock=clock, **params)  # validates own and inner parameters
        inner_params = self._sized_pages({k: v for k, v in params.items() if k in self.inner.params}, store, memory)
        s = self.settings
        inner_floor = self._inner_floor(store, inner_params)
        # the wrapped algorithm's page map (already built) tells R's distinct keys and v_R
        page_map = getattr(self.inner(store, inner_floor, **inner_params), "page_map", None) or store.page_map()
        k = store.max_rows_per_key
        per_key = MasterCache.bytes_per_key(store.key_type.itemsize, k, store.row_bytes(page_map))
        fixed = store.result_bytes(page_map, 0)  # the row log's per-column overhead
        cache_keys = s["cache_keys"] or best_cache_size(
            self.memory, page_map.n_keys, per_key, s["skew"], reserve=inner_floor + fixed + 1
        )
        cache_keys = min(cache_keys, page_map.n_keys)
        cache_bytes = int(math.ceil(cache_keys * per_key)) + fixed
        if self.memory - cache_bytes < inner_floor:
            raise self._budget_error(cache_bytes + inner_floor, f"H_R of {cache_keys} keys and the smallest {self.inner.name}")
        self.cache = MasterCache(cache_keys, k, store.key_type.dtype, self.schema, s["eviction"], s["seed"])
        self._cache_budget = cache_bytes
        self.algorithm = self.inner(store, self.memory - cache_bytes, clock=clock, **inner_params)
        self._misses = StreamBuffer(store.key_type, self.clock)
        self.threshold = s["threshold"]
        self._decay_every = s["decay_every"] or DECAY_PER_KEY * max(self.cache.capacity, 1)
        self._probed_since_decay = 0
        self._miss_ratio = 1.0  # misses per probed tuple, averaged over the last rounds
        self._steps_since_adapt = 0
        self._evictions_at_adapt = 0

    @classmethod
    def _sized_pages(cls, inner_params: dict, store: MasterStore, memory: int) -> dict:
        """``inner_params`` with the page size pinned that the wrapped algorithm takes at the whole
        budget ``memory``, where it sizes its pages from its budget (HYBRIDJOIN's ``page_rows`` 0):
        the search for its smallest budget would otherwise size pages from each budget it tries and
        build a page map of each size (64, 256 and 1,024 rows, 4.2 s at R = 2M rows, and three maps
        kept beside R) on the first join of a table, where the join reads the one map."""
        auto = cls.inner.params.get("page_rows")
        if auto is None or auto.default != 0 or inner_params.get("page_rows"):
            return inner_params
        try:
            whole = cls.inner(store, memory, **inner_params)
        except ConfigError as exc:
            if not str(exc).startswith("memory:"):
                raise
            return inner_params  # too small to choose: the smallest budget is searched as it is
        return {**inner_params, "page_rows": whole.page_map.page_rows}

    @classmethod
    def _inner_floor(cls, store: MasterStore, inner_params: dict) -> int:
        """The smallest budget the wrapped algorithm accepts (found by halving: construction is
        cheap once its page map is built, :meth:`_sized_pages`)."""
        hi = 1 << 16
        while True:
            try:
                cls.inner(store, hi, **inner_params)
                break
            except ConfigError as exc:
                if not str(exc).startswith("memory:") or hi > 1 << 40:
                    raise
                hi *= 4
        lo = hi // 4
        while hi - lo > max(1024, hi // 64):
            mid = (lo + hi) // 2
            try:
                cls.inner(store, mid, **inner_params)
                hi = mid
            except ConfigError as exc:
                if not str(exc).startswith("memory:"):
                    raise
                lo = mid
        return hi

    # -- one outer iteration -----------------------------------------------------------------
    def _step(self, buffer: StreamBuffer) -> JoinOutput:
        outputs = []
        self._misses.closed = self._misses.final = False  # a new run (micro-batch) after a drain feeds the disk stage again
        for _ in range(PROBE_ROUNDS):  # Algorithm 1 lines 2-11: until w misses wait for H_S
            want = self.algorithm.demand - self._misses.available
            if want <= 0 or not buffer.available:
                break
            outputs.append(self._probe_round(buffer, want))
        self._misses.closed = buffer.exhausted  # the disk stage drains exactly when the stream does
        self._misses.final = buffer.exhausted and buffer.final
        if self._misses.available or self.algorithm.pending or self._misses.closed:
            disk = self.algorithm.step(self._misses)
            self._misses.taken.clear()
            outputs.append(disk)
            self._learn(disk)
        return JoinOutput.concat(outputs, self.schema)

    def _probe_round(self, buffer: StreamBuffer, want: int) -> JoinOutput:
        """Probe H_R with the next tuples, as many as hold ``want`` misses and no more.

        Algorithm 1 takes tuples until w misses wait; taking ``want`` tuples a round (the
        misses still wanted) needs many small rounds once most tuples hit (2.4-7 a step in the
        tests, up to :data:`PROBE_ROUNDS`). Instead a round looks ahead at the tuples
        the observed miss ratio says hold ``want`` misses (with a margin) and takes the prefix
        up to the ``want``-th miss and the hits after it: usually one round a step, and never
        more misses waiting than the wrapped algorithm's demand (so M holds as before).
        """
        ratio = max(self._miss_ratio, MIN_MISS_RATIO)
        look = min(buffer.available, max(want, min(math.ceil(want * PROBE_LOOK_MARGIN / ratio), want + MAX_LOOK)))
        keys = buffer.peek_keys(look)
        hit, slots = self.cache.find(keys)
        miss_at = np.flatnonzero(~hit)
        self._miss_ratio = (self._miss_ratio + len(miss_at) / len(keys)) / 2
        self.counters.cache_rounds += 1
        cut = int(miss_at[want]) if len(miss_at) > want else len(keys)
        return self._probe(self._take(buffer, cut), (hit[:cut], slots[:cut]))

    def _probe(self, chunk: StreamChunk, found: tuple[np.ndarray, np.ndarray] | None = None) -> JoinOutput:
        hit, probe_idx, log_rows = self.cache.probe(chunk.keys, found)
        self.counters.cache_probes += len(chunk)
        self.counters.cache_hits += int(hit.sum())
        self._probed_since_decay += len(chunk)
        if self._probed_since_decay >= self._decay_every:
            self.cache.decay()
            self._probed_since_decay = 0
        self._misses.append(chunk.row_ids[~hit], chunk.keys[~hit], chunk.deadlines[~hit])
        out = JoinOutput.empty(self.schema)
        if len(probe_idx):
            out = JoinOutput(chunk.row_ids[probe_idx], self.cache.rows(log_rows), out.unmatched_ids,
                             out.unmatched_reason, chunk.keys[probe_idx])
        return out

    def _learn(self, disk: JoinOutput) -> None:
        """Algorithm 1 lines 16-18: admit master tuples that matched often enough in this step.

        f counts stream tuples per key (a key with K rows yields K pairs per tuple); the K rows
        to cache are those of the key's first stream tuple, consecutive in the output. The
        pairs are sorted by key once, and a key's pairs counted from where its run starts; on a
        unique key of R a pair is a tuple, so tuples are counted apart only where keys repeat
        (three ``np.unique`` sorts had been a quarter of this method in CACHEJOIN-L's Spark pipeline).
        """
        if self.cache.capacity and len(disk.matched_ids) and disk.matched_keys is not None:
            order = np.argsort(disk.matched_keys, kind="stable")
            in_order = disk.matched_keys[order]
            first, pairs = runs_of(in_order)
            keys = in_order[first]
            tuples = pairs
            if not self.one_row_per_match:
                _, one_pair_per_tuple = np.unique(disk.matched_ids, return_index=True)
                _, tuples = np.unique(disk.matched_keys[one_pair_per_tuple], return_counts=True)
            passes = tuples > self.threshold if self.strict else tuples >= self.threshold
            chosen = np.flatnonzero(passes)
            chosen = chosen[~self.cache.contains(keys[chosen])]
            if len(chosen):
                rows_per_key = pairs[chosen] // tuples[chosen]
                rows = disk.master.take(order[ranges(first[chosen], rows_per_key)])
                self.cache.admit(keys[chosen], tuples[chosen].astype(np.float64), rows, rows_per_key)
                self.counters.cache_admissions += len(chosen)
        self._adapt()

    def _adapt(self) -> None:
        if not self.settings["adaptive"]:
            return
        self._steps_since_adapt += 1
        if self._steps_since_adapt < ADAPT_STEPS:
            return
        evicted = self.cache.evictions - self._evictions_at_adapt
        if self.cache.size < self.cache.capacity and self.threshold > 1:
            self.threshold -= 1  # H_R not full: the threshold is too high
        elif evicted > self.cache.capacity // 10:
            self.threshold += 1  # H_R churns: the threshold is too low
        self._steps_since_adapt = 0
        self._evictions_at_adapt = self.cache.evictions

    def invalidate(self, keys: np.ndarray) -> int:
        """Drop the H_R entries of changed keys (and whatever the wrapped algorithm caches)."""
        return self.cache.invalidate(keys) + self.algorithm.invalidate(keys)

    # -- accounting -------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        return self.algorithm.pending + self._misses.available

    @property
    def in_flight(self) -> int:
        return self.algorithm.in_flight

    @property
    def demand(self) -> int:
        return max(self.algorithm.demand - self._misses.available, 0)

    @property
    def capacity_tuples(self) -> int:
        """The disk phase's tuples and the misses waiting for it (at most its demand)."""
        return self.algorithm.capacity_with_waiting

    @property
    def cycle_ended(self) -> bool:
        """The disk phase's: its tuples leave as it scans R (a MESHJOIN's whole scans)."""
        return self.algorithm.cycle_ended

    def turnovers(self) -> float:
        """The disk phase's, or the halvings of H_R's frequencies so far if more: H_R learns
        from the disk phase's loads and settles as H_S turns over, unless it serves nearly every
        tuple (R fits in it) and H_S hardly turns over at all."""
        return max(self.algorithm.turnovers(), self.counters.cache_probes / self._decay_every)

    def structure_bytes(self) -> int:
        waiting = self._misses.available * (self.store.key_type.itemsize + 8)
        return self.cache.nbytes + self.algorithm.structure_bytes() + waiting

    def memory_split(self) -> dict:
        return {
            "cache_keys": self.cache.capacity,
            "cache_bytes": self._cache_budget,
            "inner": self.algorithm.name,
            "inner_budget_bytes": self.algorithm.memory,
            **{f"inner.{k}": v for k, v in self.algorithm.memory_split().items()},
        }

    def stats(self) -> dict:
        out = super().stats()
        out["cache_hit_ratio"] = self.counters.hit_ratio
        out["threshold_now"] = self.threshold
        out["disk_loads"] = self.algorithm.counters.loads
        return out


class SemiStreamJoin(FrontStage):
    name = "ssj"
    auto_candidate = True
    paper = "SSJ (Naeem, Dobbie, Weber): Algorithm 1, sec. IV; disk-probing phase as MESHJOIN"
    inner = MeshJoin


class CMeshJoin(FrontStage):
    name = "cmeshjoin"
    auto_candidate = True
    paper = "CMESHJOIN (Naeem, Dobbie, Weber, Lutteroth): sec. 3, Algorithm 1"
    inner = MeshJoin
    strict = True


class CacheJoin(FrontStage):
    name = "cachejoin"
    auto_candidate = True
    paper = "CACHEJOIN: front-stage + HYBRIDJOIN (pq-frequent-pages paper sec. 2; its random overwrite is eviction=random)"
    inner = HybridJoin


class CacheJoinL(CacheJoin):
    name = "cachejoin-l"
    auto_candidate = False  # the cost model has no model of its own for it (it predicts its base's rate)
    paper = "CACHEJOIN-L: front-stage + HYBRIDJOIN-L (pq-frequent-pages paper sec. 3.1)"
    inner = HybridJoinL


class CacheJoinPQ(CacheJoin):
    name = "cachejoin-pq"
    auto_candidate = True
    paper = "CACHEJOIN-PQ: front-stage + HYBRIDJOIN-PQ, the three-stage approach (pq paper sec. 1, 4)"
    inner = HybridJoinPQ
