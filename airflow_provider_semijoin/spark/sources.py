"""Stream sources of the runner: a landing folder, the built-in generator, any Spark source.

Every source gives the runner a streaming DataFrame with two columns of its own next to the
user's: ``sj_id``, a tuple id stable across replays (what makes the idempotent sinks exact), and
``sj_arrival``, the tuple's arrival time in epoch seconds (latency and deadlines count from it).

The generator is a Python streaming data source of Spark 4 (:mod:`pyspark.sql.datasource`):
an offset is ``{"row": n, "t0": epoch}``; rows ``[start, end)`` are always the same tuples
(:func:`..workloads.zipf.zipf_rows`) with arrival times ``t0 + a(i)`` where ``a`` is the pacing at
``rows_per_second`` (uniform, or the self-similar bursts of :mod:`..workloads.bursty`). A replayed
micro-batch therefore reads exactly what the first attempt read.

The stream's clock starts warm: a new query's first micro-batch (:data:`WARM_UP`) carries no
tuple but runs the whole path once - a read task in a Python worker, ``foreachBatch``, the sinks -
and ``t0`` is taken when the next batch is planned, after it. Spark's start-up (worker processes,
the callback server, first plans: tens of seconds on a busy machine) is thus not charged to the
first tuples' latency and deadlines, as a stream that starts flowing when its consumer is ready.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..core.errors import ConfigError
from ..workloads.bursty import bursty_arrivals
from ..workloads.zipf import zipf_rows
from ..job.spec import SourceSpec

GENERATOR_FORMAT = "semijoin_generator"
CORRUPT_COLUMN = "_corrupt_record"
FILE_COLUMN = "sj_file"
TICK_COLUMN = "sj_tick"  # set on the heartbeat's rows (dropped before the join)
ARRIVAL_BLOCK = 65536  # rows per block of bursty arrival times (each block seeded on its own)
# rows per read task of the generator: a task costs Spark's Python worker some 35 ms beyond its rows, so few
# large tasks (a 1M-tuple micro-batch: 2, one per core of local[2]); from 100,000 to 500,000 rows the no-join
# query of `semijoin bench --spark` went from 1.27M to 1.84M tuples/s, the workers' CPU 0.59 -> 0.24 us a tuple
READ_PARTITION_ROWS = 500_000
WARM_UP = {"row": 0, "t0": None, "warm_up": True}  # the end offset of a new query's first, empty batch


def arrival_offsets(start: int, end: int, rows_per_second: float, bursty: bool, seed: int) -> np.ndarray:
    """Seconds after t0 at which rows ``start`` .. ``end - 1`` arrive (non-decreasing)."""
    rows = np.arange(start, end, dtype=np.int64)
    if not bursty:
        return rows / float(rows_per_second)
    out = np.empty(len(rows))
    for block in np.unique(rows // ARRIVAL_BLOCK):
        times = bursty_arrivals(ARRIVAL_BLOCK, mean_rate=rows_per_second, seed=int(seed) * 7919 + int(block))
        inside = rows // ARRIVAL_BLOCK == block
        out[inside] = block * ARRIVAL_BLOCK / rows_per_second + times[rows[inside] - block * ARRIVAL_BLOCK]
    return out


def arrived_rows(settings: dict, elapsed: float, done: int) -> int:
    """How many rows of the generator have arrived ``elapsed`` seconds after t0 (at least ``done``)."""
    total = settings["total_rows"]
    rate = settings["rows_per_second"]
    if not settings["bursty"]:
        due = int(np.floor(elapsed * rate)) + 1 if elapsed >= 0 else 0
    else:
        due = done
        while total is None or due < total:
            block_end = (due // ARRIVAL_BLOCK + 1) * ARRIVAL_BLOCK
            times = arrival_offsets(due, block_end, rate, True, settings["seed"])
            arrived = int(np.searchsorted(times, elapsed, side="right"))
            due += arrived
            if due < block_end:
                break
    due = max(due, done)
    return due if total is None else min(due, total)


def generator_schema(settings: dict) -> str:
    """The generator's columns (``settings`` as :func:`generator_settings` gives them)."""
    key = "BIGINT" if settings["key_type"] == "int" else "STRING"
    extra = "".join(f", {column} {key}" for column in settings["extra_keys"])
    return f"tid BIGINT, nk {key}, qty BIGINT, amount DOUBLE{extra}, sj_arrival DOUBLE"


