"""The paths ``semijoin bench --spark`` measures (:mod:`.spark_pipeline` says what each one
is and how it is timed): the product's Spark pipeline (:func:`run_pipeline`), Spark's own
stream-static join and the no-join query (:func:`run_stream_static`), and the core engine fed
Spark's micro-batches (:func:`run_core_batches`) or continuously (:func:`run_core_continuous`);
with the settings they share (:class:`SparkBenchConfig`)."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .cpu import DATABASE, DRIVER, CpuTally, ProcessCpu, cpu_split
from .spark_window import BatchWindow, TupleLedger, spark_result
from .steady import CHUNK_ROWS, BenchConfig, Stopwatch, backlog_target, check_registry_names, top_up
from ..core.checks import check_positive
from ..core.errors import ConfigError
from ..core.joins import JoinOutput, StreamBuffer, create
from ..core.keys import normalize, sorted_distinct
from ..core.metrics import latency_ms
from ..core.reasons import Unmatched
from ..core.runner import feed_keys
from ..core.session import JoinSession
from ..core.stores import open_store
from ..core.stores.sql import MYSQL, DatabaseURL
from ..workloads.zipf import SHAPES as GENERATOR_SHAPES
from ..workloads.zipf import zipf_rows
from ..spark.runner import end_after_batch, run_job
from ..spark.sinks import DEAD_LETTER_SCHEMA, ParquetSink, dead_letter_rows
from ..spark.sources import stream_frame
from ..job.sources import GeneratorSource, source_from_dict
from ..job.spec import JobSpec

KEY = "nk"  # the join key of the bench's master table and stream
DEFAULT_JDBC_JAR = "/usr/share/java/mariadb-java-client.jar"  # Debian's libmariadb-java
JDBC_DRIVER = "org.mariadb.jdbc.Driver"
JDBC_FETCH_ROWS = 10_000  # the driver streams R in rows of this many instead of holding it whole
BACKLOG_RATE = 1e12  # tuples/s offered in the throughput runs: all have arrived, the admission limit decides
STREAM_STATIC = "spark-join"
NO_JOIN = "spark-no-join"  # the same query with no join at all: the ceiling of any join through this Spark
R_KEY = "sj_master_key"  # R's key column in the stream-static join (the stream has its own nk)
PIPELINE, CORE_BATCHES, CORE_CONTINUOUS = "spark pipeline", "core, Spark's batches", "core, continuous"
PIPELINE_RESTING = "spark pipeline, no work ahead"  # the join idle between micro-batches (spark.ahead off)
KEPT_UP_SHARE = 0.9  # a latency run that completes less than this share of the offered rate fell behind
ENDING_WAIT_S = 30.0  # a stream-static query ends itself after the micro-batch following its window, or is stopped
STOP_GRACE_S = 300.0  # a run whose window is not complete this long after warm-up + window stops anyway
QUIET_RATE, QUIET_TRIGGER_S, QUIET_MAX_QUEUE_S = 5000.0, 1.0, 2.0  # the bounded-wait run: a quiet stream


@dataclass
class SparkBenchConfig:
    """The core bench's settings (master, rows, memory, zipf, shapes, warm-up, window, params,
    seed) plus the Spark ones. ``algorithms`` None: HYBRIDJOIN and the best cache algorithm.
    ``latency_rate`` None: half of the slowest Spark path's throughput. ``latency_max_queue_s``:
    the steps' ``max_queue_time_s`` in the latency runs (None: the step's default), the longest a
    tuple may wait inside the join: what a user who wants a p99 bound sets."""

    core: BenchConfig
    algorithms: list[str] | None = None
    batch_rows: int = 1_000_000
    latency_rate: float | None = None
    trigger_s: float = 0.5
    latency_max_queue_s: float | None = None
    spark_master: str = "local[2]"
    jdbc_jar: str | None = DEFAULT_JDBC_JAR
    workdir: str | None = None

    def __post_init__(self) -> None:
        for i, shape in enumerate(self.core.shapes):
            if shape not in GENERATOR_SHAPES:
                raise ConfigError(f"shapes[{i}]: {shape!r} is not a stream shape of the Spark generator source "
                                  f"(one of {list(GENERATOR_SHAPES)})")
        check_registry_names(self.algorithms or [])
        check_positive("batch_rows", self.batch_rows, "a positive number of tuples per micro-batch", integer=True)
        check_positive("latency_rate", self.latency_rate, "a positive number of tuples per second", optional=True)
        check_positive("trigger_s", self.trigger_s, "a positive number of seconds")
        check_positive("latency_max_queue_s", self.latency_max_queue_s, "a positive number of seconds", optional=True)


# -- the source of the throughput runs ------------------------------------------------------------
def source_fields(config: BenchConfig, shape: str, rate: float | None, batch_rows: int) -> dict:
    """The job's ``source``: the generator offered at ``rate``, or (None)
    a backlog - every tuple has arrived - read ``batch_rows`` per micro-batch
    (``GeneratorSource.max_rows_per_batch``, the one way to cap a micro-batch)."""
    generator = GeneratorSource(rows_per_second=rate or BACKLOG_RATE, master_rows=config.rows, exponent=config.zipf,
                                shape=shape, seed=config.seed, max_rows_per_batch=None if rate is not None else batch_rows)
    return {"source": generator.to_dict()}


def stream_rows(config: BenchConfig, shape: str, start: int, end: int) -> pa.Table:
    """Tuples ``start .. end - 1`` of the generator's stream (the same ones Spark reads)."""
    return zipf_rows(start, end, config.rows, exponent=config.zipf, shape=shape, seed=config.seed)


