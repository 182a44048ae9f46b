"""Issue 55 through the real Spark path: as-of lookups on a MariaDB system-versioned R
(``as_of: {event_time, system_time: true}``) at partitions 1 and 2.

One job per partitions: a landing folder of Parquet files (``tid``, ``nk``, a TIMESTAMP
``sold_at`` in no order) -> one step per algorithm, each looking ``nk`` up in R as of
``sold_at`` over R's system periods (the store reads it ``FOR SYSTEM_TIME ALL``) and adding R's
surrogate key under a name of its own (``on_missing: unknown_member``) -> Parquet sinks. R's
versions were made by real statements at controlled system times (``tests/system_versioned.py``:
several versions per key, deletes, a key back after a gap). While the job runs, after the first
file's micro-batch, another session UPDATEs a key at system time day 130 - after every event
time of the first file, so its answer is the same before and after - with ``change_capture:
triggers``; the second file's tuples of that key after day 130 must get the new version.

What holds: each step's column equals, as a multiset of (tid, surrogate key), the database's own
``JOIN r FOR SYSTEM_TIME ALL ON s.nk = r.nk AND s.sold_at >= r.ROW_START AND s.sold_at <
r.ROW_END`` at the end (no version valid, or a key never in R: the unknown member); a null event
time of a key R holds is in the dead letter once, as ``null_event_time``; the period columns are
not in the output.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_semijoin.core.joins import ALGORITHMS
from airflow_provider_semijoin.core.stores.system_time import PERIOD_NAMES
from airflow_provider_semijoin.spark.sinks import read_parquet_sink

from spark_jobs import landing_job
from system_versioned import START, at, expected, stream, versioned_dimension  # tests/ is on sys.path
from test_asof_spark import out_column, run_with_a_commit_between

pytestmark = pytest.mark.mysql

UNKNOWN = -1
SMALL = {"page_rows": 4, "partition_pages": 2}
ALGORITHMS_AT = {1: ["hybridjoin", "inlj", "ssij"], 2: ["cachejoin", "meshjoin"]}
CHANGED_AT = 130  # the day of the UPDATE committed while the job runs


def job(tmp_path, url: str, table: str, partitions: int):
    steps = [{"column": "nk", "master": {"url": url, "table": table, "key": "nk", "select": ["sk"]}, "algorithm": name,
              "memory": "1M", "params": {p: v for p, v in SMALL.items() if p in ALGORITHMS[name].params},
              "on_missing": "unknown_member", "unknown_member": {out_column(name): UNKNOWN},
              "rename": {"sk": out_column(name)}, "max_queue_time_s": 2.0, "change_capture": "triggers",
              "as_of": {"event_time": "sold_at", "system_time": True}}
             for name in ALGORITHMS_AT[partitions]]
    return landing_job(tmp_path, "tid BIGINT, nk BIGINT, sold_at TIMESTAMP", steps, partitions, work_ahead=False)


def later_tuples(first_tid: int, nk: int) -> pa.Table:
    """Tuples of ``nk`` just before and after the change, and long after it."""
    days = [CHANGED_AT - 1, CHANGED_AT + 1, CHANGED_AT + 30]
    return pa.table({"tid": pa.array(range(first_tid, first_tid + 3), pa.int64()), "nk": pa.array([nk] * 3, pa.int64()),
                     "sold_at": pa.array([START + dt.timedelta(days=d) for d in days], pa.timestamp("us", "UTC"))})


@pytest.mark.parametrize("partitions", [1, 2])
def test_system_time_steps_equal_the_databases_join(spark, tmp_path, mysql_backend, partitions):
    rng = np.random.default_rng(550 + partitions)
    table = versioned_dimension(mysql_backend, rng)
    spec = job(tmp_path, mysql_backend.url, table, partitions)
    first = stream(rng)  # event times before day 120
    changed = int(mysql_backend.execute(f"SELECT MIN(nk) FROM `{table}`")[0][0])  # a key R holds now
    second = pa.concat_tables([stream(rng).set_column(0, "tid", pa.array(range(1000, 1400), pa.int64())),
                               later_tuples(2000, changed)])
    summary = run_with_a_commit_between(spark, tmp_path, spec, first, second, lambda: at(
        mysql_backend, CHANGED_AT, f"UPDATE `{table}` SET sk = 99999 WHERE nk = %s", (changed,)))
    total = first.num_rows + second.num_rows
    assert summary["input_rows"] == total

    tuples = pa.concat_tables([first, second])
    answer = expected(mysql_backend, table, tuples)
    assert answer[2000] != 99999 and answer[2001] == answer[2002] == 99999  # the change is in the database's answer
    untimed = {t for t, a in answer.items() if a == "null_event_time"}
    want = Counter((t, a if isinstance(a, int) else UNKNOWN) for t, a in answer.items() if t not in untimed)
    matched = read_parquet_sink(spec.sinks.matched.path)
    dead = read_parquet_sink(spec.sinks.dead_letter.path)
    assert untimed and sorted(json.loads(row)["tid"] for row in dead["row"].to_pylist()) == sorted(untimed)
    assert set(dead["reason"].to_pylist()) == {"null_event_time"}
    for name in ALGORITHMS_AT[partitions]:
        got = Counter(zip((int(t) for t in matched["tid"].to_pylist()), matched[out_column(name)].to_pylist()))
        assert got == want, name
    assert not set(PERIOD_NAMES) & set(matched.column_names)


@pytest.mark.parametrize("as_of, message", [
    ({"event_time": "sold_at", "valid_from": "vf", "valid_to": "vt"},
     r"steps\[0\]\.as_of: table '\w+' is system-versioned \(period columns 'ROW_START', 'ROW_END'\); expected "
     r"system_time: true instead of valid_from/valid_to 'vf', 'vt', which would see its current rows only$"),
])
def test_a_declaration_that_does_not_fit_a_system_versioned_table_fails_before_the_query(tmp_path, mysql_backend,
                                                                                           as_of, message):
    """One sentence at job start, before Spark is asked for anything (no session here)."""
    from airflow_provider_semijoin.core.errors import ConfigError
    from airflow_provider_semijoin.spark.runner import check_job

    table = mysql_backend.table_name()
    mysql_backend.execute(f"CREATE TABLE `{table}` (id INT PRIMARY KEY, nk BIGINT, sk BIGINT, vf DATETIME, "
                          "vt DATETIME, KEY (nk)) WITH SYSTEM VERSIONING")
    spec = job(tmp_path, mysql_backend.url, table, 1)
    for step in spec.steps:
        step.as_of = type(step.as_of)(**as_of)
    with pytest.raises(ConfigError, match=rf"^{message}"):
        check_job(spec)


def test_system_time_on_a_plain_table_fails_before_the_query(tmp_path, mysql_backend):
    from airflow_provider_semijoin.core.errors import ConfigError
    from airflow_provider_semijoin.spark.runner import check_job

    table = mysql_backend.table_name()
    mysql_backend.execute(f"CREATE TABLE `{table}` (id INT PRIMARY KEY, nk BIGINT, sk BIGINT, KEY (nk))")
    with pytest.raises(ConfigError, match=rf"^steps\[0\]\.as_of\.system_time: table '{table}' is not system-versioned "
                                          r"\(its TABLE_TYPE is 'BASE TABLE'\); expected a table created WITH SYSTEM "
                                          r"VERSIONING$"):
        check_job(job(tmp_path, mysql_backend.url, table, 1))


def test_system_time_on_a_table_captured_from_the_binary_log_fails_before_the_query(tmp_path, binlog_backend):
    """The binary log's before-images hold a system-versioned R's current rows only: refused."""
    from airflow_provider_semijoin.core.errors import ConfigError
    from airflow_provider_semijoin.core.stores.binlog import BinlogCapture
    from airflow_provider_semijoin.spark.runner import check_job

    table = binlog_backend.table_name()
    binlog_backend.execute(f"CREATE TABLE `{table}` (nk BIGINT PRIMARY KEY, sk BIGINT) WITH SYSTEM VERSIONING")
    with BinlogCapture(binlog_backend.url, table, "nk") as capture:
        capture.enable()
    with pytest.raises(ConfigError, match=rf"^steps\[0\]\.as_of\.system_time: '{table}' has its changes captured from "
                                          r"the binary log, whose before-images of a system-versioned R lack its "
                                          r"history; expected triggers"):
        check_job(job(tmp_path, binlog_backend.url, table, 1))
