"""HYBRIDJOIN, HYBRIDJOIN-L, HYBRIDJOIN-PQ: the contract and what only they promise."""

import dataclasses
import sqlite3
import time

import numpy as np
import pytest
from contract import (
    ROW_ID, JoinContract, assert_exact, master_of, measured_as, record_calls, record_loads, stream_of, zipf_keys,
)
from hypothesis import strategies as st

from airflow_provider_semijoin.core import costmodel as cm
from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.joins import JoinOutput, StreamBuffer, create
from airflow_provider_semijoin.core.joins.hybridjoin import HybridJoin, HybridJoinL, HybridJoinPQ
from airflow_provider_semijoin.core.joins.hybridjoin_plan import ADMIT_SHARE, READ_AHEAD_SHARE
from airflow_provider_semijoin.core.oracle import engine_pairs, hash_join
from airflow_provider_semijoin.core.prediction import explain
from airflow_provider_semijoin.core.runner import feed_keys, run_join
from airflow_provider_semijoin.core.session import JoinSession, materialise
from airflow_provider_semijoin.core.stores import create_change_tables, store_for, write_table
from airflow_provider_semijoin.core.unitcosts import ComponentCosts
from airflow_provider_semijoin.workloads import zipf_stream

HYBRIDS = ["hybridjoin", "hybridjoin-l", "hybridjoin-pq"]


class TestHybridJoin(JoinContract):
    algorithm = "hybridjoin"


class TestHybridJoinL(JoinContract):
    algorithm = "hybridjoin-l"
    param_strategies = {
        "lookup_position": st.sampled_from([0.0, 0.1, 0.3, 0.7, 1.0]),
        "starvation_turnovers": st.sampled_from([0.0, 0.5, 1.0, 3.0]),
    }


class TestHybridJoinPQ(JoinContract):
    algorithm = "hybridjoin-pq"
    param_strategies = {
        "page_threshold": st.sampled_from([0.0, 1.0, 2.0, 5.0]),
        "decay": st.sampled_from([0.0, 0.5, 0.9, 1.0]),
        "threshold_rule": st.sampled_from(["mean", "sqrt"]),
    }


@pytest.mark.parametrize("name", HYBRIDS)
def test_a_stream_of_absent_keys_costs_one_load_per_distinct_page_at_most(backend, name):
    store = backend.make_master(master_of(range(1, 800, 2)))  # odd keys, 40 pages of 10
    keys = np.random.default_rng(4).integers(0, 400, 2000) * 2  # even keys: none in R
    algorithm = create(name, store, 1 << 20, {"page_rows": 10})
    assert algorithm.table.capacity >= len(keys)  # H_S holds the whole stream at once
    stream = stream_of(keys.tolist())
    run = run_join(algorithm, stream, "sk")
    assert_exact(store, stream, run)
    pages = np.unique(algorithm.page_map.page_of(keys[keys <= 799]))
    assert run.stats["loads"] <= len(pages)
    assert run.stats["unmatched_by_reason"] == {"not_in_master": 2000}


@pytest.mark.parametrize("name", HYBRIDS)
def test_the_queue_drains_without_new_input_on_an_intermittent_stream(backend, name):
    store = backend.make_master(master_of(range(300)))
    algorithm = create(name, store, 1 << 20, {"page_rows": 10})
    buffer = StreamBuffer(store.key_type)
    rng = np.random.default_rng(8)
    done, sent = [], 0
    for burst in (120, 1, 60):  # bursts with silences in between; the buffer is never closed
        keys = rng.integers(-5, 305, burst)
        buffer.append(np.arange(sent, sent + burst), keys)
        sent += burst
        pages = len(np.unique(algorithm.page_map.page_of(keys)))
        lag = max(algorithm._loads, 1)  # steps before the first load is joined (read_ahead loads under way)
        for step in range(pages + lag):
            before = algorithm.pending
            out = algorithm.step(buffer)
            done += out.unmatched_ids.tolist() + np.unique(out.matched_ids).tolist()
            assert step < lag or algorithm.pending < before  # every step without input completes tuples
            if algorithm.pending == 0:
                break
        assert algorithm.pending == 0 and buffer.available == 0 and not buffer.closed
    assert sorted(done) == list(range(sent))


