"""One small DAG per join operator: a generated product table (embedded SQLite master data)
joined with a generated Zipf sales stream on local Spark, for one minute or 60,000 tuples.

Each DAG is ``example_semijoin_<algorithm>``; open a running task's "Semi-join metrics" link to
watch its service rate, latency and cache hit ratio.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from airflow_provider_semijoin.operators.join import (
    CacheJoinLOperator,
    CacheJoinOperator,
    CacheJoinPQOperator,
    CMeshJoinOperator,
    HybridJoinLOperator,
    HybridJoinOperator,
    HybridJoinPQOperator,
    INLJOperator,
    MeshJoinOperator,
    SemiStreamJoinOperator,
    SSIJOperator,
    SSJOperator,
)

MASTER_ROWS = 100_000


@task
def prepare_master() -> dict:
    """The master table ``product`` in the embedded master database (kept when it is there)."""
    from airflow_provider_semijoin.hooks.master import MasterDataHook
    from airflow_provider_semijoin.workloads.master import generate_master

    return {k: v for k, v in generate_master(MasterDataHook().get_url(), "product", MASTER_ROWS).items() if k != "seconds"}


JOIN = dict(
    column="nk",
    master_table="product",
    master_key="nk",
    change_capture="triggers",  # the join sees every writer's changes to product
    select=["sk", "category"],
    memory="8M",
    source={"kind": "generator", "rows_per_second": 2000, "total_rows": 60_000, "master_rows": MASTER_ROWS,
            "exponent": 1.0, "missing": 0.01},
    stop={"end_of_input": True, "duration_s": 60},
    deadline_max_latency_s=5.0,
)

OPERATORS = {
    "inlj": (INLJOperator, {}),
    "meshjoin": (MeshJoinOperator, {"algorithm_params": {"page_rows": 1000}}),
    "hybridjoin": (HybridJoinOperator, {"algorithm_params": {"page_rows": 500}}),
    "hybridjoin_l": (HybridJoinLOperator, {"algorithm_params": {"lookup_position": 0.3}}),
    "hybridjoin_pq": (HybridJoinPQOperator, {}),
    "ssj": (SSJOperator, {}),
    "cachejoin": (CacheJoinOperator, {}),
    "cachejoin_l": (CacheJoinLOperator, {}),
    "cachejoin_pq": (CacheJoinPQOperator, {}),
    "cmeshjoin": (CMeshJoinOperator, {}),
    "ssij": (SSIJOperator, {}),
    "generic": (SemiStreamJoinOperator, {"algorithm": "inlist-lru", "on_missing": "unknown_member",
                                         "unknown_member": {"sk": -1, "category": "unknown"}}),
}

for name, (operator, arguments) in OPERATORS.items():
    with DAG(
        f"example_semijoin_{name}",
        schedule=None,
        start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
        catchup=False,
        tags=["semijoin", "example"],
        doc_md=operator.__doc__,
    ):
        prepare_master() >> operator(task_id="join", **JOIN, **arguments)
