"""Master-data updates (SSIJ sec. IV-E) on SQLite and MySQL: change tables, staging, atomic
installs with a versioned change log, and what a store sees of them (versions, snapshots,
page maps that keep covering R)."""

import threading

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_semijoin.core.errors import ConfigError, StoreError
from airflow_provider_semijoin.core.joins import create
from airflow_provider_semijoin.core.runner import run_join
from airflow_provider_semijoin.core.stores import (
    DatabaseURL,
    Installed,
    create_change_tables,
    install_changes,
    pending_changes,
    stage_changes,
    store_for,
    write_table,
)
from airflow_provider_semijoin.core.stores.sql import side_tables, table_exists


def master(keys, type=None) -> pa.Table:
    """R: key ``nk``, ``v`` = 3 * position + 1, ``label``."""
    return pa.table({
        "nk": pa.array(keys, type or (pa.int64() if not keys or isinstance(keys[0], int) else pa.string())),
        "v": pa.array([3 * i + 1 for i in range(len(keys))], pa.int64()),
        "label": pa.array([f"name-{k}" for k in keys], pa.string()),
    })


def changes(ops, keys, **columns) -> pa.Table:
    return pa.table({"op": ops, "nk": keys, **columns})


def text(value):
    return value.decode() if isinstance(value, (bytes, bytearray)) else value


def rows_of(backend, table: str, order: str = "nk") -> list[tuple]:
    q = backend.quote
    return [tuple(text(v) for v in r) for r in backend.execute(f"SELECT * FROM {q(table)} ORDER BY {q(order)}")]


def log_of(backend, table: str) -> list[tuple]:
    q, log = backend.quote, side_tables(table)[0]
    return [(v, text(k), op) for v, k, op in backend.execute(f"SELECT version, {q('nk')}, op FROM {q(log)} ORDER BY version, {q('nk')}")]


# ------------------------------------------------------------------------------- the tables


def test_change_tables_are_created_once_with_the_key_type_of_r(backend):
    store = backend.make_master(master(["P-1", "P-2"]))
    for _ in range(2):
        create_change_tables(backend.connection, store.table, "nk")
    log, pending = side_tables(store.table)
    assert table_exists(backend.connection, log) and table_exists(backend.connection, pending)
    assert pending_changes(backend.url, store.table) == 0 and store.version() == 0
    if backend.name == "mysql":
        found = backend.execute(
            "SELECT TABLE_NAME, COLLATION_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
            "AND COLUMN_NAME = 'nk' AND TABLE_NAME IN (%s, %s, %s) ORDER BY TABLE_NAME", (store.table, log, pending))
        assert [c for _, c in found] == ["utf8mb4_nopad_bin"] * 3
    else:
        declared = {t: [r[2] for r in backend.execute(f'PRAGMA table_info("{t}")') if r[1] == "nk"] for t in (log, pending)}
        assert declared == {log: ["TEXT"], pending: ["TEXT"]}
        assert backend.execute("PRAGMA journal_mode")[0][0] == "wal"


def test_pending_changes_is_zero_without_a_pending_table(backend):
    store = backend.make_master(master([1, 2]))
    assert pending_changes(backend.connection, store.table) == 0
    assert not table_exists(backend.connection, side_tables(store.table)[1])  # counting created nothing


def test_names_that_cannot_have_change_tables_are_refused(backend):
    long_name = backend.table_name()
    long_name += "_" + "x" * (53 - len(long_name) - 1)
    write_table(backend.connection, long_name, master([1]), primary_key="nk")
    backend.tables.append(long_name)
    with pytest.raises(ConfigError, match=rf"^table: '{long_name}' is too long to have change tables \(at most 52"):
        create_change_tables(backend.connection, long_name, "nk")
    clash = backend.table_name()
    write_table(backend.connection, clash, pa.table({"nk": [1], "Op": ["x"]}), primary_key="nk")
    with pytest.raises(ConfigError, match=rf"^table: column 'Op' of '{clash}' has the name of a column of its change table"):
        stage_changes(backend.connection, clash, "nk", changes(["D"], [1]))
    with pytest.raises(ConfigError, match=r"^table: 'r; drop' is not a valid identifier"):
        pending_changes(backend.connection, "r; drop")
    with pytest.raises(ConfigError, match=r"^max_rows: 0 is not a positive integer"):
        install_changes(backend.connection, clash, "nk", max_rows=0)


