"""A Redis stream as the join's source, with real Redis and real local Spark: exactly once against
the oracle (the tuples' ids are their entry ids), bad entries to the dead letter, a trimmed
stream said in one sentence, a killed driver, a restarted Redis (a private server) and a replayed
batch. Each test writes a stream of its own name on the shared server (127.0.0.1:6379)."""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
import redis
from redis_server import SHARED_URL, RedisServer
from spark_jobs import SELECT, killed_then_finished, write_master

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.oracle import engine_pairs, hash_join
from airflow_provider_semijoin.core.redis_stream import Connection, EntriesLost, Planner, read_task
from airflow_provider_semijoin.job.spec import JobSpec
from airflow_provider_semijoin.spark.runner import run_job
from airflow_provider_semijoin.spark.sinks import read_parquet_batch, read_parquet_sink
from airflow_provider_semijoin.workloads.redis_feed import fill
from airflow_provider_semijoin.workloads.stream import generator_rows

SCHEMA = "tid BIGINT, nk BIGINT, qty BIGINT, amount DOUBLE"


@pytest.fixture
def stream():
    """A stream name of this test's own on the shared server, deleted afterwards."""
    name = f"sj-test-{uuid.uuid4().hex[:12]}"
    client = redis.Redis.from_url(SHARED_URL)
    yield name
    client.delete(name)
    client.close()


def settings(total_rows: int, master_rows: int = 400, missing: float = 0.1, sold_at: bool = False) -> dict:
    """The generator's settings of the rows a test writes to its stream (``sold_at``: with an event time)."""
    timed = {"event_time": {"column": "sold_at", "start": "2026-01-01T00:00:00+00:00", "late": 0.0, "max_lateness_s": 10}}
    return {"total_rows": total_rows, "master_rows": master_rows, "key_type": "int", "exponent": 1.0, "shape": "noperm",
            "missing": missing, "seed": 1, "extra_keys": {}, "rows_per_second": 1000.0, **(timed if sold_at else {})}


def write_rows(url: str, stream: str, start: int, end: int, **kw) -> list[str]:
    """Rows ``start`` .. ``end - 1`` of the generator added to ``stream``; their entry ids."""
    client = redis.Redis.from_url(url)
    try:
        return [i.decode() for i in fill(client, stream, generator_rows(settings(end, **kw), start, end))]
    finally:
        client.close()


def redis_job(tmp_path, url: str, stream: str, master_url: str, table: str, *, total_rows: int, partitions: int = 1,
              max_rows: int = 500, **extra) -> JobSpec:
    return JobSpec.from_dict({
        "source": {"kind": "redis_stream", "url": url, "stream": stream, "schema": SCHEMA, "total_rows": total_rows,
                   "max_rows_per_batch": max_rows},
        "steps": [{"column": "nk", "master_static": True, "master": {"url": master_url, "table": table, "key": "nk",
                                                                      "select": SELECT},
                   "algorithm": "hybridjoin", "memory": "1M", "params": {"page_rows": 16}}],
        "sinks": {"matched": {"path": str(tmp_path / "matched")}, "dead_letter": {"path": str(tmp_path / "dead")}},
        "checkpoint": str(tmp_path / "checkpoint"),
        "stop": {"end_of_input": True},
        "trigger_interval_s": 0.2,
        "partitions": partitions,
        **extra,
    })


def assert_exactly_once(store, ids: list[str], total_rows: int, spec: JobSpec, **kw) -> None:
    """Every entry left once (its id the entry id), exactly as the oracle's hash join of the rows says."""
    matched, dead = read_parquet_sink(spec.sinks.matched.path), read_parquet_sink(spec.sinks.dead_letter.path)
    position = {entry: i for i, entry in enumerate(ids)}
    left = Counter(matched["sj_id"].to_pylist() + dead["sj_id"].to_pylist())
    assert set(left) == set(ids) and set(left.values()) == {1}  # no entry lost, none twice
    assert [position[i] for i in matched["sj_id"].to_pylist()] == matched["tid"].to_pylist()  # the id is the entry's
    expected = hash_join(store, generator_rows(settings(total_rows, **kw), 0, total_rows), "nk")
    unmatched = pa.table({"tid": [position[i] for i in dead["sj_id"].to_pylist()], "reason": dead["reason"]})
    assert engine_pairs(matched, unmatched, SELECT, "tid") == expected


