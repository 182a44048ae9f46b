"""Calibration of the cost models' unit costs: positive, finite, deterministic with a fake clock.

Never asserts how fast anything is: only that the costs exist, are consistent and are measured
on the engine's structures (a fake clock makes the measurement exact and repeatable).
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest

from airflow_provider_semijoin.core.calibration import LOOKUP_SAMPLES, calibrate, fit_io
from airflow_provider_semijoin.core.stores.memory import memory_store
from airflow_provider_semijoin.core.unitcosts import ComponentCosts
from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.workloads import master_table


def fake_clock(step: float = 1e-6):
    """A clock that advances ``step`` seconds each time it is read."""
    ticks = itertools.count()
    return lambda: next(ticks) * step


def costs(**changes) -> ComponentCosts:
    values = {f.name: 1e-6 for f in dataclasses.fields(ComponentCosts)}
    return ComponentCosts(**{**values, **changes})


def test_costs_are_positive_and_finite_without_a_store():
    c = calibrate()
    for name, value in c.as_dict().items():
        assert math.isfinite(value) and value > 0, name
    assert c.io(1000) == pytest.approx(c.query_s + 1000 * c.row_s)


def test_a_fake_clock_makes_the_calibration_deterministic(make_master):
    store = make_master(master_table(3000, seed=0).select(["nk", "sk", "name"]))
    first = calibrate(store, clock=fake_clock())
    second = calibrate(store, clock=fake_clock())
    assert first == second
    # the store's own S and T are the I/O costs; every timing saw one tick: per-item slopes are 0
    assert (first.query_s, first.row_s) == store.calibrate()
    assert first.c_A == first.c_E == first.c_O == 1e-12
    assert first.c_step > 0 and first.c_round > 0
    assert store.counters.queries == 0  # calibration queries are not the join's


def test_string_keys_and_sampled_io(make_master):
    store = make_master(master_table(3000, key_type="str", seed=0).select(["nk", "name"]))
    c = calibrate(store, key_type="str", io_samples=2)
    assert all(math.isfinite(v) and v > 0 for v in c.as_dict().values())
    assert memory_store(store).key_type.kind == "str"


def test_s_and_t_are_fitted_to_relative_errors_so_a_large_load_s_noise_does_not_swing_s():
    """Loads of 256, 2048 and 16384 rows on S = 1 ms, T = 2.5 us a row, the largest 10% slow (as
    one noisy median of a shared machine is): S stays within 10% (0.94 ms); an even fit puts it
    at 0.70 ms."""
    rows = [256, 2048, 16384]
    seconds = [1e-3 + 2.5e-6 * n for n in rows]
    seconds[-1] *= 1.1
    query_s, row_s = fit_io(rows, seconds)
    assert query_s == pytest.approx(1e-3, rel=0.1) and row_s == pytest.approx(2.5e-6, rel=0.1)


def test_several_runs_give_each_cost_its_median_over_the_runs():
    runs = [costs(c_step=1e-4, row_s=3e-6), costs(c_step=10e-4, row_s=1e-6), costs(c_step=2e-4, row_s=2.5e-6)]
    found = ComponentCosts.median(runs)  # one run's outlier (a step 1 ms) does not move it, as a mean would
    assert (found.c_step, found.row_s, found.c_A) == (2e-4, 2.5e-6, 1e-6)


def test_runs_sample_r_at_places_of_their_own(make_master):
    """Each run of ``runs`` seeds its samples apart from the others' (a run at the same places
    would time rows the first one cached); with a fake clock the runs agree, so their median is
    one run's costs."""
    store = make_master(master_table(3000, seed=0).select(["nk", "sk", "name"]))
    loaded = []
    load_range = store.load_range
    store.load_range = lambda key, rows: loaded.append(str(key)) or load_range(key, rows)
    one = calibrate(store, clock=fake_clock(), io_samples=4)
    places_of_one = set(loaded)
    loaded.clear()
    assert calibrate(store, clock=fake_clock(), io_samples=4, runs=3).as_dict() == pytest.approx(one.as_dict(), rel=1e-6)
    assert len(set(loaded)) > len(places_of_one)


def test_inlj_s_lookup_is_timed_on_keys_at_random_places_of_r(make_master):
    """``lookup_s`` is what ``store.lookup`` of one key takes (INLJ's query), the median over
    keys of pages spread over R, each once; without samples a range load of one row (S + T)."""
    store = make_master(master_table(3000, seed=0).select(["nk", "sk", "name"]))
    now = [0.0]
    looked_up = []
    lookup = store.lookup

    def slow_lookup(key):  # each lookup takes 0.4 ms of the fake clock
        looked_up.append(key)
        now[0] += 4e-4
        return lookup(key)

    store.lookup = slow_lookup
    c = calibrate(store, clock=lambda: now[0], io_samples=2)
    assert c.lookup_s == pytest.approx(4e-4)
    pages = store.page_map().n_pages
    assert len(looked_up) == len(set(looked_up)) == min(2 * LOOKUP_SAMPLES, pages) > 1
    plain = calibrate(store, clock=fake_clock())
    assert plain.lookup_s == pytest.approx(plain.query_s + plain.row_s)


def test_with_io_keeps_the_cpu_costs():
    c = costs()
    other = c.with_io(2e-3, 3e-6)
    assert (other.query_s, other.row_s) == (2e-3, 3e-6)
    assert dataclasses.replace(other, query_s=c.query_s, row_s=c.row_s) == c


def test_cache_costs_grow_with_the_size_of_h_r():
    c = costs(c_cache=1e-8, c_cache_big=9e-8, c_hit=1e-7, c_hit_big=2e-7)
    assert c.cache_costs(1) == c.cache_costs(1024) == (1e-8, 1e-7)
    assert c.cache_costs(1 << 14) == pytest.approx((5e-8, 1.5e-7))
    assert c.cache_costs(1 << 18) == pytest.approx((9e-8, 2e-7))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: costs(c_H=-1.0), r"c_H: -1.0 is not a positive finite number"),
        (lambda: costs(row_s=float("nan")), r"row_s: nan is not a positive"),
        (lambda: calibrate(key_type="float"), r"key_type: 'float' is not one of"),
        (lambda: calibrate(io_samples=-1), r"io_samples: -1 is not a whole number >= 0"),
        (lambda: calibrate(runs=0), r"runs: 0 is not a whole number >= 1"),
    ],
)
def test_errors_name_the_field(call, message):
    with pytest.raises(ConfigError, match=message):
        call()
