"""Key normalisation: every stream value becomes a key of R's type or leaves with a reason."""

import math
import re

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.core.keys import KeyType, distinct_keys, normalize, sorted_distinct
from airflow_provider_semijoin.core.oracle import _oracle_key
from airflow_provider_semijoin.core.reasons import Unmatched

INT = KeyType("int")
MIN, MAX = -(2**63), 2**63 - 1
LABEL = {0: None, **{r.value: r.label for r in Unmatched}}


def outcome(values, key_type: KeyType) -> list:
    """Each value's key (Python int / bytes) or its reason label."""
    n = normalize(values, key_type)
    return [LABEL[int(r)] if r else k for k, r in zip(n.keys.tolist(), n.reason.tolist())]


def model(value, key_type: KeyType):
    """The rules, written once more in plain Python."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "null_key"
    if key_type.kind == "int":
        if isinstance(value, bool):
            return "bad_key"
        if isinstance(value, float):
            value = int(value) if value.is_integer() else None
        elif isinstance(value, str):
            text = value.strip()
            value = int(text) if re.fullmatch(r"[+-]?[0-9]+", text, re.ASCII) else None
        elif not isinstance(value, int):
            value = None
        return value if value is not None and MIN <= value <= MAX else "bad_key"
    if not isinstance(value, str) or "\x00" in value:
        return "bad_key"
    raw = value.encode("utf-8")
    return raw if len(raw) <= key_type.width else "not_in_master"


# ------------------------------------------------------------------------------- int R


@pytest.mark.parametrize(
    "values, type, expected",
    [
        ([1, None, -5, MAX, MIN], pa.int64(), [1, "null_key", -5, MAX, MIN]),
        ([1, 200], pa.uint8(), [1, 200]),
        ([2**64 - 1, 2**63, 2**63 - 1], pa.uint64(), ["bad_key", "bad_key", MAX]),
        ([3.0, 2.5, float("nan"), None, float("inf"), float("-inf"), -0.0], pa.float64(),
         [3, "bad_key", "null_key", "null_key", "bad_key", "bad_key", 0]),
        ([2.0**63, -(2.0**63), 1e30], pa.float64(), ["bad_key", MIN, "bad_key"]),
        ([7.0, 7.5], pa.float32(), [7, "bad_key"]),
        (["12", " 7 ", "x", "1.5", "", "+3", "-0", None, "\t20\n", "0x10", "1e3", "1_000", "٣", "007"], pa.string(),
         [12, 7, "bad_key", "bad_key", "bad_key", 3, 0, "null_key", 20, "bad_key", "bad_key", "bad_key", "bad_key", 7]),
        (["9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
          "99999999999999999999"], pa.string(),
         [MAX, "bad_key", MIN, "bad_key", "bad_key"]),
        (["42", None], pa.large_string(), [42, "null_key"]),
        ([True, False, None], pa.bool_(), ["bad_key", "bad_key", "null_key"]),
        ([b"1"], pa.binary(), ["bad_key"]),
        ([None, None], pa.null(), ["null_key", "null_key"]),
        ([1], pa.decimal128(5, 0), ["bad_key"]),
    ],
    ids=["int64", "uint8", "uint64", "float64", "float-range", "float32", "strings", "string-range",
         "large_string", "bool", "binary", "null", "decimal"],
)
def test_int_master(values, type, expected):
    assert outcome(pa.array(values, type=type), INT) == expected


def test_chunked_columns_and_empty_columns():
    assert outcome(pa.chunked_array([[1, None], [], ["x"][:0], [3]], pa.int64()), INT) == [1, "null_key", 3]
    assert outcome(pa.chunked_array([], pa.int64()), INT) == []
    assert outcome(pa.array([], pa.string()), KeyType("str", 3)) == []
    n = normalize(pa.array([1, 2]), INT)
    assert n.keys.dtype == np.int64 and n.reason.dtype == np.int8 and n.valid.tolist() == [True, True]


@pytest.mark.parametrize("key_type", [INT, KeyType("str", 6)], ids=["int", "str"])
@pytest.mark.parametrize("arrow_type", [pa.dictionary(pa.int32(), pa.string()), pa.string_view()],
                         ids=["dictionary", "string_view"])
def test_string_like_columns_are_strings(key_type, arrow_type):
    """A dictionary-encoded column (pandas categorical, Parquet) and a string_view column
    (Polars) hold strings: they must normalise like a plain string column."""
    values = ["12", None, "x", "12"]
    column = pa.array(values, pa.string()).cast(arrow_type)
    assert outcome(column, key_type) == outcome(pa.array(values, pa.string()), key_type)


# ------------------------------------------------------------------------------- str R


def test_string_master():
    key_type = KeyType("str", 8)
    values = ["P-000123", "Ü-17", "東京-3", "😀-9", "P-0001234", "", "a\x00", None, "P-00012 ", "東京-3東"]
    assert outcome(pa.array(values), key_type) == [
        b"P-000123", "Ü-17".encode(), "東京-3".encode(), "😀-9".encode(), "not_in_master", b"",
        "bad_key", "null_key", b"P-00012 ", "not_in_master",
    ]
    assert normalize(pa.array(values), key_type).keys.dtype == np.dtype("S8")


@pytest.mark.parametrize(
    "values, type",
    [([1, 2], pa.int64()), ([1.0], pa.float64()), ([True], pa.bool_()), ([b"ab"], pa.binary())],
    ids=["ints", "floats", "bools", "binary"],
)
def test_string_master_refuses_other_types(values, type):
    assert outcome(pa.array(values, type), KeyType("str", 4)) == ["bad_key"] * len(values)


def test_key_type_validation():
    with pytest.raises(ValueError, match=r"key kind: 'float' is not one of"):
        KeyType("float")
    with pytest.raises(ValueError, match=r"key width: 0 must be at least 1"):
        KeyType("str", 0)
    assert KeyType("str", 5).dtype == np.dtype("S5") and KeyType("int").itemsize == 8
    keys = KeyType("str", 4).from_db(["ab", b"cd", "é"])
    assert keys.tolist() == [b"ab", b"cd", "é".encode()]
    assert KeyType("str", 4).to_db(keys) == ["ab", "cd", "é"]


# ------------------------------------------------------------------------------- properties

integer_texts = st.builds(
    lambda pre, sign, digits, post: pre + sign + digits + post,
    st.text(st.sampled_from(" \t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u2003\u3000"), max_size=2),
    st.sampled_from(["", "+", "-", "--"]),
    st.text(st.sampled_from("0123456789٣x."), max_size=21),
    st.text(st.sampled_from(" \t\n\u2028"), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(values=st.one_of(
    st.lists(st.one_of(st.none(), st.integers(MIN, MAX)), max_size=20).map(lambda v: pa.array(v, pa.int64())),
    st.lists(st.one_of(st.none(), st.floats(), st.integers(-(2**70), 2**70).map(float)), max_size=20)
    .map(lambda v: pa.array(v, pa.float64())),
    st.lists(st.one_of(st.none(), integer_texts, st.text(max_size=5)), max_size=20)
    .map(lambda v: pa.array(v, pa.string())),
))
def test_int_normalisation_follows_the_rules(values):
    assert outcome(values, INT) == [model(v, INT) for v in values.to_pylist()]


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.text(max_size=6)), max_size=20), width=st.integers(1, 12))
def test_str_normalisation_follows_the_rules(values, width):
    key_type = KeyType("str", width)
    assert outcome(pa.array(values, pa.string()), key_type) == [model(v, key_type) for v in values]


@settings(max_examples=300, deadline=None)
@given(value=integer_texts)
def test_the_oracle_reads_integer_strings_like_the_engine(value):
    """The oracle decides from the values themselves; it must agree with the normaliser (and
    not crash: '\\x1c7' matches its regex, but int() rejects the \\x1c separator)."""
    engine = outcome(pa.array([value]), INT)[0]
    key, reason = _oracle_key(value, "int")
    assert (reason or key) == engine


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2**63, 2**63 - 1), max_size=60), st.integers(-2**63, 2**63 - 1),
       st.integers(1, 40), st.integers(0, 300))
def test_distinct_keys_are_what_np_unique_gives_dense_or_sparse(scattered, base, span, n):
    """Keys over a narrow span (marked in flags, near either end of int64) and scattered ones
    (sorted) come out as ``np.unique`` gives them, in R's key dtype."""
    rng = np.random.default_rng(abs(base) % 2**32)
    lo = min(max(base, -2**63), 2**63 - 1 - span)
    dense = lo + rng.integers(0, span + 1, n)
    for keys in (np.array(scattered, np.int64), dense.astype(np.int64), np.concatenate([dense, scattered]).astype(np.int64)):
        got = distinct_keys(keys)
        assert got.dtype == keys.dtype and np.array_equal(got, np.unique(keys))
    strings = np.array([b"b", b"a", b"b"], dtype="S2")
    assert distinct_keys(strings).tolist() == [b"a", b"b"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2**63, 2**63 - 1), max_size=80), st.integers(1, 30), st.sampled_from(["int64", "int32", "uint8"]))
def test_sorted_distinct_is_np_unique_of_integers_and_bytes(values, modulus, dtype):
    """Integers of any width (with repeats: folded onto ``modulus`` values) and byte strings come
    out as ``np.unique`` gives them, in their dtype; the input is not reordered."""
    for array in (np.array(values, np.int64), np.array([v % modulus for v in values], np.int64).astype(dtype)):
        before = array.copy()
        got = sorted_distinct(array)
        assert got.dtype == array.dtype and np.array_equal(got, np.unique(array))
        assert np.array_equal(array, before)
    strings = np.array([str(v % modulus).encode() for v in values], dtype="S3")
    assert np.array_equal(sorted_distinct(strings), np.unique(strings))


def test_sorted_distinct_leaves_floats_to_np_unique_so_nans_are_one_value():
    assert np.array_equal(sorted_distinct(np.array([np.nan, 1.0, np.nan])), np.array([1.0, np.nan]), equal_nan=True)
