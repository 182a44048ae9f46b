"""The one place a job spec is assembled from what a task is given, and the one list of its options.

A join operator (one step) and a surrogate-key pipeline (one or more steps, from YAML) give the
same things in different shapes: master tables behind Airflow connection ids, sinks that are
Parquet folders or tables behind connection ids, a checkpoint, a stop condition. Both hand them
to :func:`step_dict` and :func:`job_dict`, which build the data :meth:`.spec.JobSpec.from_dict`
reads, so the two cannot drift: the same placeholders at parse time, the same name cleaning, the
same sink resolution, the same source resolution (a Redis stream's ``conn_id``), the same
connection defaults (a connection's ``page_rows``).

Every other field of :class:`.spec.StepSpec` and :class:`.spec.JobSpec` is an *option*
(:data:`STEP_OPTIONS`, :data:`JOB_OPTIONS`): the operators take it as an argument and a YAML
pipeline as a field of the same name, made from these lists, and pass it through to the spec,
which alone checks it. A field named like a ``[semijoin]`` option (``memory``,
``db_retry_max_s``) defaults to the configured option on both paths; any other to the spec's
default. A new field of the spec is thereby an operator argument and a YAML field.

This module reads Airflow's configuration only through :attr:`Connections.option` (lazily); it
does not import Airflow: a :class:`Connections` says how a connection id becomes a database URL
(the hooks, at run time) or a placeholder (parse time, when only the shape is checked).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from ..core.errors import ConfigError, SpecError
from ..core.joins.registry import ALGORITHMS
from ..core.stores.sql import DatabaseURL
from ..get_provider_info import CONFIG_OPTIONS
from .spec import JobSpec, StepSpec

PARSE_TIME_URL = "sqlite:///resolved-at-run-time.db"  # stands in for a connection's database at parse time
PARSE_TIME_FOLDER = "resolved-at-run-time"  # stands in for a folder under the work folder at parse time
PARSE_TIME_REDIS_URL = "redis://resolved-at-run-time:6379/0"  # stands in for a Redis connection at parse time
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_]")


# the spec's fields each Airflow path gives in a shape of its own; the rest are options
STEP_SHAPED = ("column", "master")  # a required argument; master_conn_id/master_table/master_key/select, a YAML dimension
JOB_SHAPED = ("name", "source", "steps", "sinks", "checkpoint", "stop", "deadline")  # name: from the DAG and task ids
STEP_OPTIONS: tuple[dataclasses.Field, ...] = tuple(f for f in dataclasses.fields(StepSpec) if f.name not in STEP_SHAPED)
JOB_OPTIONS: tuple[dataclasses.Field, ...] = tuple(f for f in dataclasses.fields(JobSpec) if f.name not in JOB_SHAPED)


def option_default(option: dataclasses.Field):
    """An option's default on the Airflow paths: None (the configured ``[semijoin]`` option, read
    when the spec is assembled) for a field named like one, else the spec's own default."""
    if option.name in CONFIG_OPTIONS:
        return None
    return option.default_factory() if option.default_factory is not dataclasses.MISSING else option.default


def with_options(options: tuple[dataclasses.Field, ...]):
    """Class decorator, under ``@dataclass``: a field per option, at its :func:`option_default`
    (how a YAML pipeline's step and job take the spec's options)."""
    def add(cls):
        annotations = cls.__dict__.get("__annotations__", {})
        for option in options:
            annotations[option.name] = option.type
            if option.default_factory is not dataclasses.MISSING:
                setattr(cls, option.name, dataclasses.field(default_factory=option.default_factory))
            else:
                setattr(cls, option.name, dataclasses.field(default=option_default(option)))
        cls.__annotations__ = annotations
        return cls
    return add


def _no_page_rows(conn_id: str | None) -> int | None:
    return None


def _configured(name: str):
    from ..config import typed_option  # Airflow's configuration, read only where an option is left to it

    return typed_option(name)


def _has_password(url) -> bool:
    if not isinstance(url, str):
        return False
    try:
        return bool(DatabaseURL.parse(url).password)
    except ConfigError:  # not a database URL: the spec says what is wrong with it
        return False


@dataclass(frozen=True)
class Connections:
    """How Airflow connection ids become what a job spec holds.

    ``url(conn_id)``: the database URL (None: parse time, every URL is :data:`PARSE_TIME_URL`);
    ``redis_url(conn_id)``: a Redis connection's URL (None: parse time, :data:`PARSE_TIME_REDIS_URL`);
    ``page_rows(conn_id)``: the connection's ``page_rows`` (None: the algorithm's default);
    ``option(name)``: the ``[semijoin]`` option an option left None defaults to (Airflow's).
    """

    url: Callable[[str | None], str] | None = None
    redis_url: Callable[[str], str] | None = None
    page_rows: Callable[[str | None], int | None] = _no_page_rows
    option: Callable[[str], Any] = _configured

    @property
    def at_run_time(self) -> bool:
        return self.url is not None

    def database_url(self, conn_id: str | None) -> str:
        return self.url(conn_id) if self.url is not None else PARSE_TIME_URL

    def stream_url(self, conn_id: str) -> str:
        return self.redis_url(conn_id) if self.redis_url is not None else PARSE_TIME_REDIS_URL

    def configured(self, name: str, value):
        """``value``, or where it is None and ``name`` is a ``[semijoin]`` option, the configured option."""
        return self.option(name) if value is None and name in CONFIG_OPTIONS else value

    def options(self, given: dict, options: tuple[dataclasses.Field, ...]) -> dict:
        """The options as the spec takes them: left None, the ``[semijoin]`` option of that name or,
        for a mapping, an empty one; mappings copied."""
        data = dict(given)
        for option in options:
            value = self.configured(option.name, given.get(option.name))
            if value is None and option.default_factory is not dataclasses.MISSING:
                value = option.default_factory()
            if value is not None or option.name in given:
                data[option.name] = dict(value) if isinstance(value, dict) else value
        return data