@pytest.mark.parametrize("name", HYBRIDS)
def test_a_backlog_is_admitted_in_batches_and_a_trickle_at_once(backend, name):
    """While more tuples wait than slots are free, H_S admits only once ADMIT_SHARE of it is
    free, then fills it; tuples that fit the free slots are admitted when they arrive; a page
    then holds its tuples in fewer groups than one admission a step made (issue 12)."""
    store = backend.make_master(master_of(range(20_000)))
    algorithm = create(name, store, 1 << 21, {"page_rows": 50, "read_ahead": 0})
    batch = algorithm.memory_split()["admit_tuples"]
    assert batch == int(algorithm.table.capacity * ADMIT_SHARE) > 1
    buffer = StreamBuffer(store.key_type)
    rng = np.random.default_rng(3)
    backlog = 6 * algorithm.table.capacity
    buffer.append(np.arange(backlog), rng.integers(0, 20_000, backlog))
    admissions = []
    while buffer.available > 2 * algorithm.table.capacity:  # a backlog throughout
        before, free = algorithm.table.admitted, algorithm.table.free
        algorithm.step(buffer)
        if algorithm.table.admitted > before:
            admissions.append((algorithm.table.admitted - before, free))
    assert len(admissions) > 3 and all(n == free >= batch for n, free in admissions)
    waiting = np.flatnonzero(algorithm.table.page_count)
    groups = [len(_groups_of(algorithm.table, page)) for page in waiting]
    assert np.mean(groups) < np.mean(algorithm.table.page_count[waiting]) / 2  # a group is several tuples
    buffer.taken.clear()
    trickle = StreamBuffer(store.key_type)
    algorithm = create(name, store, 1 << 21, {"page_rows": 50, "read_ahead": 0})
    trickle.append(np.arange(3), np.array([5, 500, 5000]))
    algorithm.step(trickle)
    assert algorithm.table.admitted == 3 and trickle.available == 0


def _groups_of(table, page: int) -> list[int]:
    groups, g = [], int(table._page_head[page])
    while g >= 0:
        groups.append(g)
        g = int(table._group_next[g])
    return groups


def test_hybridjoin_l_with_lookup_position_1_loads_like_hybridjoin(backend):
    store = backend.make_master(master_of(range(500)))
    store.assume_costs(in_costs=(1.0, 1.0))  # every page range-loaded (no IN probes), so the loads show every choice
    stream = stream_of(zipf_keys(np.random.default_rng(6), np.arange(-10, 510), 3000, 0.8).tolist())
    loads = {}
    for name, params in [("hybridjoin", {}), ("hybridjoin-l", {"lookup_position": 1.0})]:
        # one load under way: a single reader session runs the loads in the order they were chosen
        algorithm = create(name, store, 24_000, {"page_rows": 8, "read_ahead": 1, **params})
        assert 50 < algorithm.table.capacity < 1000  # a queue much shorter than the stream
        loads[name] = record_loads(store)
        run = run_join(algorithm, stream, "sk")
        del store.load_pages
        assert_exact(store, stream, run)
    assert len(loads["hybridjoin"]) > 100
    assert loads["hybridjoin-l"] == loads["hybridjoin"]


def starvation_share(algorithm, keys: np.ndarray, warm_tuples: int) -> float:
    """The share of ``algorithm``'s loads its starvation guard chose, on a backlog of ``keys``,
    after its first ``warm_tuples``."""
    buffer = StreamBuffer(algorithm.store.key_type)
    buffer.append(np.arange(len(keys)), keys)
    before = None
    while buffer.available > algorithm.demand:
        algorithm.step(buffer)
        buffer.taken.clear()
        if before is None and algorithm.counters.tuples_in > warm_tuples:
            before = (algorithm.counters.loads, algorithm.counters.starvation_loads)
    loads = algorithm.counters.loads - before[0]
    return (algorithm.counters.starvation_loads - before[1]) / loads


