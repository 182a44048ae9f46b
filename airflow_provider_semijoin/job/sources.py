"""Where a job's stream tuples come from: one class per ``kind`` of source, each with its own
fields and checks, and what the runner asks of every source (its columns when known, its tuple
id column, whether and when it ends) as properties of the class.

* :class:`FilesSource` (``files``): a landing folder ``path`` of ``format`` files (parquet, csv,
  json lines), read as new files appear; ``schema`` is a Spark DDL string (``"id BIGINT, nk
  STRING"``) or None to infer it once from the files already there. A tuple's id is
  ``<file name>#<row>``. A Parquet timestamp stored in nanoseconds (pandas' default), which
  Spark refuses to read, is read floored to the microsecond (:func:`..spark.sources.read_files`),
  the unit decided from the files present at the start; a later file in another unit stops the
  job in one sentence (:func:`..spark.sources.check_units`).
* :class:`GeneratorSource` (``generator``): the built-in Zipf stream (:mod:`..workloads.zipf`) at
  ``rows_per_second``, optionally bursty (self-similar arrivals), ``total_rows`` in all (None:
  endless). Its keys are those of a master of ``master_rows`` rows
  (:func:`..workloads.master.generate_master`); ``max_rows_per_batch`` caps a micro-batch (a
  backlog is read in several batches). ``extra_keys`` adds more foreign-key columns, each a Zipf
  stream of its own over another master: ``{"customer_nk": {"master_rows": 20000, "seed": 7}}``
  (``exponent``, ``shape``, ``missing``, ``seed`` default to the source's; a sale carries a
  product and a customer key).
* :class:`SparkSource` (``spark``): any Spark source by ``format`` and ``options`` (Kafka where
  the connector is on the classpath); ``id_column`` names a column that is stable across replays.
* :class:`RedisStreamSource` (``redis_stream``): the entries of Redis stream ``stream`` on the
  server of ``url`` (the Airflow paths take ``conn_id`` instead: :func:`.assemble.source_dict`),
  their fields read as the columns of ``schema`` (:data:`..core.redis_stream.REDIS_TYPES`), from
  ``start`` (``earliest``: the stream's first entry when the job first runs; ``latest``: entries
  added after that), ``max_rows_per_batch`` a micro-batch (default :data:`REDIS_MAX_ROWS_PER_BATCH`),
  ``total_rows`` in all (None: endless). A tuple's id is its entry id (or ``id_column``), its
  arrival time the entry id's time (or the job's ``arrival_column``).

In JSON and YAML a source is one mapping whose ``kind`` selects the class (default
``generator``), in the flat form of every spec written so far: :meth:`SourceSpec.to_dict` writes
the fields of every kind (another kind's at its default) and :func:`source_fields` reads them
back, refusing another kind's field only when it holds something else than its default.

Each class names its ``reader`` (``module:function``): the function of the runtime that makes
its streaming DataFrame, imported by :func:`..spark.sources.stream_frame` when a job runs. The
generator's lives with the generators (:func:`..workloads.stream.read_generator`), so the Spark
runtime imports none of them.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import ClassVar

from ..core.checks import check_flag, check_number
from ..core.errors import ConfigError, SemiJoinError, SpecError, shown, shown_key
from ..core.reasons import CORRUPT_COLUMN, CORRUPT_REASON
from ..core.redis_stream import REDIS_TYPES, check_url
from ..core.stores.sql import MYSQL, DatabaseURL, redact
from ..workloads.stream import generator_schema
from ..workloads.zipf import SHAPES
from .checks import identifier, one_of, positive, shown_options

FILE_FORMATS = ("parquet", "csv", "json")
GENERATOR_COLUMNS = ("tid", "nk", "qty", "amount", "sj_arrival")
EVENT_TIME_SETTINGS = ("column", "start", "late", "max_lateness_s")
EVENT_TIME_START = "2026-01-01T00:00:00+00:00"  # the generator's row 0 happened then, unless event_time.start says
EXTRA_KEY_SETTINGS = ("master_rows", "exponent", "shape", "missing", "seed")
ARRIVAL_DDL = "sj_arrival DOUBLE"  # the arrival time every source's stream carries (epoch seconds)
REDIS_MAX_ROWS_PER_BATCH = 100_000  # a backlog's micro-batch: about a second of the join's work on 2 cores
REDIS_STARTS = ("earliest", "latest")
REDIS_READY_S = 10.0  # how long a job's start waits for the Redis server
REDIS_TYPE_NAMES = {"LONG": "BIGINT", "INTEGER": "INT", **{name: name for name in REDIS_TYPES}}


def file_dataset(path: str) -> tuple[str, str]:
    """A folder as a lineage dataset (namespace, name)."""
    return "file", os.path.abspath(path)


def table_dataset(url: str, table: str) -> tuple[str, str]:
    """A table in the database of ``url`` as a lineage dataset (namespace, name; no credentials
    in either): MySQL's ``mysql://{host}:{port}``, ``{database}.{table}``; SQLite's
    ``sqlite://{this host's name}``, ``{absolute path of the database file}.{table}``."""
    parsed = DatabaseURL.parse(url)
    if parsed.dialect is MYSQL:
        return f"mysql://{parsed.host}:{parsed.port}", f"{parsed.database}.{table}"
    return f"sqlite://{socket.gethostname()}", f"{os.path.abspath(parsed.path)}.{table}"


