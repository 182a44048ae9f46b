"""Idempotent sinks: what a micro-batch writes replaces what an earlier attempt at it wrote.

Spark's checkpoint replays a micro-batch whose commit did not happen (a crash, a kill). A sink
that appended would then hold that batch twice; these sinks key their writes by the batch id:

* Parquet: the batch's rows go to ``<path>/batch=<id>/part-<i>.parquet`` (one file per
  :data:`PART_ROWS` rows, written in parallel: a writer encodes on one core), in a temporary
  folder renamed into place, so a folder is either the whole batch or absent.
* Table (SQLite / MySQL): one transaction deletes the rows tagged ``sj_batch = id`` and inserts
  the batch's rows. Every row also carries ``sj_id``, the stream tuple id stable across replays.

The dead-letter sink has one fixed schema whatever the stream's: ``sj_id``, ``step`` (the join
step that rejected the tuple, -1 before the first step), ``reason``, ``sj_arrival`` and ``row``
(the tuple as JSON).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

from ..core.errors import ConfigError, shown
from ..core.stores.reconnect import StoreUnavailable, TransactionLost
from ..core.stores.sql import IDENTIFIER, MYSQL, DatabaseURL, dialect_of, mysql_key_collation
from ..job.spec import SINK_INDEX_SUFFIX, TargetSpec
from .joinstate import DEADLINE

BATCH_COLUMN = "sj_batch"
# Rows per file of a Parquet sink's batch folder; the files are written on as many threads: one
# writer encodes on one core, so a large batch split in two files is written in about half the
# time on an idle 2-core machine (docs/measurements.md).
PART_ROWS = 500_000
DEAD_LETTER_SCHEMA = pa.schema(
    [("sj_id", pa.string()), ("step", pa.int32()), ("reason", pa.string()), ("sj_arrival", pa.float64()), ("row", pa.string())]
)


def dead_letter_rows(rows: pa.Table, step: int, reasons) -> pa.Table:
    """``rows`` (any schema, with sj_id and sj_arrival) in the dead-letter schema; their deadlines
    (:data:`.joinstate.DEADLINE`), if they carry them, stay a column of their own, outside ``row``."""
    payload_columns = [c for c in rows.column_names if c not in ("sj_id", "sj_arrival", DEADLINE)]
    payload = rows.select(payload_columns).to_pylist()
    reason = reasons if isinstance(reasons, (pa.Array, pa.ChunkedArray)) else pa.array([reasons] * rows.num_rows, pa.string())
    dead = pa.table(
        {
            "sj_id": rows["sj_id"].cast(pa.string()),
            "step": pa.array([step] * rows.num_rows, pa.int32()),
            "reason": reason,
            "sj_arrival": rows["sj_arrival"].cast(pa.float64()),
            "row": pa.array([json.dumps(r, default=str, sort_keys=True) for r in payload], pa.string()),
        },
        schema=DEAD_LETTER_SCHEMA,
    )
    return dead.append_column(DEADLINE, rows[DEADLINE]) if DEADLINE in rows.column_names else dead


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns a Parquet sink dictionary-encodes: strings other than the tuple id (master
    attributes such as a category repeat, where a dictionary pays). Numbers and the ids, nearly
    all distinct, are written plain: building a dictionary the writer then abandons costs more
    than writing plain values, for the same file size (``docs/measurements.md``)."""
    return [f.name for f in schema if f.name != "sj_id" and (pa.types.is_string(f.type) or pa.types.is_large_string(f.type))]