def generator_rows(settings: dict, start: int, end: int) -> pa.Table:
    """Rows ``start`` .. ``end - 1`` of the generator (without arrival times): always the same."""
    s = settings
    rows = zipf_rows(start, end, s["master_rows"], exponent=s["exponent"], shape=s["shape"], missing=s["missing"],
                     key_type=s["key_type"], seed=s["seed"])
    for column, extra in s["extra_keys"].items():
        keys = zipf_rows(start, end, extra["master_rows"], exponent=extra["exponent"], shape=extra["shape"],
                         missing=extra["missing"], key_type=s["key_type"], seed=extra["seed"])
        rows = rows.append_column(column, keys["nk"])
    return rows


def _generator_classes():
    """The data source classes (built on first use: pyspark is imported only here)."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class RowRange(InputPartition):
        def __init__(self, start: int, end: int, t0: float | None):
            self.start, self.end, self.t0 = start, end, t0

    class GeneratorReader(DataSourceStreamReader):
        def __init__(self, options: dict, clock=time.time):
            self.settings = json.loads(options["settings"])
            self.clock = clock

        def initialOffset(self) -> dict:
            return {"row": 0, "t0": None}  # the clock starts after the warm-up batch

        def latestOffset(self, start: dict, limit) -> dict:
            if start["t0"] is None:  # planned after the previous batch ended: WARM_UP, then the clock
                if not start.get("warm_up"):
                    return dict(WARM_UP)
                return {"row": arrived_rows(self.settings, 0.0, 0), "t0": self.clock()}
            due = arrived_rows(self.settings, self.clock() - start["t0"], start["row"])
            cap = self.settings["max_rows_per_batch"]
            return {"row": due if cap is None else min(due, start["row"] + cap), "t0": start["t0"]}

        def partitions(self, start: dict, end: dict):
            if end["t0"] is None:  # the warm-up batch: one read task without rows
                return [RowRange(0, 0, None)]
            bounds = list(range(start["row"], end["row"], READ_PARTITION_ROWS)) + [end["row"]]
            return [RowRange(a, b, end["t0"]) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]

        def read(self, partition):
            s = self.settings
            rows = generator_rows(s, partition.start, partition.end)
            if partition.t0 is None:
                return
            times = partition.t0 + arrival_offsets(partition.start, partition.end, s["rows_per_second"], s["bursty"], s["seed"])
            yield from rows.append_column("sj_arrival", pa.array(times)).to_batches()

        def commit(self, end: dict) -> None:
            pass

    class GeneratorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return GENERATOR_FORMAT

        def schema(self) -> str:
            return generator_schema(json.loads(self.options["settings"]))

        def streamReader(self, schema):
            return GeneratorReader(self.options)

    return GeneratorSource


def generator_settings(source: SourceSpec) -> dict:
    settings = {
        name: getattr(source, name)
        for name in ("rows_per_second", "total_rows", "master_rows", "key_type", "exponent", "shape", "missing", "bursty",
                     "seed", "max_rows_per_batch")
    }
    settings["extra_keys"] = {column: source.extra_key_settings(column) for column in source.extra_keys}
    return settings


def check_source(source: SourceSpec) -> None:
    """What can be checked before Spark starts: the landing folder exists."""
    if source.kind == "files" and not Path(source.path).is_dir():
        raise ConfigError(f"source.path: folder {source.path!r} does not exist (expected the landing folder of the stream)")


def file_schema(spark, source: SourceSpec):
    """The landing files' schema: as given, or inferred once from the files already there."""
    from pyspark.sql.types import StringType, StructField, StructType

    if source.schema is not None:
        try:
            schema = StructType.fromDDL(source.schema)
        except Exception as exc:  # pyspark raises its own parse errors
            raise ConfigError(f"source.schema: {source.schema!r} is not a Spark DDL schema ({str(exc).splitlines()[0]})") from None
    else:
        files = [p for p in Path(source.path).iterdir() if p.is_file() and not p.name.startswith((".", "_"))]
        if not files:
            raise ConfigError(
                f"source.schema: missing, and the landing folder {source.path!r} holds no file to infer it from "
                "(give a schema such as 'id BIGINT, nk STRING')"
            )
        reader = spark.read.format(source.format).options(**_reader_options(source))
        try:
            schema = reader.load(source.path).schema
        except Exception as exc:  # pyspark's AnalysisException: e.g. a JSON object with a key twice
            raise ConfigError(
                f"source.schema: missing, and it cannot be inferred from the files in {source.path!r} "
                f"({str(exc).splitlines()[0][:200]}); give a schema such as 'id BIGINT, nk STRING'"
            ) from None
    if source.format != "parquet" and CORRUPT_COLUMN not in schema.fieldNames():
        schema = StructType(list(schema.fields) + [StructField(CORRUPT_COLUMN, StringType(), True)])
    return schema