def test_hybridjoin_l_starvation_guard_decides_every_steady_load_by_default(backend):
    """In the steady state of a backlog the oldest tuple passes one H_S of admissions before
    -L's lookup element gets a turn, so the default guard chooses nearly every load (-L loads
    as HYBRIDJOIN); a guard of 5 H_S leaves most loads to the lookup element on a skewed stream."""
    store = backend.make_master(master_of(range(0, 8000, 2)))
    store.assume_costs(in_costs=(1.0, 1.0))  # range loads only: every load is a choice of the policy
    keys = zipf_stream(60_000, 4000, exponent=1.0, shape="noperm", seed=1)["nk"].to_numpy() * 2 - 2
    shares = {}
    for turnovers in (1.0, 5.0):
        algorithm = create("hybridjoin-l", store, 60_000, {"page_rows": 50, "read_ahead": 0, "rider_repeats": 0,
                                                           "starvation_turnovers": turnovers})
        assert 500 < algorithm.table.capacity < 5000
        shares[turnovers] = starvation_share(algorithm, keys, 20_000)
    assert shares[1.0] > 0.9 and shares[5.0] < 0.5, shares


def test_hybridjoin_pq_with_no_page_due_chooses_as_hybridjoin_l(backend):
    """The pq paper builds its PQ on HYBRIDJOIN-L (sec. 6: "we implemented our new strategy to
    the existing ... HYBRIDJOIN-L"): with no page due, -L's lookup element chooses. It was the
    oldest element, so where no page is frequent (skew 0) -PQ ran as HYBRIDJOIN, not as -L."""
    store = backend.make_master(master_of(range(500)))
    store.assume_costs(in_costs=(1.0, 1.0))
    stream = stream_of(zipf_keys(np.random.default_rng(6), np.arange(-10, 510), 3000, 0.8).tolist())
    algorithm = create("hybridjoin-pq", store, 24_000, {"page_rows": 8, "page_threshold": 1e9})
    choices = []  # (-PQ's page, -L's, HYBRIDJOIN's) at every choice

    def choose():
        choices.append((HybridJoinPQ._choose_page(algorithm), HybridJoinL._choose_page(algorithm),
                        HybridJoin._choose_page(algorithm)))
        return choices[-1][0]

    algorithm._choose_page = choose
    run = run_join(algorithm, stream, "sk")
    assert_exact(store, stream, run)
    assert len(choices) > 100 and all(pq == lookup for pq, lookup, _ in choices)
    assert any(pq != oldest for pq, _, oldest in choices)


def test_hybridjoin_pq_schedules_the_page_of_a_hot_key(backend):
    store = backend.make_master(master_of(range(1000)))
    rng = np.random.default_rng(9)
    keys = rng.integers(0, 1000, 4000)
    keys[rng.random(4000) < 0.4] = 517  # one very hot key
    stream = stream_of(keys.tolist())
    algorithm = create("hybridjoin-pq", store, 40_000, {"page_rows": 10})
    run = run_join(algorithm, stream, "sk")
    assert_exact(store, stream, run)
    assert run.stats["pq_loads"] > 0


@pytest.mark.parametrize("skew", [0.0, 1.0])
def test_hybridjoin_pq_loads_a_due_page_only_once_its_threshold_of_tuples_waits(backend, skew):
    """A page is due when its estimated frequency says the threshold's tuples wait on it, but H_S
    knows the count: a due page holding fewer waits longer, its frequency corrected. PQ loaded a
    due page whenever any tuple waited, and at skew 0 the pages that lucky loads had made look
    frequent were loaded half full (MariaDB, R = 2M rows, 50 MiB: PQ loads of ~400 tuples
    against a threshold of ~1,040, HYBRIDJOIN-PQ at 0.5x HYBRIDJOIN-L); below its threshold
    no PQ load is more productive than an ordinary one."""
    store = backend.make_master(master_of(range(5000)))
    store.assume_costs(in_costs=(1.0, 1.0))  # range loads only: a page's load serves all its waiting tuples
    stream = stream_of(zipf_keys(np.random.default_rng(3), np.arange(5000), 60_000, skew).tolist())
    algorithm = create("hybridjoin-pq", store, 200_000, {"page_rows": 25, "read_ahead": 0})
    served, loaded = [], algorithm._loaded  # (tuples, threshold) of every PQ load

    def recorded(page, matched, rider=False):
        if algorithm._from_queue and not rider:
            served.append((matched, algorithm.threshold))
        loaded(page, matched, rider)

    algorithm._loaded = recorded
    run = run_join(algorithm, stream, "sk")
    assert_exact(store, stream, run)
    assert skew == 0.0 or len(served) > 20, "at skew 1 hot pages are frequent"
    assert all(tuples >= threshold for tuples, threshold in served), [s for s in served if s[0] < s[1]][:5]


