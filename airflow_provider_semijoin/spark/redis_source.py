"""A Redis stream as a Python streaming data source of Spark 4 (:mod:`pyspark.sql.datasource`).

The offsets (entry ids, kept in Spark's checkpoint), the planning and the columnar decoding are
:mod:`..core.redis_stream`'s; this module wires them into Spark's stream reader:

* ``initialOffset``: ``{"id": "0-0", "row": 0, "base": None}``; the first micro-batch then reads
  nothing and fixes where the job starts (``start: earliest | latest``), warming the Python workers;
* ``latestOffset(start, limit)``: admission control - at most ``max_rows_per_batch`` entries a
  micro-batch (Spark's ``ReadMaxRows``, the default read limit), all there are under
  ``ReadAllAvailable``;
* ``partitions(start, end)``: read tasks of at most :data:`..core.redis_stream.READ_PARTITION_ROWS`
  entries, split at entry ids;
* ``read(partition)``: stateless, a pipeline of XRANGEs with COUNT, decoded into one Arrow batch.

A replayed micro-batch reads the same entries (its offsets are in the checkpoint), so its tuples
get the same ids: ``sj_id`` is the entry id. :func:`read_redis_stream` is the source's reader
(named by :attr:`...job.sources.RedisStreamSource.reader`). The URL, which may hold a password,
travels as the option ``url``, which Spark redacts in plans and logs
(``spark.sql.redaction.options.regex``); the other settings as ``settings``.
"""

from __future__ import annotations

import json

from ..core.reasons import CORRUPT_COLUMN, CORRUPT_REASON
from ..core.redis_stream import Connection, Planner, read_task

REDIS_FORMAT = "semijoin_redis_stream"


def redis_schema(fields: list) -> str:
    """The frame's columns: the entry id, the fields, and the two columns of a bad entry."""
    columns = ", ".join(f"{name} {kind}" for name, kind in fields)
    return f"sj_id STRING, {columns}, {CORRUPT_COLUMN} STRING, {CORRUPT_REASON} STRING"


def redis_data_source():
    """The data source classes (built on first use: pyspark is imported only here)."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    class EntryChunks(InputPartition):
        def __init__(self, chunks: list):
            self.chunks = chunks  # [(after, until, count)]: the XRANGEs of one read task

    class RedisStreamReader(DataSourceStreamReader):
        def __init__(self, options: dict):
            self.url = options["url"]
            self.settings = json.loads(options["settings"])
            self._planner = None

        @property
        def planner(self) -> Planner:
            if self._planner is None:
                s = self.settings
                self._planner = Planner(Connection(self.url, s["retry_max_s"]), s["stream"], s["start"], s["total_rows"])
            return self._planner

        def initialOffset(self) -> dict:
            return {"id": "0-0", "row": 0, "base": None}

        def getDefaultReadLimit(self):
            cap = self.settings["max_rows_per_batch"]
            return ReadAllAvailable() if cap is None else ReadMaxRows(cap)

        def latestOffset(self, start: dict, limit) -> dict:
            return self.planner.latest(start, limit.max_rows if isinstance(limit, ReadMaxRows) else None)

        def partitions(self, start: dict, end: dict):
            return [EntryChunks(chunks) for chunks in self.planner.partitions(start, end)]

        def read(self, partition):
            s = self.settings
            connection = Connection(self.url, s["retry_max_s"])
            try:
                yield read_task(connection, s["stream"], partition.chunks, [tuple(f) for f in s["fields"]])
            finally:
                connection.client.close()

        def commit(self, end: dict) -> None:
            pass

    class RedisStreamDataSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return REDIS_FORMAT

        def schema(self) -> str:
            return redis_schema(json.loads(self.options["settings"])["fields"])

        def streamReader(self, schema):
            return RedisStreamReader(self.options)

    return RedisStreamDataSource


def read_redis_stream(spark, source, retry_max_s: float):
    """The stream's DataFrame and, as every reader gives, the arrival time to add: the entry id's
    time (Redis stamps an entry added with ``*`` with its clock, in milliseconds)."""
    from pyspark.sql import functions as F

    spark.dataSource.register(redis_data_source())
    settings = {"stream": source.stream, "start": source.start, "total_rows": source.total_rows,
                "max_rows_per_batch": source.max_rows_per_batch, "fields": source.fields, "retry_max_s": retry_max_s}
    frame = (spark.readStream.format(REDIS_FORMAT).option("url", source.url)
             .option("settings", json.dumps(settings)).load())
    return frame, F.timestamp_millis(F.split(F.col("sj_id"), "-").getItem(0).cast("long"))
