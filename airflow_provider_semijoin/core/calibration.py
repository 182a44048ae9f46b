"""Measure the component costs of the papers' cost models on the running machine.

The cost models of HYBRIDJOIN (sec. 4.4, Table 1), SSJ (sec. IV-C, Table 1) and CMESHJOIN
(sec. 3.2) price one iteration of the outer loop from a handful of unit costs. The papers give
them in nanoseconds for their Java prototypes; here they are measured, in seconds, by timing the
engine's own structures on synthetic arrays (no constant is copied from a paper):

* I/O: ``c_IO(rows) = S + T * rows`` with S and T from :meth:`MasterStore.calibrate` (the
  figures the algorithms sized themselves with) or, with ``io_samples``, from index range loads
  at random places of R;
* per item, the papers' names: ``c_H`` per disk row in the disk buffer of a join, ``c_O`` per
  output tuple, ``c_E`` per tuple removed from H_S/Q, ``c_S`` per stream tuple read from a
  buffer, ``c_A`` per tuple added to H_S/Q, ``c_F`` per frequency check of a matched tuple,
  ``c_cache`` per stream tuple probed in H_R (and ``c_hit`` per H_R hit: its output), for a
  small and a large H_R (a binary search in a large H_R misses the CPU caches);
* per call: what numpy and Python charge whatever the size (microseconds, not nanoseconds),
  which the papers' Java prototypes could neglect and a numpy engine cannot: the fixed cost of
  one iteration (``c_step``, ``c_step_mesh``, ``c_step_inlj``), of popping a page from H_S
  (``c_pop``, plus ``c_group`` per admission group walked), of finding the oldest tuple of Q
  (``c_chunk`` per live chunk), of a stream-probing round (``c_round``) and of a learning step
  (``c_learn``) of the cache front-stage.

Each per-item cost is the slope between a small and a large call of the real function, each
the median of a few repeats; the fixed costs of whole iterations come from real ``step()``
calls of HYBRIDJOIN, MESHJOIN and INLJ over an in-memory copy of R (:class:`MemoryStore`)
with one tuple per iteration, minus their per-item parts. It takes a fraction of a second.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from .checks import check_number
from .errors import ConfigError
from .joins.base import StreamBuffer, StreamChunk, join_page
from .joins.frontstage import CacheJoin
from .joins.hybridjoin import HybridJoin
from .joins.indexjoin import IndexNestedLoopJoin
from .joins.master_cache import MasterCache
from .joins.meshjoin import MeshJoin
from .joins.stream_table import StreamTable
from .keys import KeyType
from .stores.base import IOCounters, MasterPage, MasterStore
from .stores.memory import MemoryStore, memory_store, synthetic_keys
from .unitcosts import CACHE_BIG_LOG2, CACHE_SMALL_LOG2, ComponentCosts

Clock = Callable[[], float]

SYNTH_PAGE_ROWS = 256  # rows per page of the in-memory R (128 pages)
SMALL, LARGE = 16, 4096  # tuples of the small and the large call of a slope
REPEAT = 5  # repeats of each timing (the median counts)
STEP_REPEAT = 64  # timed steps of each algorithm (the median counts)
COMPACT_CAPACITY = 1 << 17  # tuples of the table whose arena compaction is timed
FLOOR = 1e-12  # every cost is at least this (a clock too coarse to see a cost gives the floor)


def _median(times: list[float]) -> float:
    return float(np.median(times)) if len(times) else 0.0


def _time(clock: Clock, run: Callable[[], object], setup: Callable[[], object] | None = None, repeat: int = REPEAT) -> float:
    """Median seconds of ``run()`` (after an untimed ``setup()`` each time)."""
    times = []
    for _ in range(repeat):
        if setup is not None:
            setup()
        t0 = clock()
        run()
        times.append(clock() - t0)
    return _median(times)


def _line(small: float, large: float, n_small: int = SMALL, n_large: int = LARGE) -> tuple[float, float]:
    """``(fixed, per_item)`` of the line through (n_small, small) and (n_large, large)."""
    per_item = max((large - small) / (n_large - n_small), 0.0)
    return max(small - per_item * n_small, 0.0), per_item


class _Calibration:
    """The measurements on the in-memory R, one method each; the costs land in ``self.c``."""

    def __init__(self, mem: MemoryStore, clock: Clock, seed: int):
        self.mem, self.clock = mem, clock
        self.rng = np.random.default_rng(seed)
        self.page_map = mem.page_map(SYNTH_PAGE_ROWS)
        self.n_pages = self.page_map.n_pages
        self.c: dict[str, float] = {}
        self.take_fixed = 0.0

    def keys_on_pages(self, pages: np.ndarray) -> np.ndarray:
        """A random key of R on each of ``pages``."""
        at = pages * SYNTH_PAGE_ROWS + self.rng.integers(0, SYNTH_PAGE_ROWS, len(pages))
        return self.mem.keys[np.minimum(at, len(self.mem.keys) - 1)]

    def random_keys(self, n: int) -> np.ndarray:
        return self.mem.keys[self.rng.integers(0, len(self.mem.keys), n)]

    def table(self) -> StreamTable:
        return StreamTable(2 * LARGE, self.n_pages, self.mem.key_type.dtype)

    def stream_read(self) -> None:
        """c_S: :meth:`StreamBuffer.take` from chunks of 64 tuples (what a front-stage queues)."""
        def timed(n):
            keys = self.random_keys(2 * LARGE)
            state = {}

            def setup():
                buffer = StreamBuffer(self.mem.key_type, self.clock)
                for lo in range(0, len(keys), 64):
                    buffer.append(np.arange(lo, lo + 64), keys[lo : lo + 64])
                state["buffer"] = buffer
            return _time(self.clock, lambda: state["buffer"].take(n), setup)

        self.take_fixed, self.c["c_S"] = _line(timed(SMALL), timed(LARGE))

    def stream_table(self) -> None:
        """c_A, c_E, c_pop, c_group, c_chunk: :class:`StreamTable` admission, pops, oldest key."""
        def admit(n):
            keys = self.random_keys(n)
            state = {}

            def setup():
                state["table"] = self.table()

            return _time(self.clock, lambda: state["table"].admit(np.arange(n), keys, self.page_map.page_of(keys)), setup)

        self.c["c_A"] = _line(admit(SMALL), admit(LARGE))[1]

        def pop(n, groups):
            """Pop page 0 holding ``n`` tuples admitted in ``groups`` chunks."""
            keys, pages = self.keys_on_pages(np.zeros(n, np.int64)), np.zeros(n, np.int64)
            state = {}

            def setup():
                table = self.table()
                for part in np.array_split(np.arange(n), groups):
                    table.admit(part, keys[part], pages[part])
                state["table"] = table
            return _time(self.clock, lambda: state["table"].pop_page(0), setup)

        self.c["c_pop"], self.c["c_E"] = _line(pop(SMALL, 1), pop(LARGE, 1))
        self.c["c_group"] = _line(pop(256, 1), pop(256, 256), 1, 256)[1]

        def oldest(chunks):
            table = self.table()
            pages = np.arange(chunks) % self.n_pages
            keys = self.keys_on_pages(pages)
            for i in range(chunks):
                table.admit(np.array([i]), keys[i : i + 1], pages[i : i + 1])
            return _time(self.clock, table.oldest_key)

        self.c["c_chunk"] = _line(oldest(4), oldest(1024), 4, 1024)[1]
        self.c["c_compact"] = self.compaction()

    def compaction(self) -> float:
        """c_compact: the arena compaction of a table of 2^17 tuples, per tuple admitted between
        two compactions (capacity / 2 of them: it runs when the arena of 1.5 x capacity is full)."""
        capacity = COMPACT_CAPACITY
        pages = np.repeat(np.arange(self.n_pages), -(-capacity // self.n_pages))[:capacity]
        keys = self.keys_on_pages(pages)
        times = []
        for _ in range(3):
            table = StreamTable(capacity, self.n_pages, self.mem.key_type.dtype)
            table.admit(np.arange(capacity), keys, pages)
            for page in range(0, self.n_pages, 2):  # half the tuples leave
                table.pop_page(page)
            while table._tail + 1 <= len(table._key) - 1:  # fill the arena to its last slot
                n = min(table.free, len(table._key) - 1 - table._tail)
                table.admit(np.arange(n), keys[:n], pages[:n])
                if table.free == 0:
                    table.pop_page(int(pages[0]))
            table.pop_page(int(pages[-1]))
            one = keys[-1:], pages[-1:]
            t0 = self.clock()
            table.admit(np.arange(2), np.repeat(one[0], 2), np.repeat(one[1], 2))  # 2 more: compacts
            times.append(self.clock() - t0)
        return _median(times) / (capacity / 2)

    def page_join(self) -> None:
        """c_H and c_O: :func:`join_page` over pages of more rows, and with more tuples."""
        def join(rows, n):
            page = MasterPage(self.mem.keys[:rows], self.mem.rows.slice(0, rows))
            keys, ids = page.keys[self.rng.integers(0, rows, n)], np.arange(n)
            return _time(self.clock, lambda: join_page(page, ids, keys, self.mem.key_unique))

        self.c["c_H"] = _line(join(SYNTH_PAGE_ROWS, LARGE), join(8192, LARGE), SYNTH_PAGE_ROWS, 8192)[1]
        self.c["c_O"] = _line(join(1024, SMALL), join(1024, LARGE))[1]

    def _steps(self, algorithm, keys: np.ndarray) -> float:
        """Median seconds of ``algorithm.step`` fed the next key of ``keys`` before each step."""
        buffer = StreamBuffer(self.mem.key_type, self.clock)
        times = []
        for i in range(STEP_REPEAT + 8):
            at = i % len(keys)
            buffer.append(np.array([i]), keys[at : at + 1])
            t0 = self.clock()
            algorithm.step(buffer)
            times.append(self.clock() - t0)
            buffer.taken.clear()
        return _median(times[8:])

    def iterations(self) -> None:
        """c_step, c_step_mesh, c_step_inlj: real steps with one tuple each, minus per-item costs."""
        c = self.c
        one_tuple = c["c_S"] + c["c_A"] + c["c_E"] + c["c_O"] + c["c_H"] * SYNTH_PAGE_ROWS
        cycle = self.keys_on_pages(np.arange(self.n_pages))  # tuple i lies on page i mod pages
        load = _time(self.clock, lambda: self.mem.load_pages(self.page_map, 1), repeat=STEP_REPEAT // 4)
        popped = c["c_pop"] + c["c_group"]

        # HYBRIDJOIN: each step admits one tuple, loads its page and pops it
        hj = HybridJoin(self.mem, 1 << 22, page_rows=SYNTH_PAGE_ROWS, clock=self.clock)
        c["c_step"] = self._steps(hj, cycle) - load - one_tuple - popped - c["c_chunk"]

        # MESHJOIN: partitions of one page; each step admits one tuple, on the page it scans
        mj = MeshJoin(self.mem, 1 << 22, page_rows=SYNTH_PAGE_ROWS, partition_pages=1, clock=self.clock)
        mj.chunk_tuples = 1
        c["c_step_mesh"] = self._steps(mj, cycle) - load - one_tuple - popped

        # INLJ: one lookup per step (the in-memory lookup stands for the query c_IO prices)
        inlj = IndexNestedLoopJoin(self.mem, 1 << 20, clock=self.clock)
        lookup = _time(self.clock, lambda: self.mem.lookup(cycle[3]), repeat=STEP_REPEAT // 4)
        c["c_step_inlj"] = self._steps(inlj, cycle) - lookup - c["c_S"] - c["c_O"]

    def front_stage(self) -> None:
        """c_cache, c_hit, c_round, c_F, c_learn: a CACHEJOIN's stream-probing and learning."""
        mem, cached = self.mem, 1 << CACHE_SMALL_LOG2
        fs = CacheJoin(mem, 1 << 22, cache_keys=cached, page_rows=SYNTH_PAGE_ROWS, adaptive=0, clock=self.clock)
        hot = np.arange(0, 2 * cached, 2)  # every other key of R's first pages is cached
        fs.cache.admit(mem.keys[hot], np.ones(cached), mem.rows.take(hot), np.ones(cached, np.int64))
        cold = mem.keys[4 * cached :]

        def probe(keys, n):
            chunk = StreamChunk(np.arange(n), keys[self.rng.integers(0, len(keys), n)])
            return _time(self.clock, lambda: fs._probe(chunk))

        round_fixed, self.c["c_cache"] = _line(probe(cold, SMALL), probe(cold, LARGE))
        self.c["c_hit"] = max(_line(probe(mem.keys[hot], SMALL), probe(mem.keys[hot], LARGE))[1] - self.c["c_cache"], 0.0)
        self.c["c_round"] = round_fixed + self.take_fixed
        self.big_cache(fs.cache, mem.keys[hot], cold)

        def learn(n):
            # a disk step's output: n matched tuples whose keys mostly come once (below the threshold)
            keys = np.sort(cold[self.rng.integers(0, len(cold), n)])
            out = join_page(MasterPage(mem.keys, mem.rows), np.arange(n), keys, mem.key_unique)
            return _time(self.clock, lambda: fs._learn(out))

        self.c["c_learn"], self.c["c_F"] = _line(learn(SMALL), learn(LARGE))


    def big_cache(self, small: MasterCache, small_hot: np.ndarray, small_cold: np.ndarray) -> None:
        """c_cache_big, c_hit_big: what probing an H_R of 2^18 keys (and taking the rows of its
        hits) costs per tuple more than probing ``small``, added to c_cache and c_hit."""
        mem, n = self.mem, 1 << CACHE_BIG_LOG2
        keys = synthetic_keys(2 * n, mem.key_type)[0]
        big = MasterCache(n, 1, mem.key_type.dtype, mem.schema, "lfu")
        big.admit(keys[::2], np.ones(n), mem.rows.take(np.arange(n) % len(mem.rows)), np.ones(n, np.int64))

        def probe(cache, pool):
            chosen = pool[self.rng.integers(0, len(pool), LARGE)]
            return _time(self.clock, lambda: cache.rows(cache.probe(chosen)[2])) / LARGE

        miss = probe(big, keys[1::2]) - probe(small, small_cold)
        hit = probe(big, keys[::2]) - probe(small, small_hot)
        self.c["c_cache_big"] = self.c["c_cache"] + max(miss, 0.0)
        self.c["c_hit_big"] = self.c["c_hit"] + max(hit - miss, 0.0)


