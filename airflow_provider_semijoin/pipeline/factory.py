"""The DAG factory: each pipeline YAML file of a folder becomes a DAG.

A DAG file in the DAGs folder needs two lines::

    from airflow_provider_semijoin.pipeline.factory import dags_from_folder
    dags_from_folder(Path(__file__).parent / "pipelines", globals())

A pipeline's DAG runs the task ``surrogate_keys`` (every step in one Spark query); with
``deadline_monitor`` a :class:`~..sensors.deadline.DeadlineMissSensor` watches it, and with
``install_updates`` each dimension table gets an update sensor and an install task that run
alongside the join (SSIJ update semantics); with ``watch_changes`` each gets a sensor that
succeeds on a new version of it (any writer's commit, its writes captured). An invalid file fails the DAG file's import with
``<file>: <field path>: <what is wrong>`` for every invalid file of the folder, so
``airflow dags list-import-errors`` names them all.
"""

from __future__ import annotations

from pathlib import Path

from ..core.errors import SpecError
from .spec import PipelineSpec, load_pipeline

JOIN_TASK = "surrogate_keys"


def build_dag(spec: PipelineSpec, source_file: str | None = None):
    """The DAG of one pipeline spec."""
    import pendulum
    from airflow.sdk import DAG

    from ..operators.updates import InstallMasterChangesOperator
    from ..sensors.deadline import DeadlineMissSensor
    from ..sensors.updates import MasterDataChangesSensor
    from .operator import SemiJoinPipelineOperator

    steps = ", ".join(f"{s.column} -> {s.dimension.table}.{s.dimension.surrogate_key}" for s in spec.steps)
    with DAG(
        spec.dag_id,
        schedule=spec.schedule,
        start_date=pendulum.parse(spec.start_date),
        catchup=False,
        max_active_runs=1,  # one streaming query per pipeline (it owns the checkpoint)
        description=spec.description or f"Surrogate keys: {steps}",
        tags=[*spec.tags, "semijoin"],
        doc_md=f"Pipeline spec `{source_file}`: {steps}." if source_file else None,
    ) as dag:
        SemiJoinPipelineOperator(task_id=JOIN_TASK, pipeline=spec)
        monitor = spec.deadline_monitor
        if monitor is not None:
            DeadlineMissSensor(
                task_id="deadline_monitor", join_task_id=JOIN_TASK, threshold=monitor.threshold,
                window_s=monitor.window_s, min_tuples=monitor.min_tuples, fail_on_breach=monitor.fail_on_breach,
                poke_interval=min(monitor.window_s / 4, 30),
            )
        updates = spec.install_updates
        for dimension in spec.dimensions if updates is not None else []:
            wait = MasterDataChangesSensor(
                task_id=f"changes_{dimension.table}", master_conn_id=dimension.conn_id, table=dimension.table,
                key=dimension.natural_key, min_pending=updates.min_pending, max_delay_s=updates.max_delay_s,
                deferrable=updates.deferrable, poke_interval=updates.poke_interval,
            )
            wait >> InstallMasterChangesOperator(
                task_id=f"install_{dimension.table}", master_conn_id=dimension.conn_id, table=dimension.table,
                key=dimension.natural_key,
            )
        watch = spec.watch_changes
        for dimension in spec.dimensions if watch is not None else []:
            MasterDataChangesSensor(
                task_id=f"changes_{dimension.table}", master_conn_id=dimension.conn_id, table=dimension.table,
                key=dimension.natural_key, watch="versions", deferrable=watch.deferrable,
                poke_interval=watch.poke_interval,
            )
    return dag


def dags_from_folder(folder, namespace: dict | None = None) -> dict:
    """A DAG per ``*.yaml`` / ``*.yml`` file of ``folder``, put into ``namespace`` (the DAG file's
    ``globals()``: Airflow looks for DAGs there, and the DAGs' ``fileloc`` becomes that file).
    Raises one SpecError naming every invalid file."""
    folder = Path(folder)
    if not folder.is_dir():
        raise SpecError(f"{folder}: not a folder; expected the folder of the pipeline YAML files")
    dags, errors, files = {}, [], {}
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        try:
            spec = load_pipeline(path)
        except SpecError as exc:
            errors.append(str(exc))
            continue
        if spec.dag_id in files:
            errors.append(f"{path}: dag_id: {spec.dag_id!r} is already the DAG of {files[spec.dag_id]}; expected a DAG id of its own")
            continue
        files[spec.dag_id] = path.name
        dags[spec.dag_id] = build_dag(spec, path.name)
    if namespace is not None:
        namespace.update(dags)
        for dag in dags.values():  # workers load a DAG from its DAG file, not from this module
            dag.fileloc = namespace.get("__file__", dag.fileloc)
    if errors:
        raise SpecError("\n".join(errors))
    return dags
