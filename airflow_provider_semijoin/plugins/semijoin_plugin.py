"""``SemiJoinPlugin``: live metrics and charts of running semi-join tasks in the Airflow UI.

Registered through the ``airflow.plugins`` entry point (and the provider info's ``plugins``).
It adds to Airflow's API server:

* a FastAPI app under :data:`URL_PREFIX` (:mod:`.monitor`): JSON endpoints guarded by the API
  server's own authentication and DAG-level authorization, two pages and their assets;
* two external views: a navigation entry listing running and recently ended semi-join tasks,
  and a tab on each task instance with that task's live page (the operators' extra link opens
  the same page, :func:`task_page_url`).

Every Airflow component loads plugins, task processes included, so the app is built on its
first request (:class:`LazyMonitorApp`): only the API server pays for importing its modules.
"""

from __future__ import annotations

from urllib.parse import urlencode

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/semijoin"


def task_page_url(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    """The live page of one task instance, relative to the API server's root."""
    query = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id}
    if map_index >= 0:
        query["map_index"] = map_index
    return f"{URL_PREFIX}/ui/task?{urlencode(query)}"


class LazyMonitorApp:
    """An ASGI app that builds :func:`.monitor.create_app` when the first request arrives."""

    def __init__(self):
        self._app = None

    async def __call__(self, scope, receive, send):
        if self._app is None:
            from .monitor import create_app

            self._app = create_app()
        await self._app(scope, receive, send)


class SemiJoinPlugin(AirflowPlugin):
    name = "semijoin"
    fastapi_apps = [{"app": LazyMonitorApp(), "url_prefix": URL_PREFIX, "name": "Semi-join monitor"}]
    external_views = [
        {
            "name": "Semi-joins",
            "href": f"{URL_PREFIX}/ui/",
            "destination": "nav",
            "url_route": "semijoin",
            "icon": f"{URL_PREFIX}/static/icon.svg",
            "nav_top_level": True,
        },
        {
            "name": "Semi-join",
            # Airflow's UI fills the placeholders (MAP_INDEX only for mapped tasks)
            "href": f"{URL_PREFIX}/ui/task?"
            "dag_id={DAG_ID}&run_id={RUN_ID}&task_id={TASK_ID}&map_index={MAP_INDEX}",
            "destination": "task_instance",
            "url_route": "semijoin-task",
            "icon": f"{URL_PREFIX}/static/icon.svg",
        },
    ]
