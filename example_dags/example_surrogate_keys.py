"""Declarative surrogate-key pipelines: every YAML file in ``pipelines/`` becomes a DAG.

See ``pipelines/sales_keys.yaml`` and :mod:`airflow_provider_semijoin.pipeline.spec`.
"""

from __future__ import annotations

from pathlib import Path

from airflow_provider_semijoin.pipeline.factory import dags_from_folder

dags_from_folder(Path(__file__).parent / "pipelines", globals())
