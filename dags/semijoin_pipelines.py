"""The project's own pipelines: every YAML file in ``pipelines/`` becomes a DAG (the factory of
:mod:`airflow_provider_semijoin.pipeline.factory`). ``semijoin demo`` runs ``semijoin_sales_facts``."""

from __future__ import annotations

from pathlib import Path

from airflow_provider_semijoin.pipeline.factory import dags_from_folder

for _dag in dags_from_folder(Path(__file__).parent / "pipelines", globals()).values():
    _dag.fileloc = __file__  # workers load the DAG from this file, not from the factory's module
