"""``python -m airflow_provider_semijoin.bench.data_paths``: the product's streaming query
(:func:`..spark.runner.run_job`) on a Parquet landing folder, as a user runs it, at
``partitions`` 1 and 2 with the rows through the driver (``data_path: driver``) and 1, 2 and 4
with the rows on the executors (``data_path: executors``, :mod:`..spark.executor_rows`), in turn,
``--rounds`` times after ``--warmup-rounds`` not reported (a fresh JVM's first queries cost several
times the CPU of later ones), on the standalone cluster of :mod:`.partitions` (a master and two
one-core workers).

The stream is the Zipf stream of :mod:`.partitions` (``--batch-rows`` a file, one file a
micro-batch: ``max_files_per_trigger: 1``, a backlog), joined with R on MariaDB by one step (or,
``--steps 2``, a pipeline of two lookups: :func:`job_steps`), the sinks Parquet. Per run: the wall clock of ``run_job`` (the query's start-up, every batch and the
drain: what a user waits) and its tuples/s; the steady tuples/s over the batches after the first
``--warmup`` and before the drain; CPU a tuple of every process under the bench and of the
database server over those same batches (:class:`.cpu.ProcessCpu`, read at each progress record),
by class; the parts rebuilt; and the exactly-once check of the sinks: every tuple of the landing
folder left once, and the matched count is the same in every run.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from ..core.stores import redact
from ..job.spec import JobSpec, StepSpec
from ..spark.runner import run_job
from ..spark.sinks import read_parquet_sink
from .cpu import ProcessCpu, cpu_seconds, cpu_split
from .partitions import bench_arguments, bench_cluster, bench_inputs, stream_files, warm_jvms

# (partitions, data_path) of a round, in turn; 4 parts on the 2 cores: the overhead of more parts than cores
CONFIGS = ((1, "driver"), (2, "driver"), (1, "executors"), (2, "executors"), (4, "executors"))


def landing_folder(stream: list[pa.Table], folder: Path) -> Path:
    """The stream's micro-batches as a landing folder, a file each, without the columns the runner adds."""
    stream_files([batch.drop_columns(["sj_id", "sj_arrival"]) for batch in stream], folder)
    return folder


def job_steps(step: StepSpec, table: str, count: int) -> list[dict]:
    """One step joining R's every column; or (``count`` 2) a surrogate-key pipeline of issue 54's
    shape: R's ``sk`` (the unknown member -1 for a key R lacks), then its ``category`` by a second
    lookup, whose parts cut and route the first step's output anew."""
    master = {"url": step.master.url, "table": table, "key": "nk"}
    common = {"column": step.column, "algorithm": step.algorithm, "memory": step.memory, "master_static": True}
    if count == 1:
        return [{**common, "master": master}]
    return [{**common, "master": {**master, "select": ["sk"]}, "rename": {"sk": "product_sk"},
             "on_missing": "unknown_member", "unknown_member": {"product_sk": -1}},
            {**common, "master": {**master, "select": ["category"]}}]


def landing_source(landing: Path) -> dict:
    """The landing folder as the job's source: a file a micro-batch."""
    return {"kind": "files", "path": str(landing), "format": "parquet", "max_files_per_trigger": 1}


def run_once(spark, source: dict, steps: list[dict], out: Path, parts: int, data_path: str, warmup: int,
             trigger_s: float) -> dict:
    """One run of the query over the whole ``source`` (a bounded one); its figures."""
    spec = JobSpec.from_dict({
        "source": source,
        "steps": steps, "checkpoint": str(out / "checkpoint"), "stop": {"end_of_input": True},
        "sinks": {"matched": {"path": str(out / "matched")}, "dead_letter": {"path": str(out / "dead")}},
        "trigger_interval_s": trigger_s, "partitions": parts, "data_path": data_path, "name": "data_paths_bench",
    })
    cpu, records, snapshots = ProcessCpu(), [], []

    def on_progress(record: dict) -> None:
        records.append(record)
        snapshots.append(cpu.snapshot())

    started = time.time()
    summary = run_job(spec, spark=spark, on_progress=on_progress)
    wall_s = time.time() - started
    with_rows = [i for i, r in enumerate(records) if r["input_rows"]]
    first, last = with_rows[warmup - 1] if warmup else with_rows[0] - 1, with_rows[-1]
    tuples = sum(records[i]["input_rows"] for i in range(first + 1, last + 1))
    seconds = records[last]["time"] - records[first]["time"]
    spent = cpu_seconds(snapshots[first], snapshots[last])
    matched, dead = read_parquet_sink(spec.sinks.matched.path), read_parquet_sink(spec.sinks.dead_letter.path)
    ids = pa.concat_arrays([matched["sj_id"].combine_chunks(), dead["sj_id"].combine_chunks()])
    return {
        "partitions": parts, "data_path": data_path, "wall_s": round(wall_s, 2),
        "wall_tuples_per_s": round(summary["input_rows"] / wall_s, 1),
        "steady_tuples_per_s": round(tuples / seconds, 1), "steady_batches": last - first,
        "cpu": cpu_split(spent, seconds, tuples), "part_rebuilds": sum(r["part_rebuilds"] for r in records),
        "input_rows": summary["input_rows"], "matched": summary["matched"],
        "exactly_once": len(ids) == summary["input_rows"] == len(set(ids.to_pylist())),
    }


