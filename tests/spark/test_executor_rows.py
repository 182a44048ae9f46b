"""``partitions: N`` with ``data_path: executors`` (issue 54): the parts read each micro-batch's
files on the executors and write the sinks there; the driver never holds a row.

Real local Spark (``local[2]``: two Python workers), real SQLite dimensions, a landing folder of
Parquet files; every tuple leaves exactly once, as the oracle (:func:`..core.oracle.hash_join`)
says, through a killed driver (the whole process group, its JVM too) and killed Python workers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.oracle import hash_join
from airflow_provider_semijoin.core.stores import store_for
from airflow_provider_semijoin.job.spec import JobSpec, StepSpec
from airflow_provider_semijoin.spark import executor_rows
from airflow_provider_semijoin.spark.executor_rows import (BatchCall, PartsRun, Routes, batch_files, chosen_path, read_batch,
                                                           refusal, serve_parts)
from airflow_provider_semijoin.spark.joinstate import StateFiles
from airflow_provider_semijoin.spark.partitioned import RangePartitioner
from airflow_provider_semijoin.spark.runner import run_job
from airflow_provider_semijoin.spark.sinks import read_parquet_sink
from spark_jobs import killed_then_finished, pyspark_workers

FILES = 12  # more than Spark's compact interval (10): batch 9's files come from a .compact file of the source's log
FILE_ROWS = 600
ARRIVED_AT = 1.7e9  # the stream's own arrival column: this + tid seconds
SLICE_S = 0.005  # a part steps its join this long a batch while tuples wait: most stay inside, carried to the next


def int_keys(rng, n: int, keys: np.ndarray) -> pa.Array:
    """Mostly keys of R (a hot range), some in its gaps, below and above it, some null."""
    hot = keys[np.clip(len(keys) // 3 + rng.integers(-20, 20, n), 0, len(keys) - 1)]
    values = np.where(rng.random(n) < 0.6, hot, keys[rng.integers(0, len(keys), n)])
    odd = np.stack([rng.integers(-10**6, int(keys[0]), n), rng.integers(int(keys[-1]) + 1, 2**62, n), values + 1])
    values = np.where(rng.random(n) < 0.1, odd[rng.integers(0, 3, n), np.arange(n)], values)
    return pa.array(values, pa.int64(), mask=rng.random(n) < 0.03)


def str_keys(rng, n: int, keys: list[str]) -> pa.Array:
    """Keys of R, unknown ones, one longer than any key of R, one with a NUL byte, empty and null."""
    strange = ["P-x", "A-1", "P-" + "9" * 40, "P-\x001", "", "zzz"]
    return pa.array([keys[i] if r > 0.15 else (None if r < 0.03 else strange[i % len(strange)])
                     for i, r in zip(rng.integers(0, len(keys), n), rng.random(n))], pa.string())


def landing(tmp_path: Path, backend, kind: str, seed: int = 1) -> tuple[str, pa.Table]:
    """R (gappy integer keys, or string keys) and a landing folder of :data:`FILES` files; R's
    table and the whole stream in file order."""
    rng = np.random.default_rng(seed)
    if kind == "int":
        keys = np.sort(1000 + np.cumsum(rng.integers(2, 9, 20_000)))
        r = pa.table({"nk": pa.array(keys, pa.int64()), "sk": pa.array(np.arange(len(keys)), pa.int64())})
    else:
        keys = sorted({f"P-{d:0{rng.integers(3, 7)}d}" for d in rng.integers(0, 10**6, 20_000)})
        r = pa.table({"nk": pa.array(keys, pa.string()), "sk": pa.array(np.arange(len(keys)), pa.int64())})
    table = backend.make_master(r, "nk").table
    folder = tmp_path / "landing"
    folder.mkdir()
    files = []
    for i in range(FILES):
        nk = int_keys(rng, FILE_ROWS, keys) if kind == "int" else str_keys(rng, FILE_ROWS, keys)
        tid = np.arange(FILE_ROWS) + i * FILE_ROWS
        files.append(pa.table({"tid": pa.array(tid, pa.int64()), "nk": nk, "arrived": pa.array(ARRIVED_AT + tid, pa.float64())}))
        pq.write_table(files[-1], folder / f"f{i:02d}.parquet")
    return table, pa.concat_tables(files)


def job(tmp_path: Path, url: str, table: str, algorithm: str, parts: int, **extra) -> JobSpec:
    return JobSpec.from_dict({
        "source": {"kind": "files", "path": str(tmp_path / "landing"), "format": "parquet", "max_files_per_trigger": 1},
        "steps": [{"column": "nk", "master": {"url": url, "table": table, "key": "nk"},  # (every column of R)
                   "algorithm": algorithm, "memory": "1M", "master_static": True, "rename": {"sk": "nk_sk"},
                   "max_queue_time_s": None}],
        "sinks": {"matched": {"path": str(tmp_path / "matched")}, "dead_letter": {"path": str(tmp_path / "dead")}},
        "checkpoint": str(tmp_path / "checkpoint"), "stop": {"end_of_input": True}, "trigger_interval_s": SLICE_S / 0.5,
        "partitions": parts, "data_path": "executors", **extra,
    })


def check_exactly_once(backend, table: str, stream: pa.Table, spec: JobSpec) -> None:
    """Each tuple (``tid``) left once: matched with R's row of its key, or to the dead letter with
    the oracle's reason; ``sj_id`` names its file and row."""
    matched, dead = read_parquet_sink(spec.sinks.matched.path), read_parquet_sink(spec.sinks.dead_letter.path)
    expected_rows, expected_dead = hash_join(store_for(backend.connection, table, "nk"), stream, "nk")
    tids = stream["tid"].to_pylist()
    assert Counter(zip(matched["tid"].to_pylist(), matched["nk_sk"].to_pylist())) == Counter(
        (tids[i], row[0]) for (i, row), n in expected_rows.items() for _ in range(n))
    got_dead = Counter((json.loads(row)["tid"], reason) for row, reason in zip(dead["row"].to_pylist(), dead["reason"].to_pylist()))
    assert got_dead == Counter((tids[i], reason) for (i, reason), n in expected_dead.items() for _ in range(n))
    ids = matched["sj_id"].to_pylist() + dead["sj_id"].to_pylist()
    assert sorted(ids) == sorted(f"f{t // FILE_ROWS:02d}.parquet#{t % FILE_ROWS}" for t in tids)


