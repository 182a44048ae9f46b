"""Deadline monitoring: every sales tuple must be joined within 2 s of its arrival.

``example_semijoin_deadlines``: a HYBRIDJOIN task with per-tuple deadlines (arrival + 2 s) that
warns when more than 5% of the last minute's tuples missed theirs, a DeadlineMissSensor that
fails (and so alerts through the task's failure callbacks) on the same condition, and one that
waits for a breach and lets an alert task run.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from airflow_provider_semijoin.operators.join import HybridJoinOperator
from airflow_provider_semijoin.sensors.deadline import DeadlineMissSensor


@task
def prepare_master() -> int:
    from airflow_provider_semijoin.hooks.master import MasterDataHook
    from airflow_provider_semijoin.workloads.master import generate_master

    generate_master(MasterDataHook().get_url(), "product", 100_000)
    return 100_000


@task
def alert(breach: dict) -> None:
    print(f"DEADLINE ALERT: {breach['breach']}")


with DAG(
    "example_semijoin_deadlines",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["semijoin", "example"],
    doc_md=__doc__,
):
    join = HybridJoinOperator(
        task_id="join",
        column="nk",
        master_table="product",
        master_key="nk",
        change_capture="triggers",  # the join sees every writer's changes to product
        select=["sk"],
        memory="4M",
        source={"kind": "generator", "rows_per_second": 3000, "master_rows": 100_000, "bursty": True},
        stop={"duration_s": 180},
        deadline_max_latency_s=2.0,
        deadline_miss_threshold=0.05,
        deadline_window_s=60,
        on_deadline_breach="warn",
    )
    guard = DeadlineMissSensor(task_id="deadline_guard", join_task_id="join", threshold=0.05, window_s=60, timeout=600)
    breach = DeadlineMissSensor(
        task_id="wait_for_breach", join_task_id="join", threshold=0.05, window_s=60, fail_on_breach=False, timeout=600
    )
    prepare_master() >> [join, guard, breach]
    alert(breach.output)