@dataclass
class SourceSpec:
    """What every kind of source has: its ``kind``, the ``reader`` of the runtime that reads it,
    and what the runner asks of it (each subclass overrides what differs)."""

    kind: ClassVar[str]
    reader: ClassVar[str]

    def __post_init__(self):
        if self.id_column is not None:  # a field of every kind
            identifier("id_column", self.id_column)

    @property
    def bounded(self) -> bool:
        """True when the source ends after its ``total_rows`` tuples (a landing folder never ends)."""
        return False

    @property
    def ends_when_idle(self) -> bool:
        """True when ``stop.end_of_input`` ends the job at the first trigger that finds nothing new."""
        return False

    @property
    def stream_ddl(self) -> str | None:
        """The stream's columns (with ``sj_arrival``) as Spark DDL, when known before Spark starts."""
        return None

    @property
    def tuple_id_column(self) -> str | None:
        """The column whose value, as text, is a tuple's id (None: ``<file name>#<row>``)."""
        return self.id_column

    @property
    def row_column(self) -> str | None:
        """The column holding a tuple's place in a bounded stream (0, 1, ...; None: none)."""
        return None

    def endless(self) -> str | None:
        """Why ``stop.end_of_input`` would never come (None: it comes)."""
        return None

    def check_ready(self) -> None:
        """What can be checked before Spark starts, beyond the spec (raises :class:`ConfigError`)."""

    def datasets(self) -> list[tuple[str, str]]:
        """The source as lineage datasets (namespace, name): none."""
        return []

    def to_dict(self) -> dict:
        """The flat form: ``kind`` and the fields of every kind, another kind's at its default."""
        return {"kind": self.kind, **{name: getattr(self, name, default) for name, default in _DEFAULTS.items()}}

    def describe(self) -> dict:
        """:meth:`to_dict` with secret-looking options hidden and a URL's password: for logs, XCom, the UI."""
        data = self.to_dict()
        data["options"] = shown_options(data["options"])
        if data["url"] is not None:
            data["url"] = redact(data["url"])
        return data

    def __repr__(self) -> str:
        shown_fields = {k: v for k, v in self.describe().items() if k != "kind" and k in _fields_of(type(self))}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in shown_fields.items())})"


@dataclass(repr=False)
class FilesSource(SourceSpec):
    kind = "files"
    reader = "airflow_provider_semijoin.spark.sources:read_files"

    path: str | None = None
    format: str | None = None
    schema: str | None = None
    options: dict = field(default_factory=dict)
    id_column: str | None = None
    max_files_per_trigger: int | None = None

    def __post_init__(self):
        super().__post_init__()
        _check_options(self.options)
        if not self.path or not isinstance(self.path, str):
            raise SpecError(f"path: {shown(self.path)} is not a folder (a files source reads a landing folder)")
        if self.format is None:
            raise SpecError(f"format: missing; expected one of {list(FILE_FORMATS)}")
        one_of("format", self.format, FILE_FORMATS)
        if self.schema is not None and (not isinstance(self.schema, str) or not self.schema.strip()):
            raise SpecError(f"schema: {shown(self.schema)} is not a Spark DDL string such as 'id BIGINT, nk STRING'")
        positive("max_files_per_trigger", self.max_files_per_trigger, optional=True, integer=True)

    @property
    def ends_when_idle(self) -> bool:
        return True  # the files in the landing folder when the query started

    @property
    def stream_ddl(self) -> str | None:
        return f"{self.schema}, {ARRIVAL_DDL}" if self.schema is not None else None

    def check_ready(self) -> None:
        if not Path(self.path).is_dir():
            raise ConfigError(f"source.path: folder {self.path!r} does not exist (expected the landing folder of the stream)")

    def datasets(self) -> list[tuple[str, str]]:
        return [file_dataset(self.path)]


