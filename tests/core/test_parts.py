"""partitions = N, the store side, on SQLite and MySQL: a store restricted to a key range of R
(page map, cyclic scans, loads and counts cover that range only) and reads of R at one version
chosen for all parts of a micro-batch, with changes installed between the parts' reads."""

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_semijoin.core.errors import StoreError
from airflow_provider_semijoin.core.joins import create
from airflow_provider_semijoin.core.runner import run_join
from airflow_provider_semijoin.core.stores import install_changes, store_for
from airflow_provider_semijoin.core.stores.versions import KEEP_VERSIONS

KEYS = [3 * i + 1 for i in range(60)]  # 1, 4, ..., 178


def master(keys=KEYS, repeat: int = 1) -> pa.Table:
    """R: key ``nk`` (each key ``repeat`` times), ``v`` = 10 * key + copy, ``id`` unique."""
    rows = [(k, 10 * k + c) for k in keys for c in range(repeat)]
    return pa.table({"id": pa.array(range(len(rows)), pa.int64()),
                     "nk": pa.array([k for k, _ in rows], pa.int64()), "v": pa.array([v for _, v in rows], pa.int64())})


_IDS = iter(range(10_000, 10**9))


def changes(ops, keys, v) -> pa.Table:
    ids = [next(_IDS) for _ in ops]
    return pa.table({"op": ops, "id": pa.array(ids, pa.int64()), "nk": pa.array(keys, pa.int64()), "v": pa.array(v, pa.int64())})


def keys_of(page) -> list:
    return page.keys.tolist()


def pairs(run) -> set:
    return set(zip(run.matched["sk"].to_pylist(), run.matched["v"].to_pylist()))


def test_a_restricted_store_sees_only_its_key_range(backend):
    full = backend.make_master(master(), select=["v"])
    part = store_for(backend.connection, full.table, "nk", ["v"]).restrict(31, 100)  # keys 31 .. 97
    inside = [k for k in KEYS if 31 <= k < 100]
    page_map = part.page_map(4)
    assert part.n_rows == len(inside) == page_map.n_keys == page_map.n_rows
    assert page_map.bounds.tolist() == inside[::4] and page_map.max_key == inside[-1]
    assert keys_of(part.load_pages(page_map, 0, page_map.n_pages)) == inside  # the last page stops at hi
    assert keys_of(part.load_pages(page_map, page_map.n_pages - 1)) == inside[-(len(inside) % 4 or 4):]
    assert keys_of(part.load_range(90, 10)) == [91, 94, 97]
    assert keys_of(part.lookup_many(np.array([1, 31, 97, 100, 178]))) == [31, 97]
    assert keys_of(part.lookup(178)) == [] and keys_of(full.lookup(178)) == [178]
    assert part.calibrate()[0] > 0 and part.row_bytes(page_map) > 0
    below, above = store_for(backend.connection, full.table, "nk").restrict(hi=31), store_for(
        backend.connection, full.table, "nk").restrict(lo=100)
    assert below.n_rows + part.n_rows + above.n_rows == full.n_rows
    assert below.page_map(4).bounds[0] == 1 and above.page_map(4).max_key == 178


def test_a_restricted_one_to_k_store_counts_its_own_rows(backend):
    full = backend.make_master(master(KEYS[:20], repeat=3), select=["v"], primary_key="id")
    part = store_for(backend.connection, full.table, "nk", ["v"]).restrict(10, 40)
    assert part.n_rows == 3 * 10 and part.page_map(3).n_keys == 10 and part.max_rows_per_key == 3


@pytest.mark.parametrize("name", ["hybridjoin", "meshjoin", "ssij"])
def test_each_part_cycles_over_its_own_range_and_the_parts_together_are_exact(backend, name):
    full = backend.make_master(master(), select=["v"])
    rng = np.random.default_rng(7)
    stream = pa.table({"sk": pa.array(rng.choice(np.r_[KEYS, [0, 2, 500]], 400), pa.int64())})
    cut = 91  # a page boundary of pages of 5 keys: KEYS[30]
    runs = []
    for lo, hi in ((None, cut), (cut, None)):
        store = store_for(backend.connection, full.table, "nk", ["v"]).restrict(lo, hi)
        keys = stream["sk"].to_numpy()
        mine = stream.filter(pa.array((keys >= (lo or -1)) & (keys < (hi or 10**9))))
        runs.append(run_join(create(name, store, 1 << 20, {"page_rows": 5}), mine, "sk"))
        assert runs[-1].stats["exactly_once"]["ok"]
        # a scan cycles over this part's 30 keys, never over the other part's (MESHJOIN: one
        # whole cycle per tuple at most; the others read only pages their tuples need)
        assert runs[-1].stats["disk_rows"] <= 2 * 30
    expected = {(k, 10 * k) for k in stream["sk"].to_pylist() if k in KEYS}
    assert pairs(runs[0]) | pairs(runs[1]) == expected
    unmatched = sorted(runs[0].unmatched["sk"].to_pylist() + runs[1].unmatched["sk"].to_pylist())
    assert unmatched == sorted(k for k in stream["sk"].to_pylist() if k not in KEYS)