# -- the Spark pipeline ----------------------------------------------------------------------------
def run_pipeline(spark, config: SparkBenchConfig, table: str, algorithm: str, shape: str, out: Path,
                 rate: float | None, trigger_s: float | None = None, max_queue_time_s: float | None = None,
                 work_ahead: bool = True, step_options: dict | None = None, window: BatchWindow | None = None,
                 job_options: dict | None = None) -> dict:
    """The product's streaming query for ``algorithm``: a backlog (``rate`` None: every tuple
    has arrived, so no tuple is forced out by its wait) or ``rate`` with each tuple forced out
    after ``max_queue_time_s`` (None: the step's default); ``work_ahead``: the join goes on
    between micro-batches (the product's default). ``step_options`` go on the step (e.g.
    ``change_capture``), ``job_options`` on the job (e.g. ``partitions``); ``window``: the
    caller's (it sees the records and the stop)."""
    core = config.core
    step = {"column": KEY, "master": {"url": core.master, "table": table, "key": KEY},
            "algorithm": algorithm, "memory": core.memory, "params": core.params_for(algorithm),
            "master_static": True,  # the bench's R: nothing writes it while it runs (unless step_options say)
            **(step_options or {})}
    if rate is None or max_queue_time_s is not None:
        step["max_queue_time_s"] = max_queue_time_s
    spec = JobSpec.from_dict({
        **source_fields(core, shape, rate, config.batch_rows),
        "steps": [step],
        "sinks": {"matched": {"path": str(out / "matched")}, "dead_letter": {"path": str(out / "dead")}},
        "checkpoint": str(out / "checkpoint"),
        "name": "semijoin_bench",
        "trigger_interval_s": (trigger_s or config.trigger_s) if rate is not None else 0.001,
        "stop": {"duration_s": core.warmup_s + core.window_s + STOP_GRACE_S},
        "work_ahead": work_ahead,
        **(job_options or {}),
    })
    window = window or BatchWindow(core.warmup_s, core.window_s)
    run_job(spec, spark=spark, on_progress=window, stop_event=window.stop)
    path = PIPELINE if work_ahead else PIPELINE_RESTING
    return {**spark_result(algorithm, path, window, out, rate), "max_queue_time_s": spec.steps[0].max_queue_time_s}


