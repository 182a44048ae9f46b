"""Issue 55 through the real Spark path: as-of lookups on a type-2 dimension, on SQLite (DATETIME
kept as ISO text) and MariaDB (DATETIME), at partitions 1 and 2.

One job per (backend, partitions): a landing folder of Parquet files (``tid``, ``nk``, a
TIMESTAMP ``sold_at`` in no order) -> one step per algorithm (every algorithm of the registry
at partitions 1, a few at 2), each looking ``nk`` up in the same R as of ``sold_at`` and adding
R's surrogate key under a name of its own (``on_missing: unknown_member``, so every tuple goes
through every step) -> Parquet sinks. R holds several versions per key, with gaps between them,
keys whose last version ended, keys with no version yet at some event times, and keys not in R.
While the job runs, after the first file's micro-batch, another connection commits a new version
of a key - INSERT the new row, UPDATE the old one's ``valid_to`` - in one transaction
(``change_capture: triggers``); the second file's tuples, written after the commit, must see it.

What holds: each step's column of the fact table equals, as a multiset of (tid, surrogate key),
the database's own ``LEFT JOIN ... ON s.nk = r.nk AND s.sold_at >= r.valid_from AND (s.sold_at <
r.valid_to OR r.valid_to IS NULL)`` over the same tuples at the end (the change splits a version
after every event time of the first file, so the first file's answer is the same before and after
it); every tuple is in the fact table once but those of a key R holds without an event time,
which are in the dead letter once, as ``null_event_time``.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_semijoin.core.joins import ALGORITHMS
from airflow_provider_semijoin.job.spec import JobSpec

from spark_jobs import landing_job
from airflow_provider_semijoin.spark.runner import run_job
from airflow_provider_semijoin.spark.sinks import read_parquet_sink

START = dt.datetime(2026, 1, 1)
SPLIT_AT = START + dt.timedelta(days=200)  # the version committed while running starts here
UNKNOWN = -1
SMALL = {"page_rows": 4, "partition_pages": 2}  # small pages: R's 40 keys are many pages
ALGORITHMS_AT = {1: sorted(ALGORITHMS), 2: ["cachejoin", "hybridjoin", "meshjoin", "ssij"]}
WAIT_S = 300.0


def out_column(name: str) -> str:
    return "sk_" + name.replace("-", "_")


def day(n: int) -> str:
    return (START + dt.timedelta(days=n)).strftime("%Y-%m-%d %H:%M:%S")


def versions(rng) -> list[tuple]:
    """(id, nk, sk, valid_from, valid_to) rows: keys 0..39 (even keys only: odd keys are not in R),
    1-4 versions each over days 0..150, a gap after some versions, the last one open or closed."""
    rows, sk = [], 1000
    for nk in range(0, 80, 2):
        start = int(rng.integers(0, 40))
        for v in range(int(rng.integers(1, 5))):
            end = start + int(rng.integers(5, 40))
            last = v == 3 or rng.random() < 0.3
            open_end = last and rng.random() < 0.6
            rows.append((len(rows) + 1, nk, sk, day(start), None if open_end else day(end)))
            sk += 1
            if last:
                break
            start = end + (int(rng.integers(1, 10)) if rng.random() < 0.4 else 0)  # a gap, or none
    return rows


def write_dimension(backend, rows) -> str:
    table = backend.table_name()
    q = backend.quote
    backend.execute(f"CREATE TABLE {q(table)} (id INTEGER PRIMARY KEY, nk BIGINT NOT NULL, sk BIGINT NOT NULL, "
                    "valid_from DATETIME NOT NULL, valid_to DATETIME NULL)")
    backend.execute(f"CREATE INDEX ix_{table}_nk_from ON {q(table)} (nk, valid_from)")
    mark = "%s" if backend.name == "mysql" else "?"
    cursor = backend.connection.cursor()
    cursor.executemany(f"INSERT INTO {q(table)} (id, nk, sk, valid_from, valid_to) VALUES ({', '.join([mark] * 5)})", rows)
    cursor.close()
    return table


def stream_file(rng, first_tid: int, n: int, days: tuple[int, int], nulls: int = 0) -> pa.Table:
    """Tuples of keys in and out of R, event times in no order within ``days``, ``nulls`` of them null."""
    seconds = rng.integers(days[0] * 86400, days[1] * 86400, n)
    times = [START + dt.timedelta(seconds=int(s)) for s in seconds]
    for i in rng.choice(n, nulls, replace=False) if nulls else []:
        times[i] = None
    return pa.table({"tid": pa.array(np.arange(first_tid, first_tid + n), pa.int64()),
                     "nk": pa.array(rng.integers(0, 84, n), pa.int64()),
                     "sold_at": pa.array(times, pa.timestamp("us", "UTC"))})


def job(tmp_path, url: str, table: str, partitions: int) -> JobSpec:
    steps = [{"column": "nk", "master": {"url": url, "table": table, "key": "nk", "select": ["sk"]}, "algorithm": name,
              "memory": "1M", "params": {p: v for p, v in SMALL.items() if p in ALGORITHMS[name].params},
              "on_missing": "unknown_member", "unknown_member": {out_column(name): UNKNOWN},
              "rename": {"sk": out_column(name)}, "max_queue_time_s": 2.0, "change_capture": "triggers",
              "as_of": {"event_time": "sold_at", "valid_from": "valid_from", "valid_to": "valid_to"}}
             for name in ALGORITHMS_AT[partitions]]
    # work_ahead off: a slice reads R as of its start, so the commit is seen by the next file's batch
    return landing_job(tmp_path, "tid BIGINT, nk BIGINT, sold_at TIMESTAMP", steps, partitions, work_ahead=False)


def databases_join(backend, table: str, tuples: pa.Table) -> Counter:
    """The database's own as-of join of ``tuples`` with R, as a multiset of (tid, sk or UNKNOWN)."""
    q = backend.quote
    stream = backend.table_name()
    backend.execute(f"CREATE TABLE {q(stream)} (tid BIGINT, nk BIGINT, sold_at DATETIME NULL)")
    mark = "%s" if backend.name == "mysql" else "?"
    cursor = backend.connection.cursor()
    cursor.executemany(f"INSERT INTO {q(stream)} VALUES ({mark}, {mark}, {mark})", [
        (r["tid"], r["nk"], r["sold_at"] and r["sold_at"].strftime("%Y-%m-%d %H:%M:%S")) for r in tuples.to_pylist()])
    cursor.close()
    rows = backend.execute(
        f"SELECT s.tid, r.sk FROM {q(stream)} s LEFT JOIN {q(table)} r ON s.nk = r.nk AND s.sold_at >= r.valid_from "
        "AND (s.sold_at < r.valid_to OR r.valid_to IS NULL)")
    return Counter((int(tid), UNKNOWN if sk is None else int(sk)) for tid, sk in rows)


