"""core.files: format by suffix, round trips, and one-sentence errors naming the option."""

import datetime as dt
import json
import os

import pyarrow as pa
import pytest

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.files import read_table, write_private_json, write_table

TABLE = pa.table(
    {
        "tid": pa.array([0, 1, 2], pa.int64()),
        "nk": pa.array(["P-000000001", "", None]),
        "amount": pa.array([1.5, None, -2.25], pa.float64()),
    }
)


@pytest.mark.parametrize("name", ["s.parquet", "s.csv", "s.jsonl", "s.ndjson", "s.json", "S.PARQUET"])
def test_round_trip_keeps_values_and_types(tmp_path, name):
    path = tmp_path / name
    write_table(path, TABLE)
    back = read_table(str(path))
    assert back.column_names == TABLE.column_names
    assert back.schema == TABLE.schema
    assert back.to_pylist() == TABLE.to_pylist()


def test_empty_table_round_trips_in_parquet(tmp_path):
    path = tmp_path / "e.parquet"
    write_table(path, TABLE.slice(0, 0))
    assert read_table(path).num_rows == 0
    assert read_table(path).schema == TABLE.schema


def test_json_lines_are_one_object_per_line_and_dates_become_iso(tmp_path):
    path = tmp_path / "d.jsonl"
    write_table(path, pa.table({"d": pa.array([dt.date(2024, 1, 31)]), "x": [1]}))
    assert path.read_text().splitlines() == ['{"d": "2024-01-31", "x": 1}']


def test_schema_keeps_numeric_looking_codes_as_strings(tmp_path):
    path = tmp_path / "codes.csv"
    path.write_text("nk,qty\n000123,4\n000007,1\n")
    assert read_table(path).column("nk").to_pylist() == [123, 7]  # inferred: what schema= is for
    schema = pa.schema([("nk", pa.string()), ("qty", pa.int64())])
    back = read_table(path, schema=schema)
    assert back.schema == schema
    assert back.column("nk").to_pylist() == ["000123", "000007"]


def test_unknown_suffix_names_option_path_and_expected_suffixes(tmp_path):
    with pytest.raises(ConfigError, match=r"^stream: '.*y\.txt' has suffix '\.txt'; expected one of \.parquet, \.csv, \.jsonl"):
        read_table(tmp_path / "y.txt", what="stream")
    with pytest.raises(ConfigError, match=r"^out: '.*noext' has no suffix; expected one of"):
        write_table(tmp_path / "noext", TABLE, what="out")


def test_missing_file_names_option_and_path(tmp_path):
    with pytest.raises(ConfigError, match=r"^stream: '.*nope\.parquet' does not exist"):
        read_table(tmp_path / "nope.parquet", what="stream")


def test_folder_is_not_a_file(tmp_path):
    (tmp_path / "dir.csv").mkdir()
    with pytest.raises(ConfigError, match=r"^file: '.*dir\.csv' is not a file"):
        read_table(tmp_path / "dir.csv")
    with pytest.raises(ConfigError, match=r"^out: '.*dir\.csv' is a folder"):
        write_table(tmp_path / "dir.csv", TABLE, what="out")


def test_write_into_missing_folder_names_the_folder(tmp_path):
    with pytest.raises(ConfigError, match=r"^out: folder '.*missing' of '.*' does not exist"):
        write_table(tmp_path / "missing" / "x.parquet", TABLE, what="out")


@pytest.mark.parametrize(
    "name, content, fmt",
    [
        ("bad.parquet", b"this is not parquet at all", "Parquet"),
        ("bad.jsonl", b'{"a": 1}\n{"a": \n', "JSON lines"),
        ("bad.csv", b"a,b\n1,2\n3\n", "CSV"),
    ],
)
def test_corrupt_file_names_path_format_and_one_line_of_the_parser_message(tmp_path, name, content, fmt):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=rf"^stream: cannot read '.*{name}' as {fmt} \(.+\)$") as info:
        read_table(path, what="stream")
    assert "\n" not in str(info.value)


def test_nan_cannot_be_written_as_json_lines(tmp_path):
    with pytest.raises(ConfigError, match=r"^out: cannot write '.*x\.jsonl' as JSON lines \("):
        write_table(tmp_path / "x.jsonl", pa.table({"a": [float("nan")]}), what="out")


def test_private_json_is_whole_and_readable_by_its_owner_only(tmp_path):
    path = tmp_path / "summary.json"
    write_private_json(path, {"rows": 3})
    assert json.loads(path.read_text()) == {"rows": 3}
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_private_json_that_cannot_be_written_leaves_the_old_file_and_no_partial(tmp_path):
    path = tmp_path / "summary.json"
    write_private_json(path, {"rows": 3})
    with pytest.raises(TypeError, match="not JSON serializable"):
        write_private_json(path, {"rows": object()})
    assert json.loads(path.read_text()) == {"rows": 3}
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]