class Sink:
    """What every kind of sink has (one subclass per :attr:`..job.spec.TargetSpec.kind`, in
    :data:`SINK_CLASSES`): how it is opened for a target, what it checks before the query starts,
    and its idempotent :meth:`write` of a micro-batch."""

    kind: ClassVar[str]
    reconnects = 0  # sessions to the sink's database reopened after a lost one
    reconnect_wait_s = 0.0

    @classmethod
    def for_target(cls, target: TargetSpec, retry_max_s: float | None) -> Sink:
        raise NotImplementedError

    @classmethod
    def check_ready(cls, target: TargetSpec, name: str) -> None:
        """Fail before the query starts, naming the sink (``sinks.matched``), if it cannot be written."""

    @classmethod
    def check_columns(cls, columns: list[str], name: str) -> None:
        """Fail before the query starts if the sink cannot hold a column of the rows it gets."""

    def write(self, batch_id: int, rows: pa.Table) -> None:
        """Write batch ``batch_id``'s ``rows``, replacing what an earlier attempt at it wrote."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class ParquetSink(Sink):
    """Parquet files under a folder, one folder ``batch=<id>`` per micro-batch, renamed into place whole."""

    kind = "parquet"

    def __init__(self, path: str, part_rows: int = PART_ROWS):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.part_rows = part_rows

    @classmethod
    def for_target(cls, target: TargetSpec, retry_max_s: float | None) -> ParquetSink:
        return cls(target.path)

    def write(self, batch_id: int, rows: pa.Table) -> None:
        final = self.path / f"batch={batch_id}"
        staging = self.path / f".batch={batch_id}.{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        dictionary = dictionary_columns(rows.schema)
        starts = range(0, max(rows.num_rows, 1), self.part_rows)

        def write_part(i: int) -> None:
            pq.write_table(rows.slice(starts[i], self.part_rows), staging / f"part-{i}.parquet", use_dictionary=dictionary)

        if len(starts) == 1:
            write_part(0)
        else:
            with ThreadPoolExecutor(min(len(starts), os.cpu_count() or 1), thread_name_prefix="semijoin-sink") as pool:
                list(pool.map(write_part, range(len(starts))))  # (list: a part's error is raised here)
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)


class TableSink(Sink):
    """Rows in a SQLite/MySQL table. On MySQL a lost session is reopened for up to
    ``retry_max_s`` seconds (:mod:`..core.stores.reconnect`) and a write whose transaction it
    took is done again whole; past the bound the write fails, and so the micro-batch, which
    Spark's checkpoint replays when the task is retried (it replaces what it wrote, so once)."""

    kind = "table"

    def __init__(self, url: str, table: str, retry_max_s: float | None = None):
        self.connection = DatabaseURL.parse(url).connect(retry_max_s)
        if hasattr(self.connection, "on_reconnect"):
            self.connection.on_reconnect = self._reconnected
        self.dialect = dialect_of(self.connection)
        self.table = table
        self._columns: list[str] | None = None

    @classmethod
    def for_target(cls, target: TargetSpec, retry_max_s: float | None) -> TableSink:
        return cls(target.url, target.table, retry_max_s)

    @classmethod
    def check_ready(cls, target: TargetSpec, name: str) -> None:
        """The database answers."""
        try:
            DatabaseURL.parse(target.url).connect().close()
        except ConfigError as exc:
            raise ConfigError(f"{name}: {exc}") from None

    @classmethod
    def check_columns(cls, columns: list[str], name: str) -> None:
        """The rows' column names are quoted as SQL identifiers: a name the table cannot hold
        (``amount; DROP TABLE r`` in a CSV header) fails here, not in the first micro-batch."""
        for column in columns:
            if not IDENTIFIER.match(column):
                raise ConfigError(
                    f"{name}: stream column {shown(column)} is not a valid identifier for a table sink "
                    "(expected letters, digits and _, at most 64 characters; rename it in the source)"
                )

    def _create(self, schema: pa.Schema) -> None:
        d = self.dialect
        collation = mysql_key_collation(self.connection) if d is MYSQL else ""
        columns = [f"{d.quote(BATCH_COLUMN)} BIGINT NOT NULL"] + [
            f"{d.quote(f.name, 'column')} {d.column_type(f.type, key=f.name == 'sj_id', width=191, key_collation=collation)}"
            for f in schema
        ]
        cursor = self.connection.cursor()
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {d.quote(self.table, 'table')} ({', '.join(columns)})")
        index = d.quote(f"{self.table}{SINK_INDEX_SUFFIX}")
        if d is MYSQL:
            cursor.execute(
                "SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE() "
                "AND table_name = %s AND index_name = %s",
                (self.table, f"{self.table}{SINK_INDEX_SUFFIX}"),
            )
            if cursor.fetchone()[0] == 0:
                cursor.execute(f"CREATE INDEX {index} ON {d.quote(self.table)} ({d.quote(BATCH_COLUMN)})")
        else:
            cursor.execute(f"CREATE INDEX IF NOT EXISTS {index} ON {d.quote(self.table)} ({d.quote(BATCH_COLUMN)})")
        cursor.execute(f"SELECT * FROM {d.quote(self.table)} WHERE 1 = 0")  # the columns of a table that was there
        existing = [c[0] for c in cursor.description]
        cursor.fetchall()
        cursor.close()
        self._columns = [BATCH_COLUMN] + schema.names
        missing = [c for c in self._columns if c not in existing]
        if missing:
            raise ConfigError(
                f"sinks: table {self.table!r} exists without the output column {missing[0]!r} (its columns: "
                f"{shown(existing)}); drop it or add the column, or write to another table"
            )

    def _reconnected(self, waited_s: float, in_snapshot: bool) -> None:
        self.reconnects += 1
        self.reconnect_wait_s += waited_s

    def write(self, batch_id: int, rows: pa.Table) -> None:
        rows = _sql_friendly(rows)
        if self._columns is None:
            self._create(rows.schema)
        started = None
        while True:
            try:
                return self._replace_batch(batch_id, rows)
            except TransactionLost as exc:  # only a ReconnectingConnection raises it: it has a policy
                policy = self.connection.policy
                started = policy.clock() if started is None else started
                waited = policy.clock() - started
                if waited > policy.max_s:
                    raise StoreUnavailable(f"{exc}, and writes to it kept failing for {waited:.1f} s") from None

    def _replace_batch(self, batch_id: int, rows: pa.Table) -> None:
        d = self.dialect
        cursor = self.connection.cursor()
        cursor.execute("BEGIN" if d is not MYSQL else "START TRANSACTION")
        try:
            cursor.execute(f"DELETE FROM {d.quote(self.table)} WHERE {d.quote(BATCH_COLUMN)} = {d.param}", (batch_id,))
            if rows.num_rows:
                insert = (
                    f"INSERT INTO {d.quote(self.table)} ({', '.join(d.quote(c) for c in self._columns)}) "
                    f"VALUES ({d.placeholders(len(self._columns))})"
                )
                values = [c.to_pylist() for c in rows.select(self._columns[1:]).columns]
                cursor.executemany(insert, [(batch_id, *row) for row in zip(*values)])
            cursor.execute("COMMIT")
        except Exception:
            cursor.execute("ROLLBACK")
            raise
        finally:
            cursor.close()

    def close(self) -> None:
        self.connection.close()


