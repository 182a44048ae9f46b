"""The join operators: a generic one taking ``algorithm=``, and one per algorithm of the registry.

Each is a long-running task that streams ``source`` through one semi-join step with the master
table R (``master_table`` in the database of ``master_conn_id``) and writes the matched tuples
and the dead letters to ``sinks`` (see :class:`~.job.SemiJoinJobOperator` for how it runs and
reports). Everything that can be checked without a database is checked when the DAG is parsed
(unless it is templated): algorithm name and parameters, memory, identifiers, on-missing policy,
source, sinks and stop condition; a bad value is a DAG import error naming the argument.
"""

from __future__ import annotations

from ..config import option
from ..core.errors import SpecError
from ..core.joins.registry import ALGORITHMS
from ..hooks.master import MasterDataHook
from .job import PARSE_TIME_FOLDER, PARSE_TIME_URL, SemiJoinJobOperator, has_template, resolve_target

# JobSpec paths -> the operator's argument names, for parse-time errors (first match wins)
_ARGUMENTS = (
    ("steps[0].master.url", "master_conn_id"),
    ("steps[0].master.table", "master_table"),
    ("steps[0].master.key", "master_key"),
    ("steps[0].master.select", "select"),
    ("steps[0].params", "algorithm_params"),
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

    :param algorithm: a registry name (``semijoin algorithms`` lists them with their papers).
    :param column: the stream's join column (the natural key).
    :param master_table: R, a table with an index on ``master_key``.
    :param master_key: R's join key column.
    :param select: R's columns to add to each matched tuple (default: all but the key).
    :param master_conn_id: the master database (see :class:`~..hooks.master.MasterDataHook`).
    :param algorithm_params: the algorithm's parameters (e.g. ``{"page_rows": 1000}``).
    :param memory: the algorithm's memory budget (``"50M"``; default ``[semijoin] memory``).
    :param source: the stream: ``{"kind": "files", "path": ..., "format": "parquet"}``, the
        generator ``{"kind": "generator", ...}`` or any Spark source (see SourceSpec).
    :param sinks: ``{"matched": ..., "dead_letter": ...}``, each Parquet ``{"path": ...}`` or a
        table ``{"conn_id": ..., "table": ...}`` (default: Parquet under the work folder).
    :param on_missing: ``dead_letter``, ``unknown_member`` (with ``unknown_member`` values) or
        ``retry`` (for ``retry_grace_s`` seconds).
    :param rename: R's columns -> output names; ``drop_column`` drops the natural key.
    :param arrival_column: a stream column with each tuple's arrival time (default: when read).
    """

    template_fields = (
        *SemiJoinJobOperator.template_fields,
        "algorithm", "column", "master_table", "master_key", "select", "master_conn_id", "algorithm_params",
        "memory", "source", "sinks", "unknown_member",
    )
    template_fields_renderers = {"source": "json", "sinks": "json", "algorithm_params": "json"}

    def __init__(
        self,
        *,
        column: str,
        master_table: str,
        master_key: str,
        source: dict,
        algorithm: str = "hybridjoin",
        select: list[str] | None = None,
        master_conn_id: str | None = None,
        algorithm_params: dict | None = None,
        memory: str | int | None = None,
        sinks: dict | None = None,
        on_missing: str = "dead_letter",
        unknown_member: dict | None = None,
        retry_grace_s: float | None = None,
        rename: dict | None = None,
        drop_column: bool = False,
        arrival_column: str | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.algorithm = algorithm
        self.column = column
        self.master_table = master_table
        self.master_key = master_key
        self.select = select
        self.master_conn_id = master_conn_id
        self.algorithm_params = algorithm_params or {}
        self.memory = memory
        self.source = source
        self.sinks = sinks or {}
        self.on_missing = on_missing
        self.unknown_member = unknown_member
        self.retry_grace_s = retry_grace_s
        self.rename = rename or {}
        self.drop_column = drop_column
        self.arrival_column = arrival_column
        self._validate_at_parse_time()

    def _validate_at_parse_time(self) -> None:
        data = self.job_dict(resolve=False)
        if has_template(data):
            return  # checked when the task runs, after rendering
        from ..spark.spec import JobSpec

        try:
            JobSpec.from_dict(data)
        except SpecError as exc:
            raise argument_error(self.task_id, exc) from None

    def job_dict(self, *, resolve: bool) -> dict:
        params = dict(self.algorithm_params)
        url = PARSE_TIME_URL
        if resolve:
            hook = MasterDataHook(self.master_conn_id)
            url = hook.get_url()
            known = ALGORITHMS[self.algorithm].params if self.algorithm in ALGORITHMS else {}
            if hook.page_rows is not None and "page_rows" in known:
                params.setdefault("page_rows", hook.page_rows)
        output = self.output_folder() if resolve else None
        step = {
            "column": self.column,
            "master": {"url": url, "table": self.master_table, "key": self.master_key, "select": self.select},
            "algorithm": self.algorithm,
            "params": params,
            "memory": self.memory if self.memory is not None else option("memory"),
            "on_missing": self.on_missing,
            "unknown_member": self.unknown_member,
            "retry_grace_s": self.retry_grace_s,
            "rename": dict(self.rename),
            "drop_column": self.drop_column,
        }
        return {
            **self.job_fields(resolve=resolve),
            "source": self.source,
            "steps": [step],
            "sinks": {
                name: resolve_target(self.sinks.get(name), output / name if resolve else PARSE_TIME_FOLDER, resolve=resolve)
                for name in ("matched", "dead_letter")
            },
            "arrival_column": self.arrival_column,
        }


class _OneAlgorithmOperator(SemiStreamJoinOperator):
    """A join operator bound to one algorithm of the registry."""

    algorithm_name = ""

    def __init__(self, **kwargs) -> None:
        if "algorithm" in kwargs:
            raise SpecError(
                f"{kwargs.get('task_id')}: algorithm: {type(self).__name__} always runs {self.algorithm_name!r}; "
                "use SemiStreamJoinOperator(algorithm=...) to choose one"
            )
        super().__init__(algorithm=self.algorithm_name, **kwargs)


class INLJOperator(_OneAlgorithmOperator):
    """Index nested-loop join: one index lookup per stream tuple (HYBRIDJOIN paper sec. 3.2)."""

    algorithm_name = "inlj"


class MeshJoinOperator(_OneAlgorithmOperator):
    """MESHJOIN: a cyclic scan of R meets a queue of stream windows (Polyzotis et al. 2008)."""

    algorithm_name = "meshjoin"


class HybridJoinOperator(_OneAlgorithmOperator):
    """HYBRIDJOIN: the oldest tuple's key picks the page to read (Naeem et al., sec. 4, Fig. 5)."""

    algorithm_name = "hybridjoin"


class HybridJoinLOperator(_OneAlgorithmOperator):
    """HYBRIDJOIN-L: a younger tuple's key picks the page (pq-frequent-pages paper, sec. 3.1)."""

    algorithm_name = "hybridjoin-l"


class HybridJoinPQOperator(_OneAlgorithmOperator):
    """HYBRIDJOIN-PQ: frequently matched pages are read before their turn (pq paper, sec. 4)."""

    algorithm_name = "hybridjoin-pq"


class SSJOperator(_OneAlgorithmOperator):
    """SSJ: a cache of frequent master tuples in front of a MESHJOIN disk phase (Algorithm 1, sec. IV)."""

    algorithm_name = "ssj"


class CMeshJoinOperator(_OneAlgorithmOperator):
    """CMESHJOIN: the cache front-stage sized by eq. 4 over MESHJOIN (sec. 3, Algorithm 1)."""

    algorithm_name = "cmeshjoin"


class CacheJoinOperator(_OneAlgorithmOperator):
    """CACHEJOIN: the cache front-stage over HYBRIDJOIN (pq-frequent-pages paper, sec. 2)."""

    algorithm_name = "cachejoin"


class CacheJoinLOperator(_OneAlgorithmOperator):
    """CACHEJOIN-L: the cache front-stage over HYBRIDJOIN-L (pq paper, sec. 3.1)."""

    algorithm_name = "cachejoin-l"


class CacheJoinPQOperator(_OneAlgorithmOperator):
    """CACHEJOIN-PQ: the three-stage approach, front-stage over HYBRIDJOIN-PQ (pq paper, sec. 1, 4)."""

    algorithm_name = "cachejoin-pq"


class SSIJOperator(_OneAlgorithmOperator):
    """SSIJ: pending / online / join phases, a utility-counted page cache and an optimal read plan
    (semi-streamed index join paper, sec. IV); per-tuple deadlines force its join phases (IV-F)."""

    algorithm_name = "ssij"
