"""SSIJ: the contract and what only it promises: the read plan (sec. IV-D), the page cache's
ToKeep/ToRemove policy (IV-C), dynamic memory (IV-A), 1:K and range joins, deadlines (IV-F)
and updates installed while the join runs (IV-E)."""

from __future__ import annotations

import itertools
import time
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from contract import (
    ROW_ID, STREAM_KEY, JoinContract, MasterWriter, assert_exact, master_of, measured_as, one_to_k_master, record_calls,
    stream_of, worked_ahead_in_pieces, zipf_keys,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.joins import JoinOutput, StreamBuffer, create
from airflow_provider_semijoin.core.joins import ssij as ssij_module
from airflow_provider_semijoin.core.joins.ssij import KEEP_MARGIN
from airflow_provider_semijoin.core.joins.ssij_access import split_at_keep
from airflow_provider_semijoin.core.joins.ssij_pages import DEMAND_WEIGHT, PageCache, read_plan
from airflow_provider_semijoin.core.keys import normalize
from airflow_provider_semijoin.core.oracle import engine_pairs
from airflow_provider_semijoin.core.runner import check_exactly_once, run_join
from airflow_provider_semijoin.core.stores.base import MasterPage
from airflow_provider_semijoin.core.session import JoinSession
from airflow_provider_semijoin.core.stores import create_change_tables


class TestSsij(JoinContract):
    """The fixed cases with small batches (many online and join phases, a busy cache); the
    random ones also with the sizes SSIJ derives from the budget (0) and with LRU."""

    algorithm = "ssij"
    params = {"ib_thresh": 16, "sb_thresh": 24, "max_scan": 5}
    param_strategies = {
        "ib_thresh": st.sampled_from([0, 1, 7, 40]),
        "sb_thresh": st.sampled_from([0, 1, 5, 60]),
        "max_scan": st.sampled_from([1, 3, 200]),
        "cache_policy": st.sampled_from(["utility", "lru"]),
    }


# ------------------------------------------------------------------------------ the read plan


def brute_force_cost(pages: list[int], max_scan: int, query_s: float, page_s: float) -> float:
    """The cheapest split of ``pages`` into runs of consecutive requested pages, every way tried."""
    best = float("inf")
    for cuts in itertools.product([False, True], repeat=len(pages) - 1):
        runs, start = [], 0
        for i, cut in enumerate(cuts, 1):
            if cut:
                runs.append(pages[start:i])
                start = i
        runs.append(pages[start:])
        if all(run[-1] - run[0] < max_scan for run in runs):
            best = min(best, sum(query_s + page_s * (run[-1] - run[0] + 1) for run in runs))
    return best


def plan_cost(plan: list[tuple[int, int]], query_s: float, page_s: float) -> float:
    """Cost of a read plan (sec. IV-D): one query (S) per sequence plus T per page it reads."""
    return sum(query_s + page_s * count for _, count in plan)


@settings(max_examples=300, deadline=None)
@given(
    pages=st.lists(st.integers(0, 80), min_size=1, max_size=11, unique=True),
    max_scan=st.integers(1, 30),
    query_s=st.sampled_from([0.0, 1e-4, 7e-4, 5e-3]),
    page_s=st.sampled_from([1e-5, 1e-4, 3e-4]),
)
def test_read_plan_is_optimal_and_reads_no_page_twice(pages, max_scan, query_s, page_s):
    pages = sorted(pages)
    plan = read_plan(np.array(pages), max_scan, query_s, page_s)
    assert plan_cost(plan, query_s, page_s) == pytest.approx(brute_force_cost(pages, max_scan, query_s, page_s), rel=1e-9)
    read = [p for first, count in plan for p in range(first, first + count)]
    assert len(read) == len(set(read)) and read == sorted(read)  # in position order, never twice
    assert set(pages) <= set(read)
    for first, count in plan:
        assert 1 <= count <= max_scan and first in pages and first + count - 1 in pages


def test_read_plan_merges_gaps_below_max_dist_only():
    # S/T = 4: maxDist = 5 pages; a gap of 4 (3 unwanted pages) is merged, a gap of 6 is not
    assert read_plan(np.array([10, 14, 20]), 200, 4e-4, 1e-4) == [(10, 5), (20, 1)]
    # maxScan caps a run of adjacent pages: as few runs as it allows
    plan = read_plan(np.arange(7), 3, 1.0, 1e-4)
    assert len(plan) == 3 and max(count for _, count in plan) == 3
    assert read_plan(np.array([], np.int64), 5, 1e-3, 1e-4) == []


def test_the_page_cache_drops_evicted_rows_without_merging_and_merges_in_key_order_for_a_probe():
    """CR stages each sequence's kept pages as a segment; evicted rows leave their segment when
    memory is short (collect: the untouched segment is the same object), and the probe's slab
    holds the cached pages' rows only, in key order."""
    schema = pa.schema([("sk", pa.int64())])
    cache = PageCache(8, np.dtype(np.int64), schema, "utility")

    def sequence(first_key):  # two pages of 3 rows: keys first_key.., pages first_key // 3 ..
        keys = np.arange(first_key, first_key + 6, dtype=np.int64)
        return MasterPage(keys, pa.table({"sk": keys * 10})), (keys // 3).astype(np.int64)

    for first_key in (12, 0):  # staged out of key order
        loaded, row_page = sequence(first_key)
        pages = np.unique(row_page)
        cache.stage(loaded, row_page, pages, pages)
    untouched = cache._segments[1]
    cache.evict(np.array([4]))
    assert cache.garbage() > 0
    cache.collect()
    assert cache.garbage() == 0 and len(cache._segments) == 2 and cache._segments[1] is untouched
    assert cache._segments[0].keys.tolist() == [15, 16, 17]
    assert cache.compactions == 0
    slab = cache.slab
    assert slab.keys.tolist() == [0, 1, 2, 3, 4, 5, 15, 16, 17]
    assert slab.rows["sk"].to_pylist() == [10 * k for k in slab.keys.tolist()]
    assert slab.row_page.tolist() == [0, 0, 0, 1, 1, 1, 5, 5, 5] and cache.compactions == 1


# ------------------------------------------------------------------------------ helpers


class Paced:
    """Drives an algorithm step by step over a stream fed in slices (a stream that keeps
    arriving), collecting its outputs; ``tag()`` labels every output with a value (e.g. the
    version of R in effect)."""

    def __init__(self, algorithm, stream: pa.Table, tag=lambda: 0, clock=time.perf_counter):
        self.algorithm = algorithm
        self.keys = normalize(stream[STREAM_KEY], algorithm.store.key_type)
        assert self.keys.valid.all()
        self.buffer = StreamBuffer(algorithm.store.key_type, clock)
        self.sent = 0
        self.n = stream.num_rows
        self.tag = tag
        self.outputs: list[tuple[JoinOutput, object]] = []
        self.peak = 0

    def send(self, count: int, deadlines=None) -> None:
        rows = np.arange(self.sent, min(self.sent + count, self.n))
        self.buffer.append(rows, self.keys.keys[rows], deadlines)
        self.sent = rows[-1] + 1 if len(rows) else self.sent

    def step(self) -> JoinOutput:
        out = self.algorithm.step(self.buffer)
        self.outputs.append((out, self.tag()))
        self.peak = max(self.peak, self.algorithm.structure_bytes())
        return out

    def drain(self) -> None:
        self.buffer.close()
        while not (self.buffer.exhausted and self.algorithm.pending == 0):
            self.step()

    def pairs_by_tag(self, select: list[str]) -> dict[int, dict]:
        """Per stream row: the tags of the outputs it appeared in, and its pairs / reason."""
        rows: dict[int, dict] = {}
        for out, tag in self.outputs:
            master = [out.master[c].to_pylist() for c in select]
            for i, rid in enumerate(out.matched_ids.tolist()):
                entry = rows.setdefault(rid, {"tags": set(), "pairs": Counter()})
                entry["tags"].add(tag)
                entry["pairs"][tuple(col[i] for col in master)] += 1
            for rid in out.unmatched_ids.tolist():
                entry = rows.setdefault(rid, {"tags": set(), "pairs": Counter()})
                entry["tags"].add(tag)
                entry["pairs"]["not_in_master"] += 1
        return rows

    def check_exactly_once(self) -> None:
        matched = np.concatenate([o.matched_ids for o, _ in self.outputs])
        unmatched = np.concatenate([o.unmatched_ids for o, _ in self.outputs])
        assert check_exactly_once(self.n, matched, unmatched)["ok"]


def wide_master(pages: int, page_rows: int = 4) -> pa.Table:
    """R of ``pages`` pages of equal bytes (keys 1000.., labels of one length)."""
    return master_of(range(1000, 1000 + pages * page_rows))


def every_page_worth_caching(store):
    """``store`` with an IN query dearer than any page (as if so measured): no page of P_u is
    sparse (:meth:`.ssij_access.ReadCosts.sparse`), so ToKeep is the paper's (sec. IV-C), as
    with a DBMS whose point lookups cost what a page read does."""
    store.assume_costs(in_costs=(1.0, 1.0))
    return store


def memory_for(store, params: dict, cached_pages: int) -> int:
    """A budget holding everything else at its peak and about ``cached_pages`` pages of R."""
    split = create("ssij", store, 1 << 24, params).memory_split()
    others = ("page_map_bytes", "page_arrays_bytes", "read_buffer_bytes", "stream_buffers_peak_bytes")
    return sum(split[k] for k in others) + cached_pages * split["page_bytes"]


# ------------------------------------------------------------------------------ the page cache


def test_after_each_join_phase_the_cache_holds_the_best_ranked_pages(backend):
    """Sec. IV-C: at the start of a join phase the cached pages (utility: online hits) and the
    pages of P_u (utility: entries in II) are ranked by their demand (the utility averaged over
    cycles, :meth:`.ssij_pages.PageCache.settle`); the cache after the phase is a prefix of
    that ranking (ToKeep), the cached pages below it (ToRemove) are gone. The last phase (the
    stream has ended, every tuple is in SB) keeps nothing it reads: no tuple would probe it."""
    store = every_page_worth_caching(backend.make_master(wide_master(200)))
    params = {"page_rows": 4, "ib_thresh": 50, "sb_thresh": 60, "max_scan": 4}
    algorithm = create("ssij", store, memory_for(store, params, 40), params)
    rng = np.random.default_rng(3)
    stream = stream_of(zipf_keys(rng, np.arange(1000, 1800), 5000, 0.9).tolist())
    start, join_next = algorithm._start_join_phase, algorithm._join_next
    phases = []

    def spy_start(last=False):
        cached = np.flatnonzero(algorithm.cache.cached)
        requested = np.flatnonzero(algorithm._ii_count)
        entries, hits, demand = algorithm._ii_count.copy(), algorithm.cache.utility.copy(), algorithm.cache.demand.copy()
        start(last=last)
        settled = (1 - DEMAND_WEIGHT) * demand + DEMAND_WEIGHT * (hits + entries)  # this cycle's counts folded in
        assert np.allclose(algorithm.cache.demand, settled)
        utility = {p: settled[p] for p in [*cached.tolist(), *requested.tolist()]}
        phases.append((utility, set(cached.tolist()), last))

    def spy_next():
        out = join_next()
        if algorithm._phase is None:  # the phase ended: what the cache holds now
            phases[-1] += (set(np.flatnonzero(algorithm.cache.cached).tolist()),)
        return out

    algorithm._start_join_phase, algorithm._join_next = spy_start, spy_next
    run = run_join(algorithm, stream, STREAM_KEY)
    assert_exact(store, stream, run)
    assert len(phases) > 10 and algorithm.cache.evictions > 0
    assert [last for _, _, last, _ in phases] == [False] * (len(phases) - 1) + [True]
    checked = 0
    for utility, before, last, after in phases:
        if last:
            assert after <= before, "the last phase keeps no page it reads"
            continue
        kept = {p for p in utility if p in after}
        dropped = set(utility) - kept
        assert kept and after <= set(utility), "the cache holds the best candidates, nothing else"
        if dropped:
            def ranks_above(high, low, margin=1.0):
                if high and low:
                    assert min(utility[p] for p in high) >= max(utility[p] for p in low) / margin
            ranks_above(kept & before, dropped & before)  # among the cached, and among P_u: by utility
            ranks_above(kept - before, dropped - before)
            ranks_above(kept - before, dropped & before)  # a page of P_u displaced a cached one: with more
            ranks_above(kept & before, dropped - before, KEEP_MARGIN)  # it stayed: P_u's had < KEEP_MARGIN x its
            checked += 1
    assert checked > 5


def test_pages_read_in_a_join_phase_push_hot_pages_out_under_lru_only(backend):
    """Figure 11: every join phase reads more cold pages (requested once) than the cache holds;
    LRU counts them as more recent than the hot cached pages and evicts those, the utility
    policy keeps the hot pages."""
    store = every_page_worth_caching(backend.make_master(wide_master(300)))
    hot = np.arange(1000, 1024)  # pages 0-5
    rng = np.random.default_rng(5)
    keys = []
    for cold_page in range(6, 300):  # 20 hot tuples, then 1 tuple on a new cold page
        keys += rng.choice(hot, 20).tolist() + [1000 + 4 * cold_page]
    stream = stream_of(keys)
    params = {"page_rows": 4, "ib_thresh": 40, "sb_thresh": 60, "max_scan": 4}
    runs = {}
    for policy in ("utility", "lru"):
        algorithm = create("ssij", store, memory_for(store, params, 4), {**params, "cache_policy": policy})
        runs[policy] = run_join(algorithm, stream, STREAM_KEY)
        assert_exact(store, stream, runs[policy])
        assert runs[policy].stats["join_phases"] > 4 and algorithm.cache.pages < 60  # fewer than a phase reads
        assert algorithm.cache.cached[:6].all() or policy == "lru"
    hits = {policy: run.stats["cache_hit_ratio"] for policy, run in runs.items()}
    assert hits["utility"] > 0.93 and hits["lru"] < hits["utility"] - 0.03, hits


def test_the_stream_takes_memory_from_the_cache_and_never_overflows(backend):
    """Sec. IV-A: a burst fills IB during a join phase; cached pages are evicted to hold it,
    every step stays within the budget, and every arrived tuple is taken as long as IB has room."""
    store = every_page_worth_caching(backend.make_master(wide_master(400)))
    params = {"page_rows": 4, "ib_thresh": 10, "sb_thresh": 12, "ib_size": 1500, "max_scan": 4}
    memory = memory_for(store, params, 40)
    algorithm = create("ssij", store, memory, params)
    rng = np.random.default_rng(9)
    stream = stream_of(zipf_keys(rng, np.arange(1000, 2600), 3000, 0.9).tolist())
    paced = Paced(algorithm, stream)
    while paced.sent < 1200:  # a trickle: IB stays small, the cache fills what IB does not use
        paced.send(10)
        for _ in range(4):
            paced.step()
    cached_before, evictions_before, waiting = algorithm.cache.pages, algorithm.cache.evictions, len(algorithm._ib)
    assert cached_before > 100
    paced.send(1500)  # a burst: IB takes all it has room for, the cache gives way
    paced.step()
    assert paced.buffer.available == waiting
    assert algorithm.cache.pages < cached_before and algorithm.cache.evictions > evictions_before
    paced.send(paced.n)
    paced.drain()
    paced.check_exactly_once()
    assert paced.peak <= memory and algorithm.counters.structure_bytes_peak <= memory


@pytest.mark.parametrize("policy", ["utility", "lru"])
def test_the_budget_holds_when_pages_differ_in_bytes(backend, policy):
    """Pages of very different sizes (labels of 1 to 300 characters): the cache's estimates of
    a page's bytes are off, yet after every step the structures fit the budget. An IN query is
    pinned dearer than a page: with this machine's measured costs a page of one row may be
    sparse, cached only when it recurs, and the cache would then not fill."""
    rng = np.random.default_rng(31)
    keys = np.arange(0, 12000, 2)
    master = pa.table({"nk": pa.array(keys, pa.int64()),
                       "label": pa.array(["x" * int(n) for n in rng.integers(1, 100, len(keys))], pa.string())})
    store = every_page_worth_caching(backend.make_master(master))
    params = {"page_rows": 1, "ib_thresh": 100, "sb_thresh": 300, "max_scan": 6, "cache_policy": policy}
    memory = memory_for(store, params, 1500)
    stream = stream_of(zipf_keys(rng, keys, 20000, 0.8).tolist())
    algorithm = create("ssij", store, memory, params)
    run = run_join(algorithm, stream, STREAM_KEY)
    assert_exact(store, stream, run)
    assert algorithm.cache.evictions > 100 and run.stats["structure_bytes_peak"] <= memory


def test_a_budget_that_cannot_hold_the_stream_buffers_is_refused(backend):
    store = backend.make_master(wide_master(50))
    with pytest.raises(ConfigError, match=r"^memory: 40000 bytes is too small for ssij: the page map, one read "
                                          r"sequence of \d+ pages, IB of 5000 and SB of \d+ tuples alone needs"):
        create("ssij", store, 40_000, {"page_rows": 4, "ib_size": 5000})


@pytest.mark.parametrize("name, value, message", [
    ("cache_policy", "fifo", r"^ssij.cache_policy: 'fifo' is not one of \['utility', 'lru'\]"),
    ("range_hi", "-1", r"^ssij.range_hi: -1 must be >= range_lo 0"),
    ("max_scan", "0", r"^ssij.max_scan: 0 must be >= 1"),
])
def test_bad_parameters_name_the_field(backend, name, value, message):
    store = backend.make_master(wide_master(5))
    with pytest.raises(ConfigError, match=message):
        create("ssij", store, 1 << 20, {name: value})


# ------------------------------------------------------------------------------ 1:K and ranges


@pytest.mark.parametrize("k", ["1", "5", "mix"])
def test_one_to_k_joins_over_many_phases(backend, k):
    rng = np.random.default_rng(12)
    keys = range(0, 600, 3)
    multiplicity = {key: 1 if k == "1" else 5 if k == "5" else int(rng.integers(1, 6)) for key in keys}
    store = every_page_worth_caching(backend.make_master(one_to_k_master(multiplicity), primary_key="id", select=["id", "v"]))
    stream = stream_of(zipf_keys(rng, np.arange(-5, 605), 2500, 1.0).tolist())
    params = {"page_rows": 5, "ib_thresh": 30, "sb_thresh": 40, "max_scan": 4}
    algorithm = create("ssij", store, memory_for(store, params, 10), params)
    run = run_join(algorithm, stream, STREAM_KEY)
    assert_exact(store, stream, run)
    assert run.stats["join_phases"] > 5 and run.stats["cache_hit_ratio"] > 0.3
    pairs = Counter(run.matched[ROW_ID].to_pylist())
    for row, key in enumerate(stream[STREAM_KEY].to_pylist()):
        assert pairs[row] == multiplicity.get(key, 0)


def range_oracle(master: pa.Table, stream: pa.Table, lo: int, hi: int, select: list[str]) -> tuple[Counter, Counter]:
    """Each stream key k joins every row of R with k + lo <= key <= k + hi."""
    rows = sorted(zip(master["nk"].to_pylist(), *(master[c].to_pylist() for c in select)))
    matched, unmatched = Counter(), Counter()
    for rid, k in enumerate(stream[STREAM_KEY].to_pylist()):
        found = [tuple(r[1:]) for r in rows if k + lo <= r[0] <= k + hi]
        for r in found:
            matched[(rid, r)] += 1
        if not found:
            unmatched[(rid, "not_in_master")] += 1
    return matched, unmatched


@pytest.mark.parametrize("lo, hi", [(-3, 2), (0, 0), (5, 5), (-40, 40), (10, 30)])
@pytest.mark.parametrize("master", ["unique", "1:K"])
def test_range_conditions_join_every_row_in_the_key_range(backend, lo, hi, master):
    rng = np.random.default_rng([abs(lo), hi + 50])
    if master == "unique":
        table = master_of(range(0, 500, 4))
        store = backend.make_master(table)
    else:
        table = one_to_k_master({k: int(rng.integers(1, 4)) for k in range(0, 500, 4)})
        store = backend.make_master(table, primary_key="id", select=["id", "v"])
    store = every_page_worth_caching(store)  # the cache is used whatever this machine's costs
    stream = stream_of(zipf_keys(rng, np.arange(-60, 560), 1200, 0.8).tolist())
    params = {"page_rows": 3, "ib_thresh": 25, "sb_thresh": 30, "max_scan": 4, "range_lo": lo, "range_hi": hi}
    algorithm = create("ssij", store, memory_for(store, params, 12), params)
    run = run_join(algorithm, stream, STREAM_KEY)
    assert run.stats["exactly_once"]["ok"]
    got = engine_pairs(run.matched, run.unmatched, store.select, ROW_ID)
    assert got == range_oracle(table, stream, lo, hi, store.select)
    assert run.stats["cache_hits"] > 0 and run.stats["join_phases"] > 1


@pytest.mark.parametrize("steps_ahead", [1, 3])
def test_a_range_join_worked_ahead_ends_with_no_tuple_half_joined(backend, steps_ahead):
    """A range join's tuple is half joined between its online and join phases: working ahead
    (a Spark step between micro-batches) told to stop after a step or three finishes the phase
    under way first, so the session can be compacted and cut there; the output is the oracle's."""
    from airflow_provider_semijoin.core.session import materialise

    table = master_of(range(0, 500, 4))
    store = backend.make_master(table)
    stream = stream_of(zipf_keys(np.random.default_rng(9), np.arange(-60, 560), 1200, 0.8).tolist())
    params = {"page_rows": 3, "ib_thresh": 25, "sb_thresh": 30, "max_scan": 4, "range_lo": -10, "range_hi": 10}
    algorithm = create("ssij", store, memory_for(store, params, 12), params)
    out = worked_ahead_in_pieces(algorithm, stream, 200, steps_ahead, advance_first=False)
    matched, unmatched = materialise(stream, out, algorithm.schema)
    assert engine_pairs(matched, unmatched, store.select, ROW_ID) == range_oracle(table, stream, -10, 10, store.select)


def test_range_conditions_at_the_ends_of_int64(backend):
    lo_key, hi_key = -(2**63), 2**63 - 1
    keys = [lo_key, lo_key + 5, -1, 0, hi_key - 5, hi_key]
    table = pa.table({"nk": pa.array(keys, pa.int64()), "v": pa.array(range(6), pa.int64())})
    store = backend.make_master(table)
    stream = stream_of([lo_key, lo_key + 3, 2, hi_key - 6, hi_key, hi_key - 1])
    algorithm = create("ssij", store, 1 << 20, {"page_rows": 2, "range_lo": -10, "range_hi": 10})
    run = run_join(algorithm, stream, STREAM_KEY)
    got = engine_pairs(run.matched, run.unmatched, store.select, ROW_ID)
    assert got == range_oracle(table, stream, -10, 10, store.select)


def test_a_range_condition_needs_an_integer_key(backend):
    store = backend.make_master(master_of(["a", "b"]))
    with pytest.raises(ConfigError, match=r"^ssij.range_lo: a range condition needs an integer key; 'nk' is a string"):
        create("ssij", store, 1 << 20, {"range_lo": -1})


# ------------------------------------------------------------------------------ deadlines


class SteppedClock:
    """Simulated seconds (from an epoch-like start, as the Spark runner's clock): every step of
    the join costs ``step_s``, a wait for the next arrival ``idle_s`` - so a test of deadlines
    asserts what the algorithm decides, not how fast a loaded machine ran it."""

    def __init__(self, step_s: float, idle_s: float, start: float = 1.8e9):
        self.now, self.step_s, self.idle_s = start, step_s, idle_s

    def __call__(self) -> float:
        return self.now


def run_paced(algorithm, stream: pa.Table, rate: float, max_latency_s: float | None,
              clock: SteppedClock) -> tuple[np.ndarray, np.ndarray]:
    """Tuples arrive at ``rate`` per second of ``clock`` (the buffer's, which the algorithm times
    its phases with) and are appended as they arrive; the join is stepped meanwhile. Returns
    (arrival, completion) per row."""
    n = stream.num_rows
    paced = Paced(algorithm, stream, clock=clock)
    arrival = clock() + np.arange(n) / rate
    completed = np.full(n, np.nan)
    while paced.sent < n or not (paced.buffer.exhausted and algorithm.pending == 0):
        due = int(np.searchsorted(arrival, clock(), side="right")) - paced.sent
        if due > 0:
            rows = slice(paced.sent, paced.sent + due)
            paced.send(due, None if max_latency_s is None else arrival[rows] + max_latency_s)
        if paced.sent == n and not paced.buffer.closed:
            paced.buffer.close()
        out = paced.step()
        clock.now += clock.step_s
        done = np.concatenate([out.matched_ids, out.unmatched_ids])
        completed[done] = clock()
        if not len(done):
            clock.now += clock.idle_s
    paced.check_exactly_once()
    return arrival, completed


def test_a_generous_max_latency_is_met_at_a_moderate_rate(backend):
    """Sec. IV-F: SB_thresh is never reached (it exceeds the stream), so without deadlines the
    tuples wait for the end of the stream; with a max latency far above one join phase, the
    deadlines force join phases early enough that no tuple misses."""
    store = backend.make_master(master_of(range(0, 4000, 2)))
    rng = np.random.default_rng(21)
    stream = stream_of(zipf_keys(rng, np.arange(-10, 4010), 3000, 0.9).tolist())
    params = {"page_rows": 16, "ib_thresh": 50, "sb_thresh": 100_000}
    algorithm = create("ssij", store, 8 << 20, params)
    arrival, completed = run_paced(algorithm, stream, rate=2000.0, max_latency_s=0.5, clock=SteppedClock(0.002, 0.001))
    assert np.all(completed - arrival <= 0.5)
    assert algorithm.counters.forced_join_phases >= 2
    control = create("ssij", store, 8 << 20, params)
    arrival, completed = run_paced(control, stream, rate=2000.0, max_latency_s=None, clock=SteppedClock(0.002, 0.001))
    assert np.mean(completed - arrival > 0.5) > 0.5  # without deadlines most would have missed


def test_an_impossible_deadline_is_missed_and_counted(backend):
    store = backend.make_master(master_of(range(0, 3000, 2)))
    stream = stream_of(zipf_keys(np.random.default_rng(4), np.arange(0, 3000), 800, 0.9).tolist())
    algorithm = create("ssij", store, 4 << 20, {"page_rows": 16, "ib_thresh": 64})
    run = run_join(algorithm, stream, STREAM_KEY, max_latency_s=1e-9)
    assert_exact(store, stream, run)
    assert run.stats["tuples_with_deadline"] == 800 and run.stats["deadline_misses"] == 800
    assert run.stats["forced_join_phases"] > 0  # it tried: every batch went straight to a join phase


def test_the_online_phase_takes_the_closest_deadlines_first(backend):
    store = backend.make_master(master_of(range(0, 400, 2)))
    algorithm = create("ssij", store, 1 << 20, {"page_rows": 8, "ib_thresh": 10, "sb_thresh": 10})
    stream = stream_of(list(range(0, 400, 4)))
    paced = Paced(algorithm, stream)
    deadlines = np.full(100, np.inf)
    deadlines[[95, 90, 85, 80, 75, 70, 65, 60, 55, 50]] = 1e12  # far away, but earlier than none
    paced.send(100, deadlines)
    out = paced.step()  # one online phase of 10 tuples and the join phase it fills SB for
    assert sorted(out.matched_ids.tolist()) == [50, 55, 60, 65, 70, 75, 80, 85, 90, 95]


# ------------------------------------------------------------------------------ updates


def random_batch(rng, version: int, keys: np.ndarray) -> tuple[pa.Table, dict]:
    """Changes to 1-4 keys: upserts (new values; new keys inside and outside R's range) and deletes."""
    chosen = rng.choice(keys, size=int(rng.integers(1, 5)), replace=False).tolist()
    ops = ["D" if rng.random() < 0.3 else "U" for _ in chosen]
    values = [None if op == "D" else version * 100 + i for i, op in enumerate(ops)]
    labels = [None if op == "D" else f"v{version}" for op in ops]
    table = pa.table({"op": ops, "nk": pa.array(chosen, pa.int64()), "v": pa.array(values, pa.int64()),
                      "label": pa.array(labels, pa.string())})
    return table, {k: (None if op == "D" else (v, lab)) for k, op, v, lab in zip(chosen, ops, values, labels)}


def test_updates_installed_while_the_join_runs_are_seen_whole_by_every_tuple(backend):
    """Sec. IV-E: 100 batches (about 250 changed keys) are installed through ``install_updates`` between steps of a
    running join. Every tuple's output equals the join with one version of R - the one in
    effect when it completed - and every tuple leaves exactly once."""
    initial = master_of(range(0, 600, 3))
    store = backend.make_master(initial)
    create_change_tables(backend.connection, store.table, "nk")
    rng = np.random.default_rng(17)
    hot = rng.permutation(np.arange(-30, 630))
    stream = stream_of(zipf_keys(rng, hot, 6000, 1.0).tolist())
    params = {"page_rows": 4, "ib_thresh": 40, "sb_thresh": 50, "max_scan": 4}
    algorithm = create("ssij", store, memory_for(store, params, 30), params)
    states = [{k: (v, lab) for k, v, lab in zip(*(initial[c].to_pylist() for c in ("nk", "v", "label")))}]
    paced = Paced(algorithm, stream, tag=lambda: len(states) - 1)
    while paced.sent < stream.num_rows:
        paced.send(30)
        paced.step()
        if paced.sent % 60 == 0:
            changes, effect = random_batch(rng, len(states), hot[:80])
            forced, installed = algorithm.install_updates(changes)
            paced.outputs.append((forced, len(states) - 1))  # completed under the old version
            state = {**states[-1], **effect}
            states.append({k: v for k, v in state.items() if v is not None})
            assert installed.version == len(states) - 1
    paced.drain()
    paced.check_exactly_once()
    assert len(states) == 101 and algorithm.counters.invalidated_pages > 50
    keys = stream[STREAM_KEY].to_pylist()
    for rid, entry in paced.pairs_by_tag(["v", "label"]).items():
        assert len(entry["tags"]) == 1, f"row {rid} saw versions {entry['tags']}"
        (version,) = entry["tags"]
        want = states[version].get(keys[rid])
        assert entry["pairs"] == Counter([want if want else "not_in_master"]), (rid, version)


def test_install_updates_refuses_to_run_inside_someone_elses_snapshot(backend):
    store = backend.make_master(master_of(range(10)))
    create_change_tables(backend.connection, store.table, "nk")
    algorithm = create("ssij", store, 1 << 20, {"ib_thresh": 3, "sb_thresh": 10})
    changes = pa.table({"op": ["D"], "nk": [3], "v": [None], "label": [None]})
    with store.snapshot():
        with pytest.raises(ConfigError, match=r"^install_updates: R is read inside a snapshot this join did not open"):
            algorithm.install_updates(changes)
        buffer = StreamBuffer(store.key_type)
        buffer.append(np.arange(3), np.array([1, 3, 5]))
        algorithm.step(buffer)  # the tuples wait in SB: a cycle is open, part of the outer snapshot
        assert algorithm.pending == 3
        with pytest.raises(ConfigError, match=r"^install_updates: R is read inside a snapshot this join did not open"):
            algorithm.install_updates(changes)


@pytest.mark.parametrize("master", ["unique", "1:K"])
def test_each_cycle_reads_one_version_while_another_connection_installs(backend, master):
    """The long-running mode (no run_join around it): SSIJ is stepped over a stream that keeps
    arriving while a writer installs 60 batches from a connection of its own. Each cycle
    (online phases up to the join phase that empties SB) reads one snapshot of R and drops the
    cached pages of the keys changed before it: every tuple's output equals the join with the
    version its cycle read."""
    rng = np.random.default_rng(23)
    if master == "unique":
        initial = master_of(range(0, 400, 2))
        store = backend.make_master(initial)
    else:
        initial = one_to_k_master({k: int(rng.integers(1, 4)) for k in range(0, 400, 2)})
        store = backend.make_master(initial, primary_key="id", select=["id", "v"])
    create_change_tables(backend.connection, store.table, "nk")
    keys = rng.permutation(np.arange(-40, 440))
    weights = 1.0 / np.arange(1, len(keys) + 1)
    weights /= weights.sum()
    stream = stream_of(keys[rng.choice(len(keys), 60_000, p=weights)].tolist())
    params = {"page_rows": 4, "ib_thresh": 20, "sb_thresh": 30, "max_scan": 4}
    algorithm = create("ssij", store, memory_for(store, params, 20), params)
    writer = MasterWriter(backend, store, initial, keys, weights, 60, seed=29)
    paced = Paced(algorithm, stream, tag=lambda: store.seen_version)
    writer.start()
    writer.reading.set()
    while writer.is_alive() and paced.sent < paced.n:
        paced.send(20)
        paced.step()
    writer.join()
    assert writer.error is None, repr(writer.error)
    paced.n = paced.sent  # the stream ends here
    paced.drain()
    paced.check_exactly_once()
    seen = set()
    values = stream[STREAM_KEY].to_pylist()
    for rid, entry in paced.pairs_by_tag(store.select).items():
        assert len(entry["tags"]) == 1, f"row {rid} saw versions {entry['tags']}"
        (version,) = entry["tags"]
        seen.add(version)
        want = writer.states[version].get(values[rid])
        assert entry["pairs"] == Counter(want or ["not_in_master"]), (rid, version)
    assert len(seen) > 10 and max(seen) == 60 and algorithm.counters.invalidated_pages > 0


def test_a_sparse_sequence_is_read_by_an_in_query_a_dense_one_by_range(backend):
    """Issue 12's per-page access path in SSIJ's read plan: pages with few distinct keys
    waiting (one on every 4th page here), none of them kept, are read by IN queries of those
    keys - one per join phase here, its 50 keys within the read buffer's 200 rows; with an IN
    query dearer than any page (as if so measured) every sequence is a range read. Both exact."""
    store = measured_as(backend.make_master(master_of(range(0, 40_000, 2))), 1e-3, 1e-5, 1e-3, 1e-7)  # 400 pages of 50
    stream = stream_of([i * 400 + 2 for i in range(100)])  # one key on every 4th page
    params = {"page_rows": 50, "ib_thresh": 10, "sb_thresh": 50, "max_scan": 4}
    memory = memory_for(store, params, 0)  # the stream buffers fill it: room for few pages of R
    run = run_join(create("ssij", store, memory, params), stream, STREAM_KEY)
    assert_exact(store, stream, run)
    assert run.stats["in_loads"] == run.stats["join_phases"] == 2
    assert run.stats["pages_read"] == 0 and run.stats["pages_by_in"] == 100
    store.assume_costs(in_costs=(1.0, 1.0))
    run = run_join(create("ssij", store, memory, params), stream, STREAM_KEY)
    assert_exact(store, stream, run)
    assert "in_loads" not in run.stats and run.stats["pages_read"] == 100


def test_a_kept_page_is_cut_out_of_a_sequence_whose_other_pages_are_cheaper_by_in(backend):
    """A page of ToKeep is read whole; when the rest of its sequence costs less by IN, the
    sequence is cut around it (adjacent kept pages together), each piece of the others starting
    and ending on a page of P_u; otherwise, or with no page kept, the sequence stays whole."""
    store = measured_as(backend.make_master(master_of(range(0, 40_000, 2))), 1e-3, 1e-5, 1e-3, 1e-7)  # 400 pages of 50
    params = {"page_rows": 50, "ib_thresh": 10, "sb_thresh": 50, "max_scan": 10}
    algorithm = create("ssij", store, memory_for(store, params, 10), params)
    requested, one_key = np.array([0, 2, 3, 5, 6, 9]), np.ones(6, np.int64)
    keep = np.array([False, False, False, True, True, False])
    assert split_at_keep(algorithm.read_costs, [(0, 10)], one_key, keep, requested) == [(0, 4), (5, 2), (9, 1)]
    assert split_at_keep(algorithm.read_costs, [(0, 10)], one_key, np.zeros(6, bool), requested) == [(0, 10)]
    many_keys = np.full(6, 10**6)  # their IN query costs more than the sequence
    assert split_at_keep(algorithm.read_costs, [(0, 10)], many_keys, keep, requested) == [(0, 10)]
    # four kept pages in three runs: 1 ms + 3 x 1 ms + 4 x 0.5 ms is no less than the sequence's 6 ms
    assert split_at_keep(algorithm.read_costs, [(0, 10)], one_key, ~keep, requested) == [(0, 10)]


def test_the_random_shape_cuts_kept_pages_out_of_in_runs_and_stays_exact(backend, monkeypatch):
    """End to end, hot keys scattered over R (the random shape) and IN cheaper than a page:
    sequences are cut around kept pages, both kinds of read happen, every tuple leaves once."""
    store = measured_as(backend.make_master(master_of(range(0, 40_000, 2))), 1e-3, 1e-5, 1e-3, 1e-7)
    params = {"page_rows": 50, "ib_thresh": 100, "sb_thresh": 400, "max_scan": 10}
    algorithm = create("ssij", store, memory_for(store, params, 40), params)
    cuts = []

    def spy(costs, plan, *args):
        out = split_at_keep(costs, plan, *args)
        cuts.append(len(out) - len(plan))
        return out

    monkeypatch.setattr(ssij_module, "split_at_keep", spy)
    rng = np.random.default_rng(5)
    stream = stream_of(zipf_keys(rng, np.arange(0, 40_000, 2), 20_000, 1.0).tolist())
    run = run_join(algorithm, stream, STREAM_KEY)
    assert_exact(store, stream, run)
    assert sum(cuts) > 0 and run.stats["in_loads"] > 0 and run.stats["pages_read"] > 0


def test_the_last_join_phase_keeps_nothing_and_reads_sparse_pages_by_few_in_queries(backend):
    """Once the stream has ended and every tuple is in SB (a drain), no later tuple would probe
    a cached page: the last join phase keeps none, and each run of sequences cheaper by IN is
    one IN query of their keys, as many as the read buffer holds rows for (4 pages of 50 here),
    not one query per sequence (issue 12: a short stream spread over every page). A phase that
    is not the last - tuples forced out while the stream goes on - with every page worth
    caching (IN dearer than a page) reads the same pages by range and caches them (sec. IV-C)."""
    store = measured_as(backend.make_master(master_of(range(0, 40_000, 2))), 1e-3, 1e-5, 1e-3, 1e-7)  # 400 pages of 50
    keys = [2 * (i * 20_000 // 300) for i in range(300)]  # 300 keys spread over every page
    stream = stream_of(keys)
    params = {"page_rows": 50, "ib_thresh": 300, "sb_thresh": 300, "max_scan": 4}
    memory = memory_for(store, params, 400)  # room to cache every page
    in_keys = record_calls(store, "lookup_many", len)
    algorithm = create("ssij", store, memory, params)
    run = run_join(algorithm, stream, STREAM_KEY)
    assert_exact(store, stream, run)
    assert run.stats["join_phases"] == 1 and run.stats["pages_read"] == 0
    assert len(in_keys) == 2 and sum(in_keys) == len(keys) and max(in_keys) <= 200  # the read buffer's rows
    assert run.stats["pages_by_in"] == len({k // 100 for k in keys}) and not algorithm.cache.cached.any()

    in_keys.clear()
    algorithm = create("ssij", every_page_worth_caching(store), memory, params)
    session = JoinSession(algorithm, time.perf_counter)
    session.feed(np.arange(len(keys)), np.asarray(keys, np.int64))
    out = session.advance(max_pending=0)  # every tuple forced out, the stream not ended
    assert sorted(out.matched_ids.tolist()) == list(range(len(keys))) and len(out.unmatched_ids) == 0
    assert in_keys == [] and algorithm.counters.pages_read >= 100 and algorithm.cache.cached.sum() >= 100


def test_a_sparse_page_is_cached_once_it_recurs(backend):
    """A page of P_u read for few keys (cheaper by IN than its range read) is not worth its room
    in the cache, unless it was in P_u of the join phase before too: a hot key on a page of its
    own recurs in every phase (issue 12). The same 50 keys, one every 8th page, three times: the
    first phase reads their pages by one IN query and caches none; the second finds them again,
    reads them by range and caches them; the third round joins from the cache in the online
    phase."""
    store = measured_as(backend.make_master(master_of(range(0, 40_000, 2))), 1e-3, 1e-5, 1e-3, 1e-7)  # 400 pages of 50
    keys = [i * 800 + 2 for i in range(50)] * 3
    stream = stream_of(keys)
    params = {"page_rows": 50, "ib_thresh": 50, "sb_thresh": 50, "max_scan": 4}
    algorithm = create("ssij", store, memory_for(store, params, 400), params)
    run = run_join(algorithm, stream, STREAM_KEY)
    assert_exact(store, stream, run)
    assert run.stats["join_phases"] == 2 and run.stats["in_loads"] == 1 and run.stats["pages_by_in"] == 50
    assert run.stats["pages_read"] == 50 and run.stats["cache_hits"] == 50 and algorithm.cache.cached.sum() == 50