def spec_name(*parts: str) -> str:
    """A Spark query name (letters, digits, _; at most 64) for a task or a pipeline."""
    name = _NAME_CHARS.sub("_", "__".join(parts))
    return ("_" + name if name[:1].isdigit() else name)[:64]


def step_dict(*, column: str, master_conn_id: str | None, table: str, key: str, select: list[str] | None,
              options: dict, connections: Connections) -> dict:
    """One join step: the master and ``options`` (named as :data:`STEP_OPTIONS`; :meth:`Connections.options`);
    at run time the connection's ``page_rows`` is the default of an algorithm that pages."""
    step = {"column": column,
            "master": {"url": connections.database_url(master_conn_id), "table": table, "key": key, "select": select},
            **connections.options(options, STEP_OPTIONS)}
    algorithm, params = step.get("algorithm"), step.get("params")
    if (connections.at_run_time and isinstance(params, dict) and isinstance(algorithm, str) and algorithm in ALGORITHMS
            and "page_rows" in ALGORITHMS[algorithm].params):
        page_rows = connections.page_rows(master_conn_id)
        if page_rows is not None:
            params.setdefault("page_rows", page_rows)
    return step


def sink_dict(name: str, target, default_path: Path | None, connections: Connections):
    """A sink: ``conn_id`` (an Airflow connection) becomes the database ``url``; none given: Parquet
    under ``default_path`` (a placeholder at parse time); anything else is left for the spec to check.
    A ``url`` given with a password is refused: the task's arguments are kept, rendered, in Airflow's
    metadata database and shown in its UI, where only a connection's password is masked."""
    if isinstance(target, dict) and "conn_id" not in target and _has_password(target.get("url")):
        raise SpecError(f"sinks.{name}.url: holds a password, which Airflow would keep and show with the task's "
                        "arguments; expected conn_id naming an Airflow connection")
    if target is None:
        return {"kind": "parquet", "path": str(default_path) if default_path is not None else PARSE_TIME_FOLDER}
    if not isinstance(target, dict) or "conn_id" not in target:
        return target
    data = {k: v for k, v in target.items() if k != "conn_id"}
    data.setdefault("kind", "table")
    data["url"] = connections.database_url(target["conn_id"])
    return data


def source_dict(source, connections: Connections):
    """A source: a Redis stream's ``conn_id`` (an Airflow connection of type ``redis``) becomes its
    ``url``; a ``url`` given with a password is refused, as a sink's is (the task's arguments are
    kept and shown by Airflow); anything else is left for the spec to check."""
    if not isinstance(source, dict) or source.get("kind") != "redis_stream":
        return source
    if "conn_id" not in source:
        url = source.get("url")
        if isinstance(url, str) and _has_redis_password(url):
            raise SpecError("source.url: holds a password, which Airflow would keep and show with the task's arguments; "
                            "expected conn_id naming an Airflow connection of type redis")
        return source
    if source.get("url") is not None:
        raise SpecError("source.conn_id: given with url; expected one of them (conn_id: an Airflow connection of type redis)")
    if not isinstance(source["conn_id"], str) or not source["conn_id"]:
        raise SpecError(f"source.conn_id: {source['conn_id']!r} is not an Airflow connection id")
    data = {k: v for k, v in source.items() if k != "conn_id"}
    data["url"] = connections.stream_url(source["conn_id"])
    return data


def _has_redis_password(url: str) -> bool:
    try:
        return bool(urlsplit(url).password)
    except ValueError:  # not a URL: the spec says what is wrong with it
        return False


def job_dict(*, name: str, source, steps: list[dict], sinks, output_folder: Path | None, checkpoint: str | None,
             stop, deadline, options: dict, connections: Connections) -> dict:
    """The job spec as data (``sinks`` as given, ``matched`` / ``dead_letter`` defaulting to Parquet
    under ``output_folder``; a missing ``checkpoint`` is a placeholder, for parse time; ``options``
    named as :data:`JOB_OPTIONS`, see :meth:`Connections.options`)."""
    given = sinks if isinstance(sinks, dict) else {}
    resolved = {**given}  # a name other than these two is kept, for the spec to refuse
    for sink in ("matched", "dead_letter"):
        resolved[sink] = sink_dict(sink, given.get(sink), output_folder / sink if output_folder is not None else None,
                                   connections)
    return {
        "name": name,
        "source": source_dict(source, connections),
        "steps": steps,
        "sinks": resolved,
        "checkpoint": checkpoint or PARSE_TIME_FOLDER,
        "stop": stop,
        "deadline": deadline,
        **connections.options(options, JOB_OPTIONS),
    }