def summary_of(runs: list[dict]) -> list[dict]:
    """Per configuration: the median over the rounds of each figure, and each round's ratio to
    ``partitions: 1`` of the same round."""
    rows = []
    for parts, data_path in CONFIGS:
        mine = [r for r in runs if (r["partitions"], r["data_path"]) == (parts, data_path)]
        ones = [r for r in runs if (r["partitions"], r["data_path"]) == CONFIGS[0]]
        ratios = {name: [round(m[name] / o[name], 3) for m, o in zip(mine, ones)]
                  for name in ("wall_tuples_per_s", "steady_tuples_per_s")}
        ratios["cpu_us_per_tuple"] = [round(m["cpu"]["us_per_tuple"]["all"] / o["cpu"]["us_per_tuple"]["all"], 3)
                                      for m, o in zip(mine, ones)]
        rows.append({"partitions": parts, "data_path": data_path, "runs": len(mine),
                     "wall_tuples_per_s": statistics.median(r["wall_tuples_per_s"] for r in mine),
                     "steady_tuples_per_s": statistics.median(r["steady_tuples_per_s"] for r in mine),
                     "cpu_us_per_tuple": statistics.median(r["cpu"]["us_per_tuple"]["all"] for r in mine),
                     **{f"{name}_x_p1": values for name, values in ratios.items()},
                     "part_rebuilds": [r["part_rebuilds"] for r in mine],
                     "exactly_once": all(r["exactly_once"] for r in mine)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = bench_arguments("airflow_provider_semijoin.bench.data_paths", batches=8, warmup=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup-rounds", type=int, default=1, help="rounds run first and not reported (the JVMs' JIT)")
    parser.add_argument("--trigger-s", type=float, default=0.05, help="trigger_interval_s (a backlog: no batch waits long)")
    parser.add_argument("--steps", type=int, choices=(1, 2), default=1,
                        help="1: one step; 2: a surrogate-key pipeline of two lookups (the unknown member, then a column)")
    args = parser.parse_args(argv)
    table, step, stream = bench_inputs(args)
    steps = job_steps(step, table, args.steps)
    runs = []
    with tempfile.TemporaryDirectory() as folder, bench_cluster(Path(folder), "semijoin-data-paths-bench", 2) as spark:
        landing = landing_folder(stream, Path(folder) / "landing")
        warmed_s = warm_jvms(spark, args.jvm_warmup_jobs)
        for round_ in range(-args.warmup_rounds, args.rounds):
            for parts, data_path in CONFIGS:
                run = run_once(spark, landing_source(landing), steps, Path(folder) / f"r{round_}-p{parts}-{data_path}",
                               parts, data_path, args.warmup, args.trigger_s)
                print(json.dumps({"round": round_, **run}), flush=True)
                if round_ >= 0:
                    runs.append(run)
    matched = {r["matched"] for r in runs}
    report = {"master": redact(args.master), "rows": args.rows, "batch_rows": args.batch_rows, "batches": args.batches,
              "rounds": args.rounds, "warmup_rounds": args.warmup_rounds,
              "algorithm": args.algorithm, "memory": args.memory, "steps": args.steps, "warmup": args.warmup, "trigger_s": args.trigger_s,
              "jvm_warmup_s": round(warmed_s, 1), "runs": runs, "summary": summary_of(runs),
              "same_matched_in_every_run": len(matched) == 1}
    print_report(report)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


def print_report(report: dict) -> None:
    print(f"\n{report['algorithm']} x {report['steps']} step(s), R {report['rows']} rows, {report['batches']} files of {report['batch_rows']} "
          f"tuples, {report['rounds']} rounds after {report['warmup_rounds']} not reported, the first "
          f"{report['warmup']} batches of a run left out of the steady figures; same matched count in every run: "
          f"{report['same_matched_in_every_run']}")
    print("| partitions, data_path | wall tuples/s (x p=1 a round) | steady tuples/s (x p=1) | CPU us a tuple (x p=1) "
          "| rebuilds | exactly once |")
    print("|---|---|---|---|---|---|")
    for row in report["summary"]:
        print(f"| {row['partitions']}, {row['data_path']} | {row['wall_tuples_per_s']:,.0f} ({row['wall_tuples_per_s_x_p1']}) "
              f"| {row['steady_tuples_per_s']:,.0f} ({row['steady_tuples_per_s_x_p1']}) "
              f"| {row['cpu_us_per_tuple']} ({row['cpu_us_per_tuple_x_p1']}) | {row['part_rebuilds']} "
              f"| {'yes' if row['exactly_once'] else 'NO'} |")


if __name__ == "__main__":
    raise SystemExit(main())
