"""The built-in generator as a stream source of Spark: its rows, their arrival times and its reader.

The generator is a Python streaming data source of Spark 4 (:mod:`pyspark.sql.datasource`):
an offset is ``{"row": n, "t0": epoch}``; rows ``[start, end)`` are always the same tuples
(:func:`.zipf.zipf_rows`, and with ``event_time`` their event times: :func:`event_times`) with arrival times ``t0 + a(i)`` where ``a`` is the pacing at
``rows_per_second`` (uniform, or the self-similar bursts of :mod:`.bursty`). A replayed
micro-batch therefore reads exactly what the first attempt read.

The stream's clock starts warm: a new query's first micro-batch (:data:`WARM_UP`) carries no
tuple but runs the whole path once - a read task in a Python worker, ``foreachBatch``, the sinks -
and ``t0`` is taken when the next batch is planned, after it. Spark's start-up (worker processes,
the callback server, first plans: tens of seconds on a busy machine) is thus not charged to the
first tuples' latency and deadlines, as a stream that starts flowing when its consumer is ready.

:func:`read_generator` is the generator source's reader (named by
:attr:`...job.sources.GeneratorSource.reader`): the Spark runtime finds it through the source, so
that it imports nothing of the generators. pyspark is imported only when a reader is built.
"""

from __future__ import annotations

import json
import time
from datetime import datetime

import numpy as np
import pyarrow as pa

from .bursty import bursty_arrivals
from .zipf import zipf_rows

GENERATOR_FORMAT = "semijoin_generator"
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


def event_times(start: int, end: int, rows_per_second: float, event_time: dict, seed: int) -> pa.Array:
    """The event times of rows ``start`` .. ``end - 1`` (UTC timestamps): row i happened at
    ``event_time["start"]`` + i / ``rows_per_second`` seconds, so sales arrive roughly in event-time
    order, except a ``late`` share of rows that happened up to ``max_lateness_s`` earlier (out of
    order). No row happened after its place in the stream. Drawn per block of ARRIVAL_BLOCK rows
    (each seeded on its own), so any range of rows gives the same times."""
    rows = np.arange(start, end, dtype=np.int64)
    lateness = np.zeros(len(rows))
    for block in np.unique(rows // ARRIVAL_BLOCK):
        rng = np.random.default_rng([int(seed), 104729, int(block)])
        late = rng.random(ARRIVAL_BLOCK) < event_time["late"]
        by = rng.random(ARRIVAL_BLOCK) * event_time["max_lateness_s"]
        inside = rows // ARRIVAL_BLOCK == block
        at = rows[inside] - block * ARRIVAL_BLOCK
        lateness[inside] = np.where(late[at], by[at], 0.0)
    first = datetime.fromisoformat(event_time["start"]).timestamp()
    micros = np.round((first + rows / float(rows_per_second) - lateness) * 1e6).astype(np.int64)
    return pa.array(micros, pa.timestamp("us", "UTC"))


def generator_schema(settings: dict) -> str:
    """The generator's columns (``settings`` as :meth:`...job.sources.GeneratorSource.settings` gives them)."""
    key = "BIGINT" if settings["key_type"] == "int" else "STRING"
    extra = "".join(f", {column} {key}" for column in settings["extra_keys"])
    event_time = settings.get("event_time")
    timed = f", {event_time['column']} TIMESTAMP" if event_time else ""
    return f"tid BIGINT, nk {key}, qty BIGINT, amount DOUBLE{extra}{timed}, sj_arrival DOUBLE"


def generator_rows(settings: dict, start: int, end: int) -> pa.Table:
    """Rows ``start`` .. ``end - 1`` of the generator (without arrival times): always the same."""
    s = settings
    rows = zipf_rows(start, end, s["master_rows"], exponent=s["exponent"], shape=s["shape"], missing=s["missing"],
                     key_type=s["key_type"], seed=s["seed"])
    for column, extra in s["extra_keys"].items():
        keys = zipf_rows(start, end, extra["master_rows"], exponent=extra["exponent"], shape=extra["shape"],
                         missing=extra["missing"], key_type=s["key_type"], seed=extra["seed"])
        rows = rows.append_column(column, keys["nk"])
    event_time = s.get("event_time")
    if event_time:
        rows = rows.append_column(event_time["column"], event_times(start, end, s["rows_per_second"], event_time, s["seed"]))
    return rows


def generator_data_source():
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


def read_generator(spark, source, retry_max_s: float):
    """The generator's streaming DataFrame (its ``sj_arrival`` its own) and, as every reader gives,
    the arrival time to add: None, it has one."""
    spark.dataSource.register(generator_data_source())
    frame = spark.readStream.format(GENERATOR_FORMAT).option("settings", json.dumps(source.settings())).load()
    return frame, None
