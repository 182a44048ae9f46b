"""Issue 55: as-of lookups on a type-2 dimension, on SQLite (DATETIME kept as ISO text) and
MariaDB (DATETIME), at partitions 1 and 2 - through the real Spark path (every algorithm of the
registry at partitions 1, a few at 2), and for every algorithm at both through the
``foreachBatch`` body with the parts' code in this process (no Spark job).

One job per (backend, partitions): a landing folder of Parquet files (``tid``, ``nk``, a
TIMESTAMP ``sold_at`` in no order) -> one step per algorithm, each looking ``nk`` up in the same R as of ``sold_at`` and adding
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
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.joins import ALGORITHMS
from airflow_provider_semijoin.job.sources import FilesSource
from airflow_provider_semijoin.job.spec import JobSpec, StopSpec

from spark_jobs import Clock, close_parts_held_here, landing_job
from type2_tables import BEFORE_1970, START, UNKNOWN, databases_join, day, near_bounds, stream_file, versions, write_dimension
from airflow_provider_semijoin.spark.runner import BatchProcessor, run_job
from airflow_provider_semijoin.spark.sinks import read_parquet_sink
from airflow_provider_semijoin.spark.sources import check_units, file_schema

SPLIT_AT = START + dt.timedelta(days=200)  # the version committed while running starts here
SMALL = {"page_rows": 4, "partition_pages": 2}  # small pages: R's 40 keys are many pages
ALGORITHMS_AT = {1: sorted(ALGORITHMS), 2: ["cachejoin", "hybridjoin", "meshjoin", "ssij"]}
WAIT_S = 300.0


def out_column(name: str) -> str:
    return "sk_" + name.replace("-", "_")


def job(tmp_path, url: str, table: str, names: list[str], partitions: int) -> JobSpec:
    steps = [{"column": "nk", "master": {"url": url, "table": table, "key": "nk", "select": ["sk"]}, "algorithm": name,
              "memory": "1M", "params": {p: v for p, v in SMALL.items() if p in ALGORITHMS[name].params},
              "on_missing": "unknown_member", "unknown_member": {out_column(name): UNKNOWN},
              "rename": {"sk": out_column(name)}, "max_queue_time_s": 2.0, "change_capture": "triggers",
              "as_of": {"event_time": "sold_at", "valid_from": "valid_from", "valid_to": "valid_to"}}
             for name in names]
    # work_ahead off: a slice reads R as of its start, so the commit is seen by the next file's batch
    return landing_job(tmp_path, "tid BIGINT, nk BIGINT, sold_at TIMESTAMP", steps, partitions, work_ahead=False)


def scenario(rng, rows: list[tuple]) -> tuple[tuple, pa.Table, pa.Table]:
    """The key split while running (one whose open version starts before every event time of the
    first file) and the two files: the first before the commit, the second after it, each with
    two tuples of that key around the split."""
    split = next(r for r in rows if r[4] is None and r[3] < day(20))

    def around(first_tid: int, days: tuple[int, int]) -> pa.Table:
        return pa.table({"tid": [first_tid, first_tid + 1], "nk": [split[1]] * 2, "sold_at": pa.array(
            [START + dt.timedelta(days=d) for d in days], pa.timestamp("us", "UTC"))})

    first = pa.concat_tables([stream_file(rng, 0, 300, (0, 190), nulls=8), around(300, (100, 199))])
    second = pa.concat_tables([stream_file(rng, 1000, 300, (0, 260)), around(1300, (199, 201))])
    return split, first, second


def commit_new_version(backend, table: str, split: tuple) -> None:
    """Another connection's one transaction: the split key's new version and the old one's end."""
    q, mark = backend.quote, "%s" if backend.name == "mysql" else "?"
    cursor = backend.connection.cursor()
    cursor.execute("BEGIN")
    cursor.execute(f"INSERT INTO {q(table)} (id, nk, sk, valid_from, valid_to) VALUES ({mark}, {mark}, {mark}, "
                   f"{mark}, NULL)", (10_000, split[1], 99_999, SPLIT_AT.strftime("%Y-%m-%d %H:%M:%S")))
    cursor.execute(f"UPDATE {q(table)} SET valid_to = {mark} WHERE id = {mark}",
                   (SPLIT_AT.strftime("%Y-%m-%d %H:%M:%S"), split[0]))
    cursor.execute("COMMIT")
    cursor.close()


def assert_each_step_equals_the_databases_join(backend, table: str, rows: list[tuple], split: tuple, spec: JobSpec,
                                               tuples: pa.Table, names: list[str]) -> None:
    """Each step's column of the fact table, as a multiset of (tid, sk), is the database's own
    as-of join; each tuple is in the fact table once, or (a null event time of a key R holds) in
    the dead letter once."""
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
    for name in names:
        got = Counter(zip((int(t) for t in matched["tid"].to_pylist()), matched[out_column(name)].to_pylist()))
        assert got == expected, name
    assert "valid_from" not in matched.column_names and "valid_to" not in matched.column_names