def _sql_friendly(rows: pa.Table) -> pa.Table:
    """Dates, timestamps, decimals and booleans become text (ISO forms): every SQL database takes them."""
    for i, f in enumerate(rows.schema):
        t = f.type
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_string(t) or pa.types.is_large_string(t)):
            rows = rows.set_column(i, f.name, rows[f.name].cast(pa.string()))
    return rows


SINK_CLASSES: dict[str, type[Sink]] = {cls.kind: cls for cls in (ParquetSink, TableSink)}


def sink_class(target: TargetSpec) -> type[Sink]:
    """The class of the sink ``target`` names (its ``kind``)."""
    return SINK_CLASSES[target.kind]


def open_sink(target: TargetSpec, retry_max_s: float | None = None) -> Sink:
    return sink_class(target).for_target(target, retry_max_s)


def read_parquet_batch(folder: Path, columns: list[str] | None = None) -> pa.Table:
    """One batch folder of a Parquet sink, its part files in order (``part-<p>.parquet``, and a
    later step's ``part-<p>-step<i>.parquet`` of ``data_path: executors``)."""
    parts = sorted(Path(folder).glob("part-*.parquet"), key=lambda p: [int(n) for n in re.findall(r"\d+", p.stem)])
    tables = [pq.read_table(p, columns=columns) for p in parts]
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def read_parquet_sink(path: str) -> pa.Table:
    """All batches of a Parquet sink as one table (tests, the demo, the benchmark)."""
    folders = sorted(Path(path).glob("batch=*"), key=lambda p: int(p.name.split("=")[1]))
    tables = [read_parquet_batch(f) for f in folders]
    return pa.concat_tables(tables, promote_options="default") if tables else pa.table({})