# -- Spark's own stream-static join ----------------------------------------------------------------
class MasterReader:
    """R as a Spark DataFrame, read afresh at every call: through Spark's JDBC source (MySQL /
    MariaDB with the driver jar on Spark's classpath, read in key ranges by all cores), or
    through our store's full scan (one range query over every page) otherwise."""

    def __init__(self, spark, url: str, table: str, jdbc: bool):
        self.spark, self.url, self.table = spark, url, table
        self.store = open_store(url, table, KEY)
        self.columns = [KEY, *self.store.select]
        self.jdbc = jdbc and self.store.dialect is MYSQL
        self.via = "JDBC" if self.jdbc else "store scan"

    def __call__(self):
        return self._jdbc() if self.jdbc else self._scan()

    def _jdbc(self):
        db = DatabaseURL.parse(self.url)
        reader = (
            self.spark.read.format("jdbc")
            .option("url", f"jdbc:mysql://{db.host}:{db.port}/{db.database}")  # Spark's MySQL dialect (backquotes)
            .option("driver", JDBC_DRIVER)
            .option("user", db.user)
            .option("password", db.password)
            .option("dbtable", MYSQL.quote(self.table, "table"))
            .option("fetchsize", JDBC_FETCH_ROWS)
        )
        page_map = self.store.page_map()
        if self.store.key_type.kind == "int" and page_map.n_keys:
            reader = (
                reader.option("partitionColumn", KEY)
                .option("lowerBound", int(page_map.bounds[0]))
                .option("upperBound", int(page_map.max_key) + 1)
                .option("numPartitions", self.spark.sparkContext.defaultParallelism)
            )
        return reader.load().select(*self.columns)

    def _scan(self):
        page_map = self.store.page_map()
        page = self.store.load_pages(page_map, 0, page_map.n_pages)
        keys = pa.array(page.keys)
        if self.store.key_type.kind == "str":
            keys = keys.cast(pa.string())
        return self.spark.createDataFrame(page.rows.add_column(0, KEY, keys))

    def close(self) -> None:
        self.store.close()


class StreamStaticJoin:
    """``foreachBatch`` body of Spark's stream-static join: the micro-batch left-joined with R
    read afresh, collected, written to the same Parquet sinks as the pipeline's, one progress
    record (``batch_id``, ``time``, ``input_rows``) per micro-batch. With no ``read_master``, no
    join: the micro-batch collected and written whole, what Spark and the sinks cost alone."""

    def __init__(self, read_master: MasterReader | None, out: Path, on_progress, clock=time.time):
        self.read_master = read_master
        self.matched = ParquetSink(str(out / "matched"))
        self.dead = ParquetSink(str(out / "dead"))
        self.on_progress = on_progress
        self.clock = clock
        self.stopping = threading.Event()
        self.busy = threading.Lock()  # held during a micro-batch: the query stops between them
        self.query = None  # set once started: the first micro-batch after ``stopping`` has it end on its own

    def __call__(self, frame, batch_id: int) -> None:
        with self.busy:
            if not self.stopping.is_set():  # once the window is measured, the rest passes untouched
                self._join(frame, batch_id)
                return
        if self.query is not None:  # ends after this batch's commit: query.stop() then interrupts no log write
            end_after_batch(self.query)

    def _join(self, frame, batch_id: int) -> None:
        if self.read_master is None:
            return self._pass(frame.toArrow(), batch_id)
        master = self.read_master().withColumnRenamed(KEY, R_KEY)
        rows = frame.join(master, frame[KEY] == master[R_KEY], "left").toArrow()
        rows = rows.add_column(0, "sj_id", pc.cast(rows["tid"], pa.string()))
        found = pc.is_valid(rows[R_KEY])
        missed = rows.filter(pc.invert(found)).select([c for c in rows.column_names if c not in master.columns])
        reasons = pc.if_else(pc.is_null(missed[KEY]), Unmatched.NULL_KEY.label, Unmatched.NOT_IN_MASTER.label)
        self.matched.write(batch_id, rows.filter(found).drop_columns([R_KEY]))
        self.dead.write(batch_id, dead_letter_rows(missed, 0, reasons))
        self.on_progress({"batch_id": batch_id, "time": self.clock(), "input_rows": rows.num_rows, "queue_tuples": 0,
                          "matched": int(pc.sum(found).as_py() or 0), "unmatched": missed.num_rows})

    def _pass(self, rows: pa.Table, batch_id: int) -> None:
        """No join: every tuple of the micro-batch to the matched sink as it came."""
        self.matched.write(batch_id, rows.add_column(0, "sj_id", pc.cast(rows["tid"], pa.string())))
        self.dead.write(batch_id, DEAD_LETTER_SCHEMA.empty_table())
        self.on_progress({"batch_id": batch_id, "time": self.clock(), "input_rows": rows.num_rows, "queue_tuples": 0,
                          "matched": rows.num_rows, "unmatched": 0})


