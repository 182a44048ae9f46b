"""The page map kept beside R (:mod:`airflow_provider_semijoin.core.stores.pagemaps`): read back
without reading R, brought up to date from the change log (pages then uneven, and the
algorithms budget the largest), rebuilt when R changed without an install; joins stay exact."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_semijoin.core.joins import create
from airflow_provider_semijoin.core.joins.hybridjoin_plan import auto_page_rows
from airflow_provider_semijoin.core.oracle import engine_pairs, hash_join
from airflow_provider_semijoin.core.runner import run_join
from airflow_provider_semijoin.core.stores import install_changes, store_for
from airflow_provider_semijoin.core.stores.pagemaps import forget, pages_table
from airflow_provider_semijoin.core.stores.sql import table_exists

pytestmark = pytest.mark.mysql

KEYS = list(range(10, 400, 10))  # 39 keys: pages of 5 start at 10, 60, 110, ..., 360


def master(keys) -> pa.Table:
    return pa.table({"nk": pa.array(keys, pa.int64()), "v": pa.array([k * 7 for k in keys], pa.int64())})


def reopen(backend, store):
    """A new store on R, as the next run (another process) opens it."""
    return store_for(backend.connection, store.table, store.key, store.select)


def test_a_kept_map_is_read_back_without_reading_r(mysql_backend):
    store = mysql_backend.make_master(master(KEYS))
    built = store.page_map(5)
    assert store.counters.queries == 1  # the one window query over R's index
    assert table_exists(mysql_backend.connection, pages_table(store.table))
    again = reopen(mysql_backend, store)
    kept = again.page_map(5)
    assert again.counters.queries == 0  # the map came from the side table, no query on R
    assert kept.bounds.tolist() == built.bounds.tolist() == KEYS[::5]
    assert kept.sizes.tolist() == built.sizes.tolist() == [5] * 7 + [4]
    assert (kept.n_keys, kept.n_rows, kept.max_key) == (39, 39, 390)
    assert again.n_rows == 39  # from the map: no COUNT(*)
    assert again.counters.queries == 0


def test_forgotten_maps_are_built_again_from_r(mysql_backend):
    """``forget`` drops every kept map (what ``semijoin bench --cold`` does before a first run):
    the next opening reads R's index again and keeps its map anew."""
    store = mysql_backend.make_master(master(KEYS))
    store.page_map(5), store.page_map(8)
    assert forget(store) and not table_exists(mysql_backend.connection, pages_table(store.table))
    again = reopen(mysql_backend, store)
    assert again.page_map(5).bounds.tolist() == KEYS[::5] and again.counters.queries == 1  # R read again
    assert again.kept_page_rows() == [5]  # kept anew; 8 is gone with the rest
    assert forget(again) and not forget(again)


@pytest.mark.parametrize("algorithm", ["inlj", "inlist", "inlist-lru"])
def test_a_join_that_reads_no_pages_builds_no_page_map(mysql_backend, algorithm):
    """INLJ and the IN-list joins read R by key, never by page: opening R for them reads none
    of R's index for a map (a first join of a 2M-row R spent 2.5 s on one), and their v_R is
    sampled from R's first rows, what page 0 of a map would hold."""
    store = mysql_backend.make_master(master(KEYS))
    join = create(algorithm, store, 1 << 20)
    keys = np.array(KEYS[::3] + [5, 1000], np.int64)
    stream = pa.table({"rid": np.arange(len(keys)), "sk": keys})
    run = run_join(join, stream, "sk")
    assert engine_pairs(run.matched, run.unmatched, store.select, "rid") == hash_join(store, stream, "sk")
    assert store._page_maps == {} and not table_exists(mysql_backend.connection, pages_table(store.table))
    assert store.row_bytes() == pytest.approx(reopen(mysql_backend, store).row_bytes(store.page_map()))


