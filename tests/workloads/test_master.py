"""workloads.master: keys of R, absent keys, the ~120-byte table, and loading it into SQL."""

import os
import sqlite3
import time
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.stores.sql import DatabaseURL
from airflow_provider_semijoin.workloads.master import (
    DATASETS_TABLE,
    absent_key,
    generate_master,
    master_keys,
    master_table,
)

MYSQL_URL = os.environ.get(
    "SEMIJOIN_TEST_MYSQL_URL", "mysql://semijoin:semijoin@127.0.0.1:3306/semijoin_test"
)

# ------------------------------------------------------------------------------------- keys


@pytest.mark.parametrize("key_type", ["int", "str"])
def test_master_keys_are_sorted_unique_and_in_the_same_order_for_both_key_types(key_type):
    keys = master_keys(5000, key_type)
    assert len(keys) == 5000
    assert np.all(keys[1:] > keys[:-1])  # strictly increasing: sorted and unique


def test_master_keys_are_odd_numbers_and_their_p_spelling():
    assert master_keys(4).tolist() == [1, 3, 5, 7]
    assert master_keys(4).dtype == np.int64
    assert master_keys(3, "str").tolist() == ["P-000000001", "P-000000003", "P-000000005"]
    assert master_keys(0).tolist() == []


def test_absent_key_spellings_and_scalars():
    assert absent_key(0) == 0 and absent_key(0, "str") == "P-000000000"
    assert absent_key(7) == 14 and absent_key(7, "str") == "P-000000014"
    assert absent_key(np.array([1, 2])).tolist() == [2, 4]
    assert isinstance(absent_key(3, "str"), str)


@settings(max_examples=60, deadline=None)
@given(
    n_rows=st.integers(1, 3000),
    indexes=st.lists(st.integers(0, 4000), min_size=1, max_size=50),
    key_type=st.sampled_from(["int", "str"]),
)
def test_absent_keys_are_never_in_r_and_fall_just_below_their_position(n_rows, indexes, key_type):
    keys = master_keys(n_rows, key_type)
    absent = absent_key(np.array(indexes), key_type)
    assert not np.isin(absent, keys).any()
    # the absent key of position i sorts right before R's key at i (after the key at i - 1)
    assert (np.searchsorted(keys, absent) == np.minimum(indexes, n_rows)).all()


def test_bad_key_type_index_and_row_count_are_config_errors():
    with pytest.raises(ConfigError, match=r"^key_type: 'float' is not one of \['int', 'str'\]"):
        master_keys(3, "float")
    with pytest.raises(ConfigError, match=r"^index: -1 must be >= 0"):
        absent_key(np.array([3, -1]))
    with pytest.raises(ConfigError, match=r"^n_rows: -5 must be >= 0"):
        master_table(-5)
    with pytest.raises(ConfigError, match=r"^n_rows: 2.5 is not an integer"):
        master_keys(2.5)
    with pytest.raises(ConfigError, match=r"^n_rows: 500000001 must be <= 500000000"):
        master_keys(500_000_001, "str")  # keys would outgrow their 9 zero-padded digits


# ------------------------------------------------------------------------------------ table

COLUMNS = ["nk", "sk", "name", "category", "brand", "price", "weight_kg", "created"]


@pytest.mark.parametrize("key_type, nk_type", [("int", pa.int64()), ("str", pa.string())])
def test_master_table_schema_and_size_per_row(key_type, nk_type):
    table = master_table(20_000, key_type=key_type, seed=3)
    assert table.column_names == COLUMNS
    assert table.schema.field("nk").type == nk_type
    assert [table.schema.field(c).type for c in COLUMNS[1:]] == [
        pa.int64(), pa.string(), pa.string(), pa.string(), pa.float64(), pa.float64(), pa.string()
    ]
    assert table.column("nk").to_pylist() == master_keys(20_000, key_type).tolist()
    assert 90 <= table.nbytes / table.num_rows <= 160  # the papers' ~120-byte tuples
    assert table.column("nk").null_count == 0


def test_surrogate_keys_are_a_permutation_not_derivable_from_the_natural_key():
    sk = master_table(10_000, seed=1).column("sk").to_numpy()
    assert np.array_equal(np.sort(sk), np.arange(1, 10_001))
    assert abs(np.corrcoef(sk, np.arange(10_000))[0, 1]) < 0.05
    other = master_table(10_000, seed=2).column("sk").to_numpy()
    assert not np.array_equal(sk, other)


def test_descriptive_columns_look_like_product_data():
    table = master_table(5000, seed=0)
    lengths = pc.utf8_length(table.column("name")).to_numpy()
    assert 30 <= lengths.mean() <= 40
    assert table.column("name")[122].as_py().startswith("Product 000123 ")
    assert 15 <= len(pc.unique(table.column("category"))) <= 20
    assert 10 <= pc.mean(pc.utf8_length(table.column("category"))).as_py() <= 14
    price = table.column("price").to_numpy()
    assert (price > 0).all() and np.allclose(price, np.round(price, 2))
    assert (table.column("weight_kg").to_numpy() > 0).all()
    created = pc.strptime(table.column("created"), format="%Y-%m-%d", unit="s")  # ISO dates
    assert created.null_count == 0