@pytest.mark.parametrize("partitions", [1, 2])
def test_as_of_steps_equal_the_databases_join(spark, tmp_path, backend, partitions):
    rng = np.random.default_rng(55 + partitions)
    rows = versions(rng)
    table = write_dimension(backend, rows)
    # the key split while running: one whose open version starts before every event time of file 1
    split = next(r for r in rows if r[4] is None and r[3] < day(20))
    spec = job(tmp_path, backend.url, table, partitions)
    first = stream_file(rng, 0, 300, (0, 190), nulls=8)
    first = pa.concat_tables([first, pa.table({"tid": [300, 301], "nk": [split[1]] * 2, "sold_at": pa.array(
        [START + dt.timedelta(days=100), START + dt.timedelta(days=199)], pa.timestamp("us", "UTC"))})])
    second = stream_file(rng, 1000, 300, (0, 260))
    second = pa.concat_tables([second, pa.table({"tid": [1300, 1301], "nk": [split[1]] * 2, "sold_at": pa.array(
        [START + dt.timedelta(days=199), START + dt.timedelta(days=201)], pa.timestamp("us", "UTC"))})])
    records, summary, failure = [], {}, []

    def run():
        try:
            summary.update(run_job(spec, spark=spark, on_progress=records.append))
        except BaseException as exc:  # raised in the test's thread below
            failure.append(exc)

    landing = tmp_path / "landing"
    pq.write_table(first, landing / ".f0.parquet")
    (landing / ".f0.parquet").rename(landing / "f0.parquet")
    runner = threading.Thread(target=run)
    runner.start()
    try:
        wait_for(records, failure, lambda: sum(r["input_rows"] for r in records) >= first.num_rows)
        q, mark = backend.quote, "%s" if backend.name == "mysql" else "?"
        cursor = backend.connection.cursor()  # one transaction: the new version and the old one's end
        cursor.execute("BEGIN")
        cursor.execute(f"INSERT INTO {q(table)} (id, nk, sk, valid_from, valid_to) VALUES ({mark}, {mark}, {mark}, "
                       f"{mark}, NULL)", (10_000, split[1], 99_999, SPLIT_AT.strftime("%Y-%m-%d %H:%M:%S")))
        cursor.execute(f"UPDATE {q(table)} SET valid_to = {mark} WHERE id = {mark}",
                       (SPLIT_AT.strftime("%Y-%m-%d %H:%M:%S"), split[0]))
        cursor.execute("COMMIT")
        cursor.close()
        committed = len(records)
        wait_for(records, failure, lambda: len(records) > committed)  # a batch begun after the commit
        pq.write_table(second, landing / ".f1.parquet")
        (landing / ".f1.parquet").rename(landing / "f1.parquet")
        total = first.num_rows + second.num_rows
        wait_for(records, failure, lambda: sum(r["input_rows"] for r in records) >= total
                 and records[-1]["queue_tuples"] == 0)
    finally:
        (tmp_path / "stop").touch()
        runner.join(WAIT_S)
    assert not failure, failure
    assert summary["input_rows"] == total

    tuples = pa.concat_tables([first, second])
    # a null event time of a key R holds: the dead letter (a key R lacks: not_in_master, an unknown member)
    untimed = {r["tid"] for r in tuples.to_pylist() if r["sold_at"] is None and r["nk"] in {v[1] for v in rows}}
    expected = Counter({pair: n for pair, n in databases_join(backend, table, tuples).items() if pair[0] not in untimed})
    matched = read_parquet_sink(spec.sinks.matched.path)
    dead = read_parquet_sink(spec.sinks.dead_letter.path)
    assert Counter(int(t) for t in matched["tid"].to_pylist()) == Counter(  # each once
        t for t in tuples["tid"].to_pylist() if t not in untimed)
    assert untimed and sorted(json.loads(row)["tid"] for row in dead["row"].to_pylist()) == sorted(untimed)
    assert set(dead["reason"].to_pylist()) == {"null_event_time"}
    assert {(1300, split[2]), (1301, 99_999)} <= expected.keys()  # (the change is in the database's answer)
    assert (1301, split[2]) not in expected
    for name in ALGORITHMS_AT[partitions]:
        got = Counter(zip((int(t) for t in matched["tid"].to_pylist()), matched[out_column(name)].to_pylist()))
        assert got == expected, name
    assert "valid_from" not in matched.column_names and "valid_to" not in matched.column_names