@pytest.mark.parametrize("partitions", [1, 2])
def test_a_redis_stream_joins_exactly_once(spark, tmp_path, sqlite_backend, stream, partitions):
    """3,000 entries in micro-batches of at most 500 (the read limit), the first batch an empty
    warm-up; at two parts too. The ids are the entry ids, every entry leaves once."""
    store = write_master(sqlite_backend, 400)
    ids = write_rows(SHARED_URL, stream, 0, 3000)
    spec = redis_job(tmp_path, SHARED_URL, stream, sqlite_backend.url, store.table, total_rows=3000, partitions=partitions)
    records = []
    summary = run_job(spec, spark=spark, on_progress=records.append)
    assert (summary["stopped_by"], summary["input_rows"]) == ("end_of_input", 3000)
    assert records[0]["input_rows"] == 0 and max(r["input_rows"] for r in records) <= 500
    assert_exactly_once(store, ids, 3000, spec)


# what a producer may write, and where each entry goes (schema: SCHEMA + sold_at TIMESTAMP; R has odd keys)
BAD_ENTRIES = [
    ("well formed, key in R", {"tid": "0", "nk": "1", "qty": "2", "amount": "1.5", "sold_at": "2026-01-01T10:00:00Z"}, "matched"),
    ("well formed, key not in R", {"tid": "1", "nk": "2", "qty": "2", "amount": "1.5", "sold_at": "2026-01-01T10:00:00"}, "not_in_master"),
    ("fields in another order, one more field", {"note": "x", "sold_at": "2026-01-01 10:00:00+02:00", "amount": "-3e2",
                                                 "qty": "-7", "nk": "3", "tid": "2"}, "matched"),
    ("a field missing", {"tid": "3", "nk": "1", "amount": "1.5", "sold_at": "2026-01-01T10:00:00Z"}, "missing_field"),
    ("the key missing", {"tid": "4", "qty": "2", "amount": "1.5", "sold_at": "2026-01-01T10:00:00Z"}, "missing_field"),
    ("text in a BIGINT", {"tid": "5", "nk": "1", "qty": "two", "amount": "1.5", "sold_at": "2026-01-01T10:00:00Z"}, "bad_field"),
    ("an empty BIGINT", {"tid": "6", "nk": "1", "qty": "", "amount": "1.5", "sold_at": "2026-01-01T10:00:00Z"}, "bad_field"),
    ("a BIGINT out of range", {"tid": "7", "nk": "99999999999999999999", "qty": "2", "amount": "1.5",
                               "sold_at": "2026-01-01T10:00:00Z"}, "bad_field"),
    ("a decimal comma in a DOUBLE", {"tid": "8", "nk": "1", "qty": "2", "amount": "1,5", "sold_at": "2026-01-01T10:00:00Z"}, "bad_field"),
    ("bytes that are not UTF-8", {"tid": "9", "nk": b"\xff\xfe", "qty": "2", "amount": "1.5", "sold_at": "2026-01-01T10:00:00Z"}, "bad_field"),
    ("a 13th month", {"tid": "10", "nk": "1", "qty": "2", "amount": "1.5", "sold_at": "2026-13-01T10:00:00Z"}, "bad_field"),
    ("a time that is not ISO 8601", {"tid": "11", "nk": "1", "qty": "2", "amount": "1.5", "sold_at": "yesterday"}, "bad_field"),
    ("a field missing and another bad", {"tid": "12", "qty": "x", "amount": "1.5", "sold_at": "2026-01-01T10:00:00Z"}, "missing_field"),
]


