"""The minimal failing examples hypothesis found (issue 13), kept as plain tests. Each one
ended in a traceback or a 100 kB message before its fix."""

from __future__ import annotations

import copy

import pytest

from airflow_provider_semijoin.core.errors import ConfigError, SpecError
from airflow_provider_semijoin.core.joins import create
from airflow_provider_semijoin.core.units import parse_bytes
from airflow_provider_semijoin.pipeline.spec import load_pipeline
from airflow_provider_semijoin.job.spec import JobSpec

from .test_specs import JOB


def job(**changes) -> dict:
    data = copy.deepcopy(JOB)
    for path, value in changes.items():
        *parents, last = path.split("__")
        target = data
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[last] = value
    return data


# -- messages quote hostile values cut, on one line ------------------------------------------------
def test_a_huge_value_is_cut_in_the_message():
    with pytest.raises(SpecError, match=r"^name: 'a{20,}\.\.\.a+' is not a name of letters") as caught:
        JobSpec.from_dict(job(name="a" * 100_000))
    assert len(str(caught.value)) < 200


def test_a_hostile_key_in_a_field_path_is_quoted_and_cut():
    with pytest.raises(SpecError, match=r"^source\.'x\\ny': not a field of SourceSpec") as caught:
        JobSpec.from_dict(job(source__extra_keys={}, **{"source__x\ny": 1}))
    assert "\n" not in str(caught.value)
    with pytest.raises(SpecError, match=r"^steps\[0\]\.rename\.'a{20,}\.\.\.a+': 1 is not a valid identifier") as caught:
        JobSpec.from_dict(job(steps__0__rename={"a" * 100_000: 1}))
    assert len(str(caught.value)) < 300


def test_unknown_fields_of_mixed_types_are_named():
    with pytest.raises(SpecError, match=r"^source\.zz: not a field of SourceSpec"):
        data = job()
        data["source"].update({1: "x", "zz": 2})  # YAML reads `1: x` as an int key
        JobSpec.from_dict(data)  # sorted([1, 'zz']) raised TypeError


# -- wrong types where a spec expects a name or a mapping ----------------------------------------------
def test_an_algorithm_that_is_a_list():
    with pytest.raises(SpecError, match=r"^steps\[0\]\.algorithm: \['hybridjoin'\] is not one of \["):
        JobSpec.from_dict(job(steps__0__algorithm=["hybridjoin"]))  # TypeError: unhashable type


@pytest.mark.parametrize("field", ["source", "sinks", "stop", "deadline"])
def test_a_section_that_is_not_a_mapping(field):
    with pytest.raises(SpecError, match=rf"^{field}: \[1\] is not a mapping of the fields of "):
        JobSpec.from_dict(job(**{field: [1]}))  # AttributeError: 'list' object has no attribute 'kind'
    if field != "deadline":
        with pytest.raises(SpecError, match=rf"^{field}: None is not a mapping of the fields of "):
            JobSpec.from_dict(job(**{field: None}))


def test_a_master_that_is_not_a_mapping():
    with pytest.raises(SpecError, match=r"^steps\[1\]\.master: 'sqlite:///c\.db' is not a mapping of url, table"):
        JobSpec.from_dict(job(steps__1__master="sqlite:///c.db"))


