"""``python -m airflow_provider_semijoin.bench.partitions``: ``partitions = 1`` next to
``partitions = 2`` and ``4`` on a real standalone cluster (a master and two one-core workers
started here: 4 parts on 2 cores measure the overhead of more parts than cores), where a
micro-batch's time goes, and a scaling estimate for 8-64 workers with the master database's
capacity as its ceiling.

All run the runner's own join step (:class:`.step.JoinStep`, its queue carried across
micro-batches, the last batch drained) on the same micro-batches of the same Zipf stream against
the same R: ``partitions = 1`` joins in the driver, ``partitions = N`` through
:class:`.partitioned.PartitionedJoin` (one Spark job a batch, a task per worker serving the
parts it holds, each part with its own restricted store and session). Every batch's output goes
through the same Parquet sink. Before any run the cluster's JVMs are warmed with
``--jvm-warmup-jobs`` jobs shaped like a call (a fresh JVM's first jobs cost several times the
CPU of later ones, as a stream's first minutes do); the first ``warmup`` batches (instances
built, page maps read, caches cold) are left out, and so is the last (it drains). Per
configuration: tuples/s and its ratio to ``partitions = 1``; CPU seconds a tuple of every
process under the bench (the driver, its JVM, the cluster's master and workers, their
executors' JVMs and Python workers: :func:`cpu_seconds`) and its ratio; per batch of
``partitions = N`` the parts' engine time (the slice inside the task: the slowest part bounds
the batch), Spark (building the requests, the job, task launch, the collect, reading the
results: the step's wall time minus the slowest part), the sinks (the driver's Parquet write),
and the parts rebuilt (their state not found where it was left: 0 in steady state).

Before the runs it times a Spark job that carries nothing (:func:`job_floor`), and reports for
each N the most this design could reach on this machine (:func:`ceiling_ratio`): p=1's batch
against the slowest part + that job + the sinks, as if the driver's own work of a call cost nothing.

The estimate (a model, not a measurement): a batch of ``n`` tuples over ``N`` parts costs

    T(N) = D + S + max_p (a * n_p + b * r_p)

with ``D`` the driver's sinks (measured; they do not shrink with N), ``S`` the rest of the
step's time outside the parts - assigning tuples to parts, the requests, the job, task
launch, the collect of ``n`` result rows - measured at N = 2 and taken as constant (one wave of
N tasks on N cores; the rows shipped do not shrink), ``n_p`` the part's tuples - ``n/N``,
but never less than the hottest page's share, which one part must take whole - and ``r_p`` the
rows of R the part reads per batch, measured at N = 2 and taken as ``r_2 * 2/N`` (each part
reads pages of its own range only). ``a`` and ``b`` are fitted by least squares to the
measured parts (tuples, rows read, engine seconds). It assumes N cores for N parts.

The issue's own design keeps the rows off the driver: Spark shuffles each micro-batch by key
range to the parts, and the parts write the sinks from the executors. Its floor is measured with
the join taken out (:func:`executor_floor`: the batch read from a Parquet file by the executors,
``repartitionByRange``, a Python worker a part, Parquet written by the executors) against
``partitions = 1`` as the product runs it, reading the same files and collecting them first
(:func:`measure` with ``files``); its floor plus the slowest part's slice bounds what that design
could reach here (:func:`executor_design_bound`).

What a user sees is the product's streaming query, not the step alone (:func:`pipeline_runs`):
the same cluster, the generator source read by the executors ``batch_rows`` a micro-batch (a
backlog), ``foreachBatch`` collecting each micro-batch to the driver, the step, the Parquet
sinks and the checkpoint's state, at partitions 1 and 2 in turn (:data:`PIPELINE_PARTS`), each
over a window after a warm-up: tuples/s and CPU a tuple of every process under the bench and
the database server (:class:`.cpu.ProcessCpu`), and each run's exactly-once check of the sinks.
There, both pay what a micro-batch costs Spark whatever the join (the source, the collect, the
checkpoint), which the step's runs leave out.

Its ceiling is the master database: the parts' reads of R at N = 2, ``q`` queries and ``r`` rows
of R a tuple (taken as constant in N: each page is read by the one part that owns it), against
what the server serves of that access measured in the same invocation after the cluster is
stopped (:func:`.access.served_page_reads`: range reads of a page of the parts' measured rows
a query, at random places, over 1, 2 and 4 connections at once, each its own process): the most
queries/s ``Q`` and its rows/s ``W`` it reached. The estimate is

    min(n / T(N), Q / q, W / r)   tuples/s

and the report says which bound binds at each N (:func:`bound`). The ceiling assumes one
MariaDB on this 2-core machine, shared with the clients that time it (their processes convert
the rows as the parts' do) and R in its buffer pool; a bigger server, or replicas each serving
some parts, scale it, and R larger than the pool lowers it to the disk's rate.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

from ..core.stores import open_store, redact
from ..core.units import parse_bytes
from ..workloads import generate_master
from ..workloads.zipf import zipf_rows
from ..spark.partitioned import RangePartitioner
from ..spark.step import JoinStep
from ..job.spec import StepSpec
from ..spark.sinks import ParquetSink
from ..spark.standalone import standalone_cluster
from .access import served_page_reads
from .cpu import DATABASE
from .spark_paths import SparkBenchConfig, run_pipeline
from .steady import BenchConfig

WORKERS = (8, 16, 32, 64)
CEILING_CONNECTIONS = (1, 2, 4)  # connections at once reading R for the database's ceiling
PARTS = (1, 2, 4)  # on the cluster's two one-core workers: 4 measures the overhead of more parts than cores
PIPELINE_PARTS = (1, 2)  # the streaming query's runs, in turn (:func:`pipeline_runs`)


def batches(rows: int, batch_rows: int, count: int, exponent: float, seed: int):
    """The stream's micro-batches, with the runner's ``sj_id`` and ``sj_arrival`` columns."""
    for b in range(count):
        start = b * batch_rows
        stream = zipf_rows(start, start + batch_rows, rows, exponent=exponent, shape="noperm", seed=seed)
        stream = stream.add_column(0, "sj_id", pa.array([str(i) for i in range(start, start + batch_rows)]))
        yield stream.append_column("sj_arrival", pa.array(np.full(batch_rows, time.time())))


def write_sinks(sinks: tuple, batch_id: int, result) -> float:
    started = time.perf_counter()
    sinks[0].write(batch_id, result.passed)
    sinks[1].write(batch_id, result.dead)
    return time.perf_counter() - started


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and every process under it: the driver's
    JVM, the cluster's master and workers, their executors' JVMs and Python workers. (A process
    that ended between two readings takes its seconds with it: Python workers are reused.)"""
    total = 0.0
    me = psutil.Process()
    for process in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def _echoed(sent, indices):
    return [bytes(len(sent.value[i]) * 3 // 2) for i in indices]


def warm_jvms(spark, jobs: int, workers: int = 2) -> float:
    """Run ``jobs`` Spark jobs shaped like a partitioned call (a task per worker, 1 MB in, 1.5 MB
    out) so the cluster's JVMs have compiled their hot paths before anything is measured, as a
    stream's do after its first minutes: the first jobs of a fresh JVM cost several times the
    CPU of later ones. Returns the seconds it took."""
    return sum(call_seconds(spark, jobs, 1 << 20, workers))


def call_seconds(spark, jobs: int, request_bytes: int, workers: int = 2) -> list[float]:
    """The seconds of each of ``jobs`` Spark jobs shaped like a partitioned call: a task per
    worker, its request of ``request_bytes`` in a broadcast, and half as much again out."""
    context = spark.sparkContext
    seconds = []
    for _ in range(jobs):
        started = time.perf_counter()
        sent = context.broadcast([bytes(request_bytes)] * workers)
        context.parallelize(range(workers), workers).mapPartitions(functools.partial(_echoed, sent)).collect()
        sent.destroy(blocking=False)
        seconds.append(time.perf_counter() - started)
    return seconds


def job_floor(spark, jobs: int = 20, workers: int = 2) -> float:
    """The median seconds of a Spark job shaped like a call but carrying nothing (a task per
    worker, nothing in or out): what a call costs whatever the parts do (scheduling, task
    launch, the Python workers' hand-over, the collect)."""
    return statistics.median(call_seconds(spark, jobs, 0, workers))


def ceiling_ratio(one: dict, run: dict, floor_s: float) -> float:
    """The most ``run`` (partitions N) could reach against ``one`` (partitions 1) in this design
    on this machine: one part's batch against N parts' that cost nothing but their slowest part
    (the hottest page is one part's whole), one job at its :func:`job_floor` and the sinks."""
    return one["median_batch_s"] / (run["median_slowest_part_s"] + floor_s + run["median_sink_s"])


def measure(spark, step: StepSpec, parts: int, stream: list[pa.Table], warmup: int, out: Path,
            files: list[str] | None = None) -> dict:
    """One configuration over every batch: per-batch seconds, CPU seconds of every process and,
    for parts > 1, the split and the parts rebuilt. ``files``: each batch read from its Parquet
    file by the executors and collected to the driver first (as ``foreachBatch`` does), timed with it."""
    join = JoinStep(step, 0, spark=spark, partitions=parts)
    folder = out / (f"p{parts}" if files is None else f"p{parts}-read")
    sinks = (ParquetSink(str(folder / "matched")), ParquetSink(str(folder / "dead")))
    schema = read_schema(spark, files)
    rows = []
    for batch_id, batch in enumerate(stream):
        cpu, started = cpu_seconds(), time.perf_counter()
        if files is not None:
            batch = spark.read.schema(schema).parquet(files[batch_id]).toArrow()
        result = join.run(batch, batch_id, time.time(), -np.inf, -np.inf, batch_id == len(stream) - 1)  # (it checks exactly-once)
        joined = time.perf_counter() - started
        sink_s = write_sinks(sinks, batch_id, result)
        row = {"tuples": result.stats.join.left, "batch_s": joined + sink_s, "join_s": joined, "sink_s": sink_s,
               "cpu_s": cpu_seconds() - cpu}
        if parts > 1:
            part_stats = result.stats.join.part_figures()
            slowest = max(p["wall_s"] for p in part_stats if p["wall_s"] is not None)
            row.update(parts=part_stats, slowest_part_s=slowest, spark_s=joined - slowest, rebuilds=result.stats.join.rebuilds)
        rows.append(row)
    join.close()
    summary = summarize(rows, warmup, parts, ("batch_s", "join_s", "sink_s", "slowest_part_s", "spark_s"))
    if parts > 1:
        summary["rebuilds"] = [r["rebuilds"] for r in summary["per_batch"]]
    return summary


def summarize(rows: list[dict], warmup: int, parts: int, medians: tuple[str, ...]) -> dict:
    """A configuration's batches (each its ``tuples``, ``batch_s``, ``cpu_s``), the first ``warmup``
    and the last (it drains) left out: tuples/s, CPU us a tuple, the median of each of ``medians``
    the batches have, and the batches kept."""
    kept = rows[warmup:-1]
    tuples = sum(r["tuples"] for r in kept)
    seconds = sum(r["batch_s"] for r in kept)
    summary = {"partitions": parts, "batches": len(kept), "tuples_per_s": round(tuples / seconds, 1) if seconds else 0.0,
               # None: the kept batches completed no tuple (a slow machine: the join carried them to the drain)
               "cpu_us_per_tuple": round(sum(r["cpu_s"] for r in kept) / tuples * 1e6, 3) if tuples else None}
    for name in medians:
        if name in kept[0]:
            summary[f"median_{name}"] = round(statistics.median(r[name] for r in kept), 4)
    return {**summary, "per_batch": kept}


def stream_files(stream: list[pa.Table], folder: Path) -> list[str]:
    """Each micro-batch as a Parquet file of its own (what a file source's micro-batch reads)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, batch in enumerate(stream):
        paths.append(str(folder / f"batch-{i}.parquet"))
        pq.write_table(batch, paths[-1])
    return paths


def read_schema(spark, files: list[str] | None):
    """The stream files' Spark schema, read once: a read given it skips inferring it again a batch
    (as a streaming file source does), which cost Spark 0.05-0.09 s a 100k-row batch on local[2]."""
    return spark.read.parquet(files[0]).schema if files else None


def _passed_through(batches):
    """A part that joins nothing (``mapInArrow``): each Arrow batch as it came."""
    yield from batches


def _written_by_the_part(out: str, batches):
    """A part that joins nothing and writes its rows itself (``mapInArrow``): one Parquet file a
    task, named by its partition; yields how many rows it wrote."""
    from pyspark import TaskContext

    table = pa.Table.from_batches(list(batches))
    if table.num_rows:
        pq.write_table(table, f"{out}/part-{TaskContext.get().partitionId()}.parquet")
    yield pa.RecordBatch.from_pydict({"rows": pa.array([table.num_rows], pa.int64())})


def hash_slots(spark, parts: int) -> list[int]:
    """For each task ``0 .. parts - 1`` a value that Spark's hash partitioning (Murmur3, the seed
    ``hash`` uses, modulo ``parts``) sends to that task: a shuffle by a part number sent as these
    values gives each part a task of its own, with no sample of the keys first."""
    from pyspark.sql import functions as F

    found = (spark.range(64 * parts).select(F.pmod(F.hash("id"), F.lit(parts)).alias("slot"), "id")
             .groupBy("slot").agg(F.min("id")).collect())
    slots = {int(slot): int(value) for slot, value in found}
    return [slots[p] for p in range(parts)]


def executor_floor(spark, stream: list[pa.Table], files: list[str], parts: int, warmup: int, out: Path,
                   by_spark: bool = False, key: str = "nk") -> dict:
    """The issue's design for the rows with the join taken out: each micro-batch read from its file
    by the executors, shuffled by key range to ``parts`` tasks, through a Python worker
    (``mapInArrow``, where a part's join would be), written as Parquet on the executors: no row
    through the driver (:func:`_through_spark`, :func:`_through_slots`). What a design that keeps
    the rows on the executors pays a micro-batch here before its parts join anything: seconds and
    CPU seconds of every process. Each batch's files are counted after it is timed."""
    schema = read_schema(spark, files)
    through = (functools.partial(_through_spark, parts, key, schema) if by_spark
               else _through_slots(spark, parts, key, stream[0][key].to_numpy()))
    rows = []
    for batch_id, path in enumerate(files):
        folder = out / f"batch={batch_id}"
        cpu, started = cpu_seconds(), time.perf_counter()
        through(spark.read.schema(schema).parquet(path), folder)
        rows.append({"tuples": stream[batch_id].num_rows, "batch_s": time.perf_counter() - started, "cpu_s": cpu_seconds() - cpu})
        written = pq.read_table(folder).num_rows
        if written != stream[batch_id].num_rows:
            raise RuntimeError(f"batch {batch_id}: the parts wrote {written:,} rows of {stream[batch_id].num_rows:,}")
    return {**summarize(rows, warmup, parts, ("batch_s",)), "by_spark": by_spark}


def _through_spark(parts: int, key: str, schema, frame, folder: Path) -> None:
    """As Spark offers it: ``repartitionByRange`` (a sample of the keys, then the shuffle) and
    Spark's Parquet writer (its commit protocol)."""
    frame.repartitionByRange(parts, key).mapInArrow(_passed_through, schema).write.mode("overwrite").parquet(str(folder))


def _through_slots(spark, parts: int, key: str, sample: np.ndarray):
    """Its cheapest here: the part of each key from the key quantiles of ``sample`` (the first
    batch: equal parts, its best case), sent as :func:`hash_slots` values (one shuffle, a task a
    part), each part writing its file itself with pyarrow."""
    from pyspark.sql import functions as F

    cuts = np.quantile(sample, np.arange(1, parts) / parts)
    slots = hash_slots(spark, parts)
    part = F.when(F.col(key) < float(cuts[0]), F.lit(slots[0]).cast("long"))
    for k, cut in enumerate(cuts[1:], start=1):
        part = part.when(F.col(key) < float(cut), F.lit(slots[k]).cast("long"))
    part = part.otherwise(F.lit(slots[-1]).cast("long"))

    def through(frame, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        routed = frame.withColumn("sj_part", part).repartition(parts, "sj_part").drop("sj_part")
        routed.mapInArrow(functools.partial(_written_by_the_part, str(folder)), "rows long").collect()

    return through


def executor_design_bound(read_one: dict, floor: dict, two: dict) -> dict:
    """The most the rows-on-the-executors design could reach against ``partitions = 1`` as the
    product runs it (``read_one``: the batch read and collected, joined, written): its floor's
    batch plus the slowest part's slice (``two``'s, the hottest page one part's whole), the
    parts' join costing nothing else; and its floor's CPU a tuple alone against ``read_one``'s."""
    return {"throughput_x_p1": round(read_one["median_batch_s"] / (floor["median_batch_s"] + two["median_slowest_part_s"]), 3),
            "floor_throughput_x_p1": round(floor["tuples_per_s"] / read_one["tuples_per_s"], 3),
            "floor_cpu_x_p1": round(floor["cpu_us_per_tuple"] / read_one["cpu_us_per_tuple"], 3)}


def fit_parts(runs: list[dict]) -> tuple[float, float]:
    """``(a, b)``: engine seconds per tuple and per row of R read, least squares over the parts."""
    parts = [p for r in runs for p in r["parts"] if p["wall_s"] is not None]
    x = np.array([[p["fed"], p["disk_rows"]] for p in parts], dtype=float)
    y = np.array([p["wall_s"] for p in parts])
    (a, b), *_ = np.linalg.lstsq(x, y, rcond=None)
    return max(float(a), 0.0), max(float(b), 0.0)


def bound(model_tuples_per_s: float, queries_per_tuple: float, rows_per_tuple: float, db_queries_per_s: float,
          db_rows_per_s: float) -> tuple[float, str]:
    """The estimate's tuples/s and the bound that binds (``"model"``, ``"DB queries/s"`` or
    ``"DB rows/s"``): the least of the model's throughput and what the database's queries/s and
    rows/s serve at the parts' queries and rows a tuple (a tuple that reads nothing: no DB bound)."""
    bounds = {"model": model_tuples_per_s,
              "DB queries/s": db_queries_per_s / queries_per_tuple if queries_per_tuple > 0 else np.inf,
              "DB rows/s": db_rows_per_s / rows_per_tuple if rows_per_tuple > 0 else np.inf}
    binds = min(bounds, key=bounds.get)
    return bounds[binds], binds


def reads_per_tuple(two: dict) -> dict:
    """Queries and rows of R a tuple, and rows a query, over the parts of the ``partitions = 2`` run."""
    batches = two["per_batch"]
    tuples = sum(r["tuples"] for r in batches)
    queries = sum(p["disk_queries"] or 0 for r in batches for p in r["parts"])
    rows = sum(p["disk_rows"] or 0 for r in batches for p in r["parts"])
    return {"queries_per_tuple": queries / tuples, "rows_per_tuple": rows / tuples,
            "rows_per_query": rows / queries if queries else 0.0}


def estimate(two: dict, batch_rows: int, hot_share: float, ceiling: dict) -> dict:
    """Throughput of N parts from the model of the module docstring, fitted on ``two``, bounded by
    the database's ``ceiling`` (the best of :func:`.access.served_page_reads`)."""
    a, b = fit_parts(two["per_batch"])
    read = statistics.median(sum(p["disk_rows"] or 0 for p in r["parts"]) for r in two["per_batch"])  # rows of R, both parts
    driver = two["median_sink_s"]
    spark = two["median_spark_s"]
    reads = reads_per_tuple(two)
    out = {"a_s_per_tuple": a, "b_s_per_row_read": b, "driver_s": driver, "spark_s": spark, **reads,
           "ceiling": ceiling, "workers": {}}
    for n in (2, *WORKERS):
        tuples = max(batch_rows / n, hot_share * batch_rows)
        part = a * tuples + b * read / n
        model = batch_rows / (driver + spark + part)
        tuples_per_s, binds = bound(model, reads["queries_per_tuple"], reads["rows_per_tuple"],
                                    ceiling["queries_per_s"], ceiling["rows_per_s"])
        out["workers"][n] = {"batch_s": round(driver + spark + part, 4), "part_s": round(part, 4),
                             "model_tuples_per_s": round(model, 1), "tuples_per_s": round(tuples_per_s, 1), "binds": binds}
    return out


def database_ceiling(master: str, table: str, rows_per_query: float) -> list[dict]:
    """What the server serves of the parts' access (a page of their rows a query, at random
    places) over each of :data:`CEILING_CONNECTIONS` at once."""
    page_rows = max(int(round(rows_per_query)), 1)
    return [served_page_reads(master, table, page_rows, connections) for connections in CEILING_CONNECTIONS]


def hottest_page_share(store, stream: list[pa.Table], parts: int) -> float:
    partitioner = RangePartitioner(store, parts)
    pages = np.concatenate([partitioner.page_map.page_of(b["nk"].to_numpy()) for b in stream])
    counts = np.bincount(pages[pages >= 0], minlength=partitioner.page_map.n_pages)
    return float(counts.max() / max(len(pages), 1))


def pipeline_runs(spark, args, table: str, folder: Path) -> list[dict]:
    """The product's streaming query (:func:`.spark_paths.run_pipeline`) at each of
    :data:`PIPELINE_PARTS` in turn, ``args.pipeline_rounds`` times (the machine's drift falls on
    every configuration alike): a backlog of the generator's Zipf stream, ``batch_rows`` a micro-batch."""
    core = BenchConfig(master=args.master, rows=args.rows, memory=parse_bytes(args.memory), zipf=args.zipf,
                       shapes=["noperm"], algorithms=[args.algorithm], warmup_s=args.pipeline_warmup_s,
                       window_s=args.pipeline_window_s, seed=1)
    config = SparkBenchConfig(core, algorithms=[args.algorithm], batch_rows=args.batch_rows)
    runs = []
    for round_ in range(args.pipeline_rounds):
        for parts in PIPELINE_PARTS:
            run = run_pipeline(spark, config, table, args.algorithm, "noperm", folder / f"pipeline{round_}-{parts}", None,
                               job_options={"partitions": parts})
            runs.append({"partitions": parts, "round": round_, "tuples_per_s": run["tuples_per_s"],
                         "window_batches": run["window_batches"], "cpu_us_per_tuple": run["cpu"]["us_per_tuple"],
                         "exactly_once": run["exactly_once"]["ok"]})
    return runs


def pipeline_summary(runs: list[dict]) -> list[dict]:
    """Per partitions: the median over its runs of tuples/s and of CPU us a tuple (all processes,
    and without the database server), each against ``partitions = 1``'s median, and whether every
    run was exactly once."""
    rows = []
    for parts in sorted({r["partitions"] for r in runs}):
        mine = [r for r in runs if r["partitions"] == parts]
        rows.append({"partitions": parts, "runs": len(mine),
                     "tuples_per_s": statistics.median(r["tuples_per_s"] for r in mine),
                     "cpu_us_per_tuple": statistics.median(r["cpu_us_per_tuple"]["all"] for r in mine),
                     "cpu_us_per_tuple_without_db": statistics.median(
                         r["cpu_us_per_tuple"]["all"] - r["cpu_us_per_tuple"].get(DATABASE, 0.0) for r in mine),
                     "exactly_once": all(r["exactly_once"] for r in mine)})
    one = rows[0]
    for row in rows:
        for name in ("tuples_per_s", "cpu_us_per_tuple", "cpu_us_per_tuple_without_db"):
            row[f"{name}_x_p1"] = round(row[name] / one[name], 3)
    return rows


def bench_arguments(prog: str, batches: int, warmup: int) -> argparse.ArgumentParser:
    """The arguments of the benches on the standalone cluster (this one, :mod:`.executor_parts`)."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--master", default="mysql://semijoin:semijoin@127.0.0.1:3306/semijoin_bench")
    parser.add_argument("--rows", type=int, default=200_000, help="rows of R")
    parser.add_argument("--batch-rows", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=batches)
    parser.add_argument("--warmup", type=int, default=warmup)
    parser.add_argument("--algorithm", default="hybridjoin")
    parser.add_argument("--memory", default="8M")
    parser.add_argument("--zipf", type=float, default=1.0)
    parser.add_argument("--jvm-warmup-jobs", type=int, default=100, help="Spark jobs run before measuring (JIT)")
    parser.add_argument("--out", default=None, help="write the JSON report here")
    return parser


def bench_inputs(args) -> tuple[str, StepSpec, list[pa.Table]]:
    """R's table (made), the join step over it and the stream's micro-batches."""
    table = f"sj_parts_{args.rows}"
    generate_master(args.master, table, args.rows, seed=0)
    step = StepSpec(column="nk", master={"url": args.master, "table": table, "key": "nk"}, algorithm=args.algorithm,
                    memory=args.memory, master_static=True)  # the bench's R: nothing writes it while it runs
    return table, step, list(batches(args.rows, args.batch_rows, args.batches, args.zipf, seed=1))


@contextlib.contextmanager
def bench_cluster(folder: Path, app_name: str, partitions: int):
    """A Spark session on a standalone cluster of two one-core workers started under ``folder``."""
    from ..spark.session import get_spark

    with standalone_cluster(folder, workers=2, cores=1) as (url, _):
        spark = get_spark(url, app_name=app_name, partitions=partitions, conf={
            "spark.executor.cores": "1", "spark.cores.max": "2", "spark.executor.memory": "1g"})
        try:
            yield spark
        finally:
            spark.stop()


def main(argv: list[str] | None = None) -> int:
    parser = bench_arguments("airflow_provider_semijoin.bench.partitions", batches=6, warmup=1)
    parser.add_argument("--pipeline-rounds", type=int, default=3,
                        help="runs of the streaming query at each of partitions 1 and 2 (0: none)")
    parser.add_argument("--pipeline-warmup-s", type=float, default=10.0)
    parser.add_argument("--pipeline-window-s", type=float, default=20.0)
    args = parser.parse_args(argv)
    table, step, stream = bench_inputs(args)
    with tempfile.TemporaryDirectory() as folder, bench_cluster(Path(folder), "semijoin-partitions-bench", max(PARTS)) as spark:
        warmed_s = warm_jvms(spark, args.jvm_warmup_jobs)
        floor_s = job_floor(spark)
        runs = [measure(spark, step, parts, stream, args.warmup, Path(folder)) for parts in PARTS]
        files = stream_files(stream, Path(folder) / "stream")
        read_one = measure(spark, step, 1, stream, args.warmup, Path(folder), files=files)
        floors = [executor_floor(spark, stream, files, 2, args.warmup, Path(folder) / f"executor-{by_spark}", by_spark)
                  for by_spark in (False, True)]
        pipelines = pipeline_runs(spark, args, table, Path(folder))
    with open_store(args.master, table, "nk") as store:
        hot = hottest_page_share(store, stream, 2)
    served = database_ceiling(args.master, table, reads_per_tuple(runs[1])["rows_per_query"])  # (the cluster stopped)
    ceiling = max(served, key=lambda s: s["queries_per_s"])
    report = {"master": redact(args.master), "rows": args.rows, "batch_rows": args.batch_rows,
              "algorithm": args.algorithm, "memory": args.memory, "hottest_page_share": round(hot, 4),
              "runs": runs, "job_floor_s": round(floor_s, 4),
              "ceiling_x_p1": {r["partitions"]: round(ceiling_ratio(runs[0], r, floor_s), 3) for r in runs[1:]},
              "served": served, "estimate": estimate(runs[1], args.batch_rows, hot, ceiling),
              "read_one": read_one, "executor_floors": floors,
              "executor_design": executor_design_bound(read_one, min(floors, key=lambda f: f["median_batch_s"]), runs[1]),
              "pipeline_runs": pipelines, "pipeline": pipeline_summary(pipelines) if pipelines else [],
              "load_average": os.getloadavg(),
              "jvm_warmup": {"jobs": args.jvm_warmup_jobs, "seconds": round(warmed_s, 1)}}
    print_report(report)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    return 0


def print_report(report: dict) -> None:
    one = report["runs"][0]
    print(f"R = {report['rows']:,} rows, batches of {report['batch_rows']:,}, {report['algorithm']}, "
          f"memory {report['memory']} (per part: / N), hottest page {report['hottest_page_share']:.1%} of the tuples; "
          f"load average {', '.join(f'{x:.2f}' for x in report['load_average'])}; JVMs warmed with "
          f"{report['jvm_warmup']['jobs']} jobs ({report['jvm_warmup']['seconds']} s)")
    print("| partitions | tuples/s | x p=1 | CPU us/tuple | x p=1 | batch s | join s | slowest part s | Spark s | sinks s "
          "| rebuilds a batch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for run in report["runs"]:
        print(f"| {run['partitions']} | {run['tuples_per_s']:,.0f} | {run['tuples_per_s'] / one['tuples_per_s']:.2f} | "
              f"{run['cpu_us_per_tuple']:.2f} | {run['cpu_us_per_tuple'] / one['cpu_us_per_tuple']:.2f} | "
              f"{run['median_batch_s']} | {run['median_join_s']} | {run.get('median_slowest_part_s', '-')} | "
              f"{run.get('median_spark_s', '-')} | {run['median_sink_s']} | {run.get('rebuilds', '-')} |")
    print(f"a Spark job carrying nothing: {report['job_floor_s']} s (median of 20); so at most "
          + ", ".join(f"{x:.2f}x p=1 at p={n}" for n, x in report["ceiling_x_p1"].items())
          + " in this design here (p=1's batch against the slowest part + that job + the sinks)")
    r, d = report["read_one"], report["executor_design"]
    print(f"p=1 as the product runs it, each batch read from its Parquet file by the executors and collected first: "
          f"{r['tuples_per_s']:,.0f} tuples/s, {r['cpu_us_per_tuple']:.2f} us CPU a tuple, {r['median_batch_s']} s a batch; "
          "the rows on the executors at p=2, no join (read by the executors, shuffled by key range, a Python worker a part, "
          "Parquet written on the executors):")
    for f in report["executor_floors"]:
        way = "repartitionByRange + Spark's writer" if f["by_spark"] else "a task a part by hash slots, each part writing with pyarrow"
        print(f"  {way}: {f['tuples_per_s']:,.0f} tuples/s, {f['cpu_us_per_tuple']:.2f} us CPU a tuple, "
              f"{f['median_batch_s']} s a batch")
    print(f"so that design at p=2 reaches at most {d['throughput_x_p1']:.2f}x p=1 here (its cheaper floor + the slowest "
          f"part), and that floor alone costs {d['floor_cpu_x_p1']:.2f}x p=1's CPU a tuple")
    if report["pipeline"]:
        print("the product's streaming query (source, collect, step, sinks, checkpoint), median of each one's runs; "
              "CPU: every process under the bench and the database server:")
        print("| partitions | runs | tuples/s | x p=1 | CPU us/tuple | x p=1 | without the database | x p=1 | exactly once |")
        print("|---|---|---|---|---|---|---|---|---|")
        for p in report["pipeline"]:
            print(f"| {p['partitions']} | {p['runs']} | {p['tuples_per_s']:,.0f} | {p['tuples_per_s_x_p1']:.2f} | "
                  f"{p['cpu_us_per_tuple']:.2f} | {p['cpu_us_per_tuple_x_p1']:.2f} | {p['cpu_us_per_tuple_without_db']:.2f} | "
                  f"{p['cpu_us_per_tuple_without_db_x_p1']:.2f} | {'yes' if p['exactly_once'] else 'NO'} |")
        print("runs, in order: " + ", ".join(f"p={r['partitions']} {r['tuples_per_s']:,.0f}" for r in report["pipeline_runs"]))
    e = report["estimate"]
    print(f"model: part s = {e['a_s_per_tuple'] * 1e6:.2f} us/tuple + {e['b_s_per_row_read'] * 1e6:.2f} us/row of R read; "
          f"driver {e['driver_s']} s + Spark {e['spark_s']} s per batch; the parts read "
          f"{e['queries_per_tuple']:.5f} queries and {e['rows_per_tuple']:.3f} rows of R a tuple "
          f"({e['rows_per_query']:,.0f} rows a query)")
    print("the database (range reads of a page of that many rows at random places, connections at once):")
    print("| connections | queries | seconds | queries/s | rows/s |")
    print("|---|---|---|---|---|")
    for s in report["served"]:
        print(f"| {s['connections']} | {s['queries']:,} | {s['seconds']} | {s['queries_per_s']:,.0f} | {s['rows_per_s']:,.0f} |")
    c = e["ceiling"]
    print(f"ceiling: {c['queries_per_s']:,.0f} queries/s / {e['queries_per_tuple']:.5f} = "
          f"{c['queries_per_s'] / e['queries_per_tuple']:,.0f} tuples/s; {c['rows_per_s']:,.0f} rows/s / "
          f"{e['rows_per_tuple']:.3f} = {c['rows_per_s'] / e['rows_per_tuple']:,.0f} tuples/s")
    print("| workers | est. batch s | est. part s | model tuples/s | est. tuples/s | binds |")
    print("|---|---|---|---|---|---|")
    for n, w in e["workers"].items():
        print(f"| {n} | {w['batch_s']} | {w['part_s']} | {w['model_tuples_per_s']:,.0f} | {w['tuples_per_s']:,.0f} "
              f"| {w['binds']} |")


if __name__ == "__main__":
    sys.exit(main())
