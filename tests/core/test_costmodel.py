"""The papers' cost models: hand-computed values, optima, monotonicity, the HYBRIDJOIN queue model
against the engine's own stream table, and errors that name the field."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from airflow_provider_semijoin.core import costmodel as cm
from airflow_provider_semijoin.core.prediction import MODELS, explain, predict
from airflow_provider_semijoin.core.stores.memory import memory_store
from airflow_provider_semijoin.core.unitcosts import ComponentCosts
from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.joins import create
from airflow_provider_semijoin.core.joins.registry import CACHE_ALGORITHMS
from airflow_provider_semijoin.core.joins.stream_table import StreamTable
from airflow_provider_semijoin.workloads import zipf_stream
from airflow_provider_semijoin.workloads.zipf import RANDOM_SHAPE_SEED

COSTS = ComponentCosts(**{
    **{f.name: 1e-7 for f in dataclasses.fields(ComponentCosts)},
    "query_s": 5e-4, "row_s": 1.5e-6, "lookup_s": 3e-4, "c_cache_big": 2e-7, "c_hit_big": 2e-7,
    "c_step": 1e-4, "c_step_mesh": 1e-4, "c_step_inlj": 5e-5, "c_pop": 2e-5, "c_round": 3e-5,
    "c_learn": 3e-5, "in_query_s": 2e-4, "in_key_s": 4e-6,
})


def harmonic_sum(k: int, s: float = 1.0) -> float:
    return sum(1.0 / x**s for x in range(1, k + 1))


# -- eq. 1-7 of CMESHJOIN, eq. 4-10 of SSJ ------------------------------------------------------------
def test_p_n_of_one_cached_key_is_one_over_the_harmonic_number():
    for n in (10, 1000):
        assert cm.hit_ratio(1, n, 1.0) == pytest.approx(1 / harmonic_sum(n))
    assert cm.hit_ratio(30, 100, 0.7) == pytest.approx(harmonic_sum(30, 0.7) / harmonic_sum(100, 0.7))


def test_eq4_optimum_is_the_brute_force_argmax():
    memory, n_keys, per_key = 200_000, 1500, 150.0
    h = np.arange(0, int(memory // per_key) + 1)
    p_n = np.array([harmonic_sum(int(k)) for k in h]) / harmonic_sum(n_keys)
    mu = (memory - per_key * h) / (1 - p_n)  # eq. 3 in eq. 4
    assert cm.best_cache_size(memory, n_keys, per_key, 1.0) == int(h[np.argmax(mu)])


def test_ssj_eq8_and_eq10():
    n_keys, cached, segments = 100_000, 500, 40
    exact = (harmonic_sum(n_keys) - harmonic_sum(cached)) / (segments * harmonic_sum(n_keys))
    assert cm.segment_match_probability(cached, n_keys, segments) == pytest.approx(exact)
    paper = (math.log(n_keys) - math.log(cached)) / (segments * (math.log(n_keys) + cm.EULER_GAMMA))
    assert cm.segment_match_probability(cached, n_keys, segments) == pytest.approx(paper, rel=0.02)
    # MESHJOIN's H_S of w * k tuples completes w per iteration (eq. 10)
    p_n = cm.hit_ratio(cached, n_keys)
    assert cm.disk_phase_tuples(300 * segments, exact, p_n) == pytest.approx(300)


def test_ssj_eq3_equals_cmeshjoin_eq4():
    w_s, p_n, inner_loop = 3000.0, 0.7, 0.02
    w_n, front = cm.front_stage_costs(w_s, p_n, COSTS, cached=5000)
    assert w_n == pytest.approx(w_s * 0.7 / 0.3)  # eq. 7: w_N = p_N (w_N + w_S)
    ssj = cm.ssj_service_rate(w_s, w_n, inner_loop, front)
    cmesh = cm.cmeshjoin_service_rate(w_s / inner_loop, p_n, front / (w_n + w_s))
    assert ssj == pytest.approx(cmesh)
    assert cm.cmeshjoin_service_rate(1000.0, 0.75) == pytest.approx(4000.0)  # eq. 4 as printed


def test_probe_rounds():
    assert cm.probe_rounds(100, 0.0) == 1  # nothing hits: the look holds the misses exactly
    assert cm.probe_rounds(1, 0.5) == pytest.approx(1.376, abs=1e-3)  # one miss wanted: often short
    assert 1 <= cm.probe_rounds(1000, 0.5) < cm.probe_rounds(100, 0.9) < cm.probe_rounds(10, 0.9) < 2


# -- HYBRIDJOIN's w ----------------------------------------------------------------------------------
def test_uniform_pages_give_k_2_in_eq2():
    state = cm.hybridjoin_queue(np.full(100, 0.01), 100_000, 500)
    assert state.w == pytest.approx(2 * 100_000 / 100, rel=0.01)
    # the occupancy equation holds at the age found
    q = np.full(100, 0.01)
    assert np.sum(state.age * q * (1 + state.age * q / 2) / (1 + state.age * q)) == pytest.approx(100_000)


def simulate_oldest_first(q: np.ndarray, h_s: int, admissions: int, seed: int = 0) -> float:
    """Tuples per load of the engine's StreamTable driven like HYBRIDJOIN (keys = page numbers)."""
    table = StreamTable(h_s, len(q), np.dtype(np.int64))
    stream = np.random.default_rng(seed).choice(len(q), size=admissions, p=q)
    pos, pops = 0, []
    while pos < admissions:
        n = min(table.free, admissions - pos)
        table.admit(np.arange(pos, pos + n), stream[pos : pos + n], stream[pos : pos + n])
        pos += n
        pops.append(len(table.pop_page(int(table.oldest_key()))[0]))
    return float(np.mean(pops[len(pops) // 3 :]))


@pytest.mark.parametrize("shape, cached", [("random", 0), ("random", 500), ("noperm", 500)])
def test_hybridjoin_w_matches_the_engines_stream_table(shape, cached):
    q = cm.page_probabilities(20_000, 1.0, 100, shape, cached=cached)
    predicted = cm.hybridjoin_queue(q, 1000, 100).w
    assert simulate_oldest_first(q, 1000, 60_000) == pytest.approx(predicted, rel=0.06)


def test_random_shape_is_the_generators():
    assert cm.RANDOM_SHAPE_SEED == RANDOM_SHAPE_SEED
    n_keys, page_rows = 2000, 100
    q = cm.page_probabilities(n_keys, 1.0, page_rows, "random")
    keys = zipf_stream(200_000, n_keys, exponent=1.0, shape="random", seed=3)["nk"].to_numpy()
    observed = np.bincount(((keys - 1) // 2) // page_rows, minlength=len(q)) / len(keys)
    assert np.abs(observed - q).max() < 0.01
    noperm = cm.page_probabilities(n_keys, 1.0, page_rows, "noperm")
    assert noperm[0] > q.max()  # NoPerm clusters the hot keys on the first page
    assert cm.page_probabilities(n_keys, 1.0, page_rows, "noperm", cached=page_rows)[0] == 0


@pytest.mark.parametrize("shape, cached", [("noperm", 0), ("random", 0), ("noperm", 150)])
def test_page_keys_seen_are_the_distinct_keys_a_stream_brings_per_page(shape, cached):
    n_keys, page_rows, tuples = 2000, 100, 3000
    seen = cm.page_keys_seen(n_keys, 1.0, page_rows, shape, tuples, cached=cached)
    p = cm.rank_probabilities(n_keys, 1.0).copy()
    p[:cached] = 0
    rng = np.random.default_rng(5)
    position = cm.rank_positions(n_keys, shape)
    counted = []
    for _ in range(200):
        ranks = np.unique(rng.choice(n_keys, size=tuples, p=p / p.sum()))
        at = ranks if position is None else position[ranks]
        counted.append(np.bincount(at // page_rows, minlength=len(seen)))
    assert np.abs(np.mean(counted, axis=0) - seen).max() < 2.0
    assert seen.sum() == pytest.approx(np.mean([c.sum() for c in counted]), rel=0.01)


# -- predictions from memory splits ----------------------------------------------------------------
def cache_split(inner: str, cached: int, h_s: int) -> dict:
    if inner == "meshjoin":
        k = 50
        inner_split = {"page_rows": 500, "pages": 200, "partition_pages": 4, "partitions": k,
                       "chunk_tuples": h_s // k, "stream_table_capacity_tuples": h_s // k * k}
    else:
        inner_split = {"page_rows": 500, "pages": 200, "stream_table_capacity_tuples": h_s}
    return {"cache_keys": cached, "inner": inner, **{f"inner.{k}": v for k, v in inner_split.items()}}


@pytest.mark.parametrize("name, inner", [("ssj", "meshjoin"), ("cmeshjoin", "meshjoin"), ("cachejoin", "hybridjoin"),
                                         ("cachejoin-pq", "hybridjoin")])
def test_cache_algorithms_gain_from_memory_and_skew(name, inner):
    small = predict(name, cache_split(inner, 1000, 20_000), COSTS, 100_000, 1.0)
    large = predict(name, cache_split(inner, 4000, 80_000), COSTS, 100_000, 1.0)
    assert large > small > 0
    rates = [predict(name, cache_split(inner, 2000, 40_000), COSTS, 100_000, s) for s in (0.25, 0.5, 1.0, 1.2)]
    assert rates == sorted(rates) and rates[0] < rates[-1]


@pytest.mark.parametrize("name, inner", [("ssj", "meshjoin"), ("cmeshjoin", "meshjoin"), ("cachejoin", "hybridjoin"),
                                         ("cachejoin-pq", "hybridjoin")])
def test_a_front_stage_holding_every_key_of_r_is_priced_by_its_hits_alone(name, inner):
    """H_R of all of R's keys leaves the disk phase nothing (w_S = 0), where eq. 2-3 and 4 are 0/0:
    the rate is then H_R's per hit, and one key fewer cached costs a little of it, not all."""
    c_cache, c_hit = COSTS.cache_costs(1000)
    every = [predict(name, cache_split(inner, 1000, 20_000), COSTS, 1000, s) for s in (0.0, 1.0)]
    assert every == [pytest.approx(1 / (COSTS.c_S + c_cache + c_hit))] * 2
    assert 0.9 * every[0] < predict(name, cache_split(inner, 999, 20_000), COSTS, 1000, 1.0) < every[0]


def test_meshjoin_does_not_depend_on_skew():
    split = {"page_rows": 500, "partition_pages": 4, "partitions": 50, "chunk_tuples": 400}
    rates = {predict("meshjoin", split, COSTS, 100_000, s, shape) for s in (0.0, 0.5, 1.0, 1.5) for shape in cm.SHAPES}
    assert len(rates) == 1


def test_inlj_is_one_lookup_per_tuple():
    """Priced by the lookup of a key (``lookup_s``), not by a range load's S + T."""
    expected = 1 / (COSTS.lookup_s + COSTS.c_S + COSTS.c_O + COSTS.c_step_inlj)
    assert predict("inlj", {}, COSTS, 1000) == pytest.approx(expected)


@pytest.mark.parametrize("name", ["inlj", "inlist", "meshjoin", "hybridjoin", "hybridjoin-l", "hybridjoin-pq",
                                  "ssj", "cmeshjoin", "cachejoin", "cachejoin-l", "cachejoin-pq", "ssij"])
def test_every_algorithm_is_predicted_from_its_own_split(name):
    store = memory_store(None, n_keys=20_000)
    algorithm = create(name, store, 1 << 20, {"page_rows": 100} if "hybrid" in name or "cachejoin" in name else {})
    found = explain(name, algorithm, COSTS, 20_000, 1.0, "random")
    assert found.service_rate_tps > 0 and found.iteration_s > found.io_s > 0
    assert found.service_rate_tps == predict(name, algorithm.memory_split(), COSTS, 20_000, 1.0, "random",
                                                settings=dict(algorithm.settings))
    assert (found.hit_ratio is not None) == (name in CACHE_ALGORITHMS or name == "ssij")  # H_R, or SSIJ's CR
    assert explain("inlist-lru", {}, COSTS, 20_000) is None


def test_a_measured_hit_ratio_replaces_p_n():
    split = cache_split("hybridjoin", 2000, 40_000)
    ideal = explain("cachejoin", split, COSTS, 100_000)
    worse = explain("cachejoin", split, COSTS, 100_000, p_n=ideal.hit_ratio / 2)
    assert worse.hit_ratio == pytest.approx(ideal.hit_ratio / 2)
    assert worse.service_rate_tps < ideal.service_rate_tps
    assert cm.hit_ratio(cm.keys_for_hit_ratio(0.5, 100_000), 100_000) >= 0.5


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: predict("hybrid", {}, COSTS, 10), r"algorithm: 'hybrid' has no cost model"),
        (lambda: predict("inlj", {}, COSTS, 0), r"n_keys: 0 must be >= 1"),
        (lambda: predict("inlj", {}, COSTS, 10, -1.0), r"exponent: -1.0 must be >= 0"),
        (lambda: predict("inlj", {}, COSTS, 10, 1.0, "zipfy"), r"shape: 'zipfy' is not one of"),
        (lambda: predict("cachejoin", {"inner": "hybridjoin"}, COSTS, 10), r"split.cache_keys: missing"),
        (lambda: predict("meshjoin", {"page_rows": 5}, COSTS, 10), r"split.chunk_tuples: missing"),
        (lambda: predict("cachejoin", cache_split("hybridjoin", 1, 10), COSTS, 10, p_n=1.5), r"p_n: 1.5 must be in"),
        (lambda: predict("inlj", 42, COSTS, 10), r"split: int is neither a memory split"),
        (lambda: cm.page_probabilities(10, 1.0, 0), r"page_rows: 0 must be >= 1"),
    ],
)
def test_errors_name_the_field(call, message):
    with pytest.raises(ConfigError, match=message):
        call()


def test_every_algorithm_names_a_model_family_or_none():
    from airflow_provider_semijoin.core.joins import ALGORITHMS

    families = {name: cls.cost_model for name, cls in ALGORITHMS.items()}
    assert {name for name, family in families.items() if family is None} == {"inlist-lru"}
    assert {family for family in families.values() if family is not None} == set(MODELS)
    with pytest.raises(ValueError, match=r"'hybrid' is not one of the models"):
        cm.model("hybrid", "x", {}, {}, COSTS, 10, 1.0, "noperm", 0, None)


# -- IN queries priced by the leaves of R's index they read ----------------------------------------
@pytest.mark.parametrize("keys", [1, 5, 20, 200])
def test_the_leaves_an_in_query_reads_are_those_its_keys_fall_on(keys):
    rows, leaf_rows = 1024, 128  # a page of 8 leaves
    costs = dataclasses.replace(COSTS, leaf_rows=leaf_rows)
    rng = np.random.default_rng(keys)
    drawn = [len(np.unique(rng.choice(rows, min(keys, rows), replace=False) // leaf_rows)) for _ in range(2000)]
    assert costs.leaves_read(keys, rows) == pytest.approx(np.mean(drawn), rel=0.06)
    assert costs.leaves_read(keys, 10) == pytest.approx(1.0)  # a run within one leaf reads it once
    assert costs.in_cost(keys, 3) == pytest.approx(COSTS.in_query_s + COSTS.in_key_s * keys + COSTS.in_leaf_s * 3)


@pytest.mark.parametrize("shape", ["noperm", "random"])
def test_the_in_list_model_reads_the_leaves_a_batchs_distinct_keys_fall_on(shape):
    """The noperm batch's hot keys share leaves, the random shape's are scattered: the model's
    leaves are those a real batch's keys (R's keys 2i + 1) fall on, and each is priced."""
    n_keys, batch, leaf_rows = 200_000, 50_000, 100
    keys = zipf_stream(batch, n_keys, shape=shape, seed=5).column("nk").to_numpy()
    drawn = len(np.unique((keys - 1) // 2 // leaf_rows))
    costs = dataclasses.replace(COSTS, leaf_rows=leaf_rows, in_leaf_s=5e-5)
    p = explain("inlist", {"batch_rows": batch}, costs, n_keys, 1.0, shape)
    assert p.detail["leaves"] == pytest.approx(drawn, rel=0.03)
    expected_io = (p.detail["queries"] * costs.in_query_s + p.detail["distinct_keys"] * costs.in_key_s
                   + p.detail["leaves"] * costs.in_leaf_s)
    assert p.io_s == pytest.approx(expected_io)


def test_the_page_choice_bound_grows_with_skew_and_is_one_on_a_uniform_stream():
    """Any choice of page gains nothing over the oldest page when every page is as likely,
    little at skew 0.5 and several times at skew 1 when the hot keys share pages (noperm)."""
    bound = {skew: cm.page_choice_bound(cm.page_probabilities(200_000, skew, 1024, "noperm"), 100_000, 1024)
             for skew in (0.0, 0.5, 1.0)}
    assert bound[0.0] == pytest.approx(1.0, abs=0.01)
    assert 1.0 < bound[0.5] < 1.2 < 2.0 < bound[1.0]
    random = cm.page_choice_bound(cm.page_probabilities(200_000, 1.0, 1024, "random"), 100_000, 1024)
    assert 1.0 <= random < bound[1.0]  # scattered hot keys: the pages are about as likely