def test_installed_changes_make_pages_uneven_and_joins_stay_exact(mysql_backend):
    store = mysql_backend.make_master(master(KEYS))
    store.page_map(5)
    inserted = [61, 62, 63, 64, 65, 66, 67, 405]  # 7 keys into page 1 (60..109), one above R
    deleted = [210, 220, 230]  # page 4 (210..259) keeps 2 keys
    install_changes(mysql_backend.connection, store.table, "nk", pa.table({
        "op": ["U"] * len(inserted) + ["D"] * len(deleted),
        "nk": inserted + deleted,
        "v": [k * 7 for k in inserted] + [0] * len(deleted),
    }))
    again = reopen(mysql_backend, store)
    kept = again.page_map(5)
    assert kept.bounds.tolist() == KEYS[::5]  # the bounds stay, the pages' rows are counted again
    assert kept.sizes.tolist() == [5, 12, 5, 5, 2, 5, 5, 5]
    assert kept.max_page_rows == 12 and kept.n_keys == kept.n_rows == 44 and kept.max_key == 405
    fresh = again._build_page_map(5)  # what a map built now says: the same rows of R
    assert fresh.n_rows == kept.n_rows and fresh.n_keys == kept.n_keys
    hybrid = create("hybridjoin", again, 1 << 20, {"page_rows": 5})
    assert hybrid._disk_buffer_bytes >= 12 * again.row_bytes(kept)  # the largest page fits its buffer
    keys = np.array(inserted + deleted + KEYS + [5, 1000, 404], np.int64)
    stream = pa.table({"rid": np.arange(len(keys)), "sk": keys})
    want = hash_join(again, stream, "sk")
    for name in ("hybridjoin", "meshjoin", "ssij", "cachejoin"):
        run = run_join(create(name, reopen(mysql_backend, store), 1 << 20, {"page_rows": 5}), stream, "sk")
        assert engine_pairs(run.matched, run.unmatched, again.select, "rid") == want, name


def test_a_map_kept_before_r_changed_without_an_install_is_built_again(mysql_backend):
    store = mysql_backend.make_master(master(KEYS))
    store.page_map(5)
    q = mysql_backend.quote(store.table)
    mysql_backend.execute(f"INSERT INTO {q} (nk, v) VALUES (61, 1), (62, 2), (63, 3), (500, 4)")
    mysql_backend.execute(f"DELETE FROM {q} WHERE nk IN (10, 20)")
    again = reopen(mysql_backend, store)
    kept = again.page_map(5)
    assert again.counters.queries == 1  # the stamp moved: R's index is read again
    want = sorted(set(KEYS) - {10, 20} | {61, 62, 63, 500})
    assert kept.bounds.tolist() == want[::5] and kept.n_keys == len(want) and kept.max_key == 500
    third = reopen(mysql_backend, store)
    assert third.page_map(5).bounds.tolist() == want[::5] and third.counters.queries == 0  # kept again


def test_keys_below_a_kept_map_are_covered_when_it_is_read(mysql_backend):
    store = mysql_backend.make_master(master(KEYS))
    store.page_map(5)
    install_changes(mysql_backend.connection, store.table, "nk", pa.table({"op": ["U"], "nk": [1], "v": [7]}))
    kept = reopen(mysql_backend, store).page_map(5)
    assert kept.page_of(np.array([1, 10, 390], np.int64)).tolist() == [0, 0, 7]
    assert kept.sizes.tolist() == [6, 5, 5, 5, 5, 5, 5, 4]


def test_a_restricted_store_keeps_no_map(mysql_backend):
    store = mysql_backend.make_master(master(KEYS)).restrict(100, 300)
    part = store.page_map(5)
    assert part.bounds.tolist() == list(range(100, 300, 50)) and part.n_rows == 20
    assert not table_exists(mysql_backend.connection, pages_table(store.table))


def test_hybridjoin_takes_a_kept_page_size_near_the_measured_one(mysql_backend):
    assert auto_page_rows(1e-3, 1e-6) == 2048  # 4*S/T = 4000, rounded down to a power of two
    assert auto_page_rows(1e-3, 1e-6, kept=[512, 1024, 4096]) == 1024  # down to half of it: kept
    assert auto_page_rows(1e-3, 1e-6, kept=[512, 4096]) == 4096  # up to twice it: kept
    assert auto_page_rows(1e-3, 1e-6, kept=[1024, 4096]) == 1024  # as near both ways: the smaller
    assert auto_page_rows(1e-3, 1e-6, kept=[2048, 4096]) == 2048  # its own size first
    assert auto_page_rows(1e-3, 1e-6, kept=[512, 8192]) == 2048  # none near enough
    assert auto_page_rows(1e-3, 1e-6, most=1500) == 1024  # at most what a share of M holds
    assert auto_page_rows(1e-3, 1e-6, kept=[2048], most=1500) == 1024  # a kept page too large: not taken
    assert auto_page_rows(1e-3, 1e-6, most=10) == 64  # never below the smallest page
    store = mysql_backend.make_master(master(KEYS))
    assert store.kept_page_rows() == []
    store.page_map(5), store.page_map(64)
    assert reopen(mysql_backend, store).kept_page_rows() == [5, 64]