@pytest.mark.parametrize("partitions", [1, 2])
def test_as_of_steps_equal_the_databases_join(spark, tmp_path, backend, partitions):
    rng = np.random.default_rng(55 + partitions)
    rows = versions(rng)
    table = write_dimension(backend, rows)
    spec = job(tmp_path, backend.url, table, ALGORITHMS_AT[partitions], partitions)
    split, first, second = scenario(rng, rows)
    summary = run_with_a_commit_between(spark, tmp_path, spec, first, second,
                                        lambda: commit_new_version(backend, table, split))
    total = first.num_rows + second.num_rows
    assert summary["input_rows"] == total
    assert_each_step_equals_the_databases_join(backend, table, rows, split, spec, pa.concat_tables([first, second]),
                                               ALGORITHMS_AT[partitions])


@pytest.mark.parametrize("schema", [None, "tid BIGINT, nk BIGINT, sold_at TIMESTAMP"])
def test_a_landing_folder_of_nanosecond_parquet_joins_as_of(spark, tmp_path, sqlite_backend, schema):
    """Issue 66: pandas' Parquet, its event time stored as TIMESTAMP(NANOS) (which Spark refuses:
    "Illegal Parquet type: INT64 (TIMESTAMP(NANOS,false))"), the schema inferred from it or given:
    each tuple, 1-999 ns either side of a version bound, gets the version the database comparing
    every digit gives."""
    rows = versions(np.random.default_rng(66)) + [BEFORE_1970]  # (a floor is not a truncation towards zero)
    table = write_dimension(sqlite_backend, rows)
    spec = job(tmp_path, sqlite_backend.url, table, ["hybridjoin"], 1)
    spec.source.schema, spec.stop = schema, StopSpec(end_of_input=True)
    stream = near_bounds(rows)
    pq.write_table(stream, tmp_path / "landing" / "f0.parquet")
    assert run_job(spec, spark=spark)["input_rows"] == stream.num_rows
    matched = read_parquet_sink(spec.sinks.matched.path)
    got = Counter(zip((int(t) for t in matched["tid"].to_pylist()), matched[out_column("hybridjoin")].to_pylist()))
    assert got == databases_join(sqlite_backend, table, stream)


def test_a_column_in_nanoseconds_in_one_landing_file_only_is_refused_before_the_query(tmp_path):
    """Spark reads a column in one unit: one sentence, before Spark is asked for anything."""
    for name, unit in (("a.parquet", "ns"), ("b.parquet", "us")):
        pq.write_table(pa.table({"tid": [1], "sold_at": pa.array([0], pa.timestamp(unit))}), tmp_path / name)
    source = FilesSource(path=str(tmp_path), format="parquet", schema="tid BIGINT, sold_at TIMESTAMP")
    with pytest.raises(ConfigError, match=r"^source\.path: column 'sold_at' is stored in nanoseconds in 'a\.parquet' but "
                                          r"not in 'b\.parquet'; Spark reads a column in one unit, so expected every "
                                          r"landing file to store it alike$"):
        file_schema(None, source)


@pytest.mark.parametrize("units", [("ns", "us"), ("us", "ns")])
def test_a_landing_file_in_another_unit_than_at_the_start_stops_the_job_in_one_sentence(spark, tmp_path,
                                                                                          sqlite_backend, units):
    """The unit of a timestamp column is decided from the landing files present at the job's start
    (:func:`..spark.sources.file_schema`). A file in microseconds arriving at a job that reads
    nanoseconds was read as a long of microseconds floored as nanoseconds, 1000x off, silently; a
    file in nanoseconds arriving at a job that reads microseconds (as one started on an empty
    folder does) killed it with Spark's trace ("PARQUET_COLUMN_DATA_TYPE_MISMATCH ... Expected
    Spark type timestamp, actual Parquet type INT64"). Either stops the job in one sentence
    before Spark reads the file, and none of its rows reaches the sinks."""
    rows = versions(np.random.default_rng(67))
    table = write_dimension(sqlite_backend, rows)
    spec = job(tmp_path, sqlite_backend.url, table, ["hybridjoin"], 1)

    def in_unit(stream: pa.Table, unit: str) -> pa.Table:
        times = stream["sold_at"] if unit == "ns" else pc.floor_temporal(stream["sold_at"], unit="microsecond")
        return stream.set_column(2, "sold_at", times.cast(pa.timestamp(unit)))

    stream = near_bounds(rows)
    first = in_unit(stream, units[0])
    second = in_unit(stream.set_column(0, "tid", pc.add(stream["tid"], 100_000)), units[1])
    reads, stores = ({"ns": "nanoseconds", "us": "microseconds"}[unit] for unit in units)
    with pytest.raises(ConfigError, match=rf"^source\.path: file 'f1\.parquet' stores column 'sold_at' in {stores}, but "
                                          rf"this job reads it in {reads}, the unit it decided from the landing files "
                                          r"present at its start; restart the job \(it decides anew from the files then "
                                          r"present\) or write every landing file's 'sold_at' in one unit$"):
        run_with_a_commit_between(spark, tmp_path, spec, first, second, lambda: None)
    matched = read_parquet_sink(spec.sinks.matched.path)
    got = Counter(zip((int(t) for t in matched["tid"].to_pylist()), matched[out_column("hybridjoin")].to_pylist()))
    assert got and got <= databases_join(sqlite_backend, table, first)  # the first file's rows only, right