def test_master_table_is_reproducible_by_seed():
    assert master_table(1000, seed=5).equals(master_table(1000, seed=5))
    assert not master_table(1000, seed=5).equals(master_table(1000, seed=6))


def test_two_million_rows_generate_in_seconds():
    started = time.perf_counter()
    table = master_table(2_000_000, key_type="str")
    seconds = time.perf_counter() - started
    assert table.num_rows == 2_000_000
    assert seconds < 15, f"2M master rows took {seconds:.1f} s (vectorised: about 1 s)"


# --------------------------------------------------------------------------------- loading


def _rows(connection, table):
    cursor = connection.cursor()
    cursor.execute(f"SELECT * FROM {table} ORDER BY nk")
    rows = [tuple(r) for r in cursor.fetchall()]
    cursor.close()
    return rows


def _scalar(connection, sql):
    cursor = connection.cursor()
    cursor.execute(sql)
    value = cursor.fetchone()[0]
    cursor.close()
    return value


def _round_trip(url, table, key_type):
    first = generate_master(url, table, 3000, key_type=key_type, seed=4)
    assert first["reused"] is False
    assert {k: first[k] for k in ("table", "n_rows", "key_type", "seed")} == {
        "table": table, "n_rows": 3000, "key_type": key_type, "seed": 4
    }
    assert first["seconds"] >= 0

    connection = DatabaseURL.parse(url).connect()
    try:
        expected = [tuple(r.values()) for r in master_table(3000, key_type=key_type, seed=4).to_pylist()]
        assert _rows(connection, table) == expected  # ORDER BY nk is R's key order too
        cursor = connection.cursor()
        cursor.execute(
            f"SELECT n_rows, key_type, seed, created_at FROM {DATASETS_TABLE} WHERE table_name = "
            + ("?" if url.startswith("sqlite") else "%s"),
            (table,),
        )
        assert tuple(cursor.fetchone()) == (3000, key_type, 4, first["created_at"])
        cursor.close()

        # reuse: a matching record and row count leave the table alone (the tampered row stays)
        cursor = connection.cursor()
        cursor.execute(f"UPDATE {table} SET name = 'tampered' WHERE sk = 1")
        cursor.close()
        connection.commit()
        again = generate_master(url, table, 3000, key_type=key_type, seed=4)
        assert again["reused"] is True and again["created_at"] == first["created_at"]
        assert _scalar(connection, f"SELECT COUNT(*) FROM {table} WHERE name = 'tampered'") == 1

        # another seed, or reuse=False, rewrites it
        third = generate_master(url, table, 3000, key_type=key_type, seed=5)
        assert third["reused"] is False
        assert _scalar(connection, f"SELECT COUNT(*) FROM {table} WHERE name = 'tampered'") == 0
        assert generate_master(url, table, 3000, key_type=key_type, seed=5, reuse=False)["reused"] is False

        # a table that lost rows is not reused, even though its record matches
        cursor = connection.cursor()
        cursor.execute(f"DELETE FROM {table} WHERE sk <= 10")
        cursor.close()
        connection.commit()
        fourth = generate_master(url, table, 3000, key_type=key_type, seed=5)
        assert fourth["reused"] is False
        assert _scalar(connection, f"SELECT COUNT(*) FROM {table}") == 3000
    finally:
        connection.close()


@pytest.mark.parametrize("key_type", ["int", "str"])
def test_generate_master_round_trip_and_reuse_on_sqlite(tmp_path, key_type):
    _round_trip(f"sqlite:///{tmp_path / 'r.db'}", "master", key_type)


def test_generate_master_accepts_an_open_connection_and_leaves_it_open(tmp_path):
    connection = sqlite3.connect(tmp_path / "c.db")  # default isolation level: implicit transactions
    result = generate_master(connection, "products", 500, seed=1)
    assert result["reused"] is False
    assert generate_master(connection, "products", 500, seed=1)["reused"] is True
    assert _scalar(connection, "SELECT COUNT(*) FROM products") == 500  # still open
    connection.close()


def test_generate_master_rejects_bad_names_before_touching_the_database(tmp_path):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    with pytest.raises(ConfigError, match=r"^table: 'drop table' is not a valid identifier"):
        generate_master(url, "drop table", 10)
    with pytest.raises(ConfigError, match=r"^table: 'semijoin_datasets' is the bookkeeping table"):
        generate_master(url, "semijoin_datasets", 10)
    with pytest.raises(ConfigError, match=r"^key_type: 'uuid' is not one of"):
        generate_master(url, "m", 10, key_type="uuid")
    assert not (tmp_path / "x.db").exists()


@pytest.mark.mysql
@pytest.mark.parametrize("key_type", ["int", "str"])
def test_generate_master_round_trip_and_reuse_on_mysql(key_type):
    # no skip: CI provides the server, and an unreachable one must fail this test
    table = f"wl_master_{uuid.uuid4().hex[:12]}"
    try:
        _round_trip(MYSQL_URL, table, key_type)
    finally:
        connection = DatabaseURL.parse(MYSQL_URL).connect()
        cursor = connection.cursor()
        cursor.execute(f"DROP TABLE IF EXISTS {table}")
        cursor.execute(f"DELETE FROM {DATASETS_TABLE} WHERE table_name = %s", (table,))
        cursor.close()
        connection.close()