def test_bad_entries_go_to_the_dead_letter_with_their_reason_and_the_stream_goes_on(spark, tmp_path, sqlite_backend, stream):
    """Each entry of BAD_ENTRIES, then 200 good ones: each bad entry is one dead letter with its
    reason and the entry as it came (its problem named), each good one is joined."""
    store = write_master(sqlite_backend, 400)
    client = redis.Redis.from_url(SHARED_URL)
    tried = [client.xadd(stream, fields).decode() for _, fields, _ in BAD_ENTRIES]
    client.close()
    good = write_rows(SHARED_URL, stream, 100, 300, missing=0.0, sold_at=True)
    data = redis_job(tmp_path, SHARED_URL, stream, sqlite_backend.url, store.table, total_rows=len(tried) + 200).to_dict()
    data["source"]["schema"] = SCHEMA + ", sold_at TIMESTAMP"
    spec = JobSpec.from_dict(data)
    run_job(spec, spark=spark)
    matched, dead = read_parquet_sink(spec.sinks.matched.path), read_parquet_sink(spec.sinks.dead_letter.path)
    went = {i: "matched" for i in matched["sj_id"].to_pylist()} | dict(zip(dead["sj_id"].to_pylist(), dead["reason"].to_pylist()))
    assert [(what, went.get(entry)) for (what, _, _), entry in zip(BAD_ENTRIES, tried)] == [(what, where) for what, _, where in BAD_ENTRIES]
    assert Counter(went.get(entry) for entry in good) == {"matched": 200}, Counter(went.get(entry) for entry in good)
    rows = {i: json.loads(row) for i, row in zip(dead["sj_id"].to_pylist(), dead["row"].to_pylist())}
    record = json.loads(rows[tried[5]]["_corrupt_record"])
    assert record == {"id": tried[5], "fields": BAD_ENTRIES[5][1], "problem": "qty: 'two' is not a BIGINT"}
    assert json.loads(rows[tried[3]]["_corrupt_record"])["problem"] == "qty: missing"
    assert dead.filter(pa.compute.equal(dead["reason"], "bad_field"))["step"].to_pylist() == [-1] * 7  # before any step


LOST = ("source.stream: entries of Redis stream '{stream}' after id {after}, which the job has not read yet, were "
        "deleted ({why}: trimmed by XTRIM/MAXLEN or XDEL); the job stops rather than skip them (keep the stream "
        "longer, or start a new checkpoint at start: latest)")


def test_entries_trimmed_before_the_job_read_them_are_said_in_one_sentence(stream):
    """Planned, then trimmed: planning again, planning a replay and reading each say which
    entries are gone; never a shorter batch."""
    ids = write_rows(SHARED_URL, stream, 0, 1000)
    connection = Connection(SHARED_URL, 5.0)
    planner = Planner(connection, stream, partition_rows=100, chunk=50)
    start = planner.latest({"id": "0-0", "row": 0, "base": None}, 300)
    end = planner.latest(start, 300)
    assert (end["row"], end["id"]) == (300, ids[299])
    tasks = planner.partitions(start, end)
    assert [sum(count for *_, count in task) for task in tasks] == [100, 100, 100]
    assert read_task(connection, stream, tasks[0], [("tid", "BIGINT")]).column("tid").to_pylist() == list(range(100))
    connection.client.xtrim(stream, minid=ids[150], approximate=False)  # entries 0-149 gone: 100-149 not read yet
    lost = LOST.format(stream=stream, after=start["id"], why=f"150 of them, the stream's first entry now {ids[150]}")
    for plan in (lambda: planner.latest(start, 300), lambda: planner.partitions(start, end)):  # a replay's
        with pytest.raises(EntriesLost, match="^" + re.escape(lost) + "$"):
            plan()
    assert planner.latest(end, 300)["row"] == 600  # nothing after the batch is gone
    connection.client.xdel(stream, ids[700])
    with pytest.raises(EntriesLost, match=re.escape(f"after id {ids[299]}, which the job has not read yet, were deleted "
                                                    f"(the stream's max-deleted-entry-id is {ids[700]}:")):
        planner.latest(end, 300)
    with pytest.raises(EntriesLost, match=re.escape(f"after id {ids[99]}, which the job has not read yet, were deleted "
                                                    f"(50 of the 100 entries up to {ids[199]} are gone:")):
        read_task(connection, stream, tasks[1], [("tid", "BIGINT")])


def test_a_job_whose_stream_was_trimmed_under_it_stops_with_the_sentence(spark, tmp_path, sqlite_backend, stream):
    """Trimmed past the job's position while it runs (after batch 2's sinks): the job stops with
    the sentence, having written what it read before; nothing after the trim is skipped silently."""
    store = write_master(sqlite_backend, 400)
    ids = write_rows(SHARED_URL, stream, 0, 3000)
    spec = redis_job(tmp_path, SHARED_URL, stream, sqlite_backend.url, store.table, total_rows=3000)
    client = redis.Redis.from_url(SHARED_URL)

    def trim(point: str, batch_id: int) -> None:
        if (point, batch_id) == ("sinks", 2):
            client.xtrim(stream, minid=ids[1500], approximate=False)

    lost = LOST.format(stream=stream, after=ids[999], why=f"500 of them, the stream's first entry now {ids[1500]}")
    with pytest.raises(EntriesLost, match="^" + re.escape(lost) + "$"):
        run_job(spec, spark=spark, at_point=trim)
    client.close()