@pytest.mark.parametrize(("algorithm", "kind", "parts", "arrival_column"), [
    ("hybridjoin", "int", 2, None), ("meshjoin", "str", 2, None), ("ssij", "int", 2, "arrived"), ("cachejoin", "str", 3, None),
    ("hybridjoin-pq", "int", 4, None), ("inlj", "str", 1, "arrived")])
def test_every_tuple_leaves_once_with_the_rows_on_the_executors(tmp_path, sqlite_backend, spark, algorithm, kind, parts,
                                                               arrival_column):
    table, stream = landing(tmp_path, sqlite_backend, kind)
    spec = job(tmp_path, sqlite_backend.url, table, algorithm, parts, arrival_column=arrival_column)
    records = []
    summary = run_job(spec, spark=spark, on_progress=records.append)
    assert summary["stopped_by"] == "end_of_input" and summary["queue_tuples"] == 0
    assert summary["input_rows"] == stream.num_rows == summary["matched"] + summary["unmatched"]
    check_exactly_once(sqlite_backend, table, stream, spec)
    assert sum(r["part_rebuilds"] for r in records) == 0  # every part stayed where it was, on two workers
    assert (max(r["queue_tuples"] for r in records) > 0) == (algorithm != "inlj")  # carried across batches (INLJ: none)
    listed = [(name, modified) for b in range(len(records)) for name, modified in batch_files(spec.checkpoint, b)]
    assert sorted(Path(name).name for name, _ in listed) == [f"f{i:02d}.parquet" for i in range(FILES)]  # each once
    left = pa.concat_tables([read_parquet_sink(spec.sinks.matched.path).select(["tid", "sj_arrival"]),
                             read_parquet_sink(spec.sinks.dead_letter.path).select(["sj_arrival"]).append_column(
                                 "tid", pa.array([json.loads(r)["tid"] for r in read_parquet_sink(spec.sinks.dead_letter.path)["row"].to_pylist()]))
                             .select(["tid", "sj_arrival"])])
    modified = {Path(name).name: at for name, at in listed}
    arrived = {t: ARRIVED_AT + t if arrival_column else modified[f"f{t // FILE_ROWS:02d}.parquet"] for t in left["tid"].to_pylist()}
    assert dict(zip(left["tid"].to_pylist(), left["sj_arrival"].to_pylist())) == arrived  # the stream's column, or the file's time