@pytest.mark.parametrize("name", HYBRIDS)
def test_a_page_with_few_waiting_keys_is_probed_by_an_in_list(backend, name):
    store = measured_as(backend.make_master(master_of(range(0, 40_000, 2))), 1e-3, 1e-6, 1e-3, 1e-7)  # 4 pages of 5000 keys
    keys = [4, 4, 9998, 14_002, 39_998, 40_000, -1, 24_690, 24_691]
    stream = stream_of(keys)
    algorithm = create(name, store, 4 << 20, {"page_rows": 5000})
    loads = record_loads(store)
    run = run_join(algorithm, stream, "sk")
    assert_exact(store, stream, run)
    # 2, 1, 2 and 1 distinct keys wait on pages 0-3: an IN query costs less than 5000 rows, and
    # with the whole stream in H_S the other three pages ride along in the first page's query
    assert loads == [] and run.stats["in_loads"] == 1 and run.stats["loads"] == 1 and run.stats["rider_pages"] == 3


def test_hybridjoin_pq_learns_its_threshold_from_ordinary_loads_not_their_riders(backend):
    """HYBRIDJOIN-PQ's default page threshold is the mean matches of an ordinary (lookup-element)
    load. The pages riding along in that load's IN query bring a few tuples each: counted as
    loads of their own, they had dragged the mean down, and PQ then loaded pages as soon as
    they held a few tuples, by IN queries of thousands of scattered keys (CACHEJOIN-PQ at 0.4x
    CACHEJOIN-L in ``semijoin bench``)."""
    store = measured_as(backend.make_master(master_of(range(0, 40_000, 2))), 1e-3, 1e-6, 1e-3, 1e-7)  # 4 pages of 5000 keys
    stream = stream_of([4, 4, 9998, 14_002, 39_998, 40_000, -1, 24_690, 24_691])
    algorithm = create("hybridjoin-pq", store, 4 << 20, {"page_rows": 5000, "lookup_position": 1.0})  # the oldest: page 0
    run = run_join(algorithm, stream, "sk")
    assert_exact(store, stream, run)
    assert run.stats["in_loads"] == 1 and run.stats["rider_pages"] == 3
    assert algorithm.threshold == 3.0  # page 0's 3 tuples; with its riders' it was max(2, (3 + 1 + 2 + 1) / 4)


def served_per_load(algorithm, keys: np.ndarray, warm_tuples: int) -> float:
    """Stream tuples a load of ``algorithm`` serves, on a backlog of ``keys``, after its first
    ``warm_tuples`` (H_S full and turned over)."""
    buffer = StreamBuffer(algorithm.store.key_type)
    buffer.append(np.arange(len(keys)), keys)
    done = loads = 0
    while buffer.available > algorithm.demand:
        out = algorithm.step(buffer)
        buffer.taken.clear()
        if algorithm.counters.tuples_in > warm_tuples:
            done, loads = done + out.completed, loads + 1
    return done / loads


@pytest.mark.parametrize("shape, rider_repeats", [("noperm", 1.5), ("noperm", 0.0), ("random", 1.5)])
def test_the_cost_model_predicts_the_tuples_a_load_serves_with_in_queries_and_riders(sqlite_backend, shape,
                                                                                        rider_repeats):
    """HYBRIDJOIN's model (:func:`costmodel.access_paths`) against the engine on SQLite, costs
    assumed: on the noperm Zipf stream most pages are sparse and ride along in IN queries, and a
    load serves about 7x the tuples of the paper's one page a load (which the model without
    riders, 57 here, had predicted whatever the engine did); without riders, or on the random
    shape, about as many."""
    n_keys = 20_000
    store = measured_as(sqlite_backend.make_master(master_of(range(1, 2 * n_keys, 2))), 1e-3, 1e-6, 2e-4, 5e-6)
    algorithm = create("hybridjoin", store, 300_000, {"page_rows": 100, "rider_repeats": rider_repeats, "read_ahead": 0})
    costs = ComponentCosts(**{f.name: 1e-9 for f in dataclasses.fields(ComponentCosts)})
    costs = dataclasses.replace(costs, query_s=1e-3, row_s=1e-6, in_query_s=2e-4, in_key_s=5e-6)
    predicted = explain("hybridjoin", algorithm, costs, n_keys, 1.0, shape).tuples_per_iteration
    paper = explain("hybridjoin", {k: v for k, v in algorithm.memory_split().items() if k != "rider_keys"}, costs,
                    n_keys, 1.0, shape)  # a split that does not say how IN queries ride: the paper's range loads
    keys = zipf_stream(250_000, n_keys, exponent=1.0, shape=shape, seed=1)["nk"].to_numpy()
    assert served_per_load(algorithm, keys, 100_000) == pytest.approx(predicted, rel=0.2)
    if (shape, rider_repeats) == ("noperm", 1.5):
        assert predicted > 5 * paper.tuples_per_iteration


