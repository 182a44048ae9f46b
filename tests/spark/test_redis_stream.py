"""A Redis stream as the join's source, with real Redis and real local Spark: exactly once against
the oracle (the tuples' ids are their entry ids), bad entries to the dead letter, a trimmed
stream said in one sentence, a killed driver, a restarted Redis (a private server) and a replayed
batch. Each test writes a stream of its own name on the shared server (127.0.0.1:6379)."""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections import Counter

import pyarrow as pa
import pytest
import redis
from redis_server import SHARED_URL, RedisServer
from spark_jobs import SELECT, driver_summary, killed_then_finished, run_driver, write_master

from airflow_provider_semijoin.core.oracle import engine_pairs, hash_join
from airflow_provider_semijoin.job.spec import JobSpec
from airflow_provider_semijoin.spark.runner import run_job
from airflow_provider_semijoin.spark.sinks import read_parquet_sink
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


def settings(total_rows: int, master_rows: int = 400, missing: float = 0.1) -> dict:
    """The generator's settings of the rows a test writes to its stream."""
    return {"total_rows": total_rows, "master_rows": master_rows, "key_type": "int", "exponent": 1.0, "shape": "noperm",
            "missing": missing, "seed": 1, "extra_keys": {}}


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