IO_SAMPLE_ROWS = (256, 2048, 16384)  # sizes of the range loads io_samples fits S and T to: those of
# HYBRIDJOIN's pages up to MESHJOIN's partitions (the cost per row grows with the size of a result)


def _sampled_io(store: MasterStore, samples: int, clock: Clock, rng: np.random.Generator) -> tuple[float, float]:
    """S and T of range loads at random places of R: ``samples`` loads of each size of
    IO_SAMPLE_ROWS, each at a place of its own (a second load of one place finds it cached),
    and the least-squares line through the median time of each size."""
    page_map = store.page_map()
    if page_map.n_pages < 2:
        return store.calibrate()
    saved = IOCounters(**vars(store.counters))
    sizes, medians = [], []
    try:
        for rows in IO_SAMPLE_ROWS:
            times, got = [], []
            for page in rng.integers(0, page_map.n_pages, samples):
                t0 = clock()
                got.append(len(store.load_range(page_map.bounds[page], rows)))
                times.append(clock() - t0)
            sizes.append(_median(got))
            medians.append(_median(times))
    finally:
        store.counters = saved
    if max(sizes) - min(sizes) < 1:
        return max(medians[0], FLOOR), store.calibrate()[1]
    return fit_io(sizes, medians)


def fit_io(rows: list[float], seconds: list[float]) -> tuple[float, float]:
    """``(S, T)`` of the line ``S + T * rows`` through timed loads, fitted to relative errors
    (each point weighted by 1 / its time): a load's noise grows with its time, and an even fit
    lets the largest load's few percent swing S, most of the smallest load's time; weighted,
    repeated fits scatter far less (``docs/measurements.md``)."""
    weights = 1.0 / np.maximum(np.asarray(seconds, dtype=float), FLOOR)
    row_s, query_s = np.polyfit(rows, seconds, 1, w=weights)
    return max(float(query_s), FLOOR), max(float(row_s), FLOOR)


