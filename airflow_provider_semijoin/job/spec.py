"""The job spec of a streaming semi-join: source -> join steps -> sinks, with a checkpoint.

A spec is plain data (it travels as JSON to ``spark-submit``), validated when it is built: every
dataclass checks its own fields in ``__post_init__`` and raises :class:`SpecError` with the
field's name; :meth:`JobSpec.from_dict` prefixes the path (``steps[1].algorithm: ...``) and
rejects unknown fields. Nothing here touches Spark or a database: checks that need one (does the
table exist, does the source folder hold the stream key) run in the runner before the query
starts. The source, one class per kind, is in :mod:`.sources`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from ..core.asof import AsOf
from ..core.checks import check_flag
from ..core.errors import ConfigError, SpecError, shown, shown_key
from ..core.joins.registry import ALGORITHMS, algorithm_class
from ..core.stores.horizon import KEEP_VERSIONS, READER_TTL_S
from ..core.stores.sql import redact
from ..core.stores.system_time import PERIOD_NAMES
from ..core.units import parse_bytes
from ..get_provider_info import CONFIG_OPTIONS
from .checks import database_url, identifier, one_of, positive
from .inferred import inferred_member_options
from .sources import SourceSpec, file_dataset, source_fields, table_dataset

SINK_KINDS = ("parquet", "table")
SINK_INDEX_SUFFIX = "_batch"  # a table sink's index on its batch column: <table>_batch
ON_MISSING = ("dead_letter", "unknown_member", "retry", "inferred_member")
CHANGE_CAPTURES = ("triggers", "binlog")
# the micro-batch's rows read by the parts on the executors where the job allows it at partitions >= 2 (auto), always
# collected to the driver, or always read by the parts (the job refused where it cannot be)
DATA_PATHS = ("auto", "driver", "executors")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
# a field named like a [semijoin] option defaults to that option's default here, and to the
# configured value on the Airflow paths (job/assemble.py): memory, db_retry_max_s
DEFAULT_MEMORY = CONFIG_OPTIONS["memory"][1]
DEFAULT_DB_RETRY_MAX_S = float(CONFIG_OPTIONS["db_retry_max_s"][1])


@dataclass
class MasterSpec:
    """The master relation R: a database ``url``, its ``table``, ``key`` column, columns to add."""

    url: str
    table: str
    key: str
    select: list[str] | None = None

    def __post_init__(self):
        database_url("url", self.url)
        identifier("table", self.table)
        identifier("key", self.key)
        if self.select is not None:
            if not isinstance(self.select, list) or not self.select:
                raise SpecError(f"select: {shown(self.select)} is not a non-empty list of column names")
            for i, column in enumerate(self.select):
                identifier(f"select[{i}]", column)

    def describe(self) -> dict:
        return {"url": redact(self.url), "table": self.table, "key": self.key, "select": self.select}

    def __repr__(self) -> str:  # the URL without its password: reprs reach logs and tracebacks
        return f"MasterSpec(url={redact(self.url)!r}, table={self.table!r}, key={self.key!r}, select={self.select!r})"


def holds_for_retry(on_missing: str, retry_grace_s: float | None) -> bool:
    """Whether a step holds the tuples whose key R lacks for ``retry_grace_s`` (``retry``;
    ``inferred_member`` with a grace period: a placeholder is inferred after it)."""
    return on_missing == "retry" or (on_missing == "inferred_member" and retry_grace_s is not None)


@dataclass
class AsOfSpec:
    """An as-of lookup on a type-2 dimension (:mod:`..core.asof`): each tuple gets the version of
    its key valid at its ``event_time`` (a stream column), R's rows valid over the half-open
    ``[valid_from, valid_to)`` (NULL ``valid_to``: the current version). A tuple with no version
    valid then goes to the step's ``on_missing`` (reason ``no_version_valid``), one with a null
    event time to the dead letter (``null_event_time``). ``system_time: true`` instead of
    ``valid_from``/``valid_to``: R is a MariaDB system-versioned table, its versions valid over
    their system periods ``[ROW_START, ROW_END)`` (:mod:`..core.stores.system_time`)."""

    event_time: str
    valid_from: str | None = None
    valid_to: str | None = None
    system_time: bool = False

    def __post_init__(self):
        identifier("event_time", self.event_time)
        check_flag("system_time", self.system_time, error=SpecError)
        for name in ("valid_from", "valid_to"):
            if self.system_time and getattr(self, name) is not None:
                raise SpecError(f"{name}: given with system_time: true; expected one of them (a system-versioned "
                                "table's versions are its system periods)")
            if not self.system_time:
                if getattr(self, name) is None:
                    raise SpecError(f"{name}: missing; expected the column that " + (
                        "starts" if name == "valid_from" else "ends") + " a version (or system_time: true)")
                identifier(name, getattr(self, name))
        if not self.system_time and self.valid_from == self.valid_to:
            raise SpecError(f"valid_to: {shown(self.valid_to)} is valid_from too; expected the column that ends a version")

    @property
    def lookup(self) -> AsOf:
        if self.system_time:  # the periods, under the names the store reads them as
            return AsOf(self.event_time, *PERIOD_NAMES)
        return AsOf(self.event_time, self.valid_from, self.valid_to)

    def check_join(self, column: str, key: str, algorithm: str, params: dict) -> None:
        """The lookup fits its join of the stream's ``column`` with R's ``key`` by ``algorithm``
        with ``params``: one sentence otherwise (a step's spec and ``semijoin join --as-of``)."""
        if self.event_time == column:
            raise SpecError(f"as_of.event_time: {shown(self.event_time)} is the join column; expected the "
                            "stream's event-time column")
        for name in ("valid_from", "valid_to"):
            if getattr(self, name) == key:
                raise SpecError(f"as_of.{name}: {shown(key)} is the master key; expected a version column of R")
        if not all(_zero(params.get(name, 0)) for name in ("range_lo", "range_hi")):
            raise SpecError(f"as_of: given with a range join (params.range_lo/range_hi) of {algorithm}; "
                            "expected an equality join, whose key's versions the lookup chooses from")

    def read_columns(self, select: list[str] | None) -> list[str] | None:
        """The columns a store reads from R for ``select``: those and the version columns the
        lookup needs (None: every column, these among them)."""
        if select is None:
            return None
        return select + [c for c in self.lookup.version_columns if c not in select]


def _zero(value) -> bool:
    """Whether a parameter (a number, or the text of one from ``--set``) is zero."""
    try:
        return float(value) == 0
    except (TypeError, ValueError):
        return False


PRUNE_DEFAULTS = {"every_s": 300.0, "reader_ttl_s": READER_TTL_S, "keep_versions": KEEP_VERSIONS}  # prune_history


@dataclass
class StepSpec:
    """One semi-join: the stream's ``column`` joined with R's key by ``algorithm`` in ``memory``.

    ``on_missing`` says what happens to a tuple whose key is not in R: ``dead_letter`` (it leaves
    on the dead-letter sink with its reason), ``unknown_member`` (it goes on with the values of
    ``unknown_member`` for R's columns, e.g. ``{"product_sk": -1}``), ``retry`` (it is joined
    again in later micro-batches for ``retry_grace_s`` seconds - the dimension row may arrive
    late - and then goes to the dead-letter sink), ``inferred_member`` (a placeholder row is
    inserted into R for its natural key and the tuple goes on with that row's surrogate key,
    Kimball's inferred member: :mod:`..core.stores.inferred`; options in ``inferred_member``,
    :mod:`.inferred`; with ``retry_grace_s`` it first waits that long for the real row).
    A null key never gets a placeholder: it goes to the dead-letter sink. ``rename`` maps R's columns to output names;
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
    ``prune_history``: R's captured history (change log, before-images, binlog positions) below
    the horizon of its readers is pruned by the job every ``every_s`` seconds (default
    :data:`PRUNE_DEFAULTS`; :mod:`..core.stores.horizon`); ``false`` leaves it to
    ``semijoin changes prune``; a mapping sets some of ``every_s``, ``reader_ttl_s``, ``keep_versions``.
    ``as_of: {event_time, valid_from, valid_to}``: R is a type-2 dimension, each tuple gets the
    version valid at its event time (:class:`AsOfSpec`); ``{event_time, system_time: true}``:
    R is a MariaDB system-versioned table, the versions its system periods (never with
    ``inferred_member``: a placeholder's period would start when it is inserted, after the
    facts that asked for it); with ``inferred_member`` a key R lacks
    altogether gets a placeholder valid from the beginning of time, open-ended (its version
    columns set by the placeholder, never by ``defaults``), a key whose versions miss the event
    time is never inferred (``no_version_valid``).
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
    inferred_member: dict | None = None
    as_of: AsOfSpec | None = None
    prune_history: dict | bool | None = None

    def __post_init__(self):
        identifier("column", self.column)
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
        one_of("on_missing", self.on_missing, ON_MISSING)
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
        elif self.retry_grace_s is not None and self.on_missing != "inferred_member":
            raise SpecError(f"retry_grace_s: given, but on_missing is {shown(self.on_missing)} "
                            "(it needs 'retry' or 'inferred_member')")
        positive("retry_grace_s", self.retry_grace_s, optional=True)
        self.inferred_member = inferred_member_options(self.inferred_member, self.on_missing, self.master.key)
        if not isinstance(self.rename, dict):
            raise SpecError(f"rename: {shown(self.rename)} is not a mapping of master columns to output names")
        for old, new in self.rename.items():
            identifier(f"rename.{shown_key(old)}", new)
        check_flag("drop_column", self.drop_column, error=SpecError)
        positive("max_queue_time_s", self.max_queue_time_s, optional=True)
        if self.change_capture is not None:
            one_of("change_capture", self.change_capture, CHANGE_CAPTURES)
        check_flag("master_static", self.master_static, error=SpecError)
        if self.refresh is not None:
            if not isinstance(self.refresh, dict) or set(self.refresh) != {"every_s"}:
                raise SpecError(f"refresh: {shown(self.refresh)} is not a mapping {{every_s: seconds}}")
            positive("refresh.every_s", self.refresh["every_s"])
        self.prune_options  # noqa: B018 - checked here, before any work
        self._check_as_of()

    @property
    def prune_options(self) -> dict | None:
        """How the job prunes R's history (None: it does not; ``prune_history``)."""
        value = self.prune_history
        if value is False:
            return None
        if value is None or value is True:
            return dict(PRUNE_DEFAULTS)
        if not isinstance(value, dict) or not value or not set(value) <= set(PRUNE_DEFAULTS):
            raise SpecError(f"prune_history: {shown(value)} is not false or a mapping of some of "
                            f"{list(PRUNE_DEFAULTS)}")
        options = {**PRUNE_DEFAULTS, **value}
        positive("prune_history.every_s", options["every_s"])
        positive("prune_history.reader_ttl_s", options["reader_ttl_s"])
        keep = options["keep_versions"]
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise SpecError(f"prune_history.keep_versions: {shown(keep)} is not a whole number of at least 1")
        return options

    def _check_as_of(self) -> None:
        if isinstance(self.as_of, dict):
            self.as_of = _build(AsOfSpec, self.as_of, "as_of")
        elif self.as_of is not None and not isinstance(self.as_of, AsOfSpec):
            raise SpecError(f"as_of: {shown(self.as_of)} is not a mapping of event_time, valid_from and valid_to "
                           "(or system_time)")
        if self.as_of is None:
            return
        self.as_of.check_join(self.column, self.master.key, self.algorithm, self.params)
        if self.as_of.system_time and self.change_capture == "binlog":
            raise SpecError("as_of.system_time: given with change_capture: binlog; expected change_capture: triggers "
                            "(the binary log's before-images of a system-versioned R lack its history)")
        if self.as_of.system_time and self.master.select is None:
            raise SpecError("as_of.system_time: master.select is missing; expected the columns of R to add (a "
                            "system-versioned R is read with its periods beside them)")
        if self.as_of.system_time and self.on_missing == "inferred_member":
            raise SpecError("as_of.system_time: given with on_missing: inferred_member; expected dead_letter, "
                            "unknown_member or retry (a placeholder's system period starts when it is inserted, "
                            "after the facts that asked for it)")
        defaults = (self.inferred_member or {}).get("defaults", {})
        named = next((c for c in self.as_of.lookup.version_columns if c in defaults), None)
        if named is not None:
            raise SpecError(f"inferred_member.defaults.{named}: is a version column of as_of, which the placeholder sets "
                            "itself (valid from the beginning of time, open-ended)")

    @property
    def memory_bytes(self) -> int:
        return parse_bytes(self.memory)

    @property
    def retries(self) -> bool:
        """Tuples whose key R lacks are held for ``retry_grace_s`` (``retry``; ``inferred_member``
        with a grace period: then a placeholder is inferred)."""
        return holds_for_retry(self.on_missing, self.retry_grace_s)

    @property
    def master_select(self) -> list[str] | None:
        """The columns the step's store reads from R: ``master.select`` and, for an as-of
        lookup, the version columns it needs (None: every column, these among them)."""
        return self.master.select if self.as_of is None else self.as_of.read_columns(self.master.select)

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
        one_of("kind", self.kind, SINK_KINDS)
        if self.kind == "parquet":
            if not self.path or not isinstance(self.path, str):
                raise SpecError(f"path: {shown(self.path)} is not a folder for the Parquet files")
        else:
            database_url("url", self.url)
            identifier("table", self.table)
            if self.url.lower().startswith("sqlite:") and self.table.lower().startswith("sqlite_"):
                raise SpecError(f"table: {shown(self.table)} is reserved by SQLite (names starting with sqlite_); choose another")
            if len(self.table) > 64 - len(SINK_INDEX_SUFFIX):
                raise SpecError(f"table: {shown(self.table)} is too long for a sink table (at most "
                                f"{64 - len(SINK_INDEX_SUFFIX)} characters, so that its index {self.table}{SINK_INDEX_SUFFIX} "
                                "is a valid identifier)")

    def dataset(self) -> tuple[str, str]:
        """The sink as an OpenLineage dataset (namespace, name): its folder, or its table."""
        return file_dataset(self.path) if self.kind == "parquet" else table_dataset(self.url, self.table)

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
        positive("duration_s", self.duration_s, optional=True)
        positive("max_batches", self.max_batches, optional=True, integer=True)
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
        positive("max_latency_s", self.max_latency_s, optional=True)
        if self.column is not None:
            identifier("column", self.column)


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
    data_path: str = "auto"  # where a micro-batch's rows are read, joined and written (:mod:`..spark.executor_rows`)

    def __post_init__(self):
        for name, kind in (("source", SourceSpec), ("sinks", SinkSpec), ("stop", StopSpec), ("deadline", DeadlineSpec)):
            value = getattr(self, name)
            if not isinstance(value, kind) and not (name == "deadline" and value is None):
                raise SpecError(f"{name}: {shown(value)} is not a mapping of the fields of {kind.__name__}")
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise SpecError(f"name: {shown(self.name)} is not a name of letters, digits and underscores")
        if not self.checkpoint or not isinstance(self.checkpoint, str):
            raise SpecError(f"checkpoint: {shown(self.checkpoint)} is not a folder for Spark's checkpoint")
        positive("trigger_interval_s", self.trigger_interval_s)
        positive("partitions", self.partitions, integer=True)
        positive("db_retry_max_s", self.db_retry_max_s)
        if not isinstance(self.work_ahead, bool):
            raise SpecError(f"work_ahead: {shown(self.work_ahead)} is not true or false")
        one_of("data_path", self.data_path, DATA_PATHS)
        if not isinstance(self.steps, list) or not self.steps:
            raise SpecError("steps: missing; expected a list of at least one join step")
        for i, step in enumerate(self.steps):
            if not isinstance(step, StepSpec):
                raise SpecError(f"steps[{i}]: {shown(step)} is not a join step")
        if self.arrival_column is not None:
            identifier("arrival_column", self.arrival_column)
        endless = self.source.endless()
        if self.stop.end_of_input and endless:
            raise SpecError(f"stop.end_of_input: {endless}")
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
        return {**_plain(self), "source": self.source.to_dict()}

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
    (StepSpec, "as_of"): AsOfSpec,
    (SinkSpec, "matched"): TargetSpec,
    (SinkSpec, "dead_letter"): TargetSpec,
}


def _build(cls, data, path: str):
    """``cls(**data)`` with nested specs built too, unknown fields refused, errors prefixed by path."""
    where = f"{path}." if path else ""
    if not isinstance(data, dict):
        raise SpecError(f"{path or cls.__name__}: {shown(data)} is not a mapping of fields")
    if cls is SourceSpec:  # the class of its kind, with its own fields
        try:
            cls, data = source_fields(data)
        except SpecError as exc:
            raise SpecError(f"{where}{exc}") from None
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