def test_each_step_of_a_pipeline_on_the_executors_leaves_its_tuples_once(tmp_path, sqlite_backend, spark):
    """Two steps on the executors, each with dead letters of its own: ``nk`` (HYBRIDJOIN), then
    ``tid`` against the same R (MESHJOIN; the step's parts cut and route by their own key, the
    rows the first step's parts passed on read from their files); ``sj_id`` from ``id_column``."""
    table, stream = landing(tmp_path, sqlite_backend, "int")
    url = sqlite_backend.url
    spec = job(tmp_path, url, table, "hybridjoin", 2, source={
        "kind": "files", "path": str(tmp_path / "landing"), "format": "parquet", "max_files_per_trigger": 1, "id_column": "tid"},
        steps=[{"column": "nk", "master": {"url": url, "table": table, "key": "nk"}, "algorithm": "hybridjoin",
                "memory": "1M", "master_static": True, "rename": {"sk": "nk_sk"}, "max_queue_time_s": None},
               {"column": "tid", "master": {"url": url, "table": table, "key": "nk"}, "algorithm": "meshjoin",
                "memory": "1M", "master_static": True, "rename": {"sk": "tid_sk"}, "max_queue_time_s": None}])
    records = []
    summary = run_job(spec, spark=spark, on_progress=records.append)
    store = store_for(sqlite_backend.connection, table, "nk")
    first_matched, first_dead = hash_join(store, stream, "nk")
    tids = stream["tid"].to_pylist()
    first = {tids[i]: row[0] for (i, row) in first_matched}
    passed = stream.filter(pa.array([t in first for t in tids]))
    second_matched, second_dead = hash_join(store, passed, "tid")
    on = passed["tid"].to_pylist()
    matched, dead = read_parquet_sink(spec.sinks.matched.path), read_parquet_sink(spec.sinks.dead_letter.path)
    assert Counter(zip(matched["tid"].to_pylist(), matched["nk_sk"].to_pylist(), matched["tid_sk"].to_pylist())) == Counter(
        (on[i], first[on[i]], row[0]) for (i, row), n in second_matched.items() for _ in range(n))
    assert Counter(zip(map(int, dead["sj_id"].to_pylist()), dead["step"].to_pylist(), dead["reason"].to_pylist())) == Counter(
        [(tids[i], 0, reason) for (i, reason), n in first_dead.items() for _ in range(n)]
        + [(on[i], 1, reason) for (i, reason), n in second_dead.items() for _ in range(n)])
    assert {step for step in dead["step"].to_pylist()} == {0, 1} and matched.num_rows > 0
    assert summary["input_rows"] == stream.num_rows == summary["matched"] + summary["unmatched"] == sum(
        r["matched"] + r["unmatched"] for r in records)
    assert sum(r["part_rebuilds"] for r in records) == 0 and max(r["queue_tuples"] for r in records) > 0