LOOKUP_SAMPLES = 8  # INLJ lookups an io sample times for lookup_s (each at a key of its own)


def _sampled_lookup(store: MasterStore, samples: int, clock: Clock, rng: np.random.Generator) -> float:
    """Seconds of one lookup of a key (``key = ?``, INLJ's), the median of ``samples`` x
    :data:`LOOKUP_SAMPLES` lookups of the first keys of pages at random places of R, each page
    once (a key looked up again is cached)."""
    page_map = store.page_map()
    saved = IOCounters(**vars(store.counters))
    times = []
    try:
        for page in rng.choice(page_map.n_pages, min(samples * LOOKUP_SAMPLES, page_map.n_pages), replace=False):
            t0 = clock()
            store.lookup(page_map.bounds[page])
            times.append(clock() - t0)
    finally:
        store.counters = saved
    return _median(times)


IN_SAMPLE_KEYS = 200  # scattered keys of one IN query io_samples times to price a leaf (in_leaf_s)


def _sampled_in_leaf(store: MasterStore, samples: int, in_costs: tuple[float, float], clock: Clock,
                     rng: np.random.Generator) -> float:
    """Seconds an IN query spends per leaf of R's index it reads: ``samples`` queries of
    :data:`IN_SAMPLE_KEYS` page bounds at random places (one key a page of
    ``DEFAULT_PAGE_ROWS`` rows, so a leaf a key), each the median's share over what the
    neighbours' per-key cost (:meth:`MasterStore.calibrate_in`) already prices."""
    page_map = store.page_map()
    keys = min(IN_SAMPLE_KEYS, page_map.n_pages)
    if keys < 2:
        return FLOOR
    saved = IOCounters(**vars(store.counters))
    times = []
    try:
        for _ in range(samples):
            chosen = np.sort(page_map.bounds[rng.choice(page_map.n_pages, keys, replace=False)])
            t0 = clock()
            store.lookup_many(chosen)
            times.append(clock() - t0)
    finally:
        store.counters = saved
    in_query_s, in_key_s = in_costs
    return max((_median(times) - in_query_s - in_key_s * keys) / keys, FLOOR)