def run_stream_static(spark, config: SparkBenchConfig, table: str, shape: str, out: Path, rate: float | None,
                      jdbc: bool, poll_s: float = 0.2, join_master: bool = True) -> dict:
    """Spark's stream-static join over the same stream, a backlog (``rate`` None) or ``rate``;
    ``join_master`` False: the same query with no join (:data:`NO_JOIN`)."""
    core = config.core
    fields = source_fields(core, shape, rate, config.batch_rows)
    frame, _ = stream_frame(spark, source_from_dict(fields["source"]))
    window = BatchWindow(core.warmup_s, core.window_s)
    read_master = MasterReader(spark, core.master, table, jdbc) if join_master else None
    join = StreamStaticJoin(read_master, out, window)
    trigger = f"{config.trigger_s if rate is not None else 0.001} seconds"
    query = (frame.writeStream.foreachBatch(join).option("checkpointLocation", str(out / "checkpoint"))
             .queryName("semijoin_bench_stream_static").trigger(processingTime=trigger).start())
    join.query = query
    give_up = time.monotonic() + core.warmup_s + core.window_s + STOP_GRACE_S
    try:
        while not window.stop.wait(poll_s) and time.monotonic() < give_up:
            if not query.isActive:
                break
    finally:
        join.stopping.set()
        with contextlib.suppress(Exception):  # a failed query raises here: query.exception() below says why
            query.awaitTermination(ENDING_WAIT_S + config.trigger_s)  # the next micro-batch ends the query
        with join.busy:
            query.stop()
        if read_master is not None:
            read_master.close()
    if query.exception() is not None:
        raise RuntimeError(f"the stream-static query failed: {str(query.exception()).splitlines()[0]}")
    if read_master is None:
        return spark_result(NO_JOIN, "spark collect + sinks, no join", window, out, rate)
    return {**spark_result(STREAM_STATIC, f"spark stream-static, R via {read_master.via}", window, out, rate),
            "master_read": read_master.via}


# -- the core engine alone -------------------------------------------------------------------------
def run_core_batches(config: BenchConfig, table: str, algorithm: str, shape: str, batch_rows: list[int],
                     first_window_batch: int, clock=time.perf_counter) -> dict:
    """The engine alone over the stream tuples of a Spark run, in the same micro-batches, each fed
    to one :class:`JoinSession` and stepped for a slice as the pipeline does (the queue carried,
    no drain until the end); the rate over the Spark run's window batches counts only the time
    in the slices, and the tuples they completed."""
    window_s, window_tuples, start = 0.0, 0, 0
    ledger = TupleLedger()
    with open_store(config.master, table, KEY) as store:
        session = JoinSession(create(algorithm, store, config.memory, config.params_for(algorithm)), clock)
        for i, n in enumerate(batch_rows):
            rows = stream_rows(config, shape, start, start + n)
            started = clock()
            invalid, _ = feed_keys(session.algorithm, rows[KEY], rows["tid"].to_numpy(), None, clock, session)
            out = JoinOutput.concat([invalid, session.advance()], session.algorithm.schema)
            took = clock() - started
            ledger.record(np.concatenate([sorted_distinct(out.matched_ids), out.unmatched_ids]))
            if i >= first_window_batch:
                window_s += took
                window_tuples += out.completed
            start += n
        out = session.drain()
        ledger.record(np.concatenate([sorted_distinct(out.matched_ids), out.unmatched_ids]))
    return {
        "algorithm": algorithm,
        "path": CORE_BATCHES,
        "tuples_per_s": round(window_tuples / window_s, 1) if window_s else None,
        "window_tuples": window_tuples,
        "exactly_once": ledger.check(start),
    }