@pytest.mark.parametrize("shape", ["noperm", "random"])
def test_no_choice_of_page_serves_more_a_load_than_the_bound(sqlite_backend, shape):
    """:func:`costmodel.page_choice_bound` against the engine, range loads only: HYBRIDJOIN,
    -L and -PQ (either threshold rule) each serve at most the bound's tuples a load (w* = the
    bound x HYBRIDJOIN's modelled w); on the clustered stream -PQ's choice gains over the
    oldest page, and its 'sqrt' rule over its 'mean' one."""
    n_keys, page_rows = 4000, 50
    store = sqlite_backend.make_master(master_of(range(1, 2 * n_keys, 2)))
    store.assume_costs(in_costs=(1.0, 1.0))  # every page range-loaded
    keys = zipf_stream(120_000, n_keys, exponent=1.0, shape=shape, seed=1)["nk"].to_numpy()
    served = {}
    for name, params in [*[(name, {}) for name in HYBRIDS], ("hybridjoin-pq", {"threshold_rule": "sqrt"})]:
        algorithm = create(name, store, 60_000, {"page_rows": page_rows, "read_ahead": 0, "rider_repeats": 0, **params})
        served[name + "".join(f" {v}" for v in params.values())] = served_per_load(algorithm, keys, 40_000)
    h_s = algorithm.table.capacity
    q = cm.page_probabilities(n_keys, 1.0, page_rows, shape)
    best = cm.page_choice_bound(q, h_s, page_rows) * cm.hybridjoin_queue(q, h_s, page_rows).w
    assert max(served.values()) <= 1.05 * best, (served, best)
    if shape == "noperm":
        assert served["hybridjoin-pq sqrt"] > served["hybridjoin-pq"] > 1.1 * served["hybridjoin"], served


@pytest.mark.parametrize("name", ["hybridjoin-pq", "cachejoin-pq"])
def test_a_pq_join_names_a_threshold_rule_it_does_not_know(backend, name):
    store = backend.make_master(master_of(range(100)))
    with pytest.raises(ConfigError, match=rf"^{name}.threshold_rule: 'median' is not one of \['mean', 'sqrt'\]"):
        create(name, store, 1 << 20, {"threshold_rule": "median"})


def record_lookups(store) -> list[int]:
    """From now on, record how many keys each IN query of ``store`` asks for."""
    return record_calls(store, "lookup_many", len)


@pytest.mark.parametrize("name", HYBRIDS)
@pytest.mark.parametrize("memory, queries", [(4 << 20, 1), (160_000, 2)])
def test_riders_fill_an_in_query_up_to_the_disk_buffer(backend, name, memory, queries):
    """One key on each of 100 pages of 64 rows: the IN queries carry other pages' keys, never
    more keys than the disk buffer holds rows (a page's, or RIDER_KEYS' within 1/64 of M)."""
    store = measured_as(backend.make_master(master_of(range(0, 12_800, 2))), 1e-3, 1e-6, 1e-3, 1e-7)  # 100 pages of 64 keys
    stream = stream_of([page * 128 + 2 for page in range(100)])
    algorithm = create(name, store, memory, {"page_rows": 64})
    buffer_rows = algorithm.plan_used.sizes["buffer_rows"]
    assert buffer_rows >= 100 if queries == 1 else 64 <= buffer_rows < 100
    lookups = record_lookups(store)
    run = run_join(algorithm, stream, "sk")
    assert_exact(store, stream, run)
    assert sum(lookups) == 100 and max(lookups) <= buffer_rows and len(lookups) == queries, lookups
    assert run.stats["rider_pages"] == 100 - len(lookups)


