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
and the arrival time to add (None: the frame has its own); the files' reader also gives the unit
it reads each Parquet timestamp column in, decided at the start, which every micro-batch's files
are checked against (:func:`check_units`).
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..core.errors import ConfigError, SemiJoinError
from ..core.reasons import CORRUPT_COLUMN
from ..core.stores.reconnect import DEFAULT_RETRY_MAX_S
from ..job.sources import FilesSource, SourceSpec, SparkSource

FILE_COLUMN = "sj_file"
TICK_COLUMN = "sj_tick"  # set on the heartbeat's rows (dropped before the join)
NANOS_AS_LONG = "spark.sql.legacy.parquet.nanosAsLong"  # Spark reads TIMESTAMP(NANOS) as its long, not failing


def file_schema(spark, source: FilesSource) -> tuple:
    """The landing files' schema, as given or inferred once from the files already there, and the
    names of its timestamp columns those files store in nanoseconds (:func:`nanosecond_columns`),
    which :func:`read_files` reads as Spark's long and floors to the microsecond."""
    from pyspark.sql.types import StringType, StructField, StructType, TimestampNTZType, TimestampType

    files = [p for p in Path(source.path).iterdir() if p.is_file() and not p.name.startswith((".", "_"))]
    nanos = nanosecond_columns(files) if source.format == "parquet" else {}
    if nanos:
        spark.conf.set(NANOS_AS_LONG, "true")
    if source.schema is not None:
        try:
            schema = StructType.fromDDL(source.schema)
        except Exception as exc:  # pyspark raises its own parse errors
            raise ConfigError(f"source.schema: {source.schema!r} is not a Spark DDL schema ({str(exc).splitlines()[0]})") from None
    else:
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
        ntz = spark.conf.get("spark.sql.parquet.inferTimestampNTZ.enabled", "true") == "true"
        schema = StructType([  # as Spark infers the same column in microseconds
            StructField(f.name, TimestampNTZType() if ntz and not nanos[f.name] else TimestampType(), f.nullable)
            if f.name in nanos else f for f in schema.fields])
    if source.format != "parquet" and CORRUPT_COLUMN not in schema.fieldNames():
        schema = StructType(list(schema.fields) + [StructField(CORRUPT_COLUMN, StringType(), True)])
    timed = {f.name for f in schema.fields if isinstance(f.dataType, (TimestampType, TimestampNTZType))}
    return schema, sorted(timed & nanos.keys())


def nanosecond_columns(files: list[Path]) -> dict[str, bool]:
    """The top-level columns the Parquet ``files`` store as TIMESTAMP(NANOS) (pandas' default),
    each with whether it is adjusted to UTC (has a zone). Spark refuses to read them as timestamps
    ("Illegal Parquet type: INT64 (TIMESTAMP(NANOS,false))"), but gives their long with
    :data:`NANOS_AS_LONG`; a file that stores such a column otherwise (microseconds, INT96) would
    be read as a long of another unit, so that is one sentence. A file pyarrow cannot read is
    left to Spark's own error."""
    nanos, other = {}, {}  # column -> (first file, adjusted) / column -> first file
    for path in files:
        for name, (unit, adjusted, _) in (stored_columns(path) or {}).items():
            if unit == "nanoseconds":
                nanos.setdefault(name, (path.name, adjusted))
            else:
                other.setdefault(name, path.name)
    mixed = sorted(nanos.keys() & other.keys())
    if mixed:
        name = mixed[0]
        raise ConfigError(f"source.path: column {name!r} is stored in nanoseconds in {nanos[name][0]!r} but not in "
                          f"{other[name]!r}; Spark reads a column in one unit, so expected every landing file to "
                          "store it alike")
    return {name: adjusted for name, (_, adjusted) in nanos.items()}


def stored_columns(path) -> dict[str, tuple[str | None, bool, str]] | None:
    """How the Parquet file ``path`` (a local path or a URI pyarrow opens) stores each top-level
    column, from its footer alone: (time unit - ``nanoseconds``, ``microseconds``, ``milliseconds``
    - or None where it is no timestamp, whether adjusted to UTC, physical type); None where
    pyarrow cannot read the footer (left to Spark's own error)."""
    try:
        schema = pq.read_metadata(path).schema
    except (pa.ArrowException, OSError):
        return None
    top = set(schema.to_arrow_schema().names)
    columns = {}
    for column in (schema.column(i) for i in range(len(schema))):
        if column.path in top:
            stored = json.loads(column.logical_type.to_json())
            columns[column.path] = (stored.get("timeUnit"), bool(stored.get("isAdjustedToUTC")), column.physical_type)
    return columns


def readable(uri: str) -> str:
    """A file of Spark's log as pyarrow opens it: a local path, or the URI (another file system)."""
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme in ("", "file") else uri


