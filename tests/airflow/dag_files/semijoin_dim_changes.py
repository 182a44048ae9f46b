"""The DAG of the asset-event test (tests/airflow/test_asset_events.py): ``dim_changes`` is scheduled
on the asset ``dim_product``, whose watcher polls the captured versions of the table ``dim_product``
(connection ``dims``) every half second; its task returns the version ranges of the events it ran for."""

import pendulum
from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_provider_semijoin.triggers.versions import MasterDataVersionsTrigger

DIM_PRODUCT = Asset(
    "dim_product",
    uri="x-semijoin://dims/dim_product",
    watchers=[AssetWatcher(name="dim_product_commits",
                           trigger=MasterDataVersionsTrigger("dims", "dim_product", "nk", poll_interval=0.5))],
)


@task
def ranges(triggering_asset_events=None) -> list:
    return [[e.extra["payload"]["first_version"], e.extra["payload"]["last_version"]]
            for e in triggering_asset_events[DIM_PRODUCT]]


with DAG("dim_changes", schedule=[DIM_PRODUCT], start_date=pendulum.datetime(2025, 1, 1, tz="UTC"), catchup=False):
    ranges()