@pytest.mark.parametrize("name", HYBRIDS)
def test_pages_are_range_loaded_when_an_in_list_costs_more(backend, name):
    store = backend.make_master(master_of(range(0, 400, 2)))
    store.assume_costs(in_costs=(1.0, 1.0))  # an IN query dearer than any page, as if so measured
    stream = stream_of([4, 4, 98, 140, 398, 400, -1])
    algorithm = create(name, store, 1 << 20, {"page_rows": 50})
    loads = record_loads(store)
    run = run_join(algorithm, stream, "sk")
    assert_exact(store, stream, run)
    assert sorted(loads) == [(0, 1), (1, 1), (3, 1)] and "in_loads" not in run.stats


def serve_all(algorithm, buffer: StreamBuffer, keys: np.ndarray, first_id: int, end: bool = False) -> int:
    """Feed ``keys`` and step until none waits, the stream going on (``end``: it ends after
    them); how many tuples left."""
    buffer.append(np.arange(first_id, first_id + len(keys)), keys)
    if end:
        buffer.close()
    left = 0
    while buffer.available or algorithm.pending:
        out = algorithm.step(buffer)
        left += len(out.matched_ids) + len(out.unmatched_ids)
    return left


@pytest.mark.parametrize("name", HYBRIDS)
def test_while_the_stream_goes_on_only_pages_whose_keys_did_not_repeat_ride_along(backend, name):
    """A stream that goes on (its buffer open): a sparse page rides along in another page's IN
    query only if its tuples were about one per key at its last load; a page whose keys repeat
    waits for its own turn, when one read of each key serves more tuples (the papers'
    amortisation). Once the stream has ended, every sparse page rides."""
    store = measured_as(backend.make_master(master_of(range(0, 12_800, 2))), 1e-3, 1e-6, 1e-3, 1e-7)  # 100 pages of 64 keys
    algorithm = create(name, store, 4 << 20, {"page_rows": 64})
    hot = [page * 128 + 2 for page in range(50)]  # pages 0-49: one key three times each
    cold = [page * 128 + 2 + 2 * i for page in range(50, 100) for i in range(3)]  # pages 50-99: three keys once each
    keys = np.array(hot * 3 + cold, np.int64)
    assert algorithm.table.capacity >= len(keys)
    buffer = StreamBuffer(store.key_type)
    assert serve_all(algorithm, buffer, keys, 0) == len(keys)  # each page's repeats are seen at its load
    lookups = record_calls(store, "lookup_many", lambda wanted: set(wanted.tolist()))
    assert serve_all(algorithm, buffer, keys, len(keys)) == len(keys)
    assert set().union(*lookups) == set(hot) | set(cold)
    assert max(len(query & set(hot)) for query in lookups) == 1, "each page whose key repeats has a query of its own"
    assert any(query >= set(cold) for query in lookups), "the pages whose keys do not repeat ride along together"
    lookups.clear()
    assert serve_all(algorithm, buffer, keys, 2 * len(keys), end=True) == len(keys)  # the stream ends: every page rides
    assert len(lookups) == 1 and lookups[0] == set(hot) | set(cold)


def test_a_larger_kept_page_is_taken_only_where_the_rider_buffer_holds_it(mysql_backend):
    """The measured costs ask for pages of 256 rows and a map of 512 is kept beside R (MySQL): a
    large budget reads the kept map (no O(R) build); a small one, whose disk buffer would grow
    for it, builds its own of 256."""
    store = measured_as(mysql_backend.make_master(master_of(range(20_000))), 1e-4, 1e-6, 1e-3, 1e-7)  # 4*S/T = 400
    store.page_map(512)
    assert store.kept_page_rows() == [512]
    assert create("hybridjoin", store, 64 << 20).page_map.page_rows == 512
    assert create("hybridjoin", store, 256 << 10).page_map.page_rows == 256


@pytest.mark.parametrize("name", HYBRIDS)
def test_a_slow_round_trip_asks_for_pages_only_as_large_as_an_eighth_of_m(backend, name):
    """S = 10 ms against T = 1 us (CI on a loaded machine measured S = 10 ms) asks for pages of
    8192 rows, 240 KB here: a budget of 128 KiB would not hold one, and the join was refused.
    The page is sized down to what an eighth of M holds, and the join runs, exact."""
    store = measured_as(backend.make_master(master_of(range(0, 40_000, 2))), 1e-2, 1e-6, 1e-2, 1e-6)
    memory = 128 << 10
    algorithm = create(name, store, memory)
    page_rows = algorithm.page_map.page_rows
    assert 64 <= page_rows and page_rows * store.row_bytes(algorithm.page_map) <= memory / 8, page_rows
    assert create(name, store, 64 << 20).page_map.page_rows == 8192  # where M holds them, the measured size
    stream = stream_of(list(range(0, 40_000, 7)))  # every seventh key: on R where even
    assert_exact(store, stream, run_join(algorithm, stream, "sk"))