def test_each_batch_file_is_checked_against_the_unit_decided_at_the_start(tmp_path):
    """:func:`..spark.sources.check_units` on Spark's URIs, from the footers alone (both data paths
    call it before the batch's files are read): a job reading nanoseconds takes only nanoseconds
    (microseconds, milliseconds, INT96 would be read as a long of another unit); one reading
    microseconds takes any unit Spark reads as a timestamp but nanoseconds; a file without the
    column, or that is no Parquet, is left to Spark."""
    def written(name: str, unit: str | None, **options) -> str:
        column = {} if unit is None else {"sold_at": pa.array([0], pa.timestamp(unit))}
        pq.write_table(pa.table({"tid": [1], **column}), tmp_path / name, **options)
        return (tmp_path / name).as_uri()

    ns, us, ms, int96, without = (written("ns.parquet", "ns"), written("us.parquet", "us"), written("ms.parquet", "ms"),
                                  written("int96.parquet", "ns", use_deprecated_int96_timestamps=True),
                                  written("without.parquet", None))
    (tmp_path / "bad.parquet").write_text("not parquet")
    bad = (tmp_path / "bad.parquet").as_uri()
    check_units([ns, without, bad], {"sold_at": "nanoseconds"})
    check_units([us, ms, int96, without, bad], {"sold_at": "microseconds"})
    check_units([ns, us], {})  # (no Parquet timestamp column: nothing read)
    for uri, held in ((us, "in microseconds"), (ms, "in milliseconds"), (int96, "as INT96 \\(no time unit\\)")):
        with pytest.raises(ConfigError, match=rf"^source\.path: file '{uri.rsplit('/', 1)[1]}' stores column 'sold_at' "
                                              rf"{held}, but this job reads it in nanoseconds, "):
            check_units([ns, uri], {"tid": "microseconds", "sold_at": "nanoseconds"})
    with pytest.raises(ConfigError, match=r"^source\.path: file 'ns\.parquet' stores column 'sold_at' in nanoseconds, "
                                          r"but this job reads it in microseconds, "):
        check_units([us, ns], {"sold_at": "microseconds"})


def run_with_a_commit_between(spark, tmp_path, spec, first: pa.Table, second: pa.Table, commit) -> dict:
    """Run ``spec`` on its landing folder: ``first`` as a file, ``commit()`` once its micro-batch
    is done, ``second`` once a micro-batch begun after the commit is done, then stop when all is
    out; the job's summary."""
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
        commit()
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
    return summary


@pytest.mark.parametrize("partitions", [1, 2])
def test_every_algorithm_as_of_equals_the_databases_join_with_the_parts_in_process(tmp_path, backend, partitions):
    """The same job with one step per algorithm of the registry, at partitions 1 and 2, driven
    through the ``foreachBatch`` body with the parts' code in this process
    (``BatchProcessor(spec, None, ...)``, as ``test_parts_exact``: at partitions 2 each part's
    :func:`..spark.partitioned.join_parts` over the rows its task would get). The first file is
    a micro-batch, the new version is committed (the cache steps still hold tuples of the first),
    then the second file is one, then the steps drain."""
    rng = np.random.default_rng(550 + partitions)
    rows = versions(rng)
    table = write_dimension(backend, rows)
    names = sorted(ALGORITHMS)
    spec = job(tmp_path, backend.url, table, names, partitions)
    spec.source.id_column = "tid"  # (the runner's ids of a landing file's rows need Spark's file column)
    split, first, second = scenario(rng, rows)
    clock = Clock()
    processor = BatchProcessor(spec, None, False, clock)
    assert all((s.partitioned is not None) == (partitions > 1) for s in processor.steps)
    try:
        for batch_id, batch in enumerate([first, second]):
            processor.process(batch.append_column("sj_arrival", pa.array([clock.now] * batch.num_rows)), batch_id)
            if batch_id == 0:
                assert any(s.carried.count for s in processor.steps)  # tuples inside the join at the commit
                commit_new_version(backend, table, split)
            clock.now += 1.0
        processor.request_drain("end_of_input")
        processor.process(first.slice(0, 0).append_column("sj_arrival", pa.array([], pa.float64())), 2)
        assert processor.drained == "end_of_input"
        assert all(s.carried.count == 0 for s in processor.steps)
    finally:
        processor.close()
        close_parts_held_here()
    assert_each_step_equals_the_databases_join(backend, table, rows, split, spec, pa.concat_tables([first, second]),
                                               names)


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
    spec = job(tmp_path, sqlite_backend.url, table, ["hybridjoin"], 1)
    spec.source.schema = schema
    with pytest.raises(ConfigError, match=rf"^{message}"):
        check_job(spec)