def test_a_driver_killed_between_the_parts_sinks_and_their_state_leaves_each_tuple_once(tmp_path, sqlite_backend):
    """The driver and its JVM killed at batch 3's ``sinks`` point: every part has written its
    sinks of the batch, none its state after it (a rebuild reads batch 2's), and Spark has not
    committed it; the batch is replayed, its parts rebuilt from batch 2's state files. Then
    killed at the start of batch 6; a third driver ends the stream."""
    table, stream = landing(tmp_path, sqlite_backend, "int")
    spec = job(tmp_path, sqlite_backend.url, table, "hybridjoin", 2)
    state = tmp_path / "checkpoint" / "sj_state" / "parts"
    looked = []

    def at_sinks_of_batch_3(point: str) -> None:
        if point != "sinks:3":
            return
        ranges = json.loads((state / "executor_parts.json").read_text())["ranges"]
        owners = [part for part, key_range in enumerate(ranges) if key_range is not None]
        for part in owners:
            for sink in (spec.sinks.matched.path, spec.sinks.dead_letter.path):
                assert (Path(sink) / "batch=3" / f"part-{part}.parquet").exists()
            assert StateFiles(state, 10).read(part, 4)[0] == 2  # the newest state a rebuild reads: batch 2's
        assert not (tmp_path / "checkpoint" / "commits" / "3").exists()
        looked.extend(owners)

    killed_then_finished(spec, tmp_path, ("sinks:3", "batch:6"), on_killed=at_sinks_of_batch_3)
    assert looked == [0, 1]
    check_exactly_once(sqlite_backend, table, stream, spec)


def test_killed_python_workers_rebuild_their_parts_from_the_state_files(tmp_path, sqlite_backend, spark):
    """Every Python worker killed after batch 4 (they held the parts' sessions): the next batch's
    parts are rebuilt from the state files, counted, and each tuple still leaves once."""
    table, stream = landing(tmp_path, sqlite_backend, "int")
    spec = job(tmp_path, sqlite_backend.url, table, "cachejoin", 2)
    killed = []

    def at_point(point: str, batch_id: int) -> None:
        if point == "state" and batch_id == 4:
            killed.extend(pyspark_workers())
            for pid in killed:
                os.kill(pid, signal.SIGKILL)

    records = []
    run_job(spec, spark=spark, on_progress=records.append, at_point=at_point)
    assert killed
    assert records[5]["part_rebuilds"] == 2 and sum(r["part_rebuilds"] for r in records) == 2
    check_exactly_once(sqlite_backend, table, stream, spec)


def spec_with(tmp_path, **changes) -> JobSpec:
    data = job(tmp_path, "sqlite:///r.db", "r", "hybridjoin", 2).to_dict()
    for path, value in changes.items():
        where = data
        *parents, last = path.split("__")
        for name in parents:
            where = where[name] if not name.isdigit() else where[int(name)]
        where[last] = value
    return JobSpec.from_dict(data)


@pytest.mark.parametrize(("changes", "conf", "message"), [
    ({"source__format": "csv"}, {}, r"needs a files source of format parquet \(got files csv\)"),
    ({"steps__0__on_missing": "retry", "steps__0__retry_grace_s": 5}, {},
     r"steps\[0\]\.on_missing: not supported .* expected dead_letter or unknown_member"),
    ({"steps__0__on_missing": "inferred_member"}, {}, r"steps\[0\]\.on_missing: not supported"),
    ({"sinks__matched": {"kind": "table", "url": "sqlite:///o.db", "table": "o"}}, {}, r"sinks.matched: .* expected kind parquet"),
    ({}, {"spark.speculation": "true"}, r"spark.speculation: true runs two attempts of a part at once"),
])
def test_what_the_executors_path_does_not_do_yet_is_refused_in_one_sentence(tmp_path, changes, conf, message):
    refused = refusal(spec_with(tmp_path, **changes), conf)
    assert refused is not None and "\n" not in refused
    assert re.search(message, refused), refused
    assert refusal(spec_with(tmp_path), {"spark.speculation": "false"}) is None