@pytest.mark.parametrize(
    "bad, message",
    [
        (pa.table({"nk": [1]}), r"^changes: no column 'op' \(columns: \['nk'\]\)"),
        (changes(["U", "X"], [1, 2]), r"^changes: row 1 has op 'X'; expected 'U' \(upsert\) or 'D' \(delete\)"),
        (changes(["U", "D"], [1, None]), r"^changes: row 1 has no nk"),
        (changes(["U"], [1], colour=["red"]), r"^changes: column 'colour' is not a column of 't\w+'"),
        ([{"op": "U", "nk": 1}], r"^changes: expected a pyarrow Table with columns op, nk and columns of"),
    ],
    ids=["no-op", "bad-op", "null-key", "unknown-column", "not-a-table"],
)
def test_bad_changes_are_refused_before_anything_is_written(backend, bad, message):
    store = backend.make_master(master([1, 2]))
    with pytest.raises(ConfigError, match=message):
        stage_changes(backend.connection, store.table, "nk", bad)
    with pytest.raises(ConfigError, match=message):
        install_changes(backend.connection, store.table, "nk", bad)
    assert pending_changes(backend.connection, store.table) == 0 and store.version() == 0
    assert rows_of(backend, store.table) == [(1, 1, "name-1"), (2, 4, "name-2")]


# ------------------------------------------------------------------------------- installing


def test_a_pending_batch_installs_oldest_first_and_empties_pending(backend):
    store = backend.make_master(master([2, 4, 6, 8]))
    staged = stage_changes(backend.url, store.table, "nk", changes(
        ["U", "U", "D", "U", "U", "D", "U", "U"],
        [4, 4, 6, 6, 8, 8, 1, 99],
        v=[100, 101, None, 600, 800, None, 10, 990],
    ))
    assert staged == 8 and pending_changes(backend.url, store.table) == 8
    assert install_changes(backend.url, store.table, "nk") == Installed(version=1, keys=5, rows=8)
    assert pending_changes(backend.url, store.table) == 0
    assert rows_of(backend, store.table) == [
        (1, 10, None), (2, 1, "name-2"), (4, 101, None), (6, 600, None), (99, 990, None)
    ]
    assert log_of(backend, store.table) == [(1, 1, "U"), (1, 4, "U"), (1, 6, "U"), (1, 8, "D"), (1, 99, "U")]
    stage_changes(backend.connection, store.table, "nk", changes(["D"], [2]))
    assert install_changes(backend.connection, store.table, "nk") == Installed(2, 1, 1)
    assert install_changes(backend.connection, store.table, "nk") == Installed(2, 0, 0)  # nothing pending
    assert store.version() == 2 and rows_of(backend, store.table)[:2] == [(1, 10, None), (4, 101, None)]


def test_max_rows_installs_the_oldest_and_leaves_the_rest_pending(backend):
    store = backend.make_master(master([1, 2, 3]))
    stage_changes(backend.connection, store.table, "nk", changes(["U"] * 3, [1, 2, 3], v=[10, 20, 30]))
    stage_changes(backend.connection, store.table, "nk", changes(["D", "U"], [1, 5], v=[None, 50]))
    assert install_changes(backend.connection, store.table, "nk", max_rows=2) == Installed(1, 2, 2)
    assert [r[:2] for r in rows_of(backend, store.table)] == [(1, 10), (2, 20), (3, 7)]
    assert pending_changes(backend.connection, store.table) == 3
    assert install_changes(backend.connection, store.table, "nk", max_rows=10) == Installed(2, 3, 3)
    assert [r[:2] for r in rows_of(backend, store.table)] == [(2, 20), (3, 30), (5, 50)]
    assert pending_changes(backend.connection, store.table) == 0


def test_changes_given_directly_leave_pending_alone(backend):
    store = backend.make_master(master([1, 2]))
    stage_changes(backend.connection, store.table, "nk", changes(["D"], [1]))
    got = install_changes(backend.connection, store.table, "nk", changes(["U"], [2], label=["two"]))
    assert got == Installed(1, 1, 1) and pending_changes(backend.connection, store.table) == 1
    assert rows_of(backend, store.table) == [(1, 1, "name-1"), (2, None, "two")]


