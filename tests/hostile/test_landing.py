"""Hostile files in the Spark landing folder (issue 13): invalid UTF-8 bytes, NaN/inf, int64
overflow, 1 MB strings, nested JSON, SQL-injection-shaped values, duplicate ids, with the schema
inferred from the files. Every record Spark reads leaves once - matched, or in the dead letter
with a reason - and the good rows among them are matched with the right master row. A column
name a table sink cannot hold fails before the query starts, naming the column."""

from __future__ import annotations

import json

import pyarrow.compute as pc
import pytest

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.spark.runner import run_job
from airflow_provider_semijoin.spark.sinks import read_parquet_sink
from airflow_provider_semijoin.job.spec import JobSpec
from airflow_provider_semijoin.workloads.master import master_table

from .tally import record

pytestmark = pytest.mark.slow

HOSTILE_KEYS = ["not-a-number", "9223372036854775808", "-9223372036854775809", "NaN", "inf", "3.5", "1e400", "",
                "' OR '1'='1", "1; DROP TABLE r; --", "x" * 1_000_000, '{"nk": 3}', "[3]", "\u00a03", "0x03"]
GOOD = {1: 3, 2: 7, 3: 99, 4: 3}  # id -> key of R (keys are 2i+1: 1, 3, ..., 199)


def landing_rows() -> list[tuple]:
    """(id, key text, note) rows: good ones (two share id 4: duplicate ids), then hostile ones."""
    rows = [(i, str(k), "good") for i, k in GOOD.items()] + [(4, "3", "duplicate id")]
    rows += [(100 + i, k, "hostile 'note'; DROP TABLE x") for i, k in enumerate(HOSTILE_KEYS)]
    return rows


def write_csv(folder) -> None:
    lines = ["id,nk,note"] + [f"{i},\"{k.replace(chr(34), chr(34) * 2)}\",{n}" for i, k, n in landing_rows()]
    body = "\n".join(lines).encode("utf-8")
    # invalid UTF-8 in a key, in a note, and a row with too many fields and a NaN id
    body += b"\n200,\xff\xfe3,bad bytes\n201,5,caf\xe9\n202,7,a,b,c\nNaN,9,x\n"
    (folder / "day1.csv").write_bytes(body)


def write_jsonl(folder) -> None:
    lines = [json.dumps({"id": i, "nk": k, "note": n}) for i, k, n in landing_rows()]
    lines += [json.dumps({"id": 300, "nk": {"nested": [1, 2]}, "note": "nested"}), json.dumps({"id": 301, "nk": 3.0}),
              json.dumps({"id": 302, "nk": 2**70}), '{"id": 303, "nk": NaN}', '{"id": 304, "nk": 5', "[1, 2]"]
    (folder / "day1.jsonl").write_bytes("\n".join(lines).encode("utf-8") + b'\n{"id": 307, "nk": "\xff3"}\n')


def landing_job(tmp_path, url: str, table: str, fmt: str, matched: dict | None = None) -> JobSpec:
    """The landing folder tmp_path/landing (schema inferred) -> hybridjoin on R -> sinks."""
    return JobSpec.from_dict({
        "source": {"kind": "files", "path": str(tmp_path / "landing"), "format": fmt},
        "steps": [{"column": "nk", "master_static": True, "master": {"url": url, "table": table, "key": "nk", "select": ["name"]},
                   "algorithm": "hybridjoin", "memory": "1M"}],
        "sinks": {"matched": matched or {"path": str(tmp_path / "matched")}, "dead_letter": {"path": str(tmp_path / "dead")}},
        "checkpoint": str(tmp_path / "checkpoint"), "stop": {"end_of_input": True}, "trigger_interval_s": 0.2,
    })


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_hostile_landing_files_leave_exactly_once(spark, tmp_path, sqlite_backend, fmt):
    store = sqlite_backend.make_master(master_table(100), select=["name"])
    landing = tmp_path / "landing"
    landing.mkdir()
    (write_csv if fmt == "csv" else write_jsonl)(landing)
    spec = landing_job(tmp_path, sqlite_backend.url, store.table, fmt)
    summary = run_job(spec, spark=spark)
    matched, dead = read_parquet_sink(spec.sinks.matched.path), read_parquet_sink(spec.sinks.dead_letter.path)

    ids = matched["sj_id"].to_pylist() + dead["sj_id"].to_pylist()
    assert len(ids) == len(set(ids)) == summary["input_rows"] > len(landing_rows())  # each record once
    assert set(dead["reason"].to_pylist()) <= {"malformed_row", "bad_key", "null_key", "not_in_master"}
    names = dict(zip(master_table(100)["nk"].to_pylist(), master_table(100)["name"].to_pylist()))
    for nk, name in zip(matched["nk"].to_pylist(), matched["name"].to_pylist()):
        assert name == names[int(float(nk))]
    good = {str(i) for i in GOOD}  # the id column may be inferred as text (a row's id is 'NaN')
    good_ids = sorted(str(i) for i in matched["id"].to_pylist() if str(i) in good)
    assert good_ids == ["1", "2", "3", "4", "4"]  # the duplicate id is a tuple of its own
    for reason in dead["reason"].to_pylist():
        record(f"landing folder ({fmt}, Spark)", reason)
    for _ in range(matched.num_rows):
        record(f"landing folder ({fmt}, Spark)")
    hostile = dead.filter(pc.match_substring(dead["row"], "DROP TABLE x"))
    assert hostile.num_rows >= len(HOSTILE_KEYS) - 2  # '3.5' is bad, '\xa03' may trim to 3: the rest are dead


def test_a_column_name_a_table_sink_cannot_hold_fails_before_the_query(spark, tmp_path, sqlite_backend):
    store = sqlite_backend.make_master(master_table(10), select=["name"])
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "a.csv").write_text("id,nk,`amount; DROP TABLE r`\n1,3,5\n")
    spec = landing_job(tmp_path, sqlite_backend.url, store.table, "csv",
                       {"kind": "table", "url": f"sqlite:///{tmp_path / 'w.db'}", "table": "facts"})
    with pytest.raises(ConfigError, match=r"^sinks\.matched: stream column '`amount; DROP TABLE r`' is not a valid identifier"):
        run_job(spec, spark=spark)
    assert not spark.streams.active
    assert not (tmp_path / "w.db").exists() or "DROP" not in (tmp_path / "w.db").read_bytes().decode("latin-1")


def test_a_schema_spark_cannot_infer_is_one_sentence(spark, tmp_path, sqlite_backend):
    """A JSON object with a key twice: Spark's inference raised AnalysisException [COLUMN_ALREADY_EXISTS]."""
    store = sqlite_backend.make_master(master_table(10), select=["name"])
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "a.jsonl").write_text('{"id": 1, "nk": 3}\n{"id": 305, "nk": "3", "id": 306}\n')
    spec = landing_job(tmp_path, sqlite_backend.url, store.table, "json")
    with pytest.raises(ConfigError, match=r"^source\.schema: missing, and it cannot be inferred from the files in .*"
                                          r"COLUMN_ALREADY_EXISTS.*; give a schema such as"):
        run_job(spec, spark=spark)
