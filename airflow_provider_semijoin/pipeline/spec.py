"""Declarative surrogate-key replacement: a pipeline spec, as dataclasses or as a YAML file.

A pipeline streams one source through a chain of surrogate-key steps, all in one Spark query,
into a fact sink. Each step swaps a business (natural) key of the stream for the surrogate key
of a dimension table, through a semi-stream join::

    dag_id: sales_facts
    source: {kind: files, path: /landing/sales, format: parquet}
    steps:
      - column: product_code                 # the stream's natural key
        dimension:
          conn_id: warehouse                 # an Airflow connection (resolved when the task runs)
          table: dim_product
          natural_key: product_code
          surrogate_key: product_sk
        algorithm: auto                      # or any registry name
        memory: 64M                          # default: [semijoin] memory
        on_missing: unknown_member           # or dead_letter, retry (+ retry_grace_s), inferred_member
        unknown_member: -1
        max_queue_time_s: 5                  # and any other option of the job spec's step
      - column: customer_id                  # a type-2 dimension: the version valid at sold_at
        event_time: sold_at
        dimension: {table: dim_customer, natural_key: customer_id, surrogate_key: customer_sk,
                    scd: 2, valid_from: valid_from, valid_to: valid_to}
    sinks:
      matched: {kind: table, conn_id: warehouse, table: fact_sales}
      dead_letter: {path: /warehouse/dead_letters}

A step takes every field of the job spec's step (:data:`..job.assemble.STEP_OPTIONS`) under
its own name, but for five it says in the warehouse's words: the ``dimension`` (master table,
natural key, surrogate key; ``scd: 2`` with ``valid_from``/``valid_to`` - or ``system_time:
true`` for a MariaDB system-versioned table - and the step's ``event_time`` for the spec's
``as_of``), ``algorithm`` (also ``auto``), ``unknown_member`` (one
surrogate key value; ``on_missing`` defaults to it) and ``keep_natural_key`` (the spec's
``drop_column`` negated). The pipeline takes every job option (``JOB_OPTIONS``: ``work_ahead``, ...) likewise.
Options left out have the spec's defaults, or the ``[semijoin]`` option of their name.

Everything is validated when the spec is built (``__post_init__``): the warehouse words here,
everything else (options, source, sinks, stop, deadline) by :class:`~..job.spec.JobSpec`
itself, with placeholders where a connection will be. A bad spec raises :class:`SpecError`
``"<file>: <field path>: <what is wrong>"``. Connection ids become URLs only in
:meth:`PipelineSpec.job_dict` at run time.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.checks import check_flag, check_number, check_positive
from ..core.deadline_watch import check_threshold
from ..core.errors import ConfigError, SpecError, shown, shown_key
from ..core.stores.sql import check_identifier
from ..job.assemble import JOB_OPTIONS, STEP_OPTIONS, Connections, job_dict, spec_name, step_dict, with_options

AUTO = "auto"
# the step options a surrogate-key step says in the warehouse's words (fields of its own)
WAREHOUSE_WORDS = ("algorithm", "on_missing", "unknown_member", "drop_column", "as_of")
SCD_TYPES = (1, 2)
_DAG_ID = re.compile(r"^[A-Za-z0-9_.-]{1,250}\Z")


def _identifier(path: str, value) -> str:
    try:
        return check_identifier(value, path)
    except ConfigError as exc:
        raise SpecError(str(exc)) from None


def _mapping(path: str, value, what: str) -> dict:
    if not isinstance(value, dict):
        raise SpecError(f"{path}: {shown(value)} is not a mapping; expected {what}")
    return value


def from_mapping(cls, data, path: str):
    """``cls(**data)``: unknown and missing fields refused, errors prefixed with ``path``."""
    where = f"{path}." if path else ""
    data = _mapping(path or cls.__name__, data, f"the fields of {cls.__name__}")
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names), key=repr)
    if unknown:
        raise SpecError(f"{where}{shown_key(unknown[0])}: not a field of {cls.__name__}; expected one of {names}")
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and f.name not in data:
            raise SpecError(f"{where}{f.name}: missing")
    try:
        return cls(**data)
    except SpecError as exc:
        raise SpecError(f"{where}{exc}") from None


@dataclass
class Dimension:
    """The dimension table a step joins: ``table`` in the database of Airflow connection
    ``conn_id`` (None: the default master connection), keyed by ``natural_key``."""

    table: str
    natural_key: str
    surrogate_key: str
    conn_id: str | None = None
    columns: list = field(default_factory=list)
    scd: int = 1
    valid_from: str | None = None
    valid_to: str | None = None
    system_time: bool = False

    def __post_init__(self):
        for name in ("table", "natural_key", "surrogate_key"):
            _identifier(name, getattr(self, name))
        self._check_scd()
        if self.conn_id is not None and (not isinstance(self.conn_id, str) or not self.conn_id):
            raise SpecError(f"conn_id: {shown(self.conn_id)} is not an Airflow connection id")
        if not isinstance(self.columns, list):
            raise SpecError(f"columns: {shown(self.columns)} is not a list; expected dimension columns to carry along")
        for i, column in enumerate(self.columns):
            _identifier(f"columns[{i}]", column)
        if self.surrogate_key == self.natural_key:
            raise SpecError(f"surrogate_key: {shown(self.surrogate_key)} is the natural key; expected the dimension's surrogate key column")

    def _check_scd(self) -> None:
        """``scd: 2`` (a slowly changing dimension of type 2: a row per version of a natural key)
        needs the columns a version is valid between; type 1 has none."""
        if isinstance(self.scd, bool) or self.scd not in SCD_TYPES:
            raise SpecError(f"scd: {shown(self.scd)} is not 1 or 2; expected the dimension's slowly-changing type")
        check_flag("system_time", self.system_time, error=SpecError)
        if self.system_time and self.scd != 2:
            raise SpecError("system_time: given, but scd is 1; expected scd: 2 (a system-versioned table's versions)")
        for name in ("valid_from", "valid_to"):
            value = getattr(self, name)
            if self.system_time and value is not None:
                raise SpecError(f"{name}: given with system_time: true; expected one of them (a system-versioned "
                                "table's versions are its system periods)")
            if self.scd == 2 and value is None and not self.system_time:
                raise SpecError(f"{name}: missing; expected the column of a version's validity (scd: 2 needs "
                                "valid_from and valid_to, or system_time: true)")
            if self.scd == 1 and value is not None:
                raise SpecError(f"{name}: given, but scd is 1; expected scd: 2 for a dimension with versions")
            if value is not None:
                _identifier(name, value)
                if value in (self.natural_key, self.surrogate_key):
                    raise SpecError(f"{name}: {shown(value)} is the {'natural' if value == self.natural_key else 'surrogate'}"
                                    " key; expected a column of the version's validity")
        if self.scd == 2 and not self.system_time and self.valid_from == self.valid_to:
            raise SpecError(f"valid_to: {shown(self.valid_to)} is valid_from too; expected the column that ends a version")

    @property
    def select(self) -> list[str]:
        return [self.surrogate_key, *[c for c in self.columns if c != self.surrogate_key]]


@dataclass
@with_options(tuple(option for option in STEP_OPTIONS if option.name not in WAREHOUSE_WORDS))
class SurrogateKeyStep:
    """Replace the stream's ``column`` by the dimension's surrogate key.

    ``on_missing``: ``unknown_member`` (the tuple goes on with the surrogate key
    ``unknown_member``, e.g. -1, the dimension's "unknown" row), ``dead_letter`` (it leaves on
    the dead-letter sink), ``retry`` (it waits ``retry_grace_s`` seconds for a late dimension
    row, then dead letter), ``inferred_member`` (a placeholder row is inserted into the dimension
    for the natural key and the tuple gets its surrogate key; options in ``inferred_member``,
    whose ``sequence`` fills the dimension's ``surrogate_key`` unless it names another column).
    ``algorithm`` ``auto`` lets the cost model choose at run time,
    for a Zipf stream of exponent ``skew``. The other fields are the job spec step's options
    (``params``, ``memory``, ``retry_grace_s``, ``rename``, ``max_queue_time_s``, ...).
    """

    column: str
    dimension: Any
    algorithm: str = AUTO
    on_missing: str = "unknown_member"
    unknown_member: Any = -1
    keep_natural_key: bool = False
    skew: float = 1.0
    event_time: str | None = None

    def __post_init__(self):
        if not isinstance(self.dimension, Dimension):
            self.dimension = from_mapping(Dimension, self.dimension, "dimension")
        if self.dimension.scd == 2 and self.event_time is None:
            raise SpecError("event_time: missing; expected the stream column whose time picks the dimension's "
                            "version (the dimension is scd: 2)")
        if self.dimension.scd == 1 and self.event_time is not None:
            raise SpecError(f"event_time: given, but dimension {self.dimension.table!r} is scd 1; expected "
                            "scd: 2 with valid_from and valid_to")
        if self.algorithm == AUTO and self.params:
            raise SpecError("params: given with algorithm 'auto'; expected no parameters (name an algorithm to set them)")
        if self.on_missing == "unknown_member" and (self.unknown_member is None or isinstance(self.unknown_member, (dict, list, bool))):
            raise SpecError(f"unknown_member: {shown(self.unknown_member)} is not a surrogate key value; expected e.g. -1")
        check_flag("keep_natural_key", self.keep_natural_key, error=SpecError)
        check_number("skew", self.skew, "a Zipf exponent >= 0", minimum=0, optional=True, error=SpecError)

    def step_dict(self, connections: Connections, algorithm: str) -> dict:
        """The JobSpec step (``algorithm`` resolved; the dimension's connection through ``connections``)."""
        unknown = None
        if self.on_missing == "unknown_member":
            rename = self.rename if isinstance(self.rename, dict) else {}
            unknown = {rename.get(self.dimension.surrogate_key, self.dimension.surrogate_key): self.unknown_member}
        options = {option.name: getattr(self, option.name) for option in STEP_OPTIONS if option.name not in WAREHOUSE_WORDS}
        options["inferred_member"] = self._inferred_member()
        return step_dict(
            column=self.column, master_conn_id=self.dimension.conn_id, table=self.dimension.table,
            key=self.dimension.natural_key, select=self.dimension.select, connections=connections,
            options={**options, "algorithm": algorithm, "on_missing": self.on_missing, "unknown_member": unknown,
                     "drop_column": not self.keep_natural_key, "as_of": self.as_of},
        )

    def _inferred_member(self):
        """``inferred_member`` with a ``sequence``: its ``surrogate_key`` defaults to the dimension's."""
        given = self.inferred_member
        if isinstance(given, dict) and given.get("sequence") is not None and "surrogate_key" not in given:
            return {**given, "surrogate_key": self.dimension.surrogate_key}
        return given

    @property
    def as_of(self) -> dict | None:
        """The job spec's as-of lookup (:class:`..job.spec.AsOfSpec`) of an ``scd: 2`` dimension."""
        if self.dimension.scd != 2:
            return None
        if self.dimension.system_time:
            return {"event_time": self.event_time, "system_time": True}
        return {"event_time": self.event_time, "valid_from": self.dimension.valid_from,
                "valid_to": self.dimension.valid_to}


@dataclass
class DeadlineMonitor:
    """A DeadlineMissSensor next to the join: fail (or alert) above ``threshold`` misses."""

    threshold: float
    window_s: float = 60.0
    min_tuples: int = 100
    fail_on_breach: bool = True

    def __post_init__(self):
        try:
            check_threshold(self.threshold, self.window_s, self.min_tuples)
        except ConfigError as exc:
            raise SpecError(str(exc)) from None
        check_flag("fail_on_breach", self.fail_on_breach, error=SpecError)


@dataclass
class UpdateInstall:
    """For each dimension: wait for its pending changes, install them (SSIJ semantics)."""

    min_pending: int = 1
    max_delay_s: float | None = None
    deferrable: bool = True
    poke_interval: float = 30.0

    def __post_init__(self):
        check_positive("min_pending", self.min_pending, integer=True, error=SpecError)
        check_positive("max_delay_s", self.max_delay_s, optional=True, error=SpecError)
        check_positive("poke_interval", self.poke_interval, optional=True, error=SpecError)
        check_flag("deferrable", self.deferrable, error=SpecError)


@dataclass
class ChangeWatch:
    """For each dimension: a sensor that succeeds once R's version moves on - a commit by any
    writer, when R's writes are captured (``change_capture: triggers`` on its step)."""

    deferrable: bool = True
    poke_interval: float = 30.0

    def __post_init__(self):
        check_positive("poke_interval", self.poke_interval, error=SpecError)
        check_flag("deferrable", self.deferrable, error=SpecError)


@dataclass
@with_options(JOB_OPTIONS)
class PipelineSpec:
    """A surrogate-key pipeline: ``source`` -> ``steps`` (one Spark query) -> ``sinks``.

    ``source``, ``stop`` and ``deadline`` are those of the job spec (:mod:`..job.spec`);
    a sink is ``{path: ...}`` (Parquet) or ``{kind: table, conn_id: ..., table: ...}``; the job
    spec's options (``trigger_interval_s``, ``partitions``, ``work_ahead``, ...) are fields too.
    """

    dag_id: str
    source: dict
    steps: list
    sinks: dict = field(default_factory=dict)
    schedule: str | None = None
    start_date: str = "2024-01-01"
    description: str | None = None
    tags: list = field(default_factory=list)
    stop: dict = field(default_factory=dict)
    deadline: dict | None = None
    checkpoint: str | None = None
    spark_conn_id: str | None = None
    deadline_monitor: Any = None
    install_updates: Any = None
    watch_changes: Any = None

    def __post_init__(self):
        if not isinstance(self.dag_id, str) or not _DAG_ID.match(self.dag_id):
            raise SpecError(f"dag_id: {shown(self.dag_id)} is not a DAG id; expected letters, digits, '_', '.' or '-'")
        if not isinstance(self.steps, list) or not self.steps:
            raise SpecError(f"steps: {shown(self.steps)} is not a list of steps; expected at least one surrogate-key step")
        self.steps = [s if isinstance(s, SurrogateKeyStep) else from_mapping(SurrogateKeyStep, s, f"steps[{i}]")
                      for i, s in enumerate(self.steps)]
        if self.schedule is not None and not isinstance(self.schedule, str):
            raise SpecError(f"schedule: {shown(self.schedule)} is not a cron expression or preset such as '@daily'")
        try:
            import pendulum

            pendulum.parse(str(self.start_date))
        except Exception:
            raise SpecError(f"start_date: {shown(self.start_date)} is not a date; expected e.g. 2024-01-01") from None
        if not isinstance(self.tags, list) or not all(isinstance(t, str) for t in self.tags):
            raise SpecError(f"tags: {shown(self.tags)} is not a list of strings")
        _mapping("sinks", self.sinks, "matched and dead_letter sinks")
        if self.deadline_monitor is not None and not isinstance(self.deadline_monitor, DeadlineMonitor):
            self.deadline_monitor = from_mapping(DeadlineMonitor, self.deadline_monitor, "deadline_monitor")
        if self.deadline_monitor is not None and self.deadline is None:
            raise SpecError("deadline_monitor: given, but the tuples have no deadline; expected a deadline "
                            "(max_latency_s or column)")
        if self.install_updates is not None and not isinstance(self.install_updates, UpdateInstall):
            self.install_updates = from_mapping(UpdateInstall, self.install_updates, "install_updates")
        if self.watch_changes is not None and not isinstance(self.watch_changes, ChangeWatch):
            self.watch_changes = from_mapping(ChangeWatch, self.watch_changes, "watch_changes")
        if self.watch_changes is not None and self.install_updates is not None:
            raise SpecError("watch_changes: given with install_updates; expected one of them (both name their "
                            "sensors changes_<table>)")
        self.job_dict()  # everything the job spec checks, with placeholders

    @property
    def dimensions(self) -> list[Dimension]:
        """The distinct dimension tables of the steps (in step order)."""
        seen = {}
        for step in self.steps:
            seen.setdefault((step.dimension.conn_id, step.dimension.table), step.dimension)
        return list(seen.values())

    def step_dicts(self, connections: Connections, choose=None) -> list[dict]:
        """The JobSpec steps; ``choose(step, url, memory) -> algorithm`` resolves ``auto`` at run time."""
        steps = []
        for step in self.steps:
            algorithm = step.algorithm
            if algorithm == AUTO and choose is not None:
                algorithm = choose(step, connections.database_url(step.dimension.conn_id),
                                   connections.configured("memory", step.memory))
            steps.append(step.step_dict(connections, "hybridjoin" if algorithm == AUTO else algorithm))
        return steps

    def job_dict(self, connections: Connections | None = None, choose=None) -> dict:
        """The JobSpec as data, checked by the spec itself (raises SpecError with the field's path);
        without ``connections``, placeholders (parse time). A task's own name, checkpoint and output
        folder come from its operator (:class:`.operator.SemiJoinPipelineOperator`)."""
        from ..job.spec import JobSpec

        connections = connections or Connections()
        data = job_dict(
            name=spec_name(self.dag_id), source=self.source, steps=self.step_dicts(connections, choose),
            sinks=self.sinks, output_folder=None, checkpoint=self.checkpoint, stop=self.stop, deadline=self.deadline,
            options={option.name: getattr(self, option.name) for option in JOB_OPTIONS}, connections=connections,
        )
        JobSpec.from_dict(data)
        return data

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def load_pipeline(path) -> PipelineSpec:
    """A pipeline spec from a YAML file; errors start with the file's name."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the pipeline spec ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text (byte {exc.start}); expected a YAML file in UTF-8") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())  # one line (a ReaderError has several)
        raise SpecError(f"{path}: not valid YAML{where} ({problem[:200]})") from None
    try:
        return from_mapping(PipelineSpec, data, "")
    except SpecError as exc:
        raise SpecError(f"{path}: {exc}") from None
