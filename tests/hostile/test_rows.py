"""Hostile stream rows through the engine (issue 13): wrong types, huge strings, NaN/inf, int64
overflow, nested values, invalid UTF-8, SQL-injection-shaped values, duplicate ids. Every tuple
leaves exactly once - matched, or unmatched with a reason - exactly as the oracle's hash join
says; and what reaches the database is only reads of R (SQLite's authorizer watches every
statement the join prepares)."""

from __future__ import annotations

import sqlite3

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.core.joins import create
from airflow_provider_semijoin.core.oracle import engine_pairs, hash_join
from airflow_provider_semijoin.core.runner import run_join
from airflow_provider_semijoin.core.stores import DatabaseURL, store_for
from airflow_provider_semijoin.workloads import generate_master

from .strategies import INJECTION, ODD_TEXT
from .tally import record

MASTER_ROWS = 300
ALGORITHMS = ["inlj", "inlist", "meshjoin", "hybridjoin", "cachejoin-pq", "ssij"]
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# keys of R are 2i+1 (int) or "P-%09d" % (2i+1) (str): mix in hits, misses and hostile values
INT_HITS = st.integers(0, MASTER_ROWS - 1).map(lambda i: 2 * i + 1)
STR_HITS = INT_HITS.map(lambda k: f"P-{k:09d}")
HOSTILE_STR = st.sampled_from(INJECTION + ODD_TEXT + [" 7", "+7", "7 ", "\u00857", "\x1c7", "٣", "7.0", "0007",
                                                       "9223372036854775807", "9223372036854775808", "-9223372036854775809",
                                                       "P-000000001", "P-000000001 ", "p-000000001", "P-000000001\x00"]) \
    | st.text(max_size=30) | STR_HITS | INT_HITS.map(str)
HOSTILE_INT = st.sampled_from([0, -1, 2**63 - 1, -(2**63)]) | st.integers(-(2**63), 2**63 - 1) | INT_HITS
HOSTILE_FLOAT = st.sampled_from([float("nan"), float("inf"), float("-inf"), -0.0, 2.0**63, -(2.0**63), 1e300, 3.5]) \
    | st.floats() | INT_HITS.map(float)


@st.composite
def key_columns(draw):
    """A stream key column: Arrow type and values drawn together, nulls anywhere."""
    n = draw(st.integers(1, 40))
    kind = draw(st.sampled_from(["int64", "uint64", "float64", "string", "large_string", "binary", "bool", "list",
                                 "struct", "dictionary", "null", "decimal", "timestamp"]))
    maybe = lambda s: st.none() | s  # noqa: E731
    if kind == "int64":
        return pa.array(draw(st.lists(maybe(HOSTILE_INT), min_size=n, max_size=n)), pa.int64())
    if kind == "uint64":
        return pa.array(draw(st.lists(maybe(st.integers(0, 2**64 - 1) | INT_HITS), min_size=n, max_size=n)), pa.uint64())
    if kind == "float64":
        return pa.array(draw(st.lists(maybe(HOSTILE_FLOAT), min_size=n, max_size=n)), pa.float64())
    if kind in ("string", "large_string", "dictionary"):
        values = draw(st.lists(maybe(HOSTILE_STR), min_size=n, max_size=n))
        values = [v.encode("utf-8", "surrogatepass").decode("utf-8", "replace") if v else v for v in values]
        array = pa.array(values, pa.large_string() if kind == "large_string" else pa.string())
        return array.dictionary_encode() if kind == "dictionary" else array
    if kind == "binary":  # invalid UTF-8 among them
        return pa.array(draw(st.lists(maybe(st.binary(max_size=12) | st.sampled_from([b"\xff\xfe", b"P-\xc3"])),
                                      min_size=n, max_size=n)), pa.binary())
    if kind == "bool":
        return pa.array(draw(st.lists(maybe(st.booleans()), min_size=n, max_size=n)), pa.bool_())
    if kind == "list":
        return pa.array(draw(st.lists(maybe(st.lists(INT_HITS, max_size=2)), min_size=n, max_size=n)), pa.list_(pa.int64()))
    if kind == "struct":
        return pa.array(draw(st.lists(maybe(st.fixed_dictionaries({"nk": INT_HITS})), min_size=n, max_size=n)))
    if kind == "decimal":
        import decimal

        return pa.array([None if v is None else decimal.Decimal(v) for v in
                         draw(st.lists(maybe(INT_HITS), min_size=n, max_size=n))], pa.decimal128(20, 0))
    if kind == "timestamp":
        return pa.array(draw(st.lists(maybe(st.integers(0, 2**35)), min_size=n, max_size=n)), pa.timestamp("s"))  # the oracle needs a datetime
    return pa.nulls(n)


@pytest.fixture(scope="module")
def masters(tmp_path_factory):
    """An int-keyed and a str-keyed R in SQLite, with an authorizer logging every access."""
    url = f"sqlite:///{tmp_path_factory.mktemp('hostile') / 'm.db'}"
    generate_master(url, "product", MASTER_ROWS, seed=0)
    generate_master(url, "product_s", MASTER_ROWS, key_type="str", seed=0)
    found = {}
    for table in ("product", "product_s"):
        connection = DatabaseURL.parse(url).connect()
        accesses: list = []
        connection.set_authorizer(lambda action, a1, a2, db, trigger, log=accesses: (log.append((action, a1, a2)), 0)[1])
        found[table] = (store_for(connection, table, "nk", ["sk", "name"]), accesses)
    yield found
    for store, _ in found.values():
        store.close()


READS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_PRAGMA}


@FAST
@given(key_columns(), st.sampled_from(ALGORITHMS), st.sampled_from(["product", "product_s"]), st.booleans())
def test_hostile_keys_leave_exactly_once_as_the_oracle_says(masters, keys, algorithm, table, duplicate_ids):
    store, accesses = masters[table]
    n = len(keys)
    tid = pa.array([0] * n if duplicate_ids else range(n), pa.int64())  # the engine counts positions, not ids
    payload = pa.array([["nested", {"x": 1}].__repr__() * (i % 3) + "\udcff".encode("utf-8", "surrogatepass")
                        .decode("utf-8", "replace") for i in range(n)])
    stream = pa.table({"pos": pa.array(range(n), pa.int64()), "tid": tid, "key": keys, "payload": payload,
                       "amount": pa.array([float("nan")] * n)})
    accesses.clear()
    result = run_join(create(algorithm, store, 2**20, {}), stream, "key")

    assert result.stats["exactly_once"]["ok"], result.stats["exactly_once"]
    assert engine_pairs(result.matched, result.unmatched, ["sk", "name"], "pos") == hash_join(store, stream, "key")
    assert set(result.unmatched["reason"].to_pylist()) <= {"not_in_master", "null_key", "bad_key"}
    writes = [a for a in accesses if a[0] not in READS]
    assert not writes, writes
    tables = {a[1] for a in accesses if a[0] == sqlite3.SQLITE_READ}
    assert tables <= {table, f"{table}__sj_changes", "sqlite_master"}, tables
    reasons = result.unmatched["reason"].to_pylist()
    record("stream rows (run_join)", None if not reasons else "; ".join(sorted(set(reasons))))

