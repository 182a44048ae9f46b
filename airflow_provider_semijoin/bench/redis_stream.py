"""``python -m airflow_provider_semijoin.bench.redis_stream``: the same join fed by a Redis stream
and by a landing folder of the same tuples, in one run, and the Redis reader alone.

The tuples are the Zipf stream of :mod:`.partitions` (``--batches`` of ``--batch-rows``), joined
with R on MariaDB by one step (:func:`.data_paths.job_steps`), the sinks Parquet, on local Spark
(``--spark-master``, default ``local[2]``, the product's default), at one part through the driver.
They are written once as a landing folder (a file a micro-batch) and once as a Redis stream
(entries of text fields, :func:`..workloads.redis_feed.fill`; ``max_rows_per_batch`` =
``--batch-rows``, so both read the same micro-batches), and the product's query
(:func:`.data_paths.run_once`) runs over each in turn, ``--rounds`` times after one not reported:
its wall clock, steady tuples/s (after ``--warmup`` batches), CPU a tuple of every process under the
bench and of the database server, the Redis server's CPU a tuple apart (whole runs: it serves no
one else here), the exactly-once check; and Redis against the landing folder, round by round.

The readers alone: each source read by Spark with nothing after it (a micro-batch collected to the
driver as Arrow, as the runner collects it, and dropped), their steady tuples/s.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa

from ..core.stores import redact
from ..job.sources import source_from_dict
from ..spark.session import get_spark
from ..spark.sources import stream_frame
from ..workloads.redis_feed import fill
from .data_paths import job_steps, landing_folder, landing_source, run_once
from .partitions import bench_arguments, bench_inputs, warm_jvms

SOURCES = ("files", "redis")
DDL_TYPES = {pa.int64(): "BIGINT", pa.float64(): "DOUBLE", pa.string(): "STRING"}


def fill_stream(url: str, stream: list[pa.Table]) -> dict:
    """The tuples as a new Redis stream; its source (``max_rows_per_batch``: a micro-batch's tuples)."""
    import redis

    name, client = f"semijoin-bench-{uuid.uuid4().hex[:8]}", redis.Redis.from_url(url)
    try:
        for batch in stream:
            fill(client, name, batch.drop_columns(["sj_id", "sj_arrival"]))
    finally:
        client.close()
    columns = stream[0].drop_columns(["sj_id", "sj_arrival"]).schema
    return {"kind": "redis_stream", "url": url, "stream": name, "schema": ", ".join(f"{f.name} {DDL_TYPES[f.type]}" for f in columns),
            "max_rows_per_batch": stream[0].num_rows, "total_rows": sum(b.num_rows for b in stream)}


def reader_alone(spark, source: dict, total: int, warmup: int, folder: Path) -> dict:
    """``source`` read into Spark with nothing after it (each micro-batch collected to the driver
    as Arrow): steady tuples/s after ``warmup`` batches with tuples."""
    ends: list[tuple[float, int]] = []

    def collected(frame, batch_id: int) -> None:
        ends.append((time.time(), frame.toArrow().num_rows))

    frame, _ = stream_frame(spark, source_from_dict(source))
    query = (frame.writeStream.foreachBatch(collected)
             .trigger(processingTime="0 seconds").option("checkpointLocation", str(folder)).start())
    try:
        while sum(n for _, n in ends) < total:
            time.sleep(0.2)
    finally:
        query.stop()
    with_rows = [i for i, (_, n) in enumerate(ends) if n]
    first = with_rows[warmup - 1]
    tuples, seconds = sum(n for _, n in ends[first + 1:]), ends[-1][0] - ends[first][0]
    return {"tuples": tuples, "seconds": round(seconds, 3), "tuples_per_s": round(tuples / seconds, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = bench_arguments("airflow_provider_semijoin.bench.redis_stream", batches=8, warmup=2)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0", help="the Redis server of the stream")
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--trigger-s", type=float, default=0.05, help="trigger_interval_s (a backlog: no batch waits long)")
    parser.set_defaults(jvm_warmup_jobs=0)  # the round not reported warms the JVM here
    args = parser.parse_args(argv)
    table, step, stream = bench_inputs(args)
    steps = job_steps(step, table, 1)
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        sources = {"files": landing_source(landing_folder(stream, Path(folder) / "landing")),
                   "redis": fill_stream(args.redis, stream)}
        spark = get_spark(args.spark_master, app_name="semijoin-redis-bench")
        try:
            warm_jvms(spark, args.jvm_warmup_jobs)
            for round_ in range(-1, args.rounds):
                for name in SOURCES:
                    before = server_cpu_s(args.redis)
                    run = run_once(spark, sources[name], steps, Path(folder) / f"r{round_}-{name}", 1, "driver",
                                   args.warmup, args.trigger_s)
                    run["redis_server_us_per_tuple"] = round((server_cpu_s(args.redis) - before) / run["input_rows"] * 1e6, 3)
                    print(json.dumps({"round": round_, "source": name, **run}), flush=True)
                    if round_ >= 0:
                        runs.append({"source": name, **run})
            total = sum(batch.num_rows for batch in stream)
            alone = {name: reader_alone(spark, sources[name], total, args.warmup, Path(folder) / f"alone-{name}")
                     for name in SOURCES}
        finally:
            spark.stop()
            drop_stream(args.redis, sources["redis"]["stream"])
    report = {"master": redact(args.master), "rows": args.rows, "batch_rows": args.batch_rows, "batches": args.batches,
              "rounds": args.rounds, "algorithm": args.algorithm, "memory": args.memory, "warmup": args.warmup,
              "spark_master": args.spark_master, "runs": runs, "readers_alone": alone}
    print_report(report)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


def server_cpu_s(url: str) -> float:
    """CPU seconds the Redis server has spent (it is no process under the bench: :class:`.cpu.ProcessCpu` misses it)."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        cpu = client.info("cpu")
    finally:
        client.close()
    return cpu["used_cpu_sys"] + cpu["used_cpu_user"]


def drop_stream(url: str, name: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.delete(name)
    finally:
        client.close()


def print_report(report: dict) -> None:
    runs = report["runs"]
    print(f"\n{report['algorithm']} {report['memory']}, R {report['rows']} rows, {report['batches']} micro-batches of "
          f"{report['batch_rows']} tuples, {report['rounds']} rounds after one not reported, {report['spark_master']}, "
          f"the first {report['warmup']} batches of a run left out of the steady figures")
    print("| source | wall tuples/s | steady tuples/s | CPU us a tuple (without Redis) | Redis server CPU us a tuple | exactly once |")
    print("|---|---|---|---|---|---|")
    for name in SOURCES:
        mine = [r for r in runs if r["source"] == name]
        figures = [", ".join(format(r[figure], ",.0f") for r in mine) for figure in ("wall_tuples_per_s", "steady_tuples_per_s")]
        cpu = ", ".join(str(r["cpu"]["us_per_tuple"]["all"]) for r in mine)
        server = ", ".join(str(r["redis_server_us_per_tuple"]) for r in mine)
        print(f"| {name} | {figures[0]} | {figures[1]} | {cpu} | {server} | {'yes' if all(r['exactly_once'] for r in mine) else 'NO'} |")
    pairs = list(zip([r for r in runs if r["source"] == "redis"], [r for r in runs if r["source"] == "files"]))
    for figure in ("wall_tuples_per_s", "steady_tuples_per_s"):
        ratios = [round(r[figure] / f[figure], 3) for r, f in pairs]
        print(f"redis x files, {figure}: {ratios} (median {statistics.median(ratios)})")
    for name, alone in report["readers_alone"].items():
        print(f"the {name} reader alone: {alone['tuples_per_s']:,.0f} tuples/s ({alone['tuples']:,} tuples in {alone['seconds']} s)")


if __name__ == "__main__":
    raise SystemExit(main())
