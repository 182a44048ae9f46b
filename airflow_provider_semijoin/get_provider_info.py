"""Provider metadata read by Airflow's ProvidersManager.

Registered through the ``apache_airflow_provider`` entry point in setup.cfg. Airflow
validates the returned dict against ``airflow/provider_info.schema.json`` and requires
``package-name`` to equal the installed distribution's (canonical) name exactly.

Keep this module import-light: Airflow imports it while discovering providers, so it
must not import airflow, pyspark or the join engine.
"""

from __future__ import annotations

from airflow_provider_semijoin import __version__

PACKAGE_NAME = "airflow-provider-semijoin"


def get_provider_info() -> dict:
    return {
        "package-name": PACKAGE_NAME,
        "name": "Semi-stream join",
        "description": (
            "Semi-stream joins (INLJ, MESHJOIN, HYBRIDJOIN, CACHEJOIN, SSIJ, ...) of a fast "
            "stream with a large disk-based master table, run as Spark Structured Streaming "
            "tasks for real-time ETL."
        ),
        "versions": [__version__],
        # hooks / operators / sensors / triggers / connection-types / plugins are added
        # here as the Airflow surface of the provider is built.
    }
