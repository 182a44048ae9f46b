"""The join operators: a generic one taking ``algorithm=``, and one per algorithm of the registry,
each a class of one line below (``HybridJoinOperator`` runs ``hybridjoin``); a test checks that
every algorithm of the registry has exactly one.

Each is a long-running task that streams ``source`` through one semi-join step with the master
table R (``master_table`` in the database of ``master_conn_id``) and writes the matched tuples
and the dead letters to ``sinks`` (see :class:`~.job.SemiJoinJobOperator` for how it runs and
reports). Everything that can be checked without a database is checked when the DAG is parsed
(unless it is templated), by the job spec itself: algorithm name and parameters, memory,
identifiers, on-missing policy, every other step and job option, source, sinks and stop
condition; a bad value is a DAG import error naming the argument.

The step's options are the fields of :class:`~..job.spec.StepSpec` (:data:`..job.assemble.STEP_OPTIONS`),
each an argument of its own name (``params`` is ``algorithm_params``: BaseOperator has ``params``).
"""

from __future__ import annotations

from ..core.errors import SpecError
from ..core.joins.registry import ALGORITHMS
from ..job.assemble import STEP_OPTIONS, step_dict
from .job import SemiJoinJobOperator, has_template
from .options import declare_options, spec_options, take_options

STEP_ARGUMENTS = {"params": "algorithm_params"}  # step options an operator names otherwise

# JobSpec paths -> the operator's argument names, for parse-time errors (first match wins)
_ARGUMENTS = (
    ("steps[0].master.url", "master_conn_id"),
    ("steps[0].master.table", "master_table"),
    ("steps[0].master.key", "master_key"),
    ("steps[0].master.select", "select"),
    *((f"steps[0].{field}", argument) for field, argument in STEP_ARGUMENTS.items()),
    ("steps[0].", ""),
    ("deadline.max_latency_s", "deadline_max_latency_s"),
    ("deadline.column", "deadline_column"),
)


def argument_error(task_id: str, error: SpecError) -> SpecError:
    message = str(error)
    for path, argument in _ARGUMENTS:
        if message.startswith(path):
            message = argument + message[len(path):]
            break
    return SpecError(f"{task_id}: {message}")


class SemiStreamJoinOperator(SemiJoinJobOperator):
    """Join a stream with master data through any algorithm of the registry.

    :param column: the stream's join column (the natural key).
    :param master_table: R, a table with an index on ``master_key``.
    :param master_key: R's join key column.
    :param select: R's columns to add to each matched tuple (default: all but the key).
    :param master_conn_id: the master database (see :class:`~..hooks.master.MasterDataHook`).
    :param source: the stream: ``{"kind": "files", "path": ..., "format": "parquet"}``, the
        generator ``{"kind": "generator", ...}``, a Redis stream ``{"kind": "redis_stream", "conn_id":
        ..., "stream": ..., "schema": ...}`` (an Airflow connection of type ``redis``) or any Spark
        source (see :mod:`~..job.sources`).
    :param sinks: ``{"matched": ..., "dead_letter": ...}``, each Parquet ``{"path": ...}`` or a
        table ``{"conn_id": ..., "table": ...}`` (default: Parquet under the work folder).
    :param algorithm: a registry name (``semijoin algorithms`` lists them with their papers).
    :param algorithm_params: the algorithm's parameters (e.g. ``{"page_rows": 1000}``).
    :param memory: the algorithm's memory budget (``"50M"``; default ``[semijoin] memory``).
    :param on_missing: ``dead_letter``, ``unknown_member`` (with ``unknown_member`` values),
        ``retry`` (for ``retry_grace_s`` seconds) or ``inferred_member`` (a placeholder row in R,
        options in ``inferred_member``: ``flag_column``, ``defaults``, ``sequence``, ``surrogate_key``).
    :param rename: R's columns -> output names; ``drop_column`` drops the natural key.
    :param max_queue_time_s: the longest a tuple waits inside the join (None: no bound).

    These step options (every field of :class:`~..job.spec.StepSpec` but ``column`` and
    ``master``) default to the spec's defaults; the job's are those of :class:`~.job.SemiJoinJobOperator`.
    """

    template_fields = (
        *SemiJoinJobOperator.template_fields,
        "algorithm", "column", "master_table", "master_key", "select", "master_conn_id", "algorithm_params",
        "memory", "source", "sinks", "unknown_member", "inferred_member",
    )
    template_fields_renderers = {"source": "json", "sinks": "json", "algorithm_params": "json"}

    @declare_options(STEP_OPTIONS, STEP_ARGUMENTS)
    def __init__(
        self,
        *,
        column: str,
        master_table: str,
        master_key: str,
        source: dict,
        select: list[str] | None = None,
        master_conn_id: str | None = None,
        sinks: dict | None = None,
        **kwargs,
    ) -> None:
        options = take_options(kwargs, STEP_OPTIONS, STEP_ARGUMENTS)
        super().__init__(**kwargs)
        self.column = column
        self.master_table = master_table
        self.master_key = master_key
        self.select = select
        self.master_conn_id = master_conn_id
        self.source = source
        self.sinks = sinks or {}
        for name, value in options.items():
            setattr(self, name, value)
        self._validate_at_parse_time()

    def _validate_at_parse_time(self) -> None:
        from ..job.spec import JobSpec

        try:
            data = self.job_dict(resolve=False)
            if has_template(data):
                return  # checked when the task runs, after rendering
            JobSpec.from_dict(data)
        except SpecError as exc:
            raise argument_error(self.task_id, exc) from None

    def job_dict(self, *, resolve: bool) -> dict:
        step = step_dict(
            column=self.column, master_conn_id=self.master_conn_id, table=self.master_table, key=self.master_key,
            select=self.select, options=spec_options(self, STEP_OPTIONS, STEP_ARGUMENTS),
            connections=self.connections(resolve=resolve),
        )
        return self.assemble(resolve=resolve, source=self.source, steps=[step], sinks=self.sinks)


