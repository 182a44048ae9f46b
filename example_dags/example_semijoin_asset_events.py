"""A DAG that runs because a dimension changed: master-data changes as Airflow asset events.

``dim_product`` is a MySQL dimension that other applications write with plain SQL. Once its
changes are captured (``semijoin changes enable --master URL --table dim_product --key
product_id``, once; ``--via binlog`` reads the binary log instead), every commit is a version of
it. The asset's watcher, :class:`~airflow_provider_semijoin.triggers.versions.MasterDataVersionsTrigger`,
polls its versions in the triggerer and fires an asset event for each batch of new ones, so
``example_semijoin_asset_events`` runs once per batch of commits - not for the table's history,
not again without a new commit, and after a triggerer restart for the commits made meanwhile.
Each run reads which products changed in the versions its events carry.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_provider_semijoin.triggers.versions import MasterDataVersionsTrigger

DIM_PRODUCT = Asset(
    "mysql://warehouse-db:3306/dw/dim_product",
    watchers=[
        AssetWatcher(
            name="dim_product_commits",
            trigger=MasterDataVersionsTrigger("warehouse", "dim_product", "product_id", poll_interval=10),
        )
    ],
)


@task
def changed_products(triggering_asset_events=None) -> list:
    """The products changed by the commits this run is for (its events' version ranges)."""
    from airflow_provider_semijoin.hooks.master import MasterDataHook

    changed = set()
    with MasterDataHook("warehouse").open_store("dim_product", "product_id") as store:
        for event in triggering_asset_events[DIM_PRODUCT]:
            batch = event.extra["payload"]
            changed.update(store.changes_since(batch["first_version"] - 1, batch["last_version"])[1].tolist())
    return sorted(changed)


with DAG(
    "example_semijoin_asset_events",
    schedule=[DIM_PRODUCT],
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["semijoin", "example"],
    doc_md=__doc__,
):
    changed_products()