@pytest.mark.parametrize("name", HYBRIDS)
def test_reading_ahead_loads_on_other_sessions_and_stays_exact(backend, name):
    """``read_ahead=2`` (the default) hands every load whose tuples fit the share kept for those
    in flight to the store's reader, two sessions of their own taking the loads in turn, each on
    its own thread, so that two loads are under way at once; a larger load is read on the
    join's own session. ``read_ahead=1`` keeps one load under way on one other session, and
    ``read_ahead=0`` reads on the join's own session and makes no reader. The store's counters
    count every read, and every tuple leaves exactly once."""
    rng = np.random.default_rng(12)
    stream = stream_of(zipf_keys(rng, np.arange(-20, 620), 3000, 1.0).tolist())
    for read_ahead in (2, 1, 0):
        store = backend.make_master(master_of(range(600)))
        algorithm = create(name, store, 1 << 20, {"page_rows": 20, "read_ahead": read_ahead})
        requests, make_request = [], algorithm._request
        algorithm._request = lambda page, final: requests.append(make_request(page, final)) or requests[-1]
        under_way, step = [], algorithm.step
        algorithm.step = lambda buffer: step(buffer) if under_way.append(len(algorithm._under_way)) is None else None
        before = store.counters.queries  # the page map's
        run = run_join(algorithm, stream, "sk")
        assert_exact(store, stream, run)
        assert len(requests) == run.stats["loads"] == store.counters.queries - before > 0
        assert max(under_way) == read_ahead
        if read_ahead:
            siblings = store.reader().siblings
            fitting = sum(len(r.row_ids) <= algorithm._ahead_tuples for r in requests)
            assert len(siblings) == read_ahead and store.connection not in [s.connection for s in siblings]
            assert sum(s.counters.queries for s in siblings) == fitting > 0
            assert min(s.counters.queries for s in siblings) >= fitting // read_ahead - 1  # taken in turn
            assert algorithm.memory_split()["read_ahead_bytes"] > 0
        else:
            assert store._reader is None and algorithm.memory_split()["read_ahead_bytes"] == 0
            assert store.counters.queries - before == run.stats["loads"] > 0


def test_the_readers_store_is_built_anew_and_shares_no_state(backend):
    """The reader's thread reads through a store of its own (:meth:`MasterStore.reader`): built
    from the same table, key, columns and key range over a new session, holding no object of
    the store's (a page map widened on one thread is never read on the other)."""
    store = backend.make_master(master_of(range(600))).restrict(100, 500)
    store.page_map(20)
    sibling = store.reader().sibling
    assert (sibling.table, sibling.key, sibling.select, sibling.key_range) == (store.table, store.key, store.select, (100, 500))
    shared = [name for name, value in vars(store).items()
              if name in vars(sibling) and vars(sibling)[name] is value and not isinstance(value, (str, int, float, tuple, type(None)))]
    assert shared == [] and sibling._page_maps == {} and sibling.connection is not store.connection
    assert np.array_equal(sibling.load_pages(store.page_map(20), 2).keys, store.load_pages(store.page_map(20), 2).keys)


def test_inside_a_snapshot_r_is_read_on_the_joins_own_session(backend):
    """With a change log every run reads R in one snapshot (SSIJ sec. IV-E), which a second
    session would not share: no reader is made and the run sees one version."""
    store = backend.make_master(master_of(range(600)))
    create_change_tables(backend.connection, store.table, "nk")
    stream = stream_of(zipf_keys(np.random.default_rng(3), np.arange(-20, 620), 2000, 1.0).tolist())
    algorithm = create("hybridjoin", store, 1 << 20, {"page_rows": 20})
    run = run_join(algorithm, stream, "sk")
    assert_exact(store, stream, run)
    assert run.stats["loads"] > 0 and store._reader is None