def _reader_options(source: SourceSpec) -> dict:
    options = {"header": "true"} if source.format == "csv" else {}
    if source.format != "parquet":
        options.update(mode="PERMISSIVE", columnNameOfCorruptRecord=CORRUPT_COLUMN)
    return {**options, **{k: str(v) for k, v in source.options.items()}}


def stream_frame(spark, source: SourceSpec, arrival_column: str | None = None):
    """The streaming DataFrame of ``source`` with ``sj_arrival`` (and ``sj_file`` for files)."""
    from pyspark.sql import functions as F

    if source.kind == "generator":
        spark.dataSource.register(_generator_classes())
        return (
            spark.readStream.format(GENERATOR_FORMAT)
            .option("settings", json.dumps(generator_settings(source)))
            .load()
        )
    if source.kind == "files":
        reader = spark.readStream.format(source.format).schema(file_schema(spark, source)).options(**_reader_options(source))
        if source.max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", source.max_files_per_trigger)
        frame = reader.load(source.path)
        frame = frame.withColumn(FILE_COLUMN, F.col("_metadata.file_name"))
        arrival = F.col("_metadata.file_modification_time")
    else:
        frame = spark.readStream.format(source.format).options(**{k: str(v) for k, v in source.options.items()}).load()
        arrival = F.current_timestamp()
    if arrival_column is not None:
        arrival = F.col(arrival_column)
    return frame.withColumn("sj_arrival", F.unix_micros(arrival.cast("timestamp")) / 1e6)


def repair_utf8(batch: pa.Table) -> pa.Table:
    """String columns with invalid UTF-8 get U+FFFD in place of the bad bytes.

    Spark's JSON reader keeps a malformed line's bytes as they are in ``_corrupt_record``; in an
    Arrow string column they break every later read (``to_pylist``: UnicodeDecodeError), and
    one such file would fail its micro-batch at every replay. Spark's CSV reader already
    replaces them; this does the same for the rest."""
    for i, f in enumerate(batch.schema):
        if not pa.types.is_string(f.type):
            continue
        column = batch.column(i)
        try:
            column.validate(full=True)
        except pa.ArrowInvalid:
            texts = [None if b is None else b.decode("utf-8", "replace") for b in column.cast(pa.binary()).to_pylist()]
            batch = batch.set_column(i, f, pa.array(texts, pa.string()))
    return batch


def with_heartbeat(spark, frame):
    """``frame`` with one heartbeat row a second unioned in (Spark's ``rate`` source, every column
    null but ``sj_tick``): a quiet source still gets a micro-batch every trigger, in which the
    joins force out the tuples that have waited long enough (:mod:`.joinstate`)."""
    from pyspark.sql import functions as F

    ticks = spark.readStream.format("rate").option("rowsPerSecond", 1).option("numPartitions", 1).load()
    columns = [F.lit(None).cast(f.dataType).alias(f.name) for f in frame.schema.fields]
    ticks = ticks.select(*columns, F.lit(True).alias(TICK_COLUMN))
    return frame.withColumn(TICK_COLUMN, F.lit(None).cast("boolean")).unionByName(ticks)


def tuple_ids(batch: pa.Table, source: SourceSpec) -> pa.Array:
    """``sj_id`` of each row of a collected micro-batch: stable across replays of the batch.

    Generator: its ``tid``. Files: ``<file name>#<row>`` with the row's position among the
    batch's rows of that file (a replay reads the same files, split the same way). Other
    sources: the user's ``id_column``, as text.
    """
    if source.id_column is not None:
        return batch[source.id_column].cast(pa.string())
    if source.kind == "generator":
        return batch["tid"].cast(pa.string())
    files = batch[FILE_COLUMN].to_numpy(zero_copy_only=False).astype(object)
    order = np.argsort(files, kind="stable")
    sorted_files = files[order]
    starts = np.r_[0, np.flatnonzero(sorted_files[1:] != sorted_files[:-1]) + 1]
    position = np.arange(len(files)) - np.repeat(starts, np.diff(np.r_[starts, len(files)]))
    row_in_file = np.empty(len(files), dtype=np.int64)
    row_in_file[order] = position
    return pa.array([f"{f}#{r}" for f, r in zip(files, row_in_file)], pa.string())
