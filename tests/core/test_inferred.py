"""Inferred members (:mod:`airflow_provider_semijoin.core.stores.inferred`) on SQLite and MariaDB:
a placeholder row per natural key R lacks, inserted once however often (or by however many
writers at once) the key is inferred, its surrogate key read back with the step's columns, kept
when the real load UPDATEs the row; and the start checks, one sentence naming the field."""

from __future__ import annotations

import threading
from collections import Counter

import pyarrow as pa
import pytest

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.stores import open_store
from airflow_provider_semijoin.core.stores.inferred import InferredMembers
from airflow_provider_semijoin.job.inferred import inferred_member_options

SELECT = ["sk", "name", "category"]


def make_dimension(backend, *, nk_type="BIGINT", auto=True, extra="", nk_index="", real=(1, 3, 5)) -> str:
    """A product dimension: auto-increment surrogate key sk, natural key nk (indexed), name NOT NULL
    with a default, category nullable, the flag inferred; ``real`` rows (nk 1, 3, 5)."""
    table = backend.table_name()
    q = backend.quote(table)
    if backend.name == "mysql":
        sk = "sk BIGINT AUTO_INCREMENT PRIMARY KEY" if auto else "sk BIGINT PRIMARY KEY"
        backend.execute(f"CREATE TABLE {q} ({sk}, nk {nk_type} NOT NULL, name VARCHAR(40) NOT NULL DEFAULT 'n/a', "
                        f"category VARCHAR(40), inferred TINYINT NOT NULL DEFAULT 0{extra}, KEY (nk)) ENGINE=InnoDB")
    else:
        sk = "sk INTEGER PRIMARY KEY" if auto else "sk BIGINT PRIMARY KEY"
        backend.execute(f"CREATE TABLE {q} ({sk}, nk {nk_type} NOT NULL, name TEXT NOT NULL DEFAULT 'n/a', "
                        f"category TEXT, inferred INTEGER NOT NULL DEFAULT 0{extra})")
        backend.execute(f"CREATE INDEX ix_{table} ON {q} (nk{nk_index})")
    p = "%s" if backend.name == "mysql" else "?"
    for i, nk in enumerate(real):
        backend.execute(f"INSERT INTO {q} (sk, nk, name, category) VALUES ({p}, {p}, {p}, {p})",
                        (100 + i, nk, f"product {nk}", "real"))
    return table


def inferrer(backend, table, select=SELECT, as_of=None, **options) -> InferredMembers:
    store = open_store(backend.url, table, "nk", select)
    normalised = inferred_member_options({"defaults": {"category": "unknown"}, **options}, "inferred_member", "nk")
    try:
        return InferredMembers(store, backend.url, normalised, "steps[0].inferred_member", as_of=as_of)
    except BaseException:
        store.close()
        raise


def closing(members: InferredMembers) -> None:
    members.close()
    members.store.close()


def rows_by_key(backend, table) -> dict:
    found = backend.execute(f"SELECT nk, sk, name, category, inferred FROM {backend.quote(table)}")
    counts = Counter(row[0] for row in found)
    assert max(counts.values()) == 1, counts  # one row per natural key, never a second placeholder
    return {row[0]: row[1:] for row in found}


def test_unknown_keys_get_one_placeholder_each_and_a_replay_reads_the_same_keys(backend):
    table = make_dimension(backend)
    members = inferrer(backend, table)
    try:
        first = members.rows_of(pa.array([2, 4, 3], pa.int64()))
        assert first.column_names == ["nk", *SELECT]
        by_key = {r["nk"]: r for r in first.to_pylist()}
        assert by_key[3] == {"nk": 3, "sk": 101, "name": "product 3", "category": "real"}  # R had it: no placeholder
        assert {by_key[k]["name"] for k in (2, 4)} == {"n/a"}  # the table's default
        assert {by_key[k]["category"] for k in (2, 4)} == {"unknown"}  # the step's default
        assert members.inserted == 2
        again = members.rows_of(pa.array([4, 2, 6], pa.int64()))  # a replay of 2 and 4, and a new key
        assert members.inserted == 3
        keys = {r["nk"]: r["sk"] for r in again.to_pylist()}
        assert (keys[2], keys[4]) == (by_key[2]["sk"], by_key[4]["sk"])
        stored = rows_by_key(backend, table)
        assert {k for k, row in stored.items() if row[3] == 1} == {2, 4, 6}
        assert len({stored[k][0] for k in stored}) == 6  # six distinct surrogate keys
    finally:
        closing(members)


