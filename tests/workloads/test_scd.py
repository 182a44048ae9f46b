"""workloads.scd: the type-2 dimension - consecutive versions per key, one open, surrogate keys unique."""

import sqlite3

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.workloads.scd import generate_versioned_master, versioned_table

FROM_S, TO_S = 1_767_225_600.0, 1_767_225_650.0  # the 50 s of a stream's event times


def micros(column) -> list:
    return pa.array(column, pa.string()).cast(pa.timestamp("us")).cast(pa.int64()).to_pylist()


@settings(max_examples=25, deadline=None)
@given(n_rows=st.integers(1, 300), share=st.floats(0, 1), max_versions=st.integers(1, 4), seed=st.integers(0, 50))
def test_each_key_has_consecutive_versions_the_last_one_open(n_rows, share, max_versions, seed):
    rows = versioned_table(n_rows, share=share, max_versions=max_versions, changes_from=FROM_S, changes_to=TO_S, seed=seed)
    nk, sk = rows["nk"].to_pylist(), rows["sk"].to_pylist()
    valid_from, valid_to = micros(rows["valid_from"]), micros(rows["valid_to"])
    assert sorted(set(nk)) == [2 * i + 1 for i in range(n_rows)] and len(set(sk)) == len(sk) == rows.num_rows
    assert sorted(sk) == list(range(1, rows.num_rows + 1))
    for i in range(rows.num_rows):
        last = i + 1 == rows.num_rows or nk[i + 1] != nk[i]
        if last:
            assert valid_to[i] is None
        else:
            assert valid_to[i] == valid_from[i + 1] and valid_from[i] < valid_to[i]
            assert FROM_S * 1e6 <= valid_to[i] < TO_S * 1e6  # a later version starts within the span
        if i == 0 or nk[i - 1] != nk[i]:
            assert valid_from[i] < FROM_S * 1e6  # the first version: from the row's created date
    assert max(nk.count(k) for k in set(nk)) <= max_versions


def test_a_share_of_the_keys_has_later_versions():
    rows = versioned_table(5000, share=0.1, max_versions=3, changes_from=FROM_S, changes_to=TO_S, seed=3)
    assert 5650 < rows.num_rows < 5850  # 10% of the keys with 1 or 2 later versions: 750 expected
    assert rows["valid_to"].null_count == 5000  # one current version per key


def test_a_span_that_ends_before_it_starts_is_refused():
    with pytest.raises(ConfigError, match="changes_to: 10.0 is not a time after changes_from"):
        versioned_table(10, share=0.5, max_versions=2, changes_from=20.0, changes_to=10.0)


def test_the_table_is_written_with_an_index_on_the_key_and_its_versions_start(tmp_path):
    url = f"sqlite:///{tmp_path / 'w.db'}"
    written = generate_versioned_master(url, "dim_customer", 200, share=0.5, max_versions=3,
                                        changes_from=FROM_S, changes_to=TO_S, seed=1)
    connection = sqlite3.connect(tmp_path / "w.db")
    assert connection.execute('SELECT COUNT(*) FROM "dim_customer"').fetchone()[0] == written > 200
    assert [r[2] for r in connection.execute("PRAGMA index_info(dim_customer_nk_valid_from)")] == ["nk", "valid_from"]
    connection.close()
