"""Provider metadata read by Airflow's ProvidersManager.

Registered through the ``apache_airflow_provider`` entry point in setup.cfg. Airflow
validates the returned dict against ``airflow/provider_info.schema.json`` and requires
``package-name`` to equal the installed distribution's (canonical) name exactly.

Keep this module import-light: Airflow imports it while discovering providers, so it
must not import airflow, pyspark or the join engine.

The connection form of the master-data connection type is declarative (``conn-fields`` and
``ui-field-behaviour``, read by Airflow 3.2+ without importing the hook); the hooks define no
``get_connection_form_widgets``. The plugin is listed here and also registered under the
``airflow.plugins`` entry point in setup.cfg: Airflow loads provider plugins from there only.
"""

from __future__ import annotations

from airflow_provider_semijoin import __version__

PACKAGE_NAME = "airflow-provider-semijoin"
INTEGRATION = "Semi-stream join"
CONFIG_SECTION = "semijoin"
MASTER_CONN_TYPE = "semijoin_master"
PLUGIN_CLASS = "airflow_provider_semijoin.plugins.semijoin_plugin.SemiJoinPlugin"

# [semijoin] options: (type, default, description). An empty default means "derived" as said.
CONFIG_OPTIONS: dict[str, tuple[str, str, str]] = {
    "master_conn_id": (
        "string",
        "semijoin_master_default",
        "Connection id of the master data when an operator names none. When no connection of "
        "that id exists, the embedded SQLite file embedded_master_path is used.",
    ),
    "embedded_master_path": (
        "string",
        "",
        "SQLite file of the embedded master data (empty: $AIRFLOW_HOME/semijoin/master.db).",
    ),
    "spark_conn_id": (
        "string",
        "",
        "Spark connection id when an operator names none (empty: in-process Spark on local_master).",
    ),
    "local_master": ("string", "local[*]", "Spark master of the in-process Spark session."),
    "work_folder": (
        "string",
        "",
        "Folder for checkpoints, job spec files and stop files (empty: $AIRFLOW_HOME/semijoin).",
    ),
    "memory": ("string", "50M", "Memory budget of a join step when an operator gives none."),
    "history_points": ("integer", "600", "Points kept in the semijoin_history XCom of a running join."),
    "history_max_age_s": ("integer", "3600", "Seconds of progress the semijoin_history XCom covers."),
    "db_retry_max_s": (
        "float",
        "120",
        "Seconds a join keeps reconnecting to a MySQL master or sink database whose session was lost "
        "(killed, restarted, network) before the task fails.",
    ),
    "kill_grace_s": (
        "float",
        "30",
        "Seconds on_kill waits for the streaming query to stop cleanly before it is killed.",
    ),
}


def get_provider_info() -> dict:
    module = "airflow_provider_semijoin"
    return {
        "package-name": PACKAGE_NAME,
        "name": INTEGRATION,
        "description": (
            "Semi-stream joins (INLJ, MESHJOIN, HYBRIDJOIN, CACHEJOIN, SSIJ, ...) of a fast "
            "stream with a large disk-based master table, run as Spark Structured Streaming "
            "tasks for real-time ETL."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://github.com/airflow-provider-semijoin",
                "tags": ["software"],
            }
        ],
        "hooks": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [f"{module}.hooks.master", f"{module}.hooks.spark"],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    f"{module}.operators.job",
                    f"{module}.operators.join",
                    f"{module}.operators.updates",
                    f"{module}.pipeline.operator",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [f"{module}.sensors.updates", f"{module}.sensors.deadline"],
            }
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [f"{module}.triggers.updates", f"{module}.triggers.versions"],
            }
        ],
        "connection-types": [
            {
                "connection-type": MASTER_CONN_TYPE,
                "hook-class-name": f"{module}.hooks.master.MasterDataHook",
                "hook-name": "Semi-join master data",
                "ui-field-behaviour": {
                    "hidden-fields": ["extra"],
                    "relabeling": {"schema": "Database (MySQL)", "host": "Host (MySQL)"},
                    "placeholders": {
                        "host": "127.0.0.1",
                        "port": "3306",
                        "schema": "warehouse",
                        "dialect": "sqlite",
                        "path": "/var/lib/semijoin/master.db",
                    },
                },
                "conn-fields": {
                    "dialect": {
                        "label": "Database",
                        "description": "sqlite (the embedded default: a file) or mysql (MySQL / MariaDB)",
                        "schema": {"type": ["string", "null"], "enum": ["sqlite", "mysql", None], "default": "sqlite"},
                    },
                    "path": {
                        "label": "SQLite file",
                        "description": "Path of the SQLite master-data file (dialect sqlite)",
                        "schema": {"type": ["string", "null"]},
                    },
                    "page_rows": {
                        "label": "Page rows",
                        "description": "Distinct keys per page of R (one index range query loads a page)",
                        "schema": {"type": ["integer", "null"], "default": 500, "minimum": 1},
                    },
                },
            }
        ],
        "extra-links": [f"{module}.operators.job.SemiJoinMetricsLink"],
        "plugins": [{"name": "semijoin", "plugin-class": PLUGIN_CLASS}],
        "config": {
            CONFIG_SECTION: {
                "description": "Defaults of the semi-stream join operators, hooks and sensors.",
                "options": {
                    name: {
                        "description": description,
                        "version_added": "0.1.0",
                        "type": kind,
                        "example": None,
                        "default": default,
                    }
                    for name, (kind, default, description) in CONFIG_OPTIONS.items()
                },
            }
        },
    }