# -- YAML files ------------------------------------------------------------------------------------
def test_yaml_with_a_control_character_is_one_line(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("\x1f")
    with pytest.raises(SpecError, match=r"p\.yaml: not valid YAML \(unacceptable character #x001f: .*\)$") as caught:
        load_pipeline(path)
    assert "\n" not in str(caught.value)


def test_yaml_that_is_not_utf8_or_not_there(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_bytes(b"dag_id: caf\xe9\n")
    with pytest.raises(SpecError, match=r"p\.yaml: not UTF-8 text \(byte 11\); expected a YAML file in UTF-8$"):
        load_pipeline(path)  # UnicodeDecodeError
    with pytest.raises(SpecError, match=r"nothere\.yaml: cannot read the pipeline spec \(No such file or directory\)$"):
        load_pipeline(tmp_path / "nothere.yaml")  # FileNotFoundError


# -- sizes and algorithm parameters at the edge of the number types ------------------------------
@pytest.mark.parametrize("text", ["9" * 400, "99999999999TB", 2**70, "0.5", 0])
def test_absurd_sizes_are_refused(text):
    with pytest.raises(ConfigError, match=r"^memory: .{1,80} is not a size \(expected e\.g\. 50MB, .*up to 1024TB\)$"):
        parse_bytes(text)  # OverflowError: cannot convert float infinity to integer; or 0 bytes accepted


def test_sizes_still_read():
    assert parse_bytes("50MB") == 50 * 2**20 and parse_bytes(1024) == 1024 and parse_bytes("1.5K") == 1536


@pytest.mark.parametrize("value, message", [
    (float("inf"), "inf is not a valid int"),  # OverflowError: cannot convert float infinity to integer
    (10**400, "1000.*000 is not a number between"),  # OverflowError: Python int too large to convert to SQLite INTEGER
    ("nan", "nan is not a number between"),  # accepted as NaN (a float parameter)
])
def test_an_infinite_parameter_is_refused(tmp_path, value, message):
    from airflow_provider_semijoin.core.stores import open_store
    from airflow_provider_semijoin.workloads import generate_master

    url = f"sqlite:///{tmp_path}/m.db"
    generate_master(url, "r", 100)
    with open_store(url, "r", "nk") as store:
        name, param = ("cachejoin", "skew") if value == "nan" else ("hybridjoin", "page_rows")
        with pytest.raises(ConfigError, match=rf"^{name}\.{param}: {message}"):
            create(name, store, 2**20, {param: value})


def test_a_sink_table_name_too_long_for_its_index():
    with pytest.raises(SpecError, match=r"^sinks\.matched\.table: 'a+\.\.\.a+' is too long for a sink table \(at most 58 characters"):
        JobSpec.from_dict(job(sinks__matched__table="a" * 59))  # ConfigError in the first micro-batch, from the index name
    JobSpec.from_dict(job(sinks__matched__table="a" * 58))


# -- credentials in reprs and in the source options that logs, XCom and the UI show ---------------
def test_reprs_of_specs_and_urls_hide_the_password():
    from airflow_provider_semijoin.core.stores import DatabaseURL

    data = job(sinks__matched__url="mysql://u:S3ntinel-r@h/db")
    spec = JobSpec.from_dict(data)
    assert "S3ntinel" in str(spec.to_dict())  # the driver's copy keeps it
    for text in (repr(spec), repr(spec.steps[0]), repr(spec.sinks), repr(DatabaseURL.parse("mysql://u:S3ntinel-r@h/db"))):
        assert "S3ntinel" not in text, text  # the dataclass reprs printed it


def test_secret_source_options_are_hidden_in_describe():
    data = job()
    data["source"] = {"kind": "spark", "format": "kafka", "id_column": "offset", "options": {
        "kafka.bootstrap.servers": "b:9092", "kafka.sasl.jaas.config": 'PlainLoginModule password="S3ntinel-o";',
        "kafka.ssl.key.password": "S3ntinel-o", "api_token": "S3ntinel-o", "jdbc": "mysql://u:S3ntinel-o@h/db"}}
    data["stop"] = {"max_batches": 1}
    spec = JobSpec.from_dict(data)
    shown = spec.describe()["source"]["options"]
    assert "S3ntinel" not in str(shown) + repr(spec.source), shown  # describe() went to the task log and XCom as given
    assert shown["kafka.bootstrap.servers"] == "b:9092" and shown["jdbc"] == "mysql://u:***@h/db"


# -- file names the file system refuses --------------------------------------------------------------
def test_cli_file_names_the_file_system_refuses(tmp_path, capsys):
    from airflow_provider_semijoin.cli import main

    long_name = "a" * 300
    for argv, message in [
        (["join", "--algorithm", "inlj", "--master", "sqlite:///m.db", "--table", "t", "--key", "k",
          "--stream", f"{long_name}.parquet", "--stream-key", "k", "--out", "o.parquet"],
         r"stream: 'a+\.\.\.a+\.parquet' is not a file name here \(File name too long\)"),  # OSError from exists()
        (["join", "--algorithm", "inlj", "--master", "sqlite:///m.db", "--table", "t", "--key", "k",
          "--stream", "s.parquet", "--stream-key", "k", "--out", "o.parquet", "--stats", "../nowhere/x/st.json"],
         r"stats: '\.\./nowhere/x/st\.json' is not a file in an existing folder"),  # FileNotFoundError after the join
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and __import__("re").search(message, err), err


def test_invalid_utf8_in_a_collected_batch_is_repaired():
    """Spark's JSON reader put a malformed line's raw bytes (0xff) into _corrupt_record: the
    micro-batch died in dead_letter_rows' to_pylist (UnicodeDecodeError), at every replay."""
    import pyarrow as pa

    from airflow_provider_semijoin.spark.sinks import dead_letter_rows
    from airflow_provider_semijoin.spark.sources import repair_utf8

    offsets = pa.py_buffer(b"\x00\x00\x00\x00\x02\x00\x00\x00\x04\x00\x00\x00")
    raw = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(b"ok\xff3")])
    batch = pa.table({"sj_id": ["a#0", "a#1"], "sj_arrival": [0.0, 0.0], "_corrupt_record": raw})
    with pytest.raises(UnicodeDecodeError):
        dead_letter_rows(batch, -1, "malformed_row")
    rows = dead_letter_rows(repair_utf8(batch), -1, "malformed_row")
    assert rows["row"].to_pylist() == ['{"_corrupt_record": "ok"}', '{"_corrupt_record": "\\ufffd3"}']


# -- identifiers ---------------------------------------------------------------------------------------
def test_an_identifier_with_a_final_newline_is_refused():
    from airflow_provider_semijoin.core.stores.sql import SQLITE, check_identifier

    for name in ("nk\n", "product\n"):
        with pytest.raises(ConfigError, match=r"is not a valid identifier"):
            check_identifier(name, "key")  # '$' matched before the final newline: accepted and quoted
        with pytest.raises(ConfigError, match=r"is not a valid identifier"):
            SQLITE.quote(name)
    with pytest.raises(SpecError, match=r"^name: 'job\\n' is not a name"):
        JobSpec.from_dict(job(name="job\n"))


def test_a_sink_table_that_exists_with_other_columns(tmp_path):
    import pyarrow as pa

    from airflow_provider_semijoin.spark.sinks import TableSink

    url = f"sqlite:///{tmp_path}/w.db"
    first = TableSink(url, "facts")
    first.write(0, pa.table({"sj_id": ["a"], "qty": [1]}))
    first.close()
    second = TableSink(url, "facts")
    with pytest.raises(ConfigError, match=r"^sinks: table 'facts' exists without the output column 'amount' \(its columns: "):
        second.write(1, pa.table({"sj_id": ["b"], "amount": [2.5]}))  # sqlite3.OperationalError: no column named amount
    second.close()


def test_a_sqlite_sink_table_named_like_sqlites_own():
    with pytest.raises(SpecError, match=r"^sinks\.matched\.table: 'sqlite_master' is reserved by SQLite"):
        JobSpec.from_dict(job(sinks__matched__table="sqlite_master"))  # sqlite3.OperationalError in the first batch
