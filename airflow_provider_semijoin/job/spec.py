"""The job spec of a streaming semi-join: source -> join steps -> sinks, with a checkpoint.

A spec is plain data (it travels as JSON to ``spark-submit``), validated when it is built: every
dataclass checks its own fields in ``__post_init__`` and raises :class:`SpecError` with the
field's name; :meth:`JobSpec.from_dict` prefixes the path (``steps[1].algorithm: ...``) and
rejects unknown fields. Nothing here touches Spark or a database: checks that need one (does the
table exist, does the source folder hold the stream key) run in the runner before the query
starts.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from ..core.checks import check_flag, check_number, check_positive
from ..core.errors import ConfigError, SpecError, shown, shown_key
from ..core.joins.registry import ALGORITHMS, algorithm_class
from ..core.stores.sql import DatabaseURL, check_identifier, redact
from ..core.units import parse_bytes
from ..get_provider_info import CONFIG_OPTIONS
from ..workloads.zipf import SHAPES

SOURCE_KINDS = ("files", "generator", "spark")
FILE_FORMATS = ("parquet", "csv", "json")
SINK_KINDS = ("parquet", "table")
SINK_INDEX_SUFFIX = "_batch"  # a table sink's index on its batch column: <table>_batch
ON_MISSING = ("dead_letter", "unknown_member", "retry")
CHANGE_CAPTURES = ("triggers", "binlog")
GENERATOR_COLUMNS = ("tid", "nk", "qty", "amount", "sj_arrival")
EXTRA_KEY_SETTINGS = ("master_rows", "exponent", "shape", "missing", "seed")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
_SECRET_OPTION = re.compile(r"pass|secret|token|jaas|credential|private|auth|key", re.IGNORECASE)
# a field named like a [semijoin] option defaults to that option's default here, and to the
# configured value on the Airflow paths (job/assemble.py): memory, db_retry_max_s
DEFAULT_MEMORY = CONFIG_OPTIONS["memory"][1]
DEFAULT_DB_RETRY_MAX_S = float(CONFIG_OPTIONS["db_retry_max_s"][1])


def _one_of(name: str, value, allowed) -> None:
    if value not in allowed:
        raise SpecError(f"{name}: {shown(value)} is not one of {list(allowed)}")


def _positive(name: str, value, *, optional: bool = False, integer: bool = False) -> None:
    check_positive(name, value, integer=integer, optional=optional, error=SpecError)


def _identifier(name: str, value) -> None:
    try:
        check_identifier(value, name)
    except ConfigError as exc:
        raise SpecError(str(exc)) from None


def _url(name: str, value) -> None:
    try:
        DatabaseURL.parse(value)
    except ConfigError as exc:
        raise SpecError(f"{name}: {str(exc).split(': ', 1)[1]}") from None


@dataclass
class SourceSpec:
    """Where stream tuples come from.

    * ``files``: a landing folder ``path`` of ``format`` files (parquet, csv, json lines), read as
      new files appear; ``schema`` is a Spark DDL string (``"id BIGINT, nk STRING"``) or None to
      infer it once from the files already there. A tuple's id is ``<file name>#<row>``.
    * ``generator``: the built-in Zipf stream (:mod:`..workloads.zipf`) at ``rows_per_second``,
      optionally bursty (self-similar arrivals), ``total_rows`` in all (None: endless). Its keys
      are those of a master of ``master_rows`` rows (:func:`..workloads.master.generate_master`);
      ``max_rows_per_batch`` caps a micro-batch (a backlog is read in several batches).
      ``extra_keys`` adds more foreign-key columns, each a Zipf stream of its own over another
      master: ``{"customer_nk": {"master_rows": 20000, "seed": 7}}`` (``exponent``, ``shape``,
      ``missing``, ``seed`` default to the source's; a sale carries a product and a customer key).
    * ``spark``: any Spark source by ``format`` and ``options`` (Kafka where the connector is on
      the classpath); ``id_column`` names a column that is stable across replays.
    """

    kind: str = "generator"
    path: str | None = None
    format: str | None = None
    schema: str | None = None
    options: dict = field(default_factory=dict)
    id_column: str | None = None
    max_files_per_trigger: int | None = None
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

    def __post_init__(self):
        _one_of("kind", self.kind, SOURCE_KINDS)
        if not isinstance(self.options, dict):
            raise SpecError(f"options: {shown(self.options)} is not a mapping of option names to values")
        if self.id_column is not None:
            _identifier("id_column", self.id_column)
        if self.kind == "files":
            if not self.path or not isinstance(self.path, str):
                raise SpecError(f"path: {shown(self.path)} is not a folder (a files source reads a landing folder)")
            if self.format is None:
                raise SpecError(f"format: missing; expected one of {list(FILE_FORMATS)}")
            _one_of("format", self.format, FILE_FORMATS)
            if self.schema is not None and (not isinstance(self.schema, str) or not self.schema.strip()):
                raise SpecError(f"schema: {shown(self.schema)} is not a Spark DDL string such as 'id BIGINT, nk STRING'")
            _positive("max_files_per_trigger", self.max_files_per_trigger, optional=True, integer=True)
        elif self.kind == "spark":
            if not self.format or not isinstance(self.format, str):
                raise SpecError(f"format: {shown(self.format)} is not a Spark source format (e.g. 'kafka')")
            if self.id_column is None:
                raise SpecError("id_column: missing; a spark source needs a column that is stable across replays")
        else:
            _positive("rows_per_second", self.rows_per_second)
            _positive("total_rows", self.total_rows, optional=True, integer=True)
            _positive("max_rows_per_batch", self.max_rows_per_batch, optional=True, integer=True)
            _positive("master_rows", self.master_rows, integer=True)
            _one_of("key_type", self.key_type, ("int", "str"))
            _one_of("shape", self.shape, SHAPES)
            check_number("exponent", self.exponent, "a number >= 0", minimum=0, error=SpecError)
            check_number("missing", self.missing, "a fraction between 0 and 1", minimum=0, maximum=1, error=SpecError)
            check_number("seed", self.seed, "an integer >= 0", integer=True, minimum=0, error=SpecError)
            self._check_extra_keys()
        if self.kind != "generator" and self.extra_keys:
            raise SpecError(f"extra_keys: given for a {self.kind} source; expected it only with kind 'generator'")

    def _check_extra_keys(self) -> None:
        if not isinstance(self.extra_keys, dict):
            raise SpecError(f"extra_keys: {shown(self.extra_keys)} is not a mapping of column names to key settings")
        for column, settings in self.extra_keys.items():
            _identifier(f"extra_keys.{shown_key(column)}", column)
            if column in GENERATOR_COLUMNS:
                raise SpecError(f"extra_keys.{shown_key(column)}: already a column of the generator; expected a new column name")
            if not isinstance(settings, dict) or "master_rows" not in settings:
                raise SpecError(f"extra_keys.{shown_key(column)}: {shown(settings)} is not a mapping with master_rows")
            unknown = sorted(set(settings) - set(EXTRA_KEY_SETTINGS), key=repr)
            if unknown:
                raise SpecError(f"extra_keys.{shown_key(column)}.{shown_key(unknown[0])}: not a key setting (settings: {list(EXTRA_KEY_SETTINGS)})")
            try:  # the same checks as the source's own settings
                SourceSpec(**{**self.extra_key_settings(column), "key_type": self.key_type})
            except SpecError as exc:
                raise SpecError(f"extra_keys.{shown_key(column)}.{exc}") from None

    def extra_key_settings(self, column: str) -> dict:
        """The Zipf settings of extra key ``column``: its own, else the source's."""
        return {name: self.extra_keys[column].get(name, getattr(self, name)) for name in EXTRA_KEY_SETTINGS}

    def describe(self) -> dict:
        """The fields, with the values of secret-looking options (``kafka.sasl.jaas.config``,
        ``*password*``, ``*secret*``, ``*token*``...) hidden and URLs redacted: for logs, XCom, the UI."""
        data = _plain(self)
        data["options"] = {k: "***" if _SECRET_OPTION.search(str(k)) else redact(v) if isinstance(v, str) else v
                           for k, v in self.options.items()}
        return data

    def __repr__(self) -> str:
        return f"SourceSpec({', '.join(f'{k}={v!r}' for k, v in self.describe().items())})"

    @property
    def bounded(self) -> bool:
        """True when the source ends: a generator with total_rows (a landing folder never ends)."""
        return self.kind == "generator" and self.total_rows is not None


@dataclass
class MasterSpec:
    """The master relation R: a database ``url``, its ``table``, ``key`` column, columns to add."""

    url: str
    table: str
    key: str
    select: list[str] | None = None

    def __post_init__(self):
        _url("url", self.url)
        _identifier("table", self.table)
        _identifier("key", self.key)
        if self.select is not None:
            if not isinstance(self.select, list) or not self.select:
                raise SpecError(f"select: {shown(self.select)} is not a non-empty list of column names")
            for i, column in enumerate(self.select):
                _identifier(f"select[{i}]", column)

    def describe(self) -> dict:
        return {"url": redact(self.url), "table": self.table, "key": self.key, "select": self.select}

    def __repr__(self) -> str:  # the URL without its password: reprs reach logs and tracebacks
        return f"MasterSpec(url={redact(self.url)!r}, table={self.table!r}, key={self.key!r}, select={self.select!r})"


@dataclass
class StepSpec:
    """One semi-join: the stream's ``column`` joined with R's key by ``algorithm`` in ``memory``.

    ``on_missing`` says what happens to a tuple whose key is not in R: ``dead_letter`` (it leaves
    on the dead-letter sink with its reason), ``unknown_member`` (it goes on with the values of
    ``unknown_member`` for R's columns, e.g. ``{"product_sk": -1}``), ``retry`` (it is joined
    again in later micro-batches for ``retry_grace_s`` seconds - the dimension row may arrive
    late - and then goes to the dead-letter sink). ``rename`` maps R's columns to output names;
    ``drop_column`` removes the natural key from the output (surrogate-key replacement).
    ``max_queue_time_s``: the longest a tuple waits inside the join across micro-batches before
    it is forced out (its page loaded); None: no bound (it leaves when its page comes round, or
    when the job drains at a stop or the end of input).
    ``change_capture``: ``triggers`` puts R's capture triggers in place at start when missing
    (:mod:`..core.stores.capture`), ``binlog`` reads R's changes from MySQL/MariaDB's binary
    log (:mod:`..core.stores.binlog`), so the running join sees every writer's commits.
    ``master_static``: the user's word that nothing but the provider's own installs changes R.
    ``refresh: {every_s: N}``: where nothing can be captured, every N seconds (at a batch's end)
    the step drops what it cached of R - caches, page maps - and reads it anew (Flink's lookup
    cache TTL); a change is then seen within N s and a micro-batch.
    Without any of them, a job on an R whose writes are not captured refuses to start
    (:func:`..core.stores.capture.changes_seen`): its answers would go stale without a word.
    """

    column: str
    master: MasterSpec
    algorithm: str = "hybridjoin"
    params: dict = field(default_factory=dict)
    memory: Any = DEFAULT_MEMORY
    on_missing: str = "dead_letter"
    unknown_member: dict | None = None
    retry_grace_s: float | None = None
    rename: dict = field(default_factory=dict)
    drop_column: bool = False
    max_queue_time_s: float | None = 10.0
    change_capture: str | None = None
    master_static: bool = False
    refresh: dict | None = None

    def __post_init__(self):
        _identifier("column", self.column)
        if isinstance(self.master, dict):
            self.master = _build(MasterSpec, self.master, "master")
        elif not isinstance(self.master, MasterSpec):
            raise SpecError(f"master: {shown(self.master)} is not a mapping of url, table, key and select")
        if not isinstance(self.algorithm, str) or self.algorithm not in ALGORITHMS:
            raise SpecError(f"algorithm: {shown(self.algorithm)} is not one of {sorted(ALGORITHMS)}")
        if not isinstance(self.params, dict):
            raise SpecError(f"params: {shown(self.params)} is not a mapping of parameter names to values")
        known = algorithm_class(self.algorithm).params
        for name, value in self.params.items():
            if name not in known:
                raise SpecError(f"params.{shown_key(name)}: not a parameter of {self.algorithm} (parameters: {sorted(known)})")
            try:
                known[name].coerce(self.algorithm, name, value)
            except ConfigError as exc:
                raise SpecError(f"params.{shown_key(name)}: {str(exc).split(': ', 1)[1]}") from None
        try:
            parse_bytes(self.memory)
        except ConfigError as exc:
            raise SpecError(str(exc)) from None
        _one_of("on_missing", self.on_missing, ON_MISSING)
        if self.on_missing == "unknown_member":
            if not isinstance(self.unknown_member, dict) or not self.unknown_member:
                raise SpecError(
                    f"unknown_member: {shown(self.unknown_member)} is not a mapping of master columns to values "
                    "(on_missing 'unknown_member' needs one, e.g. {'product_sk': -1})"
                )
        elif self.unknown_member is not None:
            raise SpecError(f"unknown_member: given, but on_missing is {shown(self.on_missing)} (it needs 'unknown_member')")
        if self.on_missing == "retry":
            if self.retry_grace_s is None:
                raise SpecError("retry_grace_s: missing; expected the seconds a tuple waits for a late master row "
                                "(on_missing 'retry')")
            _positive("retry_grace_s", self.retry_grace_s)
        elif self.retry_grace_s is not None:
            raise SpecError(f"retry_grace_s: given, but on_missing is {shown(self.on_missing)} (it needs 'retry')")
        if not isinstance(self.rename, dict):
            raise SpecError(f"rename: {shown(self.rename)} is not a mapping of master columns to output names")
        for old, new in self.rename.items():
            _identifier(f"rename.{shown_key(old)}", new)
        check_flag("drop_column", self.drop_column, error=SpecError)
        _positive("max_queue_time_s", self.max_queue_time_s, optional=True)
        if self.change_capture is not None:
            _one_of("change_capture", self.change_capture, CHANGE_CAPTURES)
        check_flag("master_static", self.master_static, error=SpecError)
        if self.refresh is not None:
            if not isinstance(self.refresh, dict) or set(self.refresh) != {"every_s"}:
                raise SpecError(f"refresh: {shown(self.refresh)} is not a mapping {{every_s: seconds}}")
            _positive("refresh.every_s", self.refresh["every_s"])

    @property
    def memory_bytes(self) -> int:
        return parse_bytes(self.memory)

    def describe(self) -> dict:
        data = _plain(self)
        data["master"] = self.master.describe()
        return data


@dataclass
class TargetSpec:
    """A sink: Parquet files under ``path``, or a database ``table`` at ``url``.

    Writes are idempotent per micro-batch: the rows of batch b replace whatever an earlier
    attempt at batch b wrote (a Parquet folder ``batch=<b>``; rows tagged ``sj_batch`` in a table).
    """

    kind: str = "parquet"
    path: str | None = None
    url: str | None = None
    table: str | None = None

    def __post_init__(self):
        _one_of("kind", self.kind, SINK_KINDS)
        if self.kind == "parquet":
            if not self.path or not isinstance(self.path, str):
                raise SpecError(f"path: {shown(self.path)} is not a folder for the Parquet files")
        else:
            _url("url", self.url)
            _identifier("table", self.table)
            if self.url.lower().startswith("sqlite:") and self.table.lower().startswith("sqlite_"):
                raise SpecError(f"table: {shown(self.table)} is reserved by SQLite (names starting with sqlite_); choose another")
            if len(self.table) > 64 - len(SINK_INDEX_SUFFIX):
                raise SpecError(f"table: {shown(self.table)} is too long for a sink table (at most "
                                f"{64 - len(SINK_INDEX_SUFFIX)} characters, so that its index {self.table}{SINK_INDEX_SUFFIX} "
                                "is a valid identifier)")

    def describe(self) -> dict:
        return {**_plain(self), "url": redact(self.url) if self.url else None}

    def __repr__(self) -> str:
        return f"TargetSpec({', '.join(f'{k}={v!r}' for k, v in self.describe().items())})"


@dataclass
class SinkSpec:
    matched: TargetSpec
    dead_letter: TargetSpec

    def __post_init__(self):
        for name in ("matched", "dead_letter"):
            value = getattr(self, name)
            if isinstance(value, dict):
                setattr(self, name, _build(TargetSpec, value, name))
            elif not isinstance(value, TargetSpec):
                raise SpecError(f"{name}: {shown(value)} is not a sink (expected kind and path, or kind, url and table)")


@dataclass
class StopSpec:
    """When the query stops: after ``duration_s``, after ``max_batches`` micro-batches, at the end
    of a bounded input (``end_of_input``: a generator with total_rows, or the files in the landing
    folder when the query started), or when the file ``stop_file`` appears (a stop request from
    another process). With none of them the query runs until its process is told to stop."""

    duration_s: float | None = None
    max_batches: int | None = None
    end_of_input: bool = False
    stop_file: str | None = None

    def __post_init__(self):
        _positive("duration_s", self.duration_s, optional=True)
        _positive("max_batches", self.max_batches, optional=True, integer=True)
        check_flag("end_of_input", self.end_of_input, error=SpecError)


@dataclass
class DeadlineSpec:
    """Per-tuple deadlines (SSIJ sec. IV-F): ``max_latency_s`` after arrival, or a ``column`` of
    absolute deadlines (timestamps)."""

    max_latency_s: float | None = None
    column: str | None = None

    def __post_init__(self):
        if (self.max_latency_s is None) == (self.column is None):
            raise SpecError("max_latency_s, column: give exactly one of them")
        _positive("max_latency_s", self.max_latency_s, optional=True)
        if self.column is not None:
            _identifier("column", self.column)


@dataclass
class JobSpec:
    """A whole streaming join: ``source`` -> ``steps`` (in order, in one query) -> ``sinks``."""

    source: SourceSpec
    steps: list[StepSpec]
    sinks: SinkSpec
    checkpoint: str
    name: str = "semijoin"
    trigger_interval_s: float = 1.0
    partitions: int = 1
    stop: StopSpec = field(default_factory=StopSpec)
    deadline: DeadlineSpec | None = None
    arrival_column: str | None = None
    db_retry_max_s: float = DEFAULT_DB_RETRY_MAX_S  # how long a lost MySQL session is reopened for (master data, table sinks)
    work_ahead: bool = True  # steps go on joining between micro-batches (:mod:`..spark.ahead`)

    def __post_init__(self):
        for name, kind in (("source", SourceSpec), ("sinks", SinkSpec), ("stop", StopSpec), ("deadline", DeadlineSpec)):
            value = getattr(self, name)
            if not isinstance(value, kind) and not (name == "deadline" and value is None):
                raise SpecError(f"{name}: {shown(value)} is not a mapping of the fields of {kind.__name__}")
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise SpecError(f"name: {shown(self.name)} is not a name of letters, digits and underscores")
        if not self.checkpoint or not isinstance(self.checkpoint, str):
            raise SpecError(f"checkpoint: {shown(self.checkpoint)} is not a folder for Spark's checkpoint")
        _positive("trigger_interval_s", self.trigger_interval_s)
        _positive("partitions", self.partitions, integer=True)
        _positive("db_retry_max_s", self.db_retry_max_s)
        if not isinstance(self.work_ahead, bool):
            raise SpecError(f"work_ahead: {shown(self.work_ahead)} is not true or false")
        if not isinstance(self.steps, list) or not self.steps:
            raise SpecError("steps: missing; expected a list of at least one join step")
        for i, step in enumerate(self.steps):
            if not isinstance(step, StepSpec):
                raise SpecError(f"steps[{i}]: {shown(step)} is not a join step")
        if self.arrival_column is not None:
            _identifier("arrival_column", self.arrival_column)
        if self.stop.end_of_input and self.source.kind == "generator" and self.source.total_rows is None:
            raise SpecError("stop.end_of_input: the generator source is endless; give source.total_rows or another stop")
        outputs: set[str] = set()
        for i, step in enumerate(self.steps):
            for column in step.master.select or []:
                out = step.rename.get(column, column)
                if out in outputs:
                    raise SpecError(f"steps[{i}].rename: output column {shown(out)} is already added by an earlier step")
                outputs.add(out)

    @classmethod
    def from_dict(cls, data: dict) -> "JobSpec":
        return _build(cls, data, "")

    def to_dict(self) -> dict:
        """Everything, as JSON-safe data (URLs keep their passwords: for the driver only)."""
        return _plain(self)

    def describe(self) -> dict:
        """:meth:`to_dict` without credentials, for logs, XCom and the UI."""
        data = self.to_dict()
        data["source"] = self.source.describe()
        data["steps"] = [step.describe() for step in self.steps]
        data["sinks"] = {"matched": self.sinks.matched.describe(), "dead_letter": self.sinks.dead_letter.describe()}
        return data


_NESTED = {
    (JobSpec, "source"): SourceSpec,
    (JobSpec, "sinks"): SinkSpec,
    (JobSpec, "stop"): StopSpec,
    (JobSpec, "deadline"): DeadlineSpec,
    (StepSpec, "master"): MasterSpec,
    (SinkSpec, "matched"): TargetSpec,
    (SinkSpec, "dead_letter"): TargetSpec,
}


def _build(cls, data, path: str):
    """``cls(**data)`` with nested specs built too, unknown fields refused, errors prefixed by path."""
    where = f"{path}." if path else ""
    if not isinstance(data, dict):
        raise SpecError(f"{path or cls.__name__}: {shown(data)} is not a mapping of fields")
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names), key=repr)
    if unknown:
        raise SpecError(f"{where}{shown_key(unknown[0])}: not a field of {cls.__name__} (fields: {names})")
    missing = [f.name for f in dataclasses.fields(cls)
               if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.name not in data]
    if missing:
        raise SpecError(f"{where}{missing[0]}: missing")
    values = dict(data)
    for name, value in data.items():
        nested = _NESTED.get((cls, name))
        if nested is not None and isinstance(value, dict):
            values[name] = _build(nested, value, f"{where}{name}")
        elif cls is JobSpec and name == "steps" and isinstance(value, list):
            values[name] = [_build(StepSpec, step, f"{where}steps[{i}]") for i, step in enumerate(value)]
    try:
        return cls(**values)
    except SpecError as exc:
        message = str(exc)
        raise SpecError(message if message.startswith(where) or not where else f"{where}{message}") from None


def _plain(spec) -> dict:
    return dataclasses.asdict(spec)
