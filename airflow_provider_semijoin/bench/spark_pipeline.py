"""``semijoin bench --spark``: what the Spark pipeline sustains, what Spark costs, and Spark's
own stream-static join, measured in one run on the same master table and the same stream.

For HYBRIDJOIN and the best cache algorithm (picked by measuring the cache family in the core
engine first, :func:`pick_cache_algorithm`; or the algorithms given) it measures three paths:

* ``spark pipeline``: the product's streaming query (:func:`.runner.run_job`): the built-in
  generator source -> ``foreachBatch`` (collect, a slice of the engine, Parquet sinks, state),
  the join working ahead between micro-batches (:mod:`..spark.ahead`); and the same query with
  the join idle between them (``work_ahead: false``, throughput only): what working ahead gains.
* ``core, Spark's batches``: the engine's :class:`..core.session.JoinSession` fed the same
  stream tuples in the same micro-batches, each stepped for a slice with the queue carried, as
  the pipeline does, without Spark. Overhead ratio = this rate / the pipeline's rate: what
  Spark itself costs (source, scheduling, Arrow transfers, sinks, state, progress).
* ``core, continuous``: the engine alone fed without micro-batches, as ``semijoin bench``
  measures it. The service rate is w / c_loop with w, the tuples matched per page load, growing
  with the tuples in H_S (HYBRIDJOIN sec. 4.4, eq. 2 and 4); the pipeline carries H_S across
  micro-batches (:mod:`.joinstate`), so it keeps H_S as full as a continuous join does.

and once Spark's own way, ``spark stream-static``: ``foreachBatch`` joins each micro-batch with
R read afresh from the database (a left join planned by Spark, then the same Parquet sinks), R
through Spark's JDBC source with Debian's MariaDB driver jar (``libmariadb-java``), or, where no
driver is available (SQLite, no jar), through our store's full scan into a DataFrame.

Throughput (the papers' service rate, HYBRIDJOIN sec. 6.1): the source offers more than the
pipeline can take - every generated tuple has arrived, and an admission limit of
``batch_rows`` tuples per micro-batch (``GeneratorSource.max_rows_per_batch``, what Kafka's
``maxOffsetsPerTrigger`` does) keeps the batches at one size - so the rate is the pipeline's,
not the source's. The window opens
``warmup_s`` after the end of the first micro-batch (which carries Spark's start-up) at the end
of a micro-batch and closes at the end of the first micro-batch ``window_s`` later; the rate is
the tuples of its micro-batches over that time. The core paths keep a backlog and run their
clock only while joining, as ``semijoin bench`` does.

Latency: the same paths offered a fixed moderate rate (``latency_rate``, default half of the
slowest Spark path's throughput, which every Spark path can sustain), p99 from a tuple's arrival
(the generator's scheduled time) to the end of the micro-batch that wrote it (core, continuous:
to its completion) over the window. A run that completes less than 90% of the offered rate in
its window is marked: its p99 counts only the tuples that completed (MESHJOIN-based algorithms
hold a tuple for a whole cycle over R). A last run per algorithm offers a quiet 5,000 tuples/s
with a 1 s trigger and ``max_queue_time_s`` 2: its largest latency shows whether every tuple
left within its maximum wait. Exactly once: every path's output is checked - each
tuple offered up to the last completed micro-batch (or, in the core, fed and then drained) left
once, matched or unmatched (the bench's R has a unique key, so once means one output row).

The no-join query (the same query collecting and writing each micro-batch whole) runs first: it
is the ceiling of any join through this Spark, and it leaves Spark's JVM warm (its JIT compiled
the source, collect and sink paths) for every path after it: a pipeline run first in a fresh JVM
spends markedly more of the JVM's CPU a tuple than one run after the no-join query
(``docs/measurements.md``).

CPU: each Spark path reports the cores its processes kept busy over the window and their CPU
microseconds a tuple (driver, Spark's JVM, Spark's Python workers, the database server when it
runs here: :mod:`.cpu`), the core engine its own (driver and database, while it steps). Their
sum for the no-join query and the engine alone bounds any pipeline on this machine's cores
(:func:`overlap_bound`), however well the two overlap.

Machines are shared and noisy: compare the rows of one run, not figures from different runs.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from .cpu import cpu_bound
from .spark_paths import (CORE_CONTINUOUS, KEPT_UP_SHARE, KEY, NO_JOIN, PIPELINE, QUIET_MAX_QUEUE_S, QUIET_RATE,
                          QUIET_TRIGGER_S, STREAM_STATIC, SparkBenchConfig, run_core_batches, run_core_continuous,
                          run_pipeline, run_stream_static)
from .steady import BenchConfig, bench_master, measure
from ..core.calibration import calibrate
from ..core.joins.registry import CACHE_ALGORITHMS
from ..core.stores import open_store, redact


def pick_cache_algorithm(config: BenchConfig, table: str, shape: str, out=print) -> tuple[str, list[dict]]:
    """The cache algorithm with the highest service rate in the core engine (``semijoin bench``'s
    measurement, half its warm-up and window each), and every one's result."""
    quick = dataclasses.replace(config, shapes=[shape], algorithms=list(CACHE_ALGORITHMS),
                                warmup_s=config.warmup_s / 2, window_s=config.window_s / 2, io_samples=0)
    with open_store(config.master, table, KEY) as store:
        costs = calibrate(store)
    results = []
    for name in CACHE_ALGORITHMS:
        r = measure(quick, table, name, shape, costs=costs)
        out(f"  core engine {name:<14} {r['service_rate_tps']:>12,.0f} tuples/s")
        results.append({"algorithm": name, "service_rate_tps": r["service_rate_tps"]})
    return max(results, key=lambda r: r["service_rate_tps"])["algorithm"], results


