"""SSIJ's model (:mod:`airflow_provider_semijoin.core.ssijmodel`) against the engine it models: the
page cache it settles on, the pages a join phase asks for, and the direction of its figures."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.joins import create
from airflow_provider_semijoin.core.joins.base import StreamBuffer
from airflow_provider_semijoin.core.prediction import explain
from airflow_provider_semijoin.core.ssijmodel import cached_pages, pages_for_hit_ratio
from airflow_provider_semijoin.core.stores import open_store
from airflow_provider_semijoin.core.unitcosts import ComponentCosts
from airflow_provider_semijoin.workloads import zipf_stream
from airflow_provider_semijoin.workloads.master import generate_master

COSTS = ComponentCosts(**{
    **{f.name: 1e-7 for f in dataclasses.fields(ComponentCosts)},
    "query_s": 5e-4, "row_s": 1.5e-6, "c_step": 1e-4, "in_query_s": 2e-4, "in_key_s": 4e-6, "leaf_rows": 100.0,
})
N_KEYS = 40_000


@pytest.fixture(scope="module")
def master(tmp_path_factory) -> str:
    """An SQLite R of N_KEYS rows keyed as the stream generator draws them (2 * position + 1)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('ssijmodel') / 'r.db'}"
    generate_master(url, "r", N_KEYS, seed=0)
    return url


def run_phases(master: str, shape: str, policy: str, phases: int, warm: int, exponent: float = 1.0,
               **params) -> tuple[object, float, dict]:
    """SSIJ over a Zipf(``exponent``) stream of ``shape`` on R of N_KEYS keys with 1 MiB: its hit
    ratio of CR and, a join phase, the pages it asked for (``asked``) and read by range queries
    (``ranged``, every page a sequence spans), the IN queries it ran (``in_queries``) and the
    pages it evicted (``evicted``), over the join phases after the first ``warm``; ``params``
    are SSIJ's other settings."""
    with open_store(master, "r", "nk") as store:
        # the engine prices its reads with the model's unit costs: measured ones vary with the
        # machine's load, and CI's once made the engine read half the pages the model reads by IN
        store.assume_costs((COSTS.query_s, COSTS.row_s), (COSTS.in_query_s, COSTS.in_key_s))
        return _run_phases(store, shape, policy, phases, warm, exponent, params)


def _run_phases(store, shape: str, policy: str, phases: int, warm: int, exponent: float,
                params: dict) -> tuple[object, float, dict]:
    algorithm = create("ssij", store, 1 << 20, {"cache_policy": policy, **params})
    buffer = StreamBuffer(store.key_type, lambda: 0.0)
    counters, seed, at_warm = algorithm.counters, 0, None
    while counters.join_phases < warm + phases or not algorithm.cycle_ended:
        if buffer.available < 2 * algorithm.demand:
            chunk = zipf_stream(50_000, N_KEYS, exponent=exponent, shape=shape, seed=seed, first_tid=seed * 50_000)
            buffer.append(chunk["tid"].to_numpy(), chunk["nk"].to_numpy())
            seed += 1
        algorithm.step(buffer)
        if at_warm is None and counters.join_phases == warm and algorithm.cycle_ended:
            at_warm, evicted_at_warm = dataclasses.replace(counters), algorithm.cache.evictions
    hits = (counters.cache_hits - at_warm.cache_hits) / (counters.cache_probes - at_warm.cache_probes)
    per_phase = {"asked": (counters.pages_requested - at_warm.pages_requested) / phases,
                 "ranged": (counters.pages_read - at_warm.pages_read) / phases,
                 "in_queries": (counters.in_loads - at_warm.in_loads) / phases,
                 "evicted": (algorithm.cache.evictions - evicted_at_warm) / phases}
    return algorithm, hits, per_phase


@pytest.mark.parametrize("shape", ["noperm", "random"])
def test_the_model_predicts_the_engines_cache_and_join_phases(master, shape):
    """CR of the pages of largest q_j (utility, sec. IV-C) and r_j = 1 - exp(-N q_j): the engine's
    hit ratio and the pages each join phase asks for, after it settled."""
    algorithm, hits, per_phase = run_phases(master, shape, "utility", phases=6, warm=3)
    found = explain("ssij", algorithm, COSTS, N_KEYS, 1.0, shape)
    assert hits == pytest.approx(found.hit_ratio, abs=0.05)
    assert per_phase["asked"] == pytest.approx(found.detail["pages_asked"], rel=0.15)
    assert per_phase["ranged"] <= 0.02 * per_phase["asked"] and found.detail["pages_by_range"] <= 0.02 * per_phase["asked"]
    assert found.detail["N"] == pytest.approx(algorithm.sb_thresh / (1 - found.hit_ratio) + algorithm.ib_thresh / 2)
    assert found.turnover_s == found.iteration_s  # H_S (IB + SB) turns over once a cycle