@pytest.mark.parametrize(("data_path", "changes", "chosen", "why"), [
    ("auto", {}, "executors", r"data_path: auto: the 2 parts read each micro-batch's files"),
    ("auto", {"partitions": 1}, "driver", r"collected to the driver \(one part\)"),
    ("auto", {"source__format": "csv"}, "driver", r"collected to the driver \(the executors' path reads .* \(got files csv\)\)"),
    ("driver", {}, "driver", r"\(data_path: driver\)"),
    ("executors", {"partitions": 1}, "executors", r"the 1 parts read"),
])
def test_auto_takes_the_executors_where_the_job_allows_it_at_two_parts_or_more(tmp_path, data_path, changes, chosen, why):
    path, said = chosen_path(spec_with(tmp_path, data_path=data_path, **changes), {})
    assert path == chosen and re.search(why, said), said
    with pytest.raises(ConfigError, match=r"steps\[0\]\.as_of: not supported with data_path: 'executors' yet"):
        chosen_path(spec_with(tmp_path, data_path="executors", steps__0__as_of={"event_time": "t", "valid_from": "f", "valid_to": "u"}), {})


def test_an_arrival_column_in_nanoseconds_is_floored_to_its_microsecond(tmp_path):
    """Issue 66: a pandas-written file's arrival column (timestamp[ns]) as epoch seconds, floored to
    the microsecond as every instant here (:mod:`...core.micros`), where the batch died with
    ArrowInvalid ("would lose data")."""
    path = tmp_path / "f.parquet"
    arrived = pa.array([1_767_225_600_000_000_999, -1, None], pa.timestamp("ns", "UTC"))
    pq.write_table(pa.table({"tid": [1, 2, 3], "arrived": arrived}), path)
    rows = read_batch([(str(path), 5.0)], ["tid", "arrived"], arrival_column="arrived")
    assert rows["sj_arrival"].to_pylist() == [1_767_225_600.0, -1e-6, None]


def test_a_landing_file_in_another_unit_than_at_the_start_stops_the_executors_in_one_sentence(tmp_path, sqlite_backend,
                                                                                               spark):
    """Issue 66 on this path: a timestamp column the files at the job's start store in nanoseconds
    is read so; a file storing it in microseconds arriving later stops the job in one sentence
    before a part reads it (:func:`..spark.sources.check_units`), and none of its rows reaches
    the sinks."""
    table, stream = landing(tmp_path, sqlite_backend, "int")
    for path in (tmp_path / "landing").iterdir():
        path.unlink()
    at = pa.array(np.arange(stream.num_rows) * 1001, pa.int64())
    first = stream.slice(0, FILE_ROWS).append_column("at", at[:FILE_ROWS].cast(pa.timestamp("ns")))
    second = stream.slice(FILE_ROWS, FILE_ROWS).append_column("at", at[FILE_ROWS:2 * FILE_ROWS].cast(pa.timestamp("us")))
    pq.write_table(first, tmp_path / "landing" / "f00.parquet")
    spec = job(tmp_path, sqlite_backend.url, table, "hybridjoin", 2, stop={"stop_file": str(tmp_path / "stop")})
    records, failure = [], []
    runner = threading.Thread(target=lambda: failure.extend(_raised(run_job, spec, spark=spark, on_progress=records.append)))
    runner.start()
    try:
        for rows in (FILE_ROWS, 2 * FILE_ROWS):  # the first file's batch; then the second's, or the failure
            deadline = time.monotonic() + 300
            while sum(r["input_rows"] for r in records) < rows and runner.is_alive() and time.monotonic() < deadline:
                time.sleep(0.1)
            if rows == FILE_ROWS:
                pq.write_table(second, tmp_path / "landing" / ".f01.parquet")
                (tmp_path / "landing" / ".f01.parquet").rename(tmp_path / "landing" / "f01.parquet")
    finally:
        (tmp_path / "stop").touch()
        runner.join(300)
    assert len(failure) == 1 and isinstance(failure[0], ConfigError), failure
    assert re.fullmatch(r"source\.path: file 'f01\.parquet' stores column 'at' in microseconds, but this job reads it in "
                        r"nanoseconds, the unit it decided from the landing files present at its start; restart the job "
                        r"\(it decides anew from the files then present\) or write every landing file's 'at' in one unit",
                        str(failure[0]))
    left = read_parquet_sink(spec.sinks.matched.path)["tid"].to_pylist() + [
        json.loads(row)["tid"] for row in read_parquet_sink(spec.sinks.dead_letter.path)["row"].to_pylist()]
    assert set(left) <= set(first["tid"].to_pylist())


