"""``SemiJoinPlugin``: live metrics and charts of running semi-join tasks in the Airflow UI.

Registered through the ``airflow.plugins`` entry point (and the provider info's ``plugins``).
It adds to Airflow's API server:

* a FastAPI app under :data:`..urls.MOUNT` (:mod:`.monitor`): JSON endpoints guarded by the API
  server's own authentication and DAG-level authorization, two pages and their assets;
* two external views: a navigation entry listing running and recently ended semi-join tasks,
  and a tab on each task instance with that task's live page (the operators' extra link opens
  the same page, :func:`..urls.task_page_url`). Their hrefs start with the path of
  ``[api] base_url`` (:mod:`..urls`), read when Airflow loads the plugin.

Every Airflow component loads plugins, task processes included, so the app is built on its
first request (:class:`LazyMonitorApp`): only the API server pays for importing its modules.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from .. import urls


class LazyMonitorApp:
    """An ASGI app that builds :func:`.monitor.create_app` when the first request arrives."""

    def __init__(self):
        self._app = None

    async def __call__(self, scope, receive, send):
        if self._app is None:
            from .monitor import create_app

            self._app = create_app()
        await self._app(scope, receive, send)


def external_views() -> list[dict]:
    """The navigation entry and the task-instance tab, under the configured base path."""
    icon = urls.monitor_url(urls.ICON)
    return [
        {
            "name": "Semi-joins",
            "href": urls.monitor_url(urls.LIST_PAGE),
            "destination": "nav",
            "url_route": "semijoin",
            "icon": icon,
            "nav_top_level": True,
        },
        {
            "name": "Semi-join",
            "href": f"{urls.monitor_url(urls.TASK_PAGE)}?{urls.TASK_TAB_QUERY}",
            "destination": "task_instance",
            "url_route": "semijoin-task",
            "icon": icon,
        },
    ]


class SemiJoinPlugin(AirflowPlugin):
    name = "semijoin"
    fastapi_apps = [{"app": LazyMonitorApp(), "url_prefix": urls.MOUNT, "name": "Semi-join monitor"}]
    def __init__(self):
        super().__init__()
        # Airflow instantiates the plugin after its configuration is loaded: [api] base_url is known
        self.external_views = external_views()