def check_units(files: list[str], units: dict[str, str]) -> None:
    """Before Spark reads a micro-batch's ``files`` (the URIs of Spark's log): each stores the
    timestamp columns of ``units`` (:func:`read_files`) in the unit the job decided at its start,
    from the footers alone. Spark reads a column in one unit, so another one's file would be read
    1000x off (microseconds as a job reading nanoseconds floors them) or kill the query with
    Spark's type mismatch: one sentence instead, naming the file, the column and both units. A
    file that lacks the column, or whose footer pyarrow cannot read, is left to Spark."""
    if not units:
        return
    for uri in files:
        stored = stored_columns(readable(uri)) or {}
        for name, reads in units.items():
            if name not in stored:
                continue
            unit, _, physical = stored[name]
            if (unit == "nanoseconds") != (reads == "nanoseconds"):
                held = f"in {unit}" if unit is not None else f"as {physical} (no time unit)"
                raise ConfigError(
                    f"source.path: file {Path(unquote(urlparse(uri).path)).name!r} stores column {name!r} {held}, "
                    f"but this job reads it in {reads}, the unit it decided from the landing files present at its start; "
                    f"restart the job (it decides anew from the files then present) or write every landing file's "
                    f"{name!r} in one unit")


def floored_micros(name: str, data_type):
    """Column ``name``, read as the nanoseconds since the epoch Spark gives with
    :data:`NANOS_AS_LONG`, as a ``data_type`` timestamp (TIMESTAMP or TIMESTAMP_NTZ) floored to its
    microsecond: exact against bounds in microseconds, as :mod:`..core.micros` says (``pmod`` is
    never negative, so before 1970 too; integer arithmetic, as a double loses nanoseconds)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampNTZType

    column = "`" + name.replace("`", "``") + "`"
    epoch = "TIMESTAMP_NTZ'1970-01-01 00:00:00'" if isinstance(data_type, TimestampNTZType) else \
        "TIMESTAMP'1970-01-01 00:00:00Z'"
    return F.expr(f"timestampadd(MICROSECOND, ({column} - pmod({column}, 1000)) div 1000, {epoch})")


def _reader_options(source: FilesSource) -> dict:
    options = {"header": "true"} if source.format == "csv" else {}
    if source.format != "parquet":
        options.update(mode="PERMISSIVE", columnNameOfCorruptRecord=CORRUPT_COLUMN)
    return {**options, **{k: str(v) for k, v in source.options.items()}}


def read_files(spark, source: FilesSource, retry_max_s: float):
    """A landing folder's new files, with ``sj_file``; they arrive when they were last modified.
    A timestamp column the files store in nanoseconds is read as its long and floored to the
    microsecond (:func:`floored_micros`). Which ones is decided here, from the files present at
    the start: the third item, the unit - ``nanoseconds`` or ``microseconds`` - each Parquet
    timestamp column is read in, which every micro-batch's files are checked against before
    Spark reads them (:func:`check_units`)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType, TimestampNTZType, TimestampType

    schema, nanos = file_schema(spark, source)
    read = StructType([StructField(f.name, LongType(), f.nullable) if f.name in nanos else f for f in schema.fields])
    reader = spark.readStream.format(source.format).schema(read).options(**_reader_options(source))
    if source.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", source.max_files_per_trigger)
    frame = reader.load(source.path).withColumns({name: floored_micros(name, schema[name].dataType) for name in nanos})
    units = {f.name: "nanoseconds" if f.name in nanos else "microseconds" for f in schema.fields
             if source.format == "parquet" and isinstance(f.dataType, (TimestampType, TimestampNTZType))}
    frame = frame.withColumn(FILE_COLUMN, F.col("_metadata.file_name"))
    return frame, F.col("_metadata.file_modification_time"), units


def read_spark(spark, source: SparkSource, retry_max_s: float):
    """Any Spark source by format and options; a tuple arrives when its micro-batch reads it."""
    from pyspark.sql import functions as F

    frame = spark.readStream.format(source.format).options(**{k: str(v) for k, v in source.options.items()}).load()
    return frame, F.current_timestamp()


def stream_frame(spark, source: SourceSpec, arrival_column: str | None = None,
                 retry_max_s: float = DEFAULT_RETRY_MAX_S) -> tuple:
    """The streaming DataFrame of ``source`` (by the reader its class names) with ``sj_arrival``:
    the reader's, or where it gives one to add, ``arrival_column`` or the reader's arrival time;
    and the unit each timestamp column of a Parquet landing folder is read in ({}: another
    source), which :func:`check_units` checks each micro-batch's files against."""
    from pyspark.sql import functions as F

    module, _, name = source.reader.partition(":")
    frame, arrival, *units = getattr(importlib.import_module(module), name)(spark, source, retry_max_s)
    units = units[0] if units else {}
    if arrival is None:
        return frame, units
    if arrival_column is not None:
        arrival = F.col(arrival_column)
    return frame.withColumn("sj_arrival", F.unix_micros(arrival.cast("timestamp")) / 1e6), units


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
