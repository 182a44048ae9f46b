"""Master-data updates while a join runs (SSIJ sec. IV-E semantics).

``example_semijoin_updates``: a CACHEJOIN task streams sales over ``product`` for five minutes
while, alongside it, a deferrable sensor waits for changes staged by upstream systems in
``product__sj_pending`` (:func:`airflow_provider_semijoin.core.stores.changes.stage_changes`)
and an install task applies them in one transaction. Every stream tuple sees ``product``
before or after an installed batch, never a part of one; cached rows of changed keys are
dropped before the next micro-batch.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from airflow_provider_semijoin.operators.join import CacheJoinOperator
from airflow_provider_semijoin.operators.updates import InstallMasterChangesOperator
from airflow_provider_semijoin.sensors.updates import MasterDataChangesSensor


@task
def prepare_master() -> int:
    from airflow_provider_semijoin.core.stores.changes import create_change_tables
    from airflow_provider_semijoin.hooks.master import MasterDataHook
    from airflow_provider_semijoin.workloads.master import generate_master

    url = MasterDataHook().get_url()
    generate_master(url, "product", 100_000)
    create_change_tables(url, "product", "nk")
    return 100_000


with DAG(
    "example_semijoin_updates",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["semijoin", "example"],
    doc_md=__doc__,
):
    ready = prepare_master()
    join = CacheJoinOperator(
        task_id="join",
        column="nk",
        master_table="product",
        master_key="nk",
        change_capture="triggers",  # the join sees every writer's changes to product
        select=["sk", "price"],
        memory="8M",
        source={"kind": "generator", "rows_per_second": 1000, "master_rows": 100_000},
        stop={"duration_s": 300},
    )
    wait = MasterDataChangesSensor(
        task_id="wait_for_changes", table="product", key="nk", min_pending=100, max_delay_s=30,
        deferrable=True, poke_interval=5, timeout=300,
    )
    install = InstallMasterChangesOperator(task_id="install_changes", table="product", key="nk")
    ready >> [join, wait]
    wait >> install
