"""``python -m airflow_provider_semijoin.bench.partitions``: ``partitions = 1`` next to
``partitions = 2`` on a real standalone cluster (a master and two one-core workers started
here), where a micro-batch's time goes, and a scaling estimate for 8-64 workers.

Both run the runner's own join step (:class:`.step.JoinStep`, its queue carried across
micro-batches, the last batch drained) on the same micro-batches of the same Zipf stream against
the same R: ``partitions = 1`` joins in the driver, ``partitions = 2`` through
:class:`.partitioned.PartitionedJoin` (one Spark task per key range of R, each with its own
restricted store and session). Every batch's output goes through the same Parquet sink. The
first ``warmup`` batches (instances built, page maps read, caches cold) are left out. Per batch
of ``partitions = 2`` it splits the time into the parts' engine time (the slice inside the
task: the slowest part bounds the batch), Spark (createDataFrame, the shuffle by part, task
launch, ``toArrow`` collect: the step's wall time minus the slowest part) and the sinks (the
driver's Parquet write).

The estimate (a model, not a measurement): a batch of ``n`` tuples over ``N`` parts costs

    T(N) = D + S + max_p (a * n_p + b * r_p)

with ``D`` the driver's sinks (measured; they do not shrink with N), ``S`` the rest of the
step's time outside the parts - assigning tuples to parts, createDataFrame, the shuffle, task
launch, the collect of ``n`` result rows - measured at N = 2 and taken as constant (one wave of
N tasks on N cores; the rows shipped do not shrink), ``n_p`` the part's tuples - ``n/N``,
but never less than the hottest page's share, which one part must take whole - and ``r_p`` the
rows of R the part reads per batch, measured at N = 2 and taken as ``r_2 * 2/N`` (each part
reads pages of its own range only). ``a`` and ``b`` are fitted by least squares to the
measured parts (tuples, rows read, engine seconds). It assumes N cores for N parts and a
master database that serves N parts' reads as fast as it served two (one MariaDB on two shared
cores does not: the estimate is an upper bound there).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..core.stores import open_store, redact
from ..workloads import generate_master
from ..workloads.zipf import zipf_rows
from ..spark.partitioned import RangePartitioner
from ..spark.step import JoinStep
from ..job.spec import StepSpec
from ..spark.sinks import ParquetSink
from ..spark.standalone import standalone_cluster

WORKERS = (8, 16, 32, 64)


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


def measure(spark, step: StepSpec, parts: int, stream: list[pa.Table], warmup: int, out: Path) -> dict:
    """One configuration over every batch: per-batch seconds and, for parts > 1, the split."""
    join = JoinStep(step, 0, spark=spark, partitions=parts)
    sinks = (ParquetSink(str(out / f"p{parts}" / "matched")), ParquetSink(str(out / f"p{parts}" / "dead")))
    rows = []
    for batch_id, batch in enumerate(stream):
        started = time.perf_counter()
        result = join.run(batch, batch_id, time.time(), -np.inf, -np.inf, batch_id == len(stream) - 1)  # (it checks exactly-once)
        joined = time.perf_counter() - started
        sink_s = write_sinks(sinks, batch_id, result)
        row = {"tuples": result.stats.join.left, "batch_s": joined + sink_s, "join_s": joined, "sink_s": sink_s}
        if parts > 1:
            part_stats = result.stats.join.part_figures()
            slowest = max(p["wall_s"] for p in part_stats)
            row.update(parts=part_stats, slowest_part_s=slowest, spark_s=joined - slowest)
        rows.append(row)
    join.close()
    kept = rows[warmup:-1]  # (the last batch drains)
    summary = {"partitions": parts, "batches": len(kept),
               "tuples_per_s": round(sum(r["tuples"] for r in kept) / sum(r["batch_s"] for r in kept), 1)}
    for name in ("batch_s", "join_s", "sink_s", "slowest_part_s", "spark_s"):
        if name in kept[0]:
            summary[f"median_{name}"] = round(statistics.median(r[name] for r in kept), 4)
    return {**summary, "per_batch": kept}


def fit_parts(runs: list[dict]) -> tuple[float, float]:
    """``(a, b)``: engine seconds per tuple and per row of R read, least squares over the parts."""
    parts = [p for r in runs for p in r["parts"]]
    x = np.array([[p["fed"], p["disk_rows"]] for p in parts], dtype=float)
    y = np.array([p["wall_s"] for p in parts])
    (a, b), *_ = np.linalg.lstsq(x, y, rcond=None)
    return max(float(a), 0.0), max(float(b), 0.0)


def estimate(two: dict, batch_rows: int, hot_share: float) -> dict:
    """Throughput of N parts from the model of the module docstring, fitted on ``two``."""
    a, b = fit_parts(two["per_batch"])
    read = statistics.median(sum(p["disk_rows"] for p in r["parts"]) for r in two["per_batch"])  # rows of R, both parts
    driver = two["median_sink_s"]
    spark = two["median_spark_s"]
    out = {"a_s_per_tuple": a, "b_s_per_row_read": b, "driver_s": driver, "spark_s": spark, "workers": {}}
    for n in (2, *WORKERS):
        tuples = max(batch_rows / n, hot_share * batch_rows)
        part = a * tuples + b * read / n
        out["workers"][n] = {"batch_s": round(driver + spark + part, 4),
                             "tuples_per_s": round(batch_rows / (driver + spark + part), 1),
                             "part_s": round(part, 4)}
    return out


def hottest_page_share(store, stream: list[pa.Table], parts: int) -> float:
    partitioner = RangePartitioner(store, parts)
    pages = np.concatenate([partitioner.page_map.page_of(b["nk"].to_numpy()) for b in stream])
    counts = np.bincount(pages[pages >= 0], minlength=partitioner.page_map.n_pages)
    return float(counts.max() / max(len(pages), 1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="airflow_provider_semijoin.bench.partitions")
    parser.add_argument("--master", default="mysql://semijoin:semijoin@127.0.0.1:3306/semijoin_bench")
    parser.add_argument("--rows", type=int, default=200_000, help="rows of R")
    parser.add_argument("--batch-rows", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--algorithm", default="hybridjoin")
    parser.add_argument("--memory", default="8M")
    parser.add_argument("--zipf", type=float, default=1.0)
    parser.add_argument("--out", default=None, help="write the JSON report here")
    args = parser.parse_args(argv)
    from ..spark.session import get_spark

    table = f"sj_parts_{args.rows}"
    generate_master(args.master, table, args.rows, seed=0)
    step = StepSpec(column="nk", master={"url": args.master, "table": table, "key": "nk"}, algorithm=args.algorithm,
                    memory=args.memory, master_static=True)  # the bench's R: nothing writes it while it runs
    stream = list(batches(args.rows, args.batch_rows, args.batches, args.zipf, seed=1))
    with tempfile.TemporaryDirectory() as folder, standalone_cluster(Path(folder), workers=2, cores=1) as (url, _):
        spark = get_spark(url, app_name="semijoin-partitions-bench", conf={
            "spark.executor.cores": "1", "spark.cores.max": "2", "spark.executor.memory": "1g"})
        try:
            runs = [measure(spark, step, parts, stream, args.warmup, Path(folder)) for parts in (1, 2)]
        finally:
            spark.stop()
    with open_store(args.master, table, "nk") as store:
        hot = hottest_page_share(store, stream, 2)
    report = {"master": redact(args.master), "rows": args.rows, "batch_rows": args.batch_rows,
              "algorithm": args.algorithm, "memory": args.memory, "hottest_page_share": round(hot, 4),
              "runs": runs, "estimate": estimate(runs[1], args.batch_rows, hot)}
    print_report(report)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    return 0


def print_report(report: dict) -> None:
    one, two = report["runs"]
    print(f"R = {report['rows']:,} rows, batches of {report['batch_rows']:,}, {report['algorithm']}, "
          f"memory {report['memory']} (per part: / N), hottest page {report['hottest_page_share']:.1%} of the tuples")
    print("| partitions | tuples/s | batch s | join s | slowest part s | Spark s | sinks s |")
    print("|---|---|---|---|---|---|---|")
    for run in (one, two):
        print(f"| {run['partitions']} | {run['tuples_per_s']:,.0f} | {run['median_batch_s']} | {run['median_join_s']} | "
              f"{run.get('median_slowest_part_s', '-')} | {run.get('median_spark_s', '-')} | {run['median_sink_s']} |")
    e = report["estimate"]
    print(f"model: part s = {e['a_s_per_tuple'] * 1e6:.2f} us/tuple + {e['b_s_per_row_read'] * 1e6:.2f} us/row of R read; "
          f"driver {e['driver_s']} s + Spark {e['spark_s']} s per batch")
    print("| workers | est. batch s | est. part s | est. tuples/s |")
    print("|---|---|---|---|")
    for n, w in e["workers"].items():
        print(f"| {n} | {w['batch_s']} | {w['part_s']} | {w['tuples_per_s']:,.0f} |")


if __name__ == "__main__":
    sys.exit(main())
