"""Stream sources of the runner: how a spec's source becomes a streaming DataFrame, and the
columns every source gives next to the user's.

Every source gives the runner a streaming DataFrame with two columns of its own next to the
user's: ``sj_id``, a tuple id stable across replays (what makes the idempotent sinks exact), and
``sj_arrival``, the tuple's arrival time in epoch seconds (latency and deadlines count from it).

A source's reader is the function its class names (:attr:`...job.sources.SourceSpec.reader`):
:func:`read_files` and :func:`read_spark` here, the generator's with the generators
(:func:`...workloads.stream.read_generator`), a Redis stream's in :mod:`.redis_source`. Each takes
the Spark session, the source and how long a lost server is retried (the job's
``db_retry_max_s``: only a Redis stream has a server to lose) and gives the streaming DataFrame
and the arrival time to add (None: the frame has its own).
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.errors import ConfigError, SemiJoinError
from ..core.reasons import CORRUPT_COLUMN
from ..core.stores.reconnect import DEFAULT_RETRY_MAX_S
from ..job.sources import FilesSource, SourceSpec, SparkSource

FILE_COLUMN = "sj_file"
TICK_COLUMN = "sj_tick"  # set on the heartbeat's rows (dropped before the join)


def file_schema(spark, source: FilesSource):
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


def _reader_options(source: FilesSource) -> dict:
    options = {"header": "true"} if source.format == "csv" else {}
    if source.format != "parquet":
        options.update(mode="PERMISSIVE", columnNameOfCorruptRecord=CORRUPT_COLUMN)
    return {**options, **{k: str(v) for k, v in source.options.items()}}


def read_files(spark, source: FilesSource, retry_max_s: float):
    """A landing folder's new files, with ``sj_file``; they arrive when they were last modified."""
    from pyspark.sql import functions as F

    reader = spark.readStream.format(source.format).schema(file_schema(spark, source)).options(**_reader_options(source))
    if source.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", source.max_files_per_trigger)
    frame = reader.load(source.path).withColumn(FILE_COLUMN, F.col("_metadata.file_name"))
    return frame, F.col("_metadata.file_modification_time")


def read_spark(spark, source: SparkSource, retry_max_s: float):
    """Any Spark source by format and options; a tuple arrives when its micro-batch reads it."""
    from pyspark.sql import functions as F

    frame = spark.readStream.format(source.format).options(**{k: str(v) for k, v in source.options.items()}).load()
    return frame, F.current_timestamp()


def stream_frame(spark, source: SourceSpec, arrival_column: str | None = None, retry_max_s: float = DEFAULT_RETRY_MAX_S):
    """The streaming DataFrame of ``source`` (by the reader its class names) with ``sj_arrival``:
    the reader's, or where it gives one to add, ``arrival_column`` or the reader's arrival time."""
    from pyspark.sql import functions as F

    module, _, name = source.reader.partition(":")
    frame, arrival = getattr(importlib.import_module(module), name)(spark, source, retry_max_s)
    if arrival is None:
        return frame
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

    The source's :attr:`~...job.sources.SourceSpec.tuple_id_column` as text (the generator's
    ``tid``, a user's ``id_column``); else (files) ``<file name>#<row>`` with the row's position
    among the batch's rows of that file (a replay reads the same files, split the same way).
    """
    if source.tuple_id_column is not None:
        return batch[source.tuple_id_column].cast(pa.string())
    files = batch[FILE_COLUMN].to_numpy(zero_copy_only=False).astype(object)
    order = np.argsort(files, kind="stable")
    sorted_files = files[order]
    starts = np.r_[0, np.flatnonzero(sorted_files[1:] != sorted_files[:-1]) + 1]
    position = np.arange(len(files)) - np.repeat(starts, np.diff(np.r_[starts, len(files)]))
    row_in_file = np.empty(len(files), dtype=np.int64)
    row_in_file[order] = position
    return file_row_ids(batch[FILE_COLUMN].combine_chunks(), row_in_file)


def file_row_ids(files: pa.Array | pa.Scalar, rows: np.ndarray) -> pa.Array:
    """``<file name>#<row>`` of each row: its file's name (one for all: a scalar) and its row in
    that file, joined columnar (a Python string a row cost 0.3-0.4 s a 100k-row batch, this 13 ms)."""
    return pc.binary_join_element_wise(files, pc.cast(pa.array(rows, pa.int64()), pa.string()), "#")


_RAISED = re.compile(r"^(airflow_provider_semijoin(?:\.\w+)+)\.(\w+): (.+)$", re.MULTILINE)


def raised_in_python(text: str) -> SemiJoinError | None:
    """Our one-sentence error that a Python process of Spark raised (a source's planning in the
    driver's Python data source runner, its reads in a Python worker), out of the traceback that
    Spark's error carries in its text; None when it carries none."""
    for module, name, message in reversed(_RAISED.findall(text)):
        cls = getattr(sys.modules.get(module) or importlib.import_module(module), name, None)
        if isinstance(cls, type) and issubclass(cls, SemiJoinError):
            return cls(message)
    return None
