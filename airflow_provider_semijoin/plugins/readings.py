"""What the monitor shows, read from Airflow's metadata database.

A running semi-join task publishes its progress as three XComs (contract C,
:mod:`airflow_provider_semijoin.core.progress`): ``semijoin_info`` once when the join starts
(algorithm, parameters, memory split), then after every micro-batch ``semijoin_metrics`` (the
latest :class:`~..core.progress.ProgressRecord`) and ``semijoin_history`` (a
:class:`~..core.progress.ProgressHistory`, at most 600 points / one hour). XComs live in the
metadata database, so the history survives a restart of the API server, and each push replaces
the previous value of its key, so a task keeps one bounded history whatever its run time.

Every function here takes a SQLAlchemy session and plain values; access control is the
caller's business (:mod:`.monitor`): :func:`list_joins` only reads the DAGs it is given.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from sqlalchemy import and_, exists, or_, select
from sqlalchemy.orm import Session

from airflow.models.taskinstance import TaskInstance
from airflow.models.xcom import XComModel
from airflow.utils.state import State, TaskInstanceState

from ..core.progress import HISTORY_SERIES, XCOM_HISTORY, XCOM_INFO, XCOM_LATEST, ProgressHistory
from ..urls import task_page_url

# What one row of the list shows from the latest progress record: (column, record field).
SUMMARY_FIELDS = (
    ("batch_id", "batch_id"),
    ("updated_at", "time"),
    ("service_rate_tps", "service_rate_tps"),
    ("latency_ms_p99", "latency_ms_p99"),
    ("deadline_misses", "total_deadline_misses"),
    ("unmatched", "total_unmatched"),
    ("input_rows", "total_input_rows"),
)

# Phases of a task's page, in the order a task goes through them.
NOT_STARTED = "not_started"  # the task has not started (no XCom yet)
WAITING = "waiting_first_batch"  # started, no micro-batch finished yet
RUNNING = "running"  # at least one micro-batch, the task still runs
ENDED = "ended"  # the task is in a finished state (success, failed, skipped...)

_TI_COLUMNS = (
    TaskInstance.dag_id,
    TaskInstance.run_id,
    TaskInstance.task_id,
    TaskInstance.map_index,
    TaskInstance.state,
    TaskInstance.try_number,
    TaskInstance.start_date,
    TaskInstance.end_date,
)


def _xcom_of(ti=TaskInstance):
    """The join condition of a task instance's XComs."""
    return and_(
        XComModel.dag_id == ti.dag_id,
        XComModel.run_id == ti.run_id,
        XComModel.task_id == ti.task_id,
        XComModel.map_index == ti.map_index,
    )


def _value(row) -> dict | None:
    """An XCom row's value as a dict; anything else (a foreign value under our key) is None."""
    value = XComModel.deserialize_value(row)
    return value if isinstance(value, dict) else None


