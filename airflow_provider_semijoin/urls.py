"""Every URL of the semi-join monitor, built in one place: below the UI plugin (its views, app and
readings) and the operators (their extra link), which both import it and not each other.

The monitor's app is mounted at :data:`MOUNT` of Airflow's API server. Airflow serves everything
under the path of ``[api] base_url`` (``/airflow`` for ``http://host:8080/airflow``) and puts a
plugin's ``href`` and ``icon`` into its pages as they are (iframe and image sources), so every
absolute URL the provider hands out - the views' hrefs and icon, the ``page`` of a listed task,
the operators' extra link - starts with that path (:func:`base_path`). The pages and scripts
themselves refer to each other relatively (``../static/``, ``../api/``) and need no base path.
"""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

MOUNT = "/semijoin"  # where the API server mounts the monitor's app (the plugin's url_prefix)
LIST_PAGE = "/ui/"
TASK_PAGE = "/ui/task"
ICON = "/static/icon.svg"
# a task-instance tab's href: Airflow's UI fills the placeholders (MAP_INDEX only for mapped tasks)
TASK_TAB_QUERY = "dag_id={DAG_ID}&run_id={RUN_ID}&task_id={TASK_ID}&map_index={MAP_INDEX}"


def base_path() -> str:
    """The path of ``[api] base_url`` without its trailing slash; ``""`` when Airflow serves at the root."""
    from airflow.sdk import conf

    return urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")


def monitor_url(path: str) -> str:
    """An absolute path (from the host) of the monitor's ``path`` (``/ui/``, ``/static/...``)."""
    return f"{base_path()}{MOUNT}{path}"


def task_page_url(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    """The live page of one task instance (``map_index`` only for a mapped task)."""
    query = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id}
    if map_index is not None and map_index >= 0:
        query["map_index"] = map_index
    return f"{monitor_url(TASK_PAGE)}?{urlencode(query)}"
