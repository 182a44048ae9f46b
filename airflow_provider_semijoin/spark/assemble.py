"""The one place a job spec is assembled from what a task is given.

A join operator (one step) and a surrogate-key pipeline (one or more steps, from YAML) give the
same things in different shapes: master tables behind Airflow connection ids, sinks that are
Parquet folders or tables behind connection ids, a checkpoint, a stop condition. Both hand them
to :func:`step_dict` and :func:`job_dict`, which build the data :meth:`.spec.JobSpec.from_dict`
reads, so the two cannot drift: the same placeholders at parse time, the same name cleaning, the
same sink resolution, the same connection defaults (a connection's ``page_rows``).

This module does not import Airflow: a :class:`Connections` says how a connection id becomes a
database URL (the hooks, at run time) or a placeholder (parse time, when only the shape is checked).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..core.errors import ConfigError, SpecError
from ..core.joins.registry import ALGORITHMS
from ..core.stores.sql import DatabaseURL

PARSE_TIME_URL = "sqlite:///resolved-at-run-time.db"  # stands in for a connection's database at parse time
PARSE_TIME_FOLDER = "resolved-at-run-time"  # stands in for a folder under the work folder at parse time
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_]")


def _no_page_rows(conn_id: str | None) -> int | None:
    return None


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
    ``page_rows(conn_id)``: the connection's ``page_rows`` (None: the algorithm's default).
    """

    url: Callable[[str | None], str] | None = None
    page_rows: Callable[[str | None], int | None] = _no_page_rows

    @property
    def at_run_time(self) -> bool:
        return self.url is not None

    def database_url(self, conn_id: str | None) -> str:
        return self.url(conn_id) if self.url is not None else PARSE_TIME_URL


def spec_name(*parts: str) -> str:
    """A Spark query name (letters, digits, _; at most 64) for a task or a pipeline."""
    name = _NAME_CHARS.sub("_", "__".join(parts))
    return ("_" + name if name[:1].isdigit() else name)[:64]


def step_dict(*, column: str, master_conn_id: str | None, table: str, key: str, select: list[str] | None,
              algorithm: str, params: dict, memory, on_missing: str, unknown_member: dict | None,
              retry_grace_s: float | None, rename: dict, drop_column: bool, connections: Connections) -> dict:
    """One join step; at run time the connection's ``page_rows`` is the default of an algorithm that pages."""
    params = dict(params)
    if connections.at_run_time and algorithm in ALGORITHMS and "page_rows" in ALGORITHMS[algorithm].params:
        page_rows = connections.page_rows(master_conn_id)
        if page_rows is not None:
            params.setdefault("page_rows", page_rows)
    return {
        "column": column,
        "master": {"url": connections.database_url(master_conn_id), "table": table, "key": key, "select": select},
        "algorithm": algorithm,
        "params": params,
        "memory": memory,
        "on_missing": on_missing,
        "unknown_member": unknown_member,
        "retry_grace_s": retry_grace_s,
        "rename": dict(rename),
        "drop_column": drop_column,
    }


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


def job_dict(*, name: str, source, steps: list[dict], sinks, output_folder: Path | None, checkpoint: str | None,
             stop, deadline, trigger_interval_s, partitions, db_retry_max_s, connections: Connections,
             arrival_column: str | None = None) -> dict:
    """The job spec as data (``sinks`` as given, ``matched`` / ``dead_letter`` defaulting to Parquet
    under ``output_folder``; a missing ``checkpoint`` is a placeholder, for parse time; a missing
    ``db_retry_max_s`` is the spec's default)."""
    given = sinks if isinstance(sinks, dict) else {}
    resolved = {**given}  # a name other than these two is kept, for the spec to refuse
    for sink in ("matched", "dead_letter"):
        resolved[sink] = sink_dict(sink, given.get(sink), output_folder / sink if output_folder is not None else None,
                                   connections)
    data = {
        "name": name,
        "source": source,
        "steps": steps,
        "sinks": resolved,
        "checkpoint": checkpoint or PARSE_TIME_FOLDER,
        "stop": stop,
        "deadline": deadline,
        "trigger_interval_s": trigger_interval_s,
        "partitions": partitions,
        "db_retry_max_s": db_retry_max_s,
        "arrival_column": arrival_column,
    }
    if db_retry_max_s is None:
        del data["db_retry_max_s"]
    return data