def test_a_one_to_k_upsert_replaces_every_row_of_the_key_and_a_delete_removes_them(backend):
    table = pa.table({"id": [0, 1, 2, 3, 4, 5], "nk": [1, 1, 1, 2, 2, 3], "v": [0, 7, 14, 21, 28, 35]})
    store = backend.make_master(table, primary_key="id")
    assert store.key_unique is False
    install_changes(backend.connection, store.table, "nk", pa.table({
        "op": ["U", "U", "D", "D", "U", "U"],
        "nk": [1, 1, 2, 3, 3, 9],
        "id": [100, 101, None, None, 300, 900],
        "v": [1, 2, None, None, 3, 4],
    }))
    assert rows_of(backend, store.table, "id") == [(100, 1, 1), (101, 1, 2), (300, 3, 3), (900, 9, 4)]
    assert [r[1:] for r in log_of(backend, store.table)] == [(1, "U"), (2, "D"), (3, "U"), (9, "U")]


def test_string_keys_are_installed_byte_for_byte(backend):
    """'a' and 'a ' are different keys (NO PAD binary collation), and so are 'a' and 'A'."""
    store = backend.make_master(master(["a", "b", "東京-3"]))
    install_changes(backend.url, store.table, "nk", changes(["U", "U", "D", "U"], ["a ", "A", "a", "東京-3"], v=[1, 2, None, 3]))
    assert [r[:2] for r in rows_of(backend, store.table)] == [("A", 2), ("a ", 1), ("b", 4), ("東京-3", 3)]
    assert {k for _, k, _ in log_of(backend, store.table)} == {"a ", "A", "a", "東京-3"}


def test_a_failing_install_changes_nothing(backend):
    """The second row's id belongs to key 3: the INSERT fails after the DELETE ran, and the
    transaction takes both back (a real constraint violation, no mock)."""
    table = pa.table({"id": [0, 1, 2], "nk": [1, 2, 3], "v": [10, 20, 30]})
    store = backend.make_master(table, primary_key="id")
    stage_changes(backend.connection, store.table, "nk", pa.table({"op": ["U", "U"], "nk": [1, 2], "id": [50, 2], "v": [0, 0]}))
    with pytest.raises(Exception, match=r"UNIQUE constraint failed|Duplicate entry"):
        install_changes(backend.connection, store.table, "nk")
    assert rows_of(backend, store.table, "id") == [(0, 1, 10), (1, 2, 20), (2, 3, 30)]
    assert pending_changes(backend.connection, store.table) == 2
    assert store.version() == 0 and log_of(backend, store.table) == []


def test_install_is_atomic_for_readers_in_other_connections(backend):
    """Batch i sets v = i on every key of R (deleting and re-inserting 1/5 of them). A reader
    in another connection sees every row with one value (one statement), and inside a
    snapshot R's rows match the version its change log names."""
    keys = list(range(0, 200, 2))
    store = backend.make_master(pa.table({"nk": keys, "v": [0] * len(keys)}))
    create_change_tables(backend.connection, store.table, "nk")
    page_map = store.page_map(16)
    failures, seen = [], set()

    def writer():
        connection = DatabaseURL.parse(backend.url).connect()
        try:
            for version in range(1, 41):
                gone = keys[version % 5 :: 5]
                install_changes(connection, store.table, "nk", pa.table({
                    "op": ["D"] * len(gone) + ["U"] * len(keys),
                    "nk": gone + keys,
                    "v": [None] * len(gone) + [version] * len(keys),
                }))
        except Exception as exc:  # reported by the main thread
            failures.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=writer)
    thread.start()
    while thread.is_alive():
        values = backend.execute(f"SELECT v, COUNT(*) FROM {backend.quote(store.table)} GROUP BY v")
        assert len(values) == 1 and values[0][1] == len(keys), values
        with store.snapshot():
            page = store.load_pages(page_map, 0, page_map.n_pages)
            assert page.keys.tolist() == keys
            assert set(page.rows["v"].to_pylist()) == {store.seen_version}
            seen.add(store.seen_version)
    thread.join()
    assert not failures, failures
    assert len(seen) >= 2 and store.version() == 40


# ------------------------------------------------------------------------------- what a store sees