def run_core_continuous(config: BenchConfig, table: str, algorithm: str, shape: str, rate: float | None,
                        clock=time.perf_counter, sleep=time.sleep) -> dict:
    """The engine fed without micro-batches. ``rate`` None: a backlog, the clock stopped only
    while the stream is produced (as ``semijoin bench``); otherwise tuples arrive at ``rate`` per
    second in real time and the latency counts from arrival to completion. At the end the
    buffer is closed and drained: every tuple fed must have left exactly once."""
    duration = config.warmup_s + config.window_s
    ledger = TupleLedger()
    with open_store(config.master, table, KEY) as store:
        engine = create(algorithm, store, config.memory, config.params_for(algorithm))
        buffer = StreamBuffer(store.key_type, clock)
        offered = stream_rows(config, shape, 0, int(rate * duration) + 1) if rate is not None else None
        keys = normalize(offered[KEY], store.key_type).keys if offered is not None else None
        fed, joined_s, window_tuples, latencies = 0, 0.0, 0, []
        read_cpu = ProcessCpu().reader((DRIVER, DATABASE)) if rate is None else dict
        window_cpu = CpuTally()
        started = clock()
        joined, cpu_mark = Stopwatch(clock), read_cpu()
        chunks = (stream_rows(config, shape, start, start + CHUNK_ROWS) for start in itertools.count(0, CHUNK_ROWS))
        while (joined_s if rate is None else clock() - started) < duration:
            if rate is None:
                if buffer.available < backlog_target(engine):
                    fed += top_up(buffer, engine, store, joined, lambda: next(chunks))
                    cpu_mark = read_cpu()
            else:
                due = min(len(keys), int((clock() - started) * rate) + 1)
                buffer.append(np.arange(fed, due), keys[fed:due])
                fed = due
                if buffer.available == 0 and engine.pending == 0:
                    sleep(min(0.01, max(0.0, started + fed / rate - clock())))
                    continue
            out = engine.step(buffer)
            done, cpu_after = clock(), read_cpu()
            buffer.taken.clear()
            joined_s = joined.read()  # the steps and their bookkeeping (a read ahead runs on beside them)
            ids = np.concatenate([out.matched_ids, out.unmatched_ids])
            ledger.record(ids)
            in_window = (joined_s if rate is None else done - started) > config.warmup_s
            if in_window:
                window_tuples += out.completed
                window_cpu.add(cpu_mark, cpu_after)
                if rate is not None:
                    latencies.append(done - (started + sorted_distinct(ids) / rate))
            cpu_mark = cpu_after
        window_s = (joined_s if rate is None else clock() - started) - config.warmup_s
        buffer.close()
        while not (buffer.exhausted and engine.pending == 0):
            out = engine.step(buffer)
            ledger.record(np.concatenate([out.matched_ids, out.unmatched_ids]))
    result = {
        "algorithm": algorithm,
        "path": CORE_CONTINUOUS,
        "offered_tps": rate,
        "tuples_per_s": round(window_tuples / window_s, 1) if window_s > 0 else None,
        "window_tuples": window_tuples,
        "exactly_once": ledger.check(fed),
    }
    if rate is None:  # the clock stops only while the stream is produced: the CPU of the rest (driver and database)
        result["cpu"] = cpu_split(window_cpu.spent, window_s, window_tuples)
    else:
        latency = latency_ms(np.concatenate(latencies) if latencies else np.zeros(0))
        result.update(latency_ms_p50=latency["p50"], latency_ms_p99=latency["p99"])
    return result