@dataclass(repr=False)
class GeneratorSource(SourceSpec):
    kind = "generator"
    reader = "airflow_provider_semijoin.workloads.stream:read_generator"

    id_column: str | None = None
    rows_per_second: float = 1000.0
    total_rows: int | None = None
    master_rows: int = 100_000
    key_type: str = "int"
    exponent: float = 1.0
    shape: str = "noperm"
    missing: float = 0.0
    bursty: bool = False
    seed: int = 0
    max_rows_per_batch: int | None = None
    extra_keys: dict = field(default_factory=dict)
    event_time: dict | None = None

    def __post_init__(self):
        super().__post_init__()
        positive("rows_per_second", self.rows_per_second)
        positive("total_rows", self.total_rows, optional=True, integer=True)
        positive("max_rows_per_batch", self.max_rows_per_batch, optional=True, integer=True)
        positive("master_rows", self.master_rows, integer=True)
        one_of("key_type", self.key_type, ("int", "str"))
        one_of("shape", self.shape, SHAPES)
        check_number("exponent", self.exponent, "a number >= 0", minimum=0, error=SpecError)
        check_number("missing", self.missing, "a fraction between 0 and 1", minimum=0, maximum=1, error=SpecError)
        check_number("seed", self.seed, "an integer >= 0", integer=True, minimum=0, error=SpecError)
        check_flag("bursty", self.bursty, error=SpecError)
        self._check_extra_keys()
        self._check_event_time()

    def _check_event_time(self) -> None:
        """``event_time: {column, start, late, max_lateness_s}``: a TIMESTAMP column of when each
        row happened (:func:`..workloads.stream.event_times`); ``start`` (ISO, UTC when it names no
        zone; default EVENT_TIME_START) is row 0's time."""
        if self.event_time is None:
            return
        if not isinstance(self.event_time, dict) or "column" not in self.event_time:
            raise SpecError(f"event_time: {shown(self.event_time)} is not a mapping with column (and start, late, max_lateness_s)")
        unknown = sorted(set(self.event_time) - set(EVENT_TIME_SETTINGS), key=repr)
        if unknown:
            raise SpecError(f"event_time.{shown_key(unknown[0])}: not an event time setting (settings: {list(EVENT_TIME_SETTINGS)})")
        column = self.event_time["column"]
        identifier("event_time.column", column)
        if column in GENERATOR_COLUMNS or column in self.extra_keys:
            raise SpecError(f"event_time.column: {column!r} is already a column of the generator; expected a new column name")
        start = self.event_time.get("start", EVENT_TIME_START)
        try:
            first = datetime.fromisoformat(start) if isinstance(start, str) else None
        except ValueError:
            first = None
        if first is None:
            raise SpecError(f"event_time.start: {shown(start)} is not an ISO time such as '2026-01-01T00:00:00Z'")
        check_number("event_time.late", self.event_time.get("late", 0), "a fraction between 0 and 1", minimum=0, maximum=1,
                     error=SpecError)
        positive("event_time.max_lateness_s", self.event_time.get("max_lateness_s", 10))

    def _check_extra_keys(self) -> None:
        if not isinstance(self.extra_keys, dict):
            raise SpecError(f"extra_keys: {shown(self.extra_keys)} is not a mapping of column names to key settings")
        for column, settings in self.extra_keys.items():
            identifier(f"extra_keys.{shown_key(column)}", column)
            if column in GENERATOR_COLUMNS:
                raise SpecError(f"extra_keys.{shown_key(column)}: already a column of the generator; expected a new column name")
            if not isinstance(settings, dict) or "master_rows" not in settings:
                raise SpecError(f"extra_keys.{shown_key(column)}: {shown(settings)} is not a mapping with master_rows")
            unknown = sorted(set(settings) - set(EXTRA_KEY_SETTINGS), key=repr)
            if unknown:
                raise SpecError(f"extra_keys.{shown_key(column)}.{shown_key(unknown[0])}: not a key setting (settings: {list(EXTRA_KEY_SETTINGS)})")
            try:  # the same checks as the source's own settings
                GeneratorSource(**{**self.extra_key_settings(column), "key_type": self.key_type})
            except SpecError as exc:
                raise SpecError(f"extra_keys.{shown_key(column)}.{exc}") from None

    def extra_key_settings(self, column: str) -> dict:
        """The Zipf settings of extra key ``column``: its own, else the source's."""
        return {name: self.extra_keys[column].get(name, getattr(self, name)) for name in EXTRA_KEY_SETTINGS}

    def settings(self) -> dict:
        """What the generator's reader needs (:mod:`..workloads.stream`), as JSON-safe data."""
        settings = {name: getattr(self, name) for name in ("rows_per_second", "total_rows", "master_rows", "key_type",
                                                           "exponent", "shape", "missing", "bursty", "seed",
                                                           "max_rows_per_batch")}
        settings["extra_keys"] = {column: self.extra_key_settings(column) for column in self.extra_keys}
        if self.event_time is not None:
            start = datetime.fromisoformat(self.event_time.get("start", EVENT_TIME_START))
            settings["event_time"] = {"column": self.event_time["column"],
                                      "start": (start if start.tzinfo else start.replace(tzinfo=timezone.utc)).isoformat(),
                                      "late": self.event_time.get("late", 0), "max_lateness_s": self.event_time.get("max_lateness_s", 10)}
        return settings

    @property
    def bounded(self) -> bool:
        return self.total_rows is not None

    @property
    def stream_ddl(self) -> str:
        return generator_schema(self.settings())

    @property
    def tuple_id_column(self) -> str:
        return self.id_column or "tid"

    @property
    def row_column(self) -> str:
        return "tid"

    def endless(self) -> str | None:
        return None if self.bounded else "the generator source is endless; give source.total_rows or another stop"