def calibrate(
    store: MasterStore | None = None,
    key_type: KeyType | str | None = None,
    seed: int = 0,
    *,
    clock: Clock = time.perf_counter,
    io_samples: int = 0,
    runs: int = 1,
) -> ComponentCosts:
    """Measure :class:`ComponentCosts` on this machine (a fraction of a second a run).

    ``store`` gives S and T (:meth:`MasterStore.calibrate`), the IN-list costs and the shape of
    R's rows (its columns, its first rows); without a store, S and T are placeholders
    (0.1 ms, 1 us) and the rows are ``(sk int64, name string)``. ``key_type`` (``"int"``,
    ``"str"`` or a :class:`KeyType`; default the store's) is the type of the synthetic keys.
    ``seed`` fixes the synthetic data; ``clock`` is the timer (tests pass a fake one).

    With ``io_samples`` > 0, S and T are fitted to that many range loads of each of three sizes
    at random places of R instead: the store's own calibration takes the best of three loads of
    R's first rows, which the database has just cached, so it underestimates what the cold
    pages of a long run cost. So is an IN query's cost per leaf of R's index it reads
    (``in_leaf_s``, from that many queries of scattered keys; without samples the floor: an
    IN query is priced by its keys alone, as the store's neighbouring keys cost), and INLJ's
    lookup of one key (``lookup_s``, :data:`LOOKUP_SAMPLES` lookups a sample; without samples
    a range load of one row, S + T).

    With ``runs`` > 1, each cost is the median over that many calibrations, the i-th seeded
    ``seed + i`` (its samples at places of R of its own, which an earlier run did not cache).
    """
    check_number("runs", runs, "a whole number >= 1", integer=True, minimum=1)
    if runs > 1:
        return ComponentCosts.median([calibrate(store, key_type, seed + i, clock=clock, io_samples=io_samples)
                                      for i in range(runs)])
    if isinstance(key_type, str):
        if key_type not in ("int", "str"):
            raise ConfigError(f"key_type: {key_type!r} is not one of ['int', 'str']")
        width = store.key_type.width if store is not None and store.key_type.kind == "str" else 12
        key_type = KeyType(key_type, width if key_type == "str" else 0)
    elif key_type is not None and not isinstance(key_type, KeyType):
        raise ConfigError(f"key_type: {key_type!r} is not 'int', 'str' or a KeyType")
    check_number("io_samples", io_samples, "a whole number >= 0", integer=True, minimum=0)
    rng = np.random.default_rng(seed)
    mem = memory_store(store, key_type)
    query_s, row_s = mem.calibrate()
    if store is not None and io_samples:
        query_s, row_s = _sampled_io(store, io_samples, clock, rng)
    run = _Calibration(mem, clock, seed)
    run.stream_read()
    run.stream_table()
    run.page_join()
    run.iterations()
    run.front_stage()
    lookup_s = query_s + row_s  # a range load of one row, unless sampled
    if store is not None and io_samples and store.page_map().n_pages:
        lookup_s = _sampled_lookup(store, io_samples, clock, rng)
    in_query_s, in_key_s = store.calibrate_in() if store is not None else (query_s, row_s)
    in_leaf_s, leaf_rows = FLOOR, 1.0
    if store is not None and io_samples:
        in_leaf_s = _sampled_in_leaf(store, io_samples, (in_query_s, in_key_s), clock, rng)
        leaf_rows = store.leaf_rows()
    values = {"query_s": query_s, "row_s": row_s, "lookup_s": lookup_s, **run.c, "in_query_s": in_query_s,
              "in_key_s": in_key_s, "in_leaf_s": in_leaf_s, "leaf_rows": leaf_rows}
    return ComponentCosts(**{k: max(float(v), FLOOR) for k, v in values.items()})