@pytest.mark.parametrize("repeat", [1, 3])
def test_parts_read_the_version_the_batch_chose_though_an_install_came_between(backend, repeat):
    """The driver picks version V; part 0 reads at V, then an install changes keys of both
    parts (an update, a delete, an insert), then part 1 reads: still R at V, through the
    before-images; a read at the newest version sees the install."""
    full = backend.make_master(master(KEYS[:40], repeat=repeat), select=["v"], primary_key="id" if repeat > 1 else None)
    install_changes(backend.url, full.table, "nk", changes(["U"] * repeat, [4] * repeat, [7] * repeat))
    version = full.version()  # what the driver chose for the micro-batch
    parts = [store_for(backend.connection, full.table, "nk", ["v"]).restrict(*r) for r in ((None, 61), (61, None))]
    algorithms = [create("hybridjoin", store, 1 << 20, {"page_rows": 4}) for store in parts]
    stream = pa.table({"sk": pa.array([4, 10, 13, 2, 64, 67, 118, 200], pa.int64())})
    seen = []
    for i, (store, algorithm) in enumerate(zip(parts, algorithms)):
        if i == 1:  # between the parts' reads: changes in both ranges
            install_changes(backend.url, full.table, "nk", changes(
                ["U"] * repeat + ["D", "D", "U"], [4] * repeat + [13, 67, 200], [8] * repeat + [0, 0, 2000]))
            assert store.version() == version + 1
        keys = stream["sk"].to_numpy()
        lo, hi = store.key_range
        mine = stream.filter(pa.array((keys >= (lo or -1)) & (keys < (hi or 10**9))))
        with store.reading_at(version):
            run = run_join(algorithm, mine, "sk")
        seen.append(run.stats["master_version"])
        for pair in pairs(run):
            assert pair[1] in ({7} if pair[0] == 4 else {10 * pair[0] + c for c in range(repeat)})
        assert sorted(run.unmatched["sk"].to_pylist()) == [k for k in [2, 200] if (lo or -1) <= k < (hi or 10**9)]
        assert sorted(run.matched["sk"].to_pylist()) == sorted(
            [k for k in mine["sk"].to_pylist() if k not in (2, 200)] * repeat)
    assert seen == [version, version]
    newest = run_join(algorithms[1], pa.table({"sk": pa.array([67, 200, 64], pa.int64())}), "sk")
    assert pairs(newest) == {(200, 2000)} | {(64, 640 + c) for c in range(repeat)}
    assert newest.stats["master_version"] == version + 1


def test_a_cache_pinned_at_a_version_drops_what_changed_when_the_next_batch_reads_newer(backend):
    full = backend.make_master(master(), select=["v"])
    part = store_for(backend.connection, full.table, "nk", ["v"]).restrict(lo=50)
    algorithm = create("cachejoin", part, 1 << 20, {"page_rows": 4})
    batch = pa.table({"sk": pa.array([52, 55, 52, 55], pa.int64())})
    install_changes(backend.url, full.table, "nk", changes(["U"], [52], [1]))
    with part.reading_at(0):  # the batch chose version 0, before that install
        assert pairs(run_join(algorithm, batch, "sk")) == {(52, 520), (55, 550)}
    with part.reading_at(1):
        assert pairs(run_join(algorithm, batch, "sk")) == {(52, 1), (55, 550)}


def test_a_version_the_database_cannot_give_is_refused_in_one_sentence(backend):
    full = backend.make_master(master(KEYS[:5]), select=["v"])
    algorithm = create("hybridjoin", full, 1 << 20, {"page_rows": 2})
    install_changes(backend.url, full.table, "nk", changes(["U"], [4], [1]))
    with full.reading_at(2), pytest.raises(StoreError, match=r"^version: R 't\w+' is at version 1 in this snapshot, older than the version 2"):
        run_join(algorithm, pa.table({"sk": [4]}), "sk")
    for v in range(KEEP_VERSIONS + 1):
        install_changes(backend.connection, full.table, "nk", changes(["U"], [7], [v]))
    with full.reading_at(1), pytest.raises(StoreError, match=rf"version 1 is more than {KEEP_VERSIONS} installs old"):
        run_join(algorithm, pa.table({"sk": [4]}), "sk")
    with full.reading_at(2):
        assert pairs(run_join(algorithm, pa.table({"sk": [4, 7]}), "sk")) == {(4, 1), (7, 0)}


def test_r_at_a_version_before_an_install_of_thousands_of_keys_reads_whole(backend):
    """The before-images of an install of any size: a read at the version before it sees R as
    it was, in one query per page (the changed keys are looked up in the change log, not
    inlined: 1,500 of them passed SQLite's expression depth)."""
    keys = list(range(1, 6001, 2))
    full = backend.make_master(master(keys), select=["v"])
    changed = keys[::2]
    install_changes(backend.url, full.table, "nk", changes(["U"] * len(changed), changed, [-1] * len(changed)))
    with full.reading_at(0), full.snapshot():
        page = full.load_pages(full.page_map(len(keys)), 0)
    assert page.keys.tolist() == keys and page.rows["v"].to_pylist() == [10 * k for k in keys]
    with full.snapshot():
        newest = full.load_pages(full.page_map(len(keys)), 0)
    assert newest.rows["v"].to_pylist() == [-1 if i % 2 == 0 else 10 * k for i, k in enumerate(keys)]