@pytest.mark.parametrize("shape", ["noperm", "random"])
def test_lru_keeps_the_pages_read_last_and_serves_less(master, shape):
    """Figure 11: LRU keeps the pages read last whatever they served - on NoPerm the cold tail of
    R - and its hit ratio falls well below the utility policy's, in the engine and the model. The
    pages it keeps are read whole, with the gaps between them: a join phase reads by range many
    pages the utility policy reads by IN (in the model, as in the engine)."""
    algorithm, hits, per_phase = run_phases(master, shape, "lru", phases=6, warm=3)
    lru = explain("ssij", algorithm, COSTS, N_KEYS, 1.0, shape)
    utility = explain("ssij", algorithm, COSTS, N_KEYS, 1.0, shape, settings={"cache_policy": "utility"})
    assert hits == pytest.approx(lru.hit_ratio, abs=0.08)
    assert lru.hit_ratio < utility.hit_ratio * 0.6 and lru.service_rate_tps < utility.service_rate_tps
    at_hits = explain("ssij", algorithm, COSTS, N_KEYS, 1.0, shape, p_n=hits)
    assert per_phase["ranged"] == pytest.approx(at_hits.detail["pages_by_range"], rel=0.35)
    assert per_phase["ranged"] > 0.05 * per_phase["asked"]


@pytest.mark.parametrize("max_scan", [1, 4])
def test_an_in_query_asks_for_what_one_sequence_could_hold(master, max_scan):
    """An IN query of a join phase takes at most the keys whose rows fit the read buffer of one
    sequence of maxScan pages: at small maxScan many IN queries a phase, in the engine and the
    model (which took RIDER_KEYS a query and said 64 times too few at maxScan 1, R = 2M rows)."""
    algorithm, hits, per_phase = run_phases(master, "noperm", "utility", phases=6, warm=3, max_scan=max_scan)
    found = explain("ssij", algorithm, COSTS, N_KEYS, 1.0, "noperm", p_n=hits)
    assert algorithm.memory_split()["in_query_keys"] == max_scan * 64
    assert per_phase["in_queries"] == pytest.approx(found.detail["in_queries"], rel=0.25)
    assert per_phase["in_queries"] > 10


def test_on_a_uniform_stream_the_cache_keeps_its_pages(master):
    """Every page serves as much: ranked by one cycle's counts (the paper's utility), the
    Poisson noise of a cycle swapped 30% of CR a phase here (at R = 2M rows 640 pages a phase,
    each a range read of its own: SSIJ at half its prediction); ranked by the demand averaged over
    cycles, CR stays put, and the hit ratio is the share of R it holds."""
    algorithm, hits, per_phase = run_phases(master, "noperm", "utility", phases=8, warm=4, exponent=0.0)
    assert per_phase["evicted"] < 0.05 * algorithm.cache.pages
    assert hits == pytest.approx(algorithm.cache.pages / algorithm.page_map.n_pages, rel=0.2)


def test_a_measured_hit_ratio_replaces_the_caches(master):
    algorithm, _, _ = run_phases(master, "noperm", "utility", phases=1, warm=1)
    ideal = explain("ssij", algorithm, COSTS, N_KEYS)
    worse = explain("ssij", algorithm, COSTS, N_KEYS, p_n=ideal.hit_ratio / 2)
    assert worse.hit_ratio == pytest.approx(ideal.hit_ratio / 2) and worse.service_rate_tps < ideal.service_rate_tps
    q = np.array([0.5, 0.1, 0.3, 0.1])
    assert list(pages_for_hit_ratio(q, 0.75)) == [1.0, 0.0, 1.0, 0.0]
    assert cached_pages(q, 2, "utility", 0.0)[1] == pytest.approx(0.8)
    with pytest.raises(ConfigError, match=r"cache_policy: 'mru' is not one of \['utility', 'lru'\]"):
        explain("ssij", algorithm, COSTS, N_KEYS, settings={"cache_policy": "mru"})