def _raised(call, *args, **kwargs) -> list[BaseException]:
    try:
        call(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - the test's thread asserts on it
        return [exc]
    return []


def test_a_refused_job_fails_before_its_query_starts(tmp_path, sqlite_backend, spark):
    table, _ = landing(tmp_path, sqlite_backend, "int")
    spec = job(tmp_path, sqlite_backend.url, table, "hybridjoin", 2, steps=[
        {"column": "nk", "master": {"url": sqlite_backend.url, "table": table, "key": "nk", "select": ["sk"]},
         "master_static": True},
        {"column": "sk", "master": {"url": sqlite_backend.url, "table": table, "key": "nk", "select": ["nk"]},
         "rename": {"nk": "nk2"}, "master_static": True, "on_missing": "retry", "retry_grace_s": 1}])
    with pytest.raises(ConfigError, match=r"steps\[1\]\.on_missing: not supported with data_path: 'executors' yet"):
        run_job(spec, spark=spark)
    assert not (tmp_path / "checkpoint").exists() and not (tmp_path / "matched").exists()
    spec = job(tmp_path, sqlite_backend.url, table, "hybridjoin", 2)
    run_job(spec, spark=spark)
    with pytest.raises(ConfigError, match=r"partitions: 3, but the checkpoint .* holds the state of 2 parts"):
        run_job(job(tmp_path, sqlite_backend.url, table, "hybridjoin", 3), spark=spark)


PROTOCOL_ALGORITHMS = ("hybridjoin", "cachejoin", "meshjoin", "ssij", "inlj")


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_the_parts_protocol_leaves_each_tuple_once_however_tasks_land_fail_or_restart(tmp_path_factory, sqlite_backend, data):
    """The parts' tasks (:func:`serve_parts`, as Spark runs them) in this process, over any placement
    of the tasks on three Python workers (each its own ``_HELD``), figures lost on the way back (the
    task failed after its join: the part is built again elsewhere) and a new driver (a restart: a new
    run, no token) replaying a batch, lost before or after it committed the parts' state: every
    tuple leaves once, matched iff its key is in R."""
    folder = tmp_path_factory.mktemp("protocol")
    algorithm = data.draw(st.sampled_from(PROTOCOL_ALGORITHMS), "algorithm")
    parts = data.draw(st.integers(1, 3), "parts")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), "seed"))
    backend = sqlite_backend  # (one database for every example: each makes an R of its own)
    keys = np.sort(rng.choice(np.arange(1, 40_000), 6000, replace=False))
    store = backend.make_master(pa.table({"nk": pa.array(keys, pa.int64()), "sk": pa.array(np.arange(len(keys)), pa.int64())}), "nk")
    step = StepSpec(column="nk", master={"url": backend.url, "table": store.table, "key": "nk"}, algorithm=algorithm,
                    memory="512K", master_static=True, max_queue_time_s=None)
    stream = [pa.table({"tid": pa.array(np.arange(b * 500, (b + 1) * 500), pa.int64()),
                        "nk": pa.array(rng.integers(-100, 40_100, 500), pa.int64(), mask=rng.random(500) < 0.03)})
              for b in range(4)]
    files = []
    for b, batch in enumerate(stream):
        pq.write_table(batch, folder / f"b{b}.parquet")
        files.append([((folder / f"b{b}.parquet").as_uri(), 1000.0 + b)])
    files.append([])  # the drain: no file
    partitioner = RangePartitioner(store, parts, 1000)
    partitioner.assign(stream[0]["nk"])
    routes = Routes(partitioner.key_ranges(), store.key_type)
    run = PartsRun("driver-0", step, routes, step.memory_bytes // parts, None, str(folder / "state"), 10,
                   str(folder / "matched"), str(folder / "dead"), None,
                   pa.schema([("sj_id", pa.string()), ("tid", pa.int64()), ("nk", pa.int64()), ("sj_arrival", pa.float64())]))
    owners = routes.owners.tolist()
    workers, tokens = {w: {} for w in "xyz"}, {}
    restarts = data.draw(st.sets(st.integers(0, len(files) - 1), max_size=2), "batches a new driver replays")

    def on(worker: str, call: BatchCall, build: bool, wanted=()) -> list[dict]:
        executor_rows._HELD = workers[worker]  # the module globals of that worker's process
        return [json.loads(f) for f in serve_parts(run, call, build, wanted)]

    try:
        batch_id = 0
        while batch_id < len(files):
            until = data.draw(st.sampled_from([-np.inf, time.time() + 0.01]), f"batch {batch_id}: slice until")
            call = BatchCall(batch_id, files[batch_id], 0, None, -np.inf, until, batch_id == len(files) - 1, dict(tokens))
            landed = data.draw(st.lists(st.sampled_from("xyz"), min_size=1, max_size=3), f"batch {batch_id}: tasks land on")
            figures = [f for w in landed for f in on(w, call, build=False)]
            lost = data.draw(st.sets(st.sampled_from(range(len(figures))), max_size=len(figures)) if figures else st.just(set()),
                             f"batch {batch_id}: figures lost")
            taken = [f for i, f in enumerate(figures) if i not in lost]
            for part in sorted(set(owners) - {f["part"] for f in taken}):
                taken += on(data.draw(st.sampled_from("xyz"), f"batch {batch_id}: part {part} built on"), call, True, [part])
            assert sorted(f["part"] for f in taken) == owners
            if batch_id in restarts:  # the driver is lost before Spark commits: a new one, with no token, replays it
                restarts.discard(batch_id)
                if data.draw(st.booleans(), f"batch {batch_id}: the lost driver committed the parts' state"):
                    run.commit_state(batch_id)
                run, tokens = dataclasses.replace(run, name=f"driver-{batch_id}-again"), {}
                continue
            run.commit_state(batch_id)  # (the driver's, after the sinks)
            tokens = {f["part"]: f["token"] for f in taken}
            batch_id += 1
        assert sum(f["carried"] for f in taken) == 0  # the drain emptied every part
    finally:
        for held in workers.values():
            for _, session, _ in held.values():
                session.algorithm.store.close()
        executor_rows._HELD = {}
    matched, dead = read_parquet_sink(str(folder / "matched")), read_parquet_sink(str(folder / "dead"))
    whole = pa.concat_tables(stream)
    assert sorted(matched["tid"].to_pylist() + [json.loads(r)["tid"] for r in dead["row"].to_pylist()]) == list(range(whole.num_rows))
    in_r = set(keys.tolist())
    assert sorted(matched["tid"].to_pylist()) == [t for t, k in zip(whole["tid"].to_pylist(), whole["nk"].to_pylist()) if k in in_r]