def test_versions_and_changed_keys(backend):
    store = backend.make_master(master([1, 2, 3]))
    assert store.version() == 0 and store.changes_since(0)[1].tolist() == []
    install_changes(backend.connection, store.table, "nk", changes(["U", "D"], [2, 3], v=[0, None]))
    install_changes(backend.connection, store.table, "nk", changes(["U", "U"], [2, 7], v=[1, 1]))
    assert store.version() == 2
    assert [(v, k.tolist()) for v, k in [store.changes_since(0), store.changes_since(1), store.changes_since(2)]] == [
        (2, [2, 3, 7]), (2, [2, 7]), (2, []),
    ]


def test_a_snapshot_hands_out_changed_keys_once_and_nests(backend):
    table = backend.make_master(master(["k1", "k2"])).table
    install_changes(backend.connection, table, "nk", changes(["U"], ["k3"], v=[9]))
    store = store_for(backend.connection, table, "nk")
    assert store.seen_version == 1  # the store opened after that install: nothing to drop
    install_changes(backend.connection, store.table, "nk", changes(["U", "D"], ["k1", "k2"], v=[5, None]))
    with store.snapshot() as changed:
        assert changed.tolist() == [b"k1", b"k2"] and changed.dtype == store.key_type.dtype
        with store.snapshot() as inner:
            assert inner.tolist() == []
        assert store.seen_version == 2
    with store.snapshot() as again:
        assert again.tolist() == []


@pytest.mark.parametrize("name", ["hybridjoin", "meshjoin", "cachejoin"])
def test_keys_inserted_below_and_above_r_are_found_after_note_changes(backend, name):
    store = backend.make_master(master(list(range(10, 50, 2))))
    algorithm = create(name, store, 1 << 20, {"page_rows": 4})  # page map built before the install
    page_map = store.page_map(4)
    install_changes(backend.url, store.table, "nk", changes(["U", "U", "U", "D"], [3, 97, 25, 10], v=[30, 970, 250, None]))
    assert page_map.page_of(np.array([3, 97])).tolist() == [-1, -1]  # not covered yet
    run = run_join(algorithm, pa.table({"sk": [3, 97, 25, 11, 10, 12, 98, 2]}), "sk")
    matched = dict(zip(run.matched["sk"].to_pylist(), run.matched["v"].to_pylist()))
    assert matched == {3: 30, 97: 970, 25: 250, 12: 4}
    assert page_map.page_of(np.array([3, 97, 2, 98])).tolist() == [0, page_map.n_pages - 1, -1, -1]
    assert sorted(run.unmatched["sk"].to_pylist()) == [2, 10, 11, 98]


def test_an_empty_master_gains_keys(backend):
    store = backend.make_master(master([]))
    algorithm = create("hybridjoin", store, 1 << 20, {"page_rows": 4})
    assert run_join(algorithm, pa.table({"sk": [5, 6]}), "sk").stats["disk_queries"] == 0
    install_changes(backend.connection, store.table, "nk", changes(["U", "U"], [5, 8], v=[50, 80]))
    run = run_join(algorithm, pa.table({"sk": [5, 6, 8, 9, 4]}), "sk")
    assert dict(zip(run.matched["sk"].to_pylist(), run.matched["v"].to_pylist())) == {5: 50, 8: 80}
    assert run.stats["master_version"] == 1


def test_a_string_key_longer_than_r_had_stops_the_join_with_a_clear_error(backend):
    table = backend.table_name()  # a key column as wide as 8 bytes, R's longest key 2 bytes
    write_table(backend.connection, table, master(["ab", "cd", "wxyzwxyz"]), primary_key="nk")
    backend.execute(f"DELETE FROM {backend.quote(table)} WHERE {backend.quote('nk')} = 'wxyzwxyz'")
    store = store_for(backend.connection, table, "nk")
    install_changes(backend.connection, store.table, "nk", changes(["D"], ["abcdefgh"]))
    with store.snapshot() as changed:
        assert changed.tolist() == []  # a long key that is deleted was never in R
    install_changes(backend.connection, store.table, "nk", changes(["U"], ["abcdef"], v=[1]))
    with pytest.raises(StoreError, match=r"^key: an installed change puts key 'abcdef' into 't\w+', longer than the 2 bytes"):
        with store.snapshot():
            pass
    reopened = store_for(backend.connection, store.table, "nk")
    assert reopened.key_type.width == 6