def test_an_in_memory_sqlite_database_joins_without_reading_ahead():
    """An in-memory SQLite database cannot be opened a second time: the join reads on its own session."""
    connection = sqlite3.connect(":memory:", isolation_level=None)
    write_table(connection, "r", master_of(range(300)), primary_key="nk")
    store = store_for(connection, "r", "nk")
    stream = stream_of(list(range(-5, 305, 3)))
    algorithm = create("hybridjoin", store, 1 << 20, {"page_rows": 10})
    before = store.counters.queries  # the page map's
    run = run_join(algorithm, stream, "sk")
    assert_exact(store, stream, run)
    assert store.reader() is None and store.counters.queries - before == run.stats["loads"] > 0


def test_read_ahead_has_its_own_share_of_m_or_is_off(backend):
    """The tuples in flight and the second page's rows are taken from M before H_S is sized, at
    most READ_AHEAD_SHARE of it; a budget too small for that reads on its own session."""
    store = backend.make_master(master_of(range(6400)))
    on = create("hybridjoin", store, 4 << 20, {"page_rows": 64})
    off = create("hybridjoin", store, 4 << 20, {"page_rows": 64, "read_ahead": 0})
    share = on.memory_split()["read_ahead_bytes"]
    assert 0 < share <= (4 << 20) * READ_AHEAD_SHARE and on.structure_bytes() <= 4 << 20
    assert on.table.capacity < off.table.capacity
    small = create("hybridjoin", store, 24 << 10, {"page_rows": 64})
    assert small.memory_split()["read_ahead_bytes"] == 0 and small._ahead_tuples == 0


def test_fewer_loads_are_under_way_where_m_holds_fewer(backend):
    """``read_ahead=2`` asks for two loads under way; each takes its own share (its tuples in
    flight and its rows), and a budget whose READ_AHEAD_SHARE holds one keeps one under way,
    a smaller one none. Over budgets from 24 KiB to 4 MiB the loads under way never fall as M
    grows, their bytes always fit the share, and every case - 0, 1 and 2 - comes up."""
    store = backend.make_master(master_of(range(6400)))
    loads = []
    for memory in np.geomspace(24 << 10, 4 << 20, 40).astype(int):
        algorithm = create("hybridjoin", store, int(memory), {"page_rows": 64, "read_ahead": 2})
        split = algorithm.memory_split()
        assert split["read_ahead_bytes"] <= memory * READ_AHEAD_SHARE and algorithm.structure_bytes() <= memory
        assert algorithm.capacity_tuples == algorithm.table.capacity + algorithm._loads * algorithm._ahead_tuples
        loads.append(algorithm._loads)
    assert loads == sorted(loads) and set(loads) == {0, 1, 2}, loads


@pytest.mark.parametrize("name", ["hybridjoin-l", "hybridjoin-pq", "cachejoin-l"])  # where this stream makes the case
def test_working_ahead_goes_on_until_no_tuple_waits(backend, name):
    """A Spark step works ahead between micro-batches with no tuple arriving
    (:meth:`JoinSession.work_ahead`). HYBRIDJOIN loads the page of its oldest tuple at every
    step (sec. 4.1), so, never told to stop, it goes on until nothing waits - also after a
    slice whose last load was read at once (too many tuples to be read ahead), where the next
    step only hands a load to the reader and completes nothing yet: working ahead stopped
    there once, and the join sat idle for the rest of Spark's time."""
    store = backend.make_master(master_of(range(0, 1200, 2)))
    algorithm = create(name, store, 256 << 10, {"page_rows": 20})
    rng = np.random.default_rng(8)
    pieces = [[600] * 600 + rng.integers(-20, 1220, 300).tolist() for _ in range(8)]  # a hot page first
    stream = stream_of([key for piece in pieces for key in piece])
    session, outputs, nothing_in_flight, lo = JoinSession(algorithm, time.perf_counter), [], 0, 0
    for piece in pieces:
        invalid, _ = feed_keys(algorithm, stream["sk"].slice(lo, len(piece)), np.arange(lo, lo + len(piece)), None,
                               time.perf_counter, session)
        lo += len(piece)
        outputs += [invalid, session.advance()]
        nothing_in_flight += session.pending > 0 and algorithm.in_flight == 0
        outputs.append(session.work_ahead(lambda: True))
        assert session.pending == 0
    assert nothing_in_flight > 0, "the case this test is for did not come up"
    matched, unmatched = materialise(stream, JoinOutput.concat(outputs, algorithm.schema), algorithm.schema)
    assert engine_pairs(matched, unmatched, store.select, ROW_ID) == hash_join(store, stream, "sk")
