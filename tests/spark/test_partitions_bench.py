"""``bench.partitions``' two Spark paths beside the step's own: p=1 fed from files the executors
read (as ``foreachBatch`` is), and the rows-on-the-executors floor (a shuffle by key range to the
parts, a Python worker each, Parquet written by the executors), on local Spark and a SQLite R."""

from __future__ import annotations

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from airflow_provider_semijoin.bench.partitions import batches, executor_floor, hash_slots, measure, stream_files
from airflow_provider_semijoin.job.spec import StepSpec
from airflow_provider_semijoin.workloads import generate_master


@pytest.mark.parametrize("by_spark", [False, True])
def test_the_executor_floor_writes_every_tuple_of_each_batch_once_one_key_range_a_part(spark, tmp_path, by_spark):
    stream = list(batches(rows=5_000, batch_rows=2_000, count=4, exponent=1.0, seed=1))
    files = stream_files(stream, tmp_path / "stream")
    floor = executor_floor(spark, stream, files, 2, warmup=1, out=tmp_path / "out", by_spark=by_spark)
    assert (floor["partitions"], floor["batches"]) == (2, 2)  # the first (warm-up) and the last left out
    assert floor["tuples_per_s"] > 0 and floor["cpu_us_per_tuple"] > 0
    for batch_id, batch in enumerate(stream):
        folder = tmp_path / "out" / f"batch={batch_id}"
        written = pq.read_table(folder)
        assert sorted(written["sj_id"].to_pylist()) == sorted(batch["sj_id"].to_pylist())
        parts = [t for t in (pq.read_table(f) for f in sorted(folder.glob("*.parquet"))) if t.num_rows]
        assert len(parts) == 2  # both key ranges hold tuples of a Zipf batch: two parts, not one task with both
        ranges = sorted((pc.min(p["nk"]).as_py(), pc.max(p["nk"]).as_py()) for p in parts)
        assert ranges[0][1] < ranges[1][0]  # each part one key range: a shuffle by range, not by hash


@pytest.mark.parametrize("parts", [2, 3, 4])
def test_each_hash_slot_sends_its_part_to_a_task_of_its_own(spark, parts):
    from pyspark.sql import functions as F

    slots = hash_slots(spark, parts)
    frame = spark.createDataFrame([(s,) for s in slots for _ in range(5)], "slot long").repartition(parts, "slot")
    tasks = frame.select("slot", F.spark_partition_id().alias("task")).distinct().collect()
    assert sorted((r["task"], r["slot"]) for r in tasks) == sorted(enumerate(slots))


def test_p1_read_from_the_files_joins_what_p1_fed_from_memory_joins(spark, tmp_path):
    master = f"sqlite:///{tmp_path / 'r.db'}"
    generate_master(master, "r", 5_000, seed=0)
    step = StepSpec(column="nk", master={"url": master, "table": "r", "key": "nk"}, algorithm="hybridjoin",
                    memory="1M", master_static=True)
    stream = list(batches(rows=5_000, batch_rows=2_000, count=4, exponent=1.0, seed=1))
    files = stream_files(stream, tmp_path / "stream")
    fed = measure(spark, step, 1, stream, 1, tmp_path / "fed")
    read = measure(spark, step, 1, stream, 1, tmp_path / "read", files=files)
    assert read["batches"] == fed["batches"] == 2  # (their tuples may all be carried to the drain on a busy machine)
    every = sorted(i for batch in stream for i in batch["sj_id"].to_pylist())
    left = {}
    for run, folder in (("fed", tmp_path / "fed" / "p1"), ("read", tmp_path / "read" / "p1-read")):
        ids = {sink: [i for b in range(len(stream)) for i in pq.read_table(folder / sink / f"batch={b}")["sj_id"].to_pylist()]
               for sink in ("matched", "dead")}
        assert sorted(ids["matched"] + ids["dead"]) == every  # each tuple left once (the last batch drains)
        left[run] = {sink: sorted(v) for sink, v in ids.items()}
    assert left["read"] == left["fed"] and left["read"]["matched"]