def batch_ids(spec: JobSpec, batch_id: int) -> set[str]:
    """The tuple ids micro-batch ``batch_id`` wrote to the sinks (its files, replaced by a replay)."""
    return {i for sink in (spec.sinks.matched.path, spec.sinks.dead_letter.path)
            for i in read_parquet_batch(Path(sink) / f"batch={batch_id}")["sj_id"].to_pylist()}


@pytest.mark.acceptance
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("partitions", [1, 2])
def test_a_killed_driver_and_a_replayed_batch_leave_each_entry_once(tmp_path, sqlite_backend, stream, partitions):
    """The packaged driver SIGKILLed with its JVM during batch 2, between batch 3's sinks and its
    state, and between batch 4's state and Spark's commit (that batch is replayed: it reads the
    same entries, though 1,000 more came meanwhile), then run to its end: each entry once."""
    store = write_master(sqlite_backend, 400)
    ids = write_rows(SHARED_URL, stream, 0, 2000)
    spec = redis_job(tmp_path, SHARED_URL, stream, sqlite_backend.url, store.table, total_rows=3000, partitions=partitions)
    seen = {}

    def on_killed(point: str) -> None:
        if point == "state:4":
            seen["batch 4"] = batch_ids(spec, 4)
            ids.extend(write_rows(SHARED_URL, stream, 2000, 3000))

    killed_then_finished(spec, tmp_path, ("batch:2", "sinks:3", "state:4"), on_killed)
    assert batch_ids(spec, 4) == seen["batch 4"] and len(seen["batch 4"]) == 500  # the replay read the same entries
    assert_exactly_once(store, ids, 3000, spec)


@pytest.mark.acceptance
@pytest.mark.timeout(900)
def test_a_restarted_redis_server_is_waited_for_and_no_entry_is_lost_or_doubled(spark, tmp_path, sqlite_backend):
    """A private Redis server (its streams kept in an append-only file) stopped during batch 2 and
    started again 3 s later: the source's planning and reads retry it (db_retry_max_s) and the
    job goes on, each entry once."""
    server = RedisServer(tmp_path)
    try:
        store = write_master(sqlite_backend, 400)
        ids = write_rows(server.url, "sales", 0, 3000)
        spec = redis_job(tmp_path, server.url, "sales", sqlite_backend.url, store.table, total_rows=3000, db_retry_max_s=60)
        restarts = []

        def restart(point: str, batch_id: int) -> None:
            if (point, batch_id) == ("batch", 2):
                server.stop()
                restarts.append(threading.Timer(3.0, server.start))
                restarts[-1].start()

        summary = run_job(spec, spark=spark, at_point=restart)
        restarts[0].join()
        assert (summary["stopped_by"], summary["input_rows"]) == ("end_of_input", 3000)
        assert_exactly_once(store, ids, 3000, spec)
    finally:
        server.close()


def test_where_a_job_starts_and_a_stream_with_deleted_entries_inside(stream):
    """``earliest``: before the first entry (the trimmed ones before it are not the job's);
    ``latest``: after the last; ``earliest`` on a stream with XDEL holes: one sentence."""
    ids = write_rows(SHARED_URL, stream, 0, 100)
    connection = Connection(SHARED_URL, 5.0)
    connection.client.xtrim(stream, minid=ids[10], approximate=False)
    initial = {"id": "0-0", "row": 0, "base": None}
    earliest = Planner(connection, stream).latest(initial, 1000)
    assert earliest["base"] == 10 and Planner(connection, stream).latest(earliest, 1000)["id"] == ids[99]
    latest = Planner(connection, stream, start="latest").latest(initial, 1000)
    assert (latest["id"], latest["base"]) == (ids[99], 100)
    connection.client.xdel(stream, ids[50])
    with pytest.raises(ConfigError, match=re.escape(
            f"source.start: earliest cannot count the entries of Redis stream '{stream}', some of which were deleted "
            f"(XDEL, up to id {ids[50]}); expected start: latest, or a stream without deleted entries")):
        Planner(connection, stream).latest(initial, 1000)