@dataclass(repr=False)
class SparkSource(SourceSpec):
    kind = "spark"
    reader = "airflow_provider_semijoin.spark.sources:read_spark"

    format: str | None = None
    options: dict = field(default_factory=dict)
    id_column: str | None = None

    def __post_init__(self):
        super().__post_init__()
        _check_options(self.options)
        if not self.format or not isinstance(self.format, str):
            raise SpecError(f"format: {shown(self.format)} is not a Spark source format (e.g. 'kafka')")
        if self.id_column is None:
            raise SpecError("id_column: missing; a spark source needs a column that is stable across replays")

    def datasets(self) -> list[tuple[str, str]]:
        """A Kafka topic (``subscribe``), or the folder of a ``path`` option."""
        if self.format == "kafka" and self.options.get("subscribe"):
            server = str(self.options.get("kafka.bootstrap.servers", "")).split(",")[0].strip()
            return [(f"kafka://{server}", topic.strip()) for topic in str(self.options["subscribe"]).split(",")]
        return [file_dataset(self.options["path"])] if self.options.get("path") else []


@dataclass(repr=False)
class RedisStreamSource(SourceSpec):
    kind = "redis_stream"
    reader = "airflow_provider_semijoin.spark.redis_source:read_redis_stream"

    url: str | None = None
    stream: str | None = None
    schema: str | None = None
    id_column: str | None = None
    start: str = "earliest"
    max_rows_per_batch: int | None = REDIS_MAX_ROWS_PER_BATCH
    total_rows: int | None = None

    def __post_init__(self):
        super().__post_init__()
        try:
            check_url(self.url)
        except ConfigError as exc:
            raise SpecError(str(exc)) from None
        if not self.stream or not isinstance(self.stream, str):
            raise SpecError(f"stream: {shown(self.stream)} is not the name of a Redis stream (its key)")
        one_of("start", self.start, REDIS_STARTS)
        positive("max_rows_per_batch", self.max_rows_per_batch, optional=True, integer=True)
        positive("total_rows", self.total_rows, optional=True, integer=True)
        names = [name for name, _ in self.fields]
        if self.id_column is not None and self.id_column not in names:
            raise SpecError(f"id_column: {self.id_column!r} is not a field of the schema (fields: {names})")

    @property
    def fields(self) -> list[tuple[str, str]]:
        """The schema as (field name, type) pairs, the type one of :data:`..core.redis_stream.REDIS_TYPES`."""
        if not isinstance(self.schema, str) or not self.schema.strip():
            raise SpecError(f"schema: {shown(self.schema)} is not the entries' fields as Spark DDL such as 'tid BIGINT, nk STRING'")
        fields = []
        for part in self.schema.split(","):
            words = part.split()
            if len(words) != 2 or words[1].upper() not in REDIS_TYPE_NAMES:
                raise SpecError(f"schema: {shown(part.strip())} is not a field and its type; expected a name and one of "
                                f"{list(REDIS_TYPES)}")
            name = words[0].strip("`")
            identifier(f"schema.{shown_key(name)}", name)
            if name in ("sj_id", "sj_arrival", CORRUPT_COLUMN, CORRUPT_REASON) or name in dict(fields):
                raise SpecError(f"schema.{name}: a column of that name is already in the stream; expected another name")
            fields.append((name, REDIS_TYPE_NAMES[words[1].upper()]))
        return fields

    @property
    def bounded(self) -> bool:
        return self.total_rows is not None

    @property
    def stream_ddl(self) -> str:
        return ", ".join([*(f"{name} {kind}" for name, kind in self.fields), ARRIVAL_DDL])

    @property
    def tuple_id_column(self) -> str:
        return self.id_column or "sj_id"

    def endless(self) -> str | None:
        return None if self.bounded else "a Redis stream never ends; give source.total_rows or another stop"

    def check_ready(self) -> None:
        """The server answers (within REDIS_READY_S) and the key, if there is one, is a stream."""
        from ..core.redis_stream import Connection

        try:
            Connection(self.url, REDIS_READY_S).info(self.stream)
        except SemiJoinError as exc:
            raise ConfigError(str(exc)) from None

    def datasets(self) -> list[tuple[str, str]]:
        host, port, db = check_url(self.url)
        return [(f"redis://{host}:{port}", f"{db}/{self.stream}")]



