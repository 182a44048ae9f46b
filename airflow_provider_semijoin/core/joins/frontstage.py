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

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from ..costmodel import PROBE_LOOK_MARGIN, best_cache_size
from ..stores.base import MasterStore
from .base import CacheProbes, Clock, JoinAlgorithm, JoinOutput, Param, StreamBuffer, StreamChunk, ranges, runs_of
from .hybridjoin import HybridJoin, HybridJoinL, HybridJoinPQ
from .master_cache import POLICIES, MasterCache
from .plan import Plan, RStats, smallest_budget
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

    def __init__(self, store: MasterStore, memory: int, *, clock: Clock = time.perf_counter, plan: Plan | None = None,
                 **params):
        super().__init__(store, memory, clock=clock, plan=plan, **params)  # validates own and inner parameters
        sizes, s = self.plan_used.sizes, self.settings
        self.cache = MasterCache(sizes["cache_keys"], store.max_rows_per_key, store.key_type.dtype, self.schema,
                                 s["eviction"], s["seed"])
        inner_params = {**{k: v for k, v in params.items() if k in self.inner.params}, **sizes["inner_pinned"]}
        inner_plan = sizes["inner_plan"]
        self.algorithm = self.inner(store, inner_plan.memory, clock=clock, plan=inner_plan, **inner_params)
        self._misses = StreamBuffer(store.key_type, self.clock)
        self.threshold = s["threshold"]
        self._decay_every = s["decay_every"] or DECAY_PER_KEY * max(self.cache.capacity, 1)
        self._probed_since_decay = 0
        self._miss_ratio = 1.0  # misses per probed tuple, averaged over the last rounds
        self._steps_since_adapt = 0
        self._evictions_at_adapt = 0

    # -- the plan: the split of M between H_R and the wrapped algorithm (CMESHJOIN eq. 1-4) -------
    @classmethod
    def statistics(cls, store: MasterStore, settings: dict) -> RStats:
        """The wrapped algorithm's, with K (H_R caches a key with all its rows)."""
        inner_stats = cls.inner.statistics(store, cls._inner_settings(settings))
        return dataclasses.replace(inner_stats, max_rows_per_key=store.max_rows_per_key)

    @classmethod
    def plan(cls, stats: RStats, memory: int, settings: dict) -> Plan:
        """H_R of ``cache_keys`` keys, or of CMESHJOIN eq. 4's best number
        (:func:`..costmodel.best_cache_size`) given R's distinct keys and v_R (the page map of the
        wrapped algorithm at its smallest budget, with the page size it takes at the whole budget
        pinned: :meth:`~.base.JoinAlgorithm.pinned`), leaving that smallest budget for the
        wrapped algorithm; the rest of M is the wrapped algorithm's plan (``inner_plan``)."""
        inner_settings = cls.inner.pinned(stats, memory, cls._inner_settings(settings))
        inner_floor = stats.floor(cls.inner, inner_settings)
        pages, per_key = cls._cached_key_bytes(stats, inner_settings, inner_floor)
        fixed = stats.result_overhead  # the row log's per-column overhead
        cache_keys = settings["cache_keys"] or best_cache_size(
            memory, pages.n_keys, per_key, settings["skew"], reserve=inner_floor + fixed + 1
        )
        cache_keys = min(cache_keys, pages.n_keys)
        cache_bytes = int(math.ceil(cache_keys * per_key)) + fixed
        if memory - cache_bytes < inner_floor:
            raise cls.budget_error(memory, cache_bytes + inner_floor, f"H_R of {cache_keys} keys and the smallest {cls.inner.name}")
        inner = cls.inner.plan(stats, memory - cache_bytes, inner_settings)
        pinned = {k: v for k, v in inner_settings.items() if k == "page_rows" and v != cls.inner.params[k].default}
        return Plan(cls.name, memory, inner.capacity_with_waiting,
                    {"cache_keys": cache_keys, "cache_bytes": cache_bytes, "inner_plan": inner, "inner_pinned": pinned})

    @classmethod
    def min_memory(cls, stats: RStats, settings: dict) -> int:
        """The wrapped algorithm's smallest budget, at the page size the budget pins
        (:meth:`~.base.JoinAlgorithm.pinned`), and H_R: its row log's overhead, with the
        ``cache_keys`` given (from the cost model none fit beside the smallest wrapped algorithm)."""
        inner_settings = cls._inner_settings(settings)

        def needed(pinned, memory):
            floor = stats.floor(cls.inner, dict(pinned))
            pages, per_key = cls._cached_key_bytes(stats, dict(pinned), floor)
            return floor + int(math.ceil(min(settings["cache_keys"], pages.n_keys) * per_key)) + stats.result_overhead

        return smallest_budget(needed, lambda memory: tuple(sorted(cls.inner.pinned(stats, memory, inner_settings).items())))

    @classmethod
    def _cached_key_bytes(cls, stats: RStats, inner_settings: dict, inner_floor: int) -> tuple:
        """R's page map as the wrapped algorithm reads it at its smallest budget, and the bytes of a
        key in H_R with its K rows (v_R of that map)."""
        pages = stats.page(cls.inner.plan(stats, inner_floor, inner_settings).sizes["page_rows"])
        return pages, MasterCache.bytes_per_key(stats.key_itemsize, stats.max_rows_per_key, pages.row_bytes)

    @classmethod
    def _inner_settings(cls, settings: dict) -> dict:
        return {k: v for k, v in settings.items() if k in cls.inner.params}

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
        return self._with_inner(self.plan_used, self.algorithm.memory_split())

    @classmethod
    def planned_split(cls, plan: Plan) -> dict:
        return cls._with_inner(plan, cls.inner.planned_split(plan.sizes["inner_plan"]))

    @classmethod
    def _with_inner(cls, plan: Plan, inner_split: dict) -> dict:
        """H_R's share of ``plan`` and the wrapped algorithm's split, its fields prefixed ``inner.``."""
        sizes = plan.sizes
        return {"cache_keys": sizes["cache_keys"], "cache_bytes": sizes["cache_bytes"], "inner": cls.inner.name,
                "inner_budget_bytes": sizes["inner_plan"].memory, **{f"inner.{k}": v for k, v in inner_split.items()}}

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
