"""The ``[semijoin]`` options of airflow.cfg (or ``AIRFLOW__SEMIJOIN__*``), with their defaults.

The defaults live in :data:`..get_provider_info.CONFIG_OPTIONS`, which Airflow also shows in
``airflow config list``; an empty default stands for a path under ``$AIRFLOW_HOME/semijoin``.
"""

from __future__ import annotations

import os
from pathlib import Path

from .core.errors import ConfigError
from .get_provider_info import CONFIG_OPTIONS, CONFIG_SECTION


def option(name: str) -> str:
    """The configured value of ``[semijoin] name`` (its default when it is not set)."""
    from airflow.sdk import conf

    _, default, _ = CONFIG_OPTIONS[name]
    return conf.get(CONFIG_SECTION, name, fallback=default)


def number_option(name: str) -> float:
    value = option(name)
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if number <= 0:
        raise ConfigError(f"[{CONFIG_SECTION}] {name}: {value!r} is not a positive number")
    return number


def typed_option(name: str):
    """``[semijoin] name`` as its type says: a positive number for ``float`` / ``integer`` options, else the string."""
    return number_option(name) if CONFIG_OPTIONS[name][0] in ("float", "integer") else option(name)


def airflow_home() -> Path:
    """``$AIRFLOW_HOME`` as Airflow reads it (default ``~/airflow``)."""
    return Path(os.environ.get("AIRFLOW_HOME", "~/airflow")).expanduser()


def work_folder() -> Path:
    """Where checkpoints, job spec files and stop files go (created on demand)."""
    folder = Path(option("work_folder") or airflow_home() / "semijoin").expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def embedded_master_path() -> Path:
    return Path(option("embedded_master_path") or airflow_home() / "semijoin" / "master.db").expanduser()