SOURCE_CLASSES: dict[str, type[SourceSpec]] = {
    cls.kind: cls for cls in (FilesSource, GeneratorSource, SparkSource, RedisStreamSource)}


def _check_options(options) -> None:
    if not isinstance(options, dict):
        raise SpecError(f"options: {shown(options)} is not a mapping of option names to values")


def _fields_of(cls: type[SourceSpec]) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _default(f: dataclasses.Field):
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _flat_defaults() -> dict:
    defaults = {}
    for cls in SOURCE_CLASSES.values():
        for f in dataclasses.fields(cls):
            defaults.setdefault(f.name, _default(f))
    return defaults


_DEFAULTS = _flat_defaults()  # every field of the flat form but kind, in its order (that of the classes), at its default
FIELDS = ("kind", *_DEFAULTS)  # the flat form's fields


def source_fields(data) -> tuple[type[SourceSpec], dict]:
    """The class a source mapping's ``kind`` selects and its own fields from ``data``; another
    kind's field is dropped at its default and refused otherwise, an unknown field refused."""
    if not isinstance(data, dict):
        raise SpecError(f"{shown(data)} is not a mapping of fields")
    unknown = sorted(set(data) - set(FIELDS), key=repr)
    if unknown:
        raise SpecError(f"{shown_key(unknown[0])}: not a field of SourceSpec (fields: {list(FIELDS)})")
    kind = data.get("kind", "generator")
    one_of("kind", kind, tuple(SOURCE_CLASSES))
    cls = SOURCE_CLASSES[kind]
    own = _fields_of(cls)
    for name, value in data.items():
        if name != "kind" and name not in own and value != _DEFAULTS[name]:
            owners = " or ".join(repr(k) for k, c in SOURCE_CLASSES.items() if name in _fields_of(c))
            raise SpecError(f"{name}: given for a {kind} source; expected it only with kind {owners}")
    return cls, {name: value for name, value in data.items() if name in own}


def source_from_dict(data) -> SourceSpec:
    """The source of a mapping in the flat form (a job spec's ``source``)."""
    cls, own = source_fields(data)
    return cls(**own)