def wait_for(records: list, failure: list, condition) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if failure:
            raise failure[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {WAIT_S} s; records: {records[-3:]}")
        time.sleep(0.1)


@pytest.mark.parametrize("columns, schema, message", [
    ("valid_from DATETIME", "tid BIGINT, nk BIGINT, sold_at TIMESTAMP",
     r"steps\[0\]\.as_of\.valid_to: column 'valid_to' is not in table '\w+' \(columns: \['id', 'nk', 'sk', "
     r"'valid_from'\]\); expected the column that ends a version$"),
    ("valid_from BLOB, valid_to DATETIME", "tid BIGINT, nk BIGINT, sold_at TIMESTAMP",
     r"steps\[0\]\.as_of\.valid_from: column 'valid_from' of '\w+' is binary; expected a DATETIME/TIMESTAMP/DATE "
     r"or an epoch number$"),
    ("valid_from DATETIME, valid_to DATETIME", "tid BIGINT, nk BIGINT",
     r"steps\[0\]\.as_of\.event_time: 'sold_at' is not a column of the stream \(columns: \['nk', 'tid'\]\)$"),
])
def test_a_table_or_stream_without_what_the_lookup_needs_fails_before_the_query(tmp_path, sqlite_backend, columns,
                                                                                  schema, message):
    """One sentence at job start, before Spark is asked for anything (no session here)."""
    from airflow_provider_semijoin.core.errors import ConfigError
    from airflow_provider_semijoin.spark.runner import check_job

    table = sqlite_backend.table_name()
    sqlite_backend.execute(f'CREATE TABLE "{table}" (id INTEGER PRIMARY KEY, nk BIGINT, sk BIGINT, {columns})')
    sqlite_backend.execute(f'CREATE INDEX "ix_{table}" ON "{table}" (nk)')
    spec = job(tmp_path, sqlite_backend.url, table, 1)
    spec.source.schema = schema
    with pytest.raises(ConfigError, match=rf"^{message}"):
        check_job(spec)