class _OneAlgorithmOperator(SemiStreamJoinOperator):
    """A join operator bound to one algorithm of the registry: ``class XOperator(_OneAlgorithmOperator,
    algorithm="x")``, documented by the algorithm's paper."""

    algorithm_name = ""

    def __init_subclass__(cls, *, algorithm: str, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if algorithm not in ALGORITHMS:
            raise TypeError(f"{cls.__name__}: algorithm {algorithm!r} is not one of {sorted(ALGORITHMS)}")
        cls.algorithm_name = algorithm
        cls.__doc__ = f"{ALGORITHMS[algorithm].paper}: :class:`SemiStreamJoinOperator` with ``algorithm={algorithm!r}``."

    def __init__(self, **kwargs) -> None:
        if "algorithm" in kwargs:
            raise SpecError(
                f"{kwargs.get('task_id')}: algorithm: {type(self).__name__} always runs {self.algorithm_name!r}; "
                "use SemiStreamJoinOperator(algorithm=...) to choose one"
            )
        super().__init__(algorithm=self.algorithm_name, **kwargs)


class INLJOperator(_OneAlgorithmOperator, algorithm="inlj"): ...
class InListOperator(_OneAlgorithmOperator, algorithm="inlist"): ...
class InListLRUOperator(_OneAlgorithmOperator, algorithm="inlist-lru"): ...
class MeshJoinOperator(_OneAlgorithmOperator, algorithm="meshjoin"): ...
class HybridJoinOperator(_OneAlgorithmOperator, algorithm="hybridjoin"): ...
class HybridJoinLOperator(_OneAlgorithmOperator, algorithm="hybridjoin-l"): ...
class HybridJoinPQOperator(_OneAlgorithmOperator, algorithm="hybridjoin-pq"): ...
class SSJOperator(_OneAlgorithmOperator, algorithm="ssj"): ...
class CMeshJoinOperator(_OneAlgorithmOperator, algorithm="cmeshjoin"): ...
class CacheJoinOperator(_OneAlgorithmOperator, algorithm="cachejoin"): ...
class CacheJoinLOperator(_OneAlgorithmOperator, algorithm="cachejoin-l"): ...
class CacheJoinPQOperator(_OneAlgorithmOperator, algorithm="cachejoin-pq"): ...
class SSIJOperator(_OneAlgorithmOperator, algorithm="ssij"): ...


# the operator of each registry algorithm, by algorithm name
OPERATORS: dict[str, type[_OneAlgorithmOperator]] = {
    operator.algorithm_name: operator for operator in _OneAlgorithmOperator.__subclasses__()
}
