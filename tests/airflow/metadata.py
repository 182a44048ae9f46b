"""Reading the Airflow metadata DB in tests: XComs and task states (what the UI plugin reads).

Every model is mapped when this module is imported, in the importing thread: mapping them lazily
from a watcher thread while dag.test() imports models in the main thread deadlocks on the
import locks.
"""

from __future__ import annotations

from airflow.models import import_all_models
from airflow.models.taskinstance import TaskInstance
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session
from sqlalchemy.orm import configure_mappers

import_all_models()
configure_mappers()


def xcoms(dag_id: str, task_id: str, key: str = "return_value") -> list:
    """The values of one XCom key of a task (over all its runs)."""
    with create_session() as session:
        rows = session.query(XComModel).filter_by(dag_id=dag_id, task_id=task_id, key=key).all()
        return [XComModel.deserialize_value(row) for row in rows]


def xcom(dag_id: str, task_id: str, key: str = "return_value"):
    """The one value of an XCom key of a task."""
    (value,) = xcoms(dag_id, task_id, key)
    return value


def task_state(dag_id: str, task_id: str) -> str | None:
    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id=dag_id, task_id=task_id).one_or_none()
        return None if ti is None else str(ti.state)