def test_the_real_load_updates_the_placeholder_and_the_key_stays(backend):
    table = make_dimension(backend)
    members = inferrer(backend, table)
    try:
        (placeholder,) = members.rows_of(pa.array([8], pa.int64())).to_pylist()
        p = "%s" if backend.name == "mysql" else "?"
        backend.execute(f"UPDATE {backend.quote(table)} SET name = {p}, category = {p}, inferred = 0 WHERE nk = {p}",
                        ("product 8", "late", 8))
        (loaded,) = members.rows_of(pa.array([8], pa.int64())).to_pylist()
        assert loaded == {"nk": 8, "sk": placeholder["sk"], "name": "product 8", "category": "late"}
        assert members.inserted == 1
        assert rows_by_key(backend, table)[8] == (placeholder["sk"], "product 8", "late", 0)
    finally:
        closing(members)


def test_string_keys_are_inferred_as_the_stream_spells_them_within_rs_key_width(backend):
    table = make_dimension(backend, nk_type="VARCHAR(20)" if backend.name == "mysql" else "TEXT",
                           real=("P-1", "P-3", "P-5"))
    if backend.name == "mysql":  # a key compared byte for byte
        backend.execute(f"ALTER TABLE {backend.quote(table)} MODIFY nk VARCHAR(20) CHARACTER SET utf8mb4 "
                        "COLLATE utf8mb4_nopad_bin NOT NULL")
    members = inferrer(backend, table)
    try:
        found = members.rows_of(pa.array(["P-2", "P-4"]))
        assert found["nk"].to_pylist() == ["P-2", "P-4"] and members.inserted == 2
        assert set(rows_by_key(backend, table)) >= {"P-2", "P-4"}
        # R's longest key had 3 bytes when the step opened it: a longer one is never inferred
        assert members.can_hold(pa.array(["P-6", "P-10", None])).to_pylist() == [True, False, False]
        assert members.can_hold(pa.array([6], pa.int64())).to_pylist() == [False]  # not a string: bad_key
    finally:
        closing(members)


def test_spellings_a_case_folding_key_calls_equal_get_one_placeholder(backend):
    """SQLite NOCASE, MariaDB utf8mb4_general_ci: 'p-2' and 'P-2' are one key of R - one
    placeholder (spelled as the first), whose row both get; 'p-3' is R's 'P-3'."""
    if backend.name == "mysql":
        table = make_dimension(backend, nk_type="VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
                               real=("P-1", "P-3", "P-5"))
    else:
        table = make_dimension(backend, nk_type="TEXT", nk_index=" COLLATE NOCASE", real=("P-1", "P-3", "P-5"))
    members = inferrer(backend, table)
    try:
        assert members.store.key_type.collation is not None
        found = members.rows_of(pa.array(["p-2", "P-2", "p-3"])).to_pylist()
        assert [r["nk"] for r in found] == ["p-2", "p-2", "P-3"] and found[2]["sk"] == 101
        assert found[0]["sk"] == found[1]["sk"] and members.inserted == 1
        assert members.rows_of(pa.array(["P-2"]))["sk"].to_pylist() == [found[0]["sk"]] and members.inserted == 1
        assert members.can_hold(pa.array(["p-7", "p-10", None])).to_pylist() == [True, False, False]
        assert sorted(rows_by_key(backend, table)) == ["P-1", "P-3", "P-5", "p-2"]
    finally:
        closing(members)