def _iso(moment: dt.datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _task_fields(ti_row) -> dict:
    return {
        "dag_id": ti_row.dag_id,
        "run_id": ti_row.run_id,
        "task_id": ti_row.task_id,
        "map_index": ti_row.map_index,
        "state": ti_row.state,
        "try_number": ti_row.try_number,
        "start_date": _iso(ti_row.start_date),
        "end_date": _iso(ti_row.end_date),
    }


def list_joins(session: Session, dag_ids: Iterable[str], *, since: dt.datetime, limit: int) -> list[dict]:
    """Semi-join task instances of ``dag_ids`` that are unfinished or ended after ``since``.

    A task instance is a semi-join task when it published ``semijoin_info`` or
    ``semijoin_metrics``. Newest start first, at most ``limit`` rows, each with the task
    instance's identity and state, its live page, the algorithm and the latest record's
    :data:`SUMMARY_FIELDS` (None before the first micro-batch).
    """
    dag_ids = set(dag_ids)
    if not dag_ids:
        return []
    monitored = exists().where(_xcom_of(), XComModel.key.in_((XCOM_INFO, XCOM_LATEST)))
    tis = session.execute(
        select(*_TI_COLUMNS)
        .where(
            TaskInstance.dag_id.in_(dag_ids),
            monitored,
            or_(
                TaskInstance.state.in_([s for s in State.unfinished if s is not None]),
                TaskInstance.state.is_(None),
                TaskInstance.end_date >= since,
            ),
        )
        .order_by(TaskInstance.start_date.desc().nulls_first(), TaskInstance.dag_id, TaskInstance.task_id)
        .limit(limit)
    ).all()
    if not tis:
        return []
    wanted = {(t.dag_id, t.run_id, t.task_id, t.map_index) for t in tis}
    values: dict[tuple, dict] = {}
    for row in session.execute(
        select(
            XComModel.dag_id, XComModel.run_id, XComModel.task_id, XComModel.map_index, XComModel.key, XComModel.value
        ).where(
            XComModel.dag_id.in_({t.dag_id for t in tis}),
            XComModel.run_id.in_({t.run_id for t in tis}),
            XComModel.key.in_((XCOM_INFO, XCOM_LATEST)),
        )
    ):
        ti_key = (row.dag_id, row.run_id, row.task_id, row.map_index)
        if ti_key in wanted:
            values[(*ti_key, row.key)] = _value(row)
    joins = []
    for t in tis:
        ti_key = (t.dag_id, t.run_id, t.task_id, t.map_index)
        info = values.get((*ti_key, XCOM_INFO)) or {}
        latest = values.get((*ti_key, XCOM_LATEST)) or {}
        joins.append(
            {
                **_task_fields(t),
                "page": task_page_url(t.dag_id, t.run_id, t.task_id, t.map_index),
                "algorithm": info.get("algorithm") or latest.get("algorithm"),
                **{column: latest.get(field) for column, field in SUMMARY_FIELDS},
            }
        )
    return joins


def history_columns(history: dict | None, latest: dict | None = None) -> dict:
    """A ``ProgressHistory.to_dict()`` as one list per series (what the charts draw).

    ``latest`` (the ``semijoin_metrics`` record) is appended when it is newer than the
    history's last point: the two XComs are pushed one after the other, and a reader between
    the two pushes would otherwise show figures of one batch next to charts ending a batch
    earlier. Adds ``disk_queries_per_s``: disk queries per second of micro-batch work (disk
    queries / batch duration), the rate the papers' cost models count in. Unknown series are
    dropped, missing ones are lists of None; the number of points is bounded like the history.
    """
    kept = ProgressHistory.from_dict(history or {})
    rows = kept.to_dict()["points"]
    at = HISTORY_SERIES.index("time")
    if latest is not None and (not rows or _later(latest.get("time"), rows[-1][at])):
        kept.append(latest)
        rows = kept.to_dict()["points"]
    columns = {name: [row[i] for row in rows] for i, name in enumerate(HISTORY_SERIES)}
    columns["disk_queries_per_s"] = [
        round(q / s, 3) if isinstance(q, (int, float)) and isinstance(s, (int, float)) and s > 0 else None
        for q, s in zip(columns["disk_queries"], columns["batch_duration_s"])
    ]
    return columns


def _later(moment, than) -> bool:
    return isinstance(moment, (int, float)) and (not isinstance(than, (int, float)) or moment > than)


def phase(state: str | None, has_info: bool, has_metrics: bool) -> str:
    """Where a task's page is in its life: :data:`NOT_STARTED`, :data:`WAITING`, :data:`RUNNING`, :data:`ENDED`."""
    if state in State.finished:
        return ENDED
    if has_metrics:
        return RUNNING
    if state == TaskInstanceState.RUNNING or has_info:
        return WAITING
    return NOT_STARTED


def task_join(session: Session, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> dict | None:
    """One task instance's join: identity, state, phase, info, latest record and history columns.

    None when there is no such task instance.
    """
    ti = session.execute(
        select(*_TI_COLUMNS).where(
            TaskInstance.dag_id == dag_id,
            TaskInstance.run_id == run_id,
            TaskInstance.task_id == task_id,
            TaskInstance.map_index == map_index,
        )
    ).one_or_none()
    if ti is None:
        return None
    values = {
        row.key: _value(row)
        for row in session.execute(
            select(XComModel.key, XComModel.value).where(
                _xcom_of(ti), XComModel.key.in_((XCOM_INFO, XCOM_LATEST, XCOM_HISTORY))
            )
        )
    }
    info, latest = values.get(XCOM_INFO), values.get(XCOM_LATEST)
    columns = history_columns(values.get(XCOM_HISTORY), latest)
    return {
        **_task_fields(ti),
        "phase": phase(ti.state, info is not None, latest is not None),
        "live": ti.state not in State.finished,
        "info": info,
        "latest": latest,
        "history": {"points": len(columns["time"]), "series": columns},
    }