def test_the_parts_see_each_commit_of_another_connection_from_the_next_batch_on(tmp_path, sqlite_backend, spark):
    """Master data changed by anyone (``change_capture: triggers``) on the executors' path: a file,
    its micro-batch, a commit of another connection (updates, a delete, inserts inside and beyond
    R's range), the next file, ... Every tuple is due at once (it arrived long ago), so it leaves
    in the batch that took its file, and that batch started after the commit before the file: its
    tuples join R as that commit left it, in every part - updated values, deleted keys unmatched,
    inserted keys matched."""
    keys = list(range(10, 4010, 4))
    store = sqlite_backend.make_master(pa.table({"nk": pa.array(keys, pa.int64()), "sk": pa.array([10 * k for k in keys], pa.int64())}), "nk")
    q, t = sqlite_backend.quote, sqlite_backend.quote(store.table)
    commits = [[f"UPDATE {t} SET {q('sk')} = -{q('sk')} WHERE {q('nk')} IN (10, 14, 2006, 4006)"],
               [f"DELETE FROM {t} WHERE {q('nk')} IN (18, 2010, 4002)"],
               [f"INSERT INTO {t} ({q('nk')}, {q('sk')}) VALUES (2, 20), (2011, 20110), (5000, 50000)"]]
    probe = [2, 10, 14, 18, 22, 2006, 2010, 2011, 2014, 4002, 4006, 5000]  # every file: each change and neighbours
    (tmp_path / "landing").mkdir()
    spec = job(tmp_path, sqlite_backend.url, store.table, "hybridjoin", 2, arrival_column="arrived", stop={"stop_file": str(tmp_path / "stop")})
    data = spec.to_dict()
    data["steps"][0].update(master_static=False, change_capture="triggers", max_queue_time_s=1.0)
    spec = JobSpec.from_dict(data)
    records, written = [], []
    done = threading.Event()
    thread = threading.Thread(target=lambda: (run_job(spec, spark=spark, on_progress=records.append), done.set()), daemon=True)
    thread.start()
    try:
        for j in range(len(commits) + 1):
            if j:  # another connection's transaction
                for sql in commits[j - 1]:
                    sqlite_backend.execute(sql)
                sqlite_backend.connection.commit()
            rows = pa.table({"tid": pa.array(np.arange(len(probe) * 20) + j * 1000, pa.int64()),
                             "nk": pa.array(probe * 20, pa.int64()), "arrived": pa.array(np.full(len(probe) * 20, 1.0))})
            pq.write_table(rows, tmp_path / "landing" / f"_f{j}.parquet")
            os.replace(tmp_path / "landing" / f"_f{j}.parquet", tmp_path / "landing" / f"f{j}.parquet")
            written.append(dict(sqlite_backend.execute(f"SELECT {q('nk')}, {q('sk')} FROM {t}")))  # R as the file's batch must see it
            deadline = time.time() + 120
            while sum(r["input_rows"] for r in records) < rows.num_rows * (j + 1) and time.time() < deadline:
                time.sleep(0.05)
        (tmp_path / "stop").touch()
        assert done.wait(120)
    finally:
        (tmp_path / "stop").touch()
        thread.join(120)
    matched, dead = read_parquet_sink(spec.sinks.matched.path), read_parquet_sink(spec.sinks.dead_letter.path)
    got = {t: ("matched", v) for t, v in zip(matched["tid"].to_pylist(), matched["nk_sk"].to_pylist())}
    got.update({json.loads(r)["tid"]: ("dead", reason) for r, reason in zip(dead["row"].to_pylist(), dead["reason"].to_pylist())})
    expected = {j * 1000 + i: ("matched", written[j][k]) if k in written[j] else ("dead", "not_in_master")
                for j in range(len(written)) for i, k in enumerate(probe * 20)}
    assert len(got) == matched.num_rows + dead.num_rows == len(expected)  # each once
    assert got == expected
    assert len({r["master_versions"][0] for r in records if r["input_rows"]}) == len(commits) + 1  # a version a file


def test_the_data_paths_bench_runs_its_one_and_two_step_jobs_on_the_executors(tmp_path):
    """``bench.data_paths --steps 1|2`` measures this path: neither job is refused (``auto`` would
    then measure the driver twice), and the pipeline's first step gives the unknown member."""
    from airflow_provider_semijoin.bench.data_paths import job_steps

    step = StepSpec(column="nk", master={"url": "sqlite:///r.db", "table": "r", "key": "nk"}, algorithm="hybridjoin",
                    memory="8M", master_static=True)
    specs = [spec_with(tmp_path, steps=job_steps(step, "r", count)) for count in (1, 2)]
    assert [refusal(spec, {}) for spec in specs] == [None, None]
    assert [len(spec.steps) for spec in specs] == [1, 2] and specs[1].steps[0].on_missing == "unknown_member"