# -- the whole run ---------------------------------------------------------------------------------
def moderate_rate(spark_rates: list[float | None]) -> float:
    """Half the slowest Spark path's throughput, rounded down to two significant digits."""
    slowest = min(r for r in spark_rates if r) / 2
    digits = 10 ** max(0, int(np.floor(np.log10(slowest))) - 1)
    return float(max(1, int(slowest // digits) * digits))


def spark_session(config: SparkBenchConfig, spark=None):
    """``(session, created, jdbc)``: the given or active session, or a new one on
    ``spark_master`` with the JDBC driver jar; ``jdbc``: the jar is on its classpath."""
    jar = config.jdbc_jar if config.jdbc_jar and Path(config.jdbc_jar).is_file() else None
    if spark is None:
        from pyspark.sql import SparkSession

        from ..spark.session import get_spark

        created = SparkSession.getActiveSession() is None
        spark = get_spark(config.spark_master, app_name="semijoin-bench", conf={"spark.jars": jar} if jar else None)
    else:
        created = False
    jdbc = bool(jar) and jar in spark.sparkContext.getConf().get("spark.jars", "")
    return spark, created, jdbc


FALLING_BEHIND_LOGGER = "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor"


def quiet_falling_behind(spark):
    """Spark's "Current batch is falling behind" WARN at ERROR while the bench runs; returns
    what sets it back. The throughput runs trigger every 1 ms on purpose (a backlog: each
    micro-batch starts as the one before ends), which printed that line once a micro-batch."""
    jvm = spark.sparkContext._jvm
    configurator = jvm.org.apache.logging.log4j.core.config.Configurator
    before = jvm.org.apache.logging.log4j.LogManager.getLogger(FALLING_BEHIND_LOGGER).getLevel()
    configurator.setLevel(FALLING_BEHIND_LOGGER, jvm.org.apache.logging.log4j.Level.ERROR)
    return lambda: configurator.setLevel(FALLING_BEHIND_LOGGER, before)


def run_spark_bench(config: SparkBenchConfig, out=print, spark=None, clock=time.perf_counter) -> dict:
    core = config.core
    started = clock()
    table, cache = bench_master(core.master, core.rows, out, clock)
    workdir = Path(config.workdir or tempfile.mkdtemp(prefix="semijoin-spark-bench-"))
    report = {"config": describe(config), "command": command(config), "server_cache": cache, "shapes": []}
    try:
        for shape in core.shapes:
            report["shapes"].append(bench_shape(config, table, shape, workdir / shape, out, spark, clock))
    finally:
        if config.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    report["seconds"] = round(clock() - started, 1)
    out(f"command ({report['seconds']:,.0f} s): {report['command']}")
    return report


def bench_shape(config: SparkBenchConfig, table: str, shape: str, workdir: Path, out, spark, clock) -> dict:
    """Every path of every algorithm on one stream shape. Each algorithm's core paths run right
    after its Spark pipeline, so the rows compared in a ratio ran under the same machine load."""
    core = config.core
    picked = None
    algorithms = list(config.algorithms or [])
    if not algorithms:
        out(f"{shape}: picking the cache algorithm in the core engine "
            f"({core.warmup_s / 2:g} s warm-up, {core.window_s / 2:g} s window each)")
        best, picked = pick_cache_algorithm(core, table, shape, out)
        algorithms = ["hybridjoin", best]
    spark, created, jdbc = spark_session(config, spark)
    restore_logger = quiet_falling_behind(spark)
    runs = itertools.count()

    def run_dir() -> Path:
        return workdir / f"run{next(runs)}"

    rows = []
    try:
        # first: the ceiling of any join through this Spark, which also warms Spark's JVM (its JIT
        # compiles the source, collect and sink paths) for every path measured after it
        no_join = run_stream_static(spark, config, table, shape, run_dir(), None, jdbc, join_master=False)
        out(f"  {shape} {NO_JOIN:<14} {no_join['path']:<24} {no_join['tuples_per_s'] or 0:>12,.0f} tuples/s")
        for name in algorithms:
            pipeline = run_pipeline(spark, config, table, name, shape, run_dir(), None)
            resting = run_pipeline(spark, config, table, name, shape, run_dir(), None, work_ahead=False)
            batches = run_core_batches(core, table, name, shape, pipeline["batch_rows"], pipeline["first_window_batch"] or 0, clock)
            continuous = run_core_continuous(core, table, name, shape, None, clock)
            for r in (batches, continuous):
                r["overhead_ratio"] = _ratio(r["tuples_per_s"], pipeline["tuples_per_s"])
            resting["overhead_ratio"] = _ratio(pipeline["tuples_per_s"], resting["tuples_per_s"])
            rows += [pipeline, resting, batches, continuous]
            for r in (pipeline, resting, batches, continuous):
                out(f"  {shape} {name:<14} {r['path']:<24} {r['tuples_per_s'] or 0:>12,.0f} tuples/s")
        static = run_stream_static(spark, config, table, shape, run_dir(), None, jdbc)
        rows.append(static)
        out(f"  {shape} {STREAM_STATIC:<14} {static['path']:<24} {static['tuples_per_s'] or 0:>12,.0f} tuples/s")
        rows.append(no_join)
        for r in rows:
            if r["path"] == PIPELINE:
                r["vs_stream_static"] = _ratio(r["tuples_per_s"], static["tuples_per_s"])
                r["vs_no_join"] = _ratio(r["tuples_per_s"], no_join["tuples_per_s"])
                continuous = next(c for c in rows if c["algorithm"] == r["algorithm"] and c["path"] == CORE_CONTINUOUS)
                r["cpu_bound"] = overlap_bound(no_join, continuous)
        rate = config.latency_rate or moderate_rate([r["tuples_per_s"] for r in rows if is_spark(r)])
        out(f"  latency runs offered {rate:,.0f} tuples/s ({latency_settings(config)})")
        for r in rows:
            if r["path"] == PIPELINE:
                paced = run_pipeline(spark, config, table, r["algorithm"], shape, run_dir(), rate,
                                     max_queue_time_s=config.latency_max_queue_s)
            elif r["path"] == CORE_CONTINUOUS:
                paced = run_core_continuous(core, table, r["algorithm"], shape, rate, clock)
            elif r["algorithm"] == STREAM_STATIC:
                paced = run_stream_static(spark, config, table, shape, run_dir(), rate, jdbc)
            else:
                continue
            r.update(latency=paced, latency_ms_p99=paced["latency_ms_p99"], latency_kept_up=kept_up(paced, rate))
            out(f"  {shape} {r['algorithm']:<14} {r['path']:<24} p99 {paced['latency_ms_p99'] or 0:>10,.1f} ms")
        for r in rows:
            if r["path"] == PIPELINE:
                quiet = run_pipeline(spark, config, table, r["algorithm"], shape, run_dir(), QUIET_RATE, QUIET_TRIGGER_S,
                                     QUIET_MAX_QUEUE_S)
                r["quiet"] = quiet
                out(f"  {shape} {r['algorithm']:<14} {QUIET_RATE:,.0f} tuples/s, trigger {QUIET_TRIGGER_S:g} s: "
                    f"max latency {quiet['latency_ms_max'] or 0:,.1f} ms (max_queue_time {QUIET_MAX_QUEUE_S:g} s)")
    finally:
        restore_logger()
        if created:
            spark.stop()
    result = {"shape": shape, "latency_rate": rate, "cache_pick": picked, "rows": rows}
    for line in format_table(result, config):
        out(line)
    return result


def overlap_bound(no_join: dict, continuous: dict) -> dict | None:
    """The most a pipeline could reach on this machine's cores were Spark's path and the engine
    overlapped perfectly: the cores over the CPU a tuple costs Spark's path alone (the no-join
    query: source, collect, sinks) plus the engine alone (core, continuous: the driver and the
    database while it steps) (:func:`.cpu.cpu_bound`); the pipeline spends more (output rows,
    state), so this is an upper bound - and where it is below 2/3 of the core's rate, so is the
    pipeline, whatever overlaps."""
    if not no_join.get("cpu") or not continuous.get("cpu"):
        return None
    spark_us, engine_us = no_join["cpu"]["us_per_tuple"]["all"], continuous["cpu"]["us_per_tuple"]["all"]
    bound = cpu_bound(spark_us + engine_us)
    return {"spark_path_us": spark_us, "engine_us": engine_us, "cores": os.cpu_count(), "tuples_per_s": bound,
            "of_core_continuous": _ratio(bound, continuous["tuples_per_s"])}


def kept_up(paced: dict, rate: float) -> bool:
    """Whether a latency run completed at least 90% of the offered rate over its window; if not,
    its p99 counts only the tuples that completed and understates the latency."""
    return (paced["tuples_per_s"] or 0) >= KEPT_UP_SHARE * rate


def is_spark(row: dict) -> bool:
    return row["path"] == PIPELINE or row["algorithm"] == STREAM_STATIC


def _ratio(core_rate: float | None, spark_rate: float | None) -> float | None:
    return round(core_rate / spark_rate, 2) if core_rate and spark_rate else None


# -- the table and the command ---------------------------------------------------------------------
def format_table(result: dict, config: SparkBenchConfig) -> list[str]:
    core = config.core
    lines = [
        "",
        f"Spark bench, shape {result['shape']}, Zipf {core.zipf:g}, memory {core.memory / 2**20:.4g} MiB, "
        f"R = {core.rows:,} rows, Spark {config.spark_master}",
        f"tuples/s: backlog, {config.batch_rows:,} tuples per micro-batch, window {core.window_s:g} s after "
        f"{core.warmup_s:g} s warm-up; p99: arrival to output at {result['latency_rate']:,.0f} tuples/s offered "
        f"({latency_settings(config)})",
        f"{'algorithm':<14} {'path':<38} {'tuples/s':>11} {'p99 ms':>10} {'overhead':>8} {'exactly once':>12}",
    ]
    for r in result["rows"]:
        p99 = r.get("latency_ms_p99")
        p99_text = "-" if p99 is None else f"{p99:,.1f}{'' if r['latency_kept_up'] else '*'}"
        ratio = r.get("overhead_ratio")
        once = r["exactly_once"]["ok"] and r.get("latency", {}).get("exactly_once", {"ok": True})["ok"]
        lines.append(
            f"{r['algorithm']:<14} {r['path']:<38} {r['tuples_per_s'] or 0:>11,.0f} {p99_text:>10} "
            f"{f'{ratio:.2f}' if ratio is not None else '-':>8} {'yes' if once else 'NO':>12}"
        )
    if any(r.get("latency_kept_up") is False for r in result["rows"]):
        lines.append(f"* its latency run completed less than {KEPT_UP_SHARE:.0%} of the offered rate in the window: "
                     "the p99 counts only the tuples that completed and understates the latency")
    lines.append("overhead = core tuples/s / Spark pipeline tuples/s of the same algorithm; on the no-work-ahead "
                 "row: the pipeline's gain from working ahead (its tuples/s / this row's)")
    for r in result["rows"]:
        if r.get("vs_stream_static") is not None:
            lines.append(f"{r['algorithm']} pipeline: {r['vs_stream_static']:.2f}x Spark's stream-static join, "
                         f"{r['vs_no_join'] or 0:.2f}x the same query with no join (the ceiling of any join through "
                         f"this Spark: source, collect, sinks)")
    for r in result["rows"]:
        quiet = r.get("quiet")
        if quiet:
            worst = quiet["latency_ms_max"]
            within = worst is not None and worst <= QUIET_MAX_QUEUE_S * 1000
            lines.append(f"{r['algorithm']} pipeline at {QUIET_RATE:,.0f} tuples/s, trigger {QUIET_TRIGGER_S:g} s: "
                         f"p99 {quiet['latency_ms_p99'] or 0:,.1f} ms, max {worst or 0:,.1f} ms - every tuple within "
                         f"max_queue_time {QUIET_MAX_QUEUE_S:g} s: {'yes' if within else 'NO'}; "
                         f"exactly once: {'yes' if quiet['exactly_once']['ok'] else 'NO'}")
    for r in result["rows"]:
        split = r.get("batch_split_s")
        if split:
            lines.append(
                f"{r['algorithm']} {r['path']}: micro-batch {split['cycle']:.2f} s = engine {split['engine']:.2f} s "
                f"+ output, sinks {split['rest_of_foreach_batch']:.2f} s + Spark (source, collect, scheduling) "
                f"{split['spark_outside_foreach_batch']:.2f} s; the engine worked ahead {split['engine_ahead']:.2f} s "
                f"meanwhile (window means)"
            )
    for r in result["rows"]:
        if r.get("cpu") and r["path"] != CORE_CONTINUOUS:
            lines.append(f"{r['algorithm']} {r['path']}: {cpu_text(r['cpu'])}")
        bound = r.get("cpu_bound")
        if bound:
            lines.append(
                f"{r['algorithm']}: Spark's path alone costs {bound['spark_path_us']:.2f} us of CPU a tuple (no join), "
                f"the engine alone {bound['engine_us']:.2f} us (core, continuous: driver and database); perfectly "
                f"overlapped on {bound['cores']} cores at most {bound['tuples_per_s'] or 0:,.0f} tuples/s, "
                f"{bound['of_core_continuous'] or 0:.2f}x the core continuous"
            )
    if result["cache_pick"]:
        cells = ", ".join(f"{r['algorithm']} {r['service_rate_tps']:,.0f}" for r in result["cache_pick"])
        lines.append(f"cache algorithm picked in the core engine (tuples/s): {cells}")
    return lines


CPU_NAMES = {"driver": "driver", "spark_jvm": "Spark JVM", "spark_python": "Spark Python workers", "database": "database"}


def cpu_text(cpu: dict) -> str:
    """``CPU a tuple <all> us = driver <us> + ...; <busy> of <n> cores busy`` (window means)."""
    parts = " + ".join(f"{name} {cpu['us_per_tuple'][kind]:.2f}" for kind, name in CPU_NAMES.items())
    return (f"CPU a tuple {cpu['us_per_tuple']['all']:.2f} us = {parts}; {cpu['cores']['all']:.2f} of "
            f"{os.cpu_count()} cores busy")


def latency_settings(config: SparkBenchConfig) -> str:
    wait = config.latency_max_queue_s
    return f"trigger {config.trigger_s:g} s, max_queue_time {'the default' if wait is None else f'{wait:g} s'}"


def size_text(n_bytes: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes % size == 0:
            return f"{n_bytes // size}{unit}"
    return str(n_bytes)


def describe(config: SparkBenchConfig) -> dict:
    data = dataclasses.asdict(config)
    data["core"]["master"] = redact(config.core.master)
    for unused in ("algorithms", "sweep_cache", "io_samples"):  # the core bench's, not this one's
        data["core"].pop(unused)
    return data


def command(config: SparkBenchConfig) -> str:
    """The ``semijoin bench --spark`` command line that repeats this run (password redacted)."""
    core = config.core
    parts = ["semijoin bench --spark", f"--master {redact(core.master)}", f"--rows {core.rows}",
             f"--memory {size_text(core.memory)}", f"--zipf {core.zipf:g}", f"--shapes {','.join(core.shapes)}"]
    if config.algorithms:
        parts.append(f"--algorithms {','.join(config.algorithms)}")
    parts += [f"--warmup {core.warmup_s:g}", f"--window {core.window_s:g}", f"--seed {core.seed}",
              f"--spark-batch-rows {config.batch_rows}"]
    if config.latency_rate:
        parts.append(f"--spark-rate {config.latency_rate:g}")
    parts.append(f"--spark-trigger {config.trigger_s:g}")
    if config.latency_max_queue_s is not None:
        parts.append(f"--spark-max-queue-time {config.latency_max_queue_s:g}")
    parts += [f"--set {k}={v}" for k, v in core.params.items()]
    return " ".join(parts)