def test_two_writers_inferring_the_same_keys_at_once_make_one_placeholder_each(backend):
    """Two steps (two sessions) infer overlapping keys at the same moment, 15 rounds: every key has
    one row, and both writers read back the same surrogate key for it."""
    table = make_dimension(backend)
    writers = [inferrer(backend, table), inferrer(backend, table)]
    results: list[list[dict]] = [[], []]
    errors = []
    start = threading.Barrier(2)

    def infer(i: int) -> None:
        try:
            for round_ in range(15):
                keys = [1000 + 10 * round_ + k for k in range(6)]  # the same keys, in another order each
                start.wait(timeout=30)
                results[i] += writers[i].rows_of(pa.array(keys[::-1] if i else keys, pa.int64())).to_pylist()
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            errors.append(exc)
            start.abort()

    threads = [threading.Thread(target=infer, args=(i,)) for i in range(2)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not errors, errors
        stored = rows_by_key(backend, table)
        inferred = {k for k, row in stored.items() if row[3] == 1}
        assert inferred == {1000 + 10 * r + k for r in range(15) for k in range(6)}
        assert writers[0].inserted + writers[1].inserted == len(inferred)
        assert ({(r["nk"], r["sk"]) for r in results[0]} == {(r["nk"], r["sk"]) for r in results[1]}
                == {(k, stored[k][0]) for k in inferred})
    finally:
        for writer in writers:
            closing(writer)


@pytest.mark.mysql
def test_a_sequence_fills_the_surrogate_key_on_mariadb(mysql_backend):
    table = make_dimension(mysql_backend, auto=False)
    sequence = f"{table}_seq"
    mysql_backend.tables.append(sequence)  # dropped with the test's tables
    mysql_backend.execute(f"CREATE SEQUENCE `{sequence}` START WITH 5000")
    members = inferrer(mysql_backend, table, sequence=sequence, surrogate_key="sk")
    try:
        found = members.rows_of(pa.array([2, 4], pa.int64()))
        assert sorted(found["sk"].to_pylist()) == [5000, 5001]
        members.rows_of(pa.array([2, 4], pa.int64()))
        assert members.inserted == 2 and len(rows_by_key(mysql_backend, table)) == 5
    finally:
        closing(members)


def test_a_type_2_placeholder_is_valid_from_the_beginning_of_time_to_the_end_in_the_columns_types(backend):
    """As-of (the version columns NOT NULL, so the end of time rather than NULL): MariaDB TIMESTAMP
    and DATE take their types' bounds, SQLite epoch numbers 0 and 2**31 - 1; a key R holds is read
    back with every version, a placeholder as its key's one version."""
    import datetime as dt

    from airflow_provider_semijoin.core.asof import AsOf

    versions = (", valid_from TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, valid_to DATE NOT NULL DEFAULT '2000-01-01'"
                if backend.name == "mysql" else ", valid_from INTEGER NOT NULL DEFAULT 5, valid_to INTEGER NOT NULL DEFAULT 9")
    table = make_dimension(backend, extra=versions, real=(1, 1, 3))  # key 1: two versions
    members = inferrer(backend, table, [*SELECT, "valid_from", "valid_to"], AsOf("sold_at", "valid_from", "valid_to"))
    try:
        found, positions = members.versions_of(pa.array([1, 7], pa.int64()))
        assert positions.tolist() == [0, 0, 1] and found["sk"].to_pylist()[:2] == [100, 101]
        (placeholder,) = found.slice(2).to_pylist()
        bounds = ((dt.datetime(1970, 1, 2), dt.date(9999, 12, 31)) if backend.name == "mysql" else (0, 2**31 - 1))
        assert (placeholder["valid_from"], placeholder["valid_to"]) == bounds
        assert placeholder["category"] == "unknown" and members.inserted == 1
        assert backend.execute(f"SELECT inferred FROM {backend.quote(table)} WHERE nk = 7") == [(1,)]
    finally:
        closing(members)


START_ERRORS = [  # (table extras, inferrer options, message after the field path)
    ({}, {"flag_column": "is_inferred"}, r"\.flag_column: column 'is_inferred' is not in table '\w+' \(columns: "),
    ({}, {"defaults": {"colour": "red"}}, r"\.defaults\.colour: column 'colour' is not in table '\w+'"),
    ({"extra": ", brand TEXT NOT NULL", "real": ()}, {}, r"\.defaults: gives no value for column 'brand' of '\w+', which is NOT "
                                             r"NULL without a default; expected a value for it in defaults$"),
    ({"auto": False}, {}, r": table '\w+' has no auto-increment column for the placeholders' surrogate key; "),
    ({}, {"select": ["name"]}, r": the surrogate key 'sk' \(auto-increment\) is not among the step's master.select "
                               r"\['name'\]; expected it there"),
]


@pytest.mark.parametrize("table_extras, options, message", START_ERRORS, ids=["flag", "default", "not-null",
                                                                             "no-auto", "sk-not-selected"])
def test_what_the_table_lacks_fails_at_start_naming_the_field(sqlite_backend, table_extras, options, message):
    table = make_dimension(sqlite_backend, **table_extras)
    options = dict(options)
    select = options.pop("select", SELECT)
    with pytest.raises(ConfigError, match=rf"^steps\[0\]\.inferred_member{message}"):
        inferrer(sqlite_backend, table, select, **options)


def test_a_sequence_on_sqlite_fails_at_start(sqlite_backend):
    table = make_dimension(sqlite_backend, auto=False)
    with pytest.raises(ConfigError, match=r"^steps\[0\]\.inferred_member\.sequence: 'sk_seq' given, but SQLite has no "
                                          r"sequences; expected an INTEGER PRIMARY KEY surrogate key instead$"):
        inferrer(sqlite_backend, table, sequence="sk_seq", surrogate_key="sk")


@pytest.mark.mysql
def test_a_missing_sequence_fails_at_start_on_mariadb(mysql_backend):
    table = make_dimension(mysql_backend, auto=False)
    with pytest.raises(ConfigError, match=r"^steps\[0\]\.inferred_member\.sequence: 'no_such_seq' is not a sequence "
                                          r"of the database; expected one made by CREATE SEQUENCE$"):
        inferrer(mysql_backend, table, sequence="no_such_seq", surrogate_key="sk")

