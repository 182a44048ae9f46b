"""The monitor's FastAPI app, mounted by Airflow's API server under ``/semijoin``.

Routes (relative to the mount point):

=====================  =======================================================================
``GET /api/joins``     running and recently ended semi-join tasks of the DAGs the user may read
``GET /api/task``      one task instance's join: phase, info, latest record, history columns
``GET /ui/``           the list page (navigation entry)
``GET /ui/task``       the live page of one task instance (task-instance tab, operator link)
``GET /static/...``    the pages' scripts and styles (no data; shipped in the package)
=====================  =======================================================================

Plugin apps are not protected by Airflow on their own: every route that shows data uses the API
server's own dependencies. ``requires_access_dag(GET, XCOM)`` (what Airflow's XCom routes use)
guards one task's metrics; the list asks the auth manager which DAGs the user may read and
reads only those. Without a valid token the pages redirect to the auth manager's login page;
a user without access gets 403.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag, requires_authenticated

from . import readings

HERE = Path(__file__).resolve().parent
PAGES = HERE / "pages"
STATIC = HERE / "static"

read_metrics = Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.XCOM))
logged_in = Depends(requires_authenticated())


def _map_index(map_index: str = "-1") -> int:
    """The task instance's map index; -1 (not mapped) for anything that is not an integer.

    Airflow's UI fills ``{MAP_INDEX}`` in a task-instance tab's URL only for mapped tasks and
    leaves the placeholder as it is for the others.
    """
    try:
        return int(map_index)
    except ValueError:
        return -1


def _page(name: str) -> FileResponse:
    return FileResponse(PAGES / name, media_type="text/html", headers={"Cache-Control": "no-cache"})


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def create_app(*, clock: Callable[[], dt.datetime] = _utc_now) -> FastAPI:
    """The monitor's app; ``clock`` gives the current time (UTC) of the list window and replies."""
    app = FastAPI(title="Semi-join monitor", docs_url=None, redoc_url=None, openapi_url=None)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.exception_handler(StarletteHTTPException)
    async def pages_ask_to_log_in(request: Request, exc: StarletteHTTPException):
        """On the HTML pages: log in first (401), or a readable refusal (403); JSON elsewhere."""
        is_page = "/ui/" in request.url.path + "/"
        if is_page and exc.status_code == 401:
            return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), status_code=303)
        if is_page and exc.status_code == 403:
            return HTMLResponse(
                "<!doctype html><title>Semi-join monitor</title><p>You may not read this DAG's task "
                "metrics. Ask an administrator for read access to the DAG.</p>",
                status_code=403,
            )
        return await http_exception_handler(request, exc)

    @app.get("/api/joins", dependencies=[logged_in])
    def joins(
        user: GetUserDep,
        session: SessionDep,
        hours: Annotated[float, Query(gt=0, le=24 * 30, description="ended tasks of the last hours")] = 24.0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 200,
    ) -> dict:
        now = clock()
        readable = get_auth_manager().get_authorized_dag_ids(user=user, method="GET")
        since = now - dt.timedelta(hours=hours)
        return {
            "now": now.isoformat(),
            "hours": hours,
            "joins": readings.list_joins(session, readable, since=since, limit=limit),
        }

    @app.get("/api/task", dependencies=[read_metrics])
    def task(
        session: SessionDep,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: Annotated[int, Depends(_map_index)],
    ) -> dict:
        found = readings.task_join(session, dag_id, run_id, task_id, map_index)
        if found is None:
            raise StarletteHTTPException(
                404, f"No task instance {task_id!r} (map index {map_index}) in run {run_id!r} of DAG {dag_id!r}"
            )
        return {"now": clock().isoformat(), **found}

    @app.get("/ui/", dependencies=[logged_in], response_class=FileResponse)
    def list_page():
        return _page("joins.html")

    @app.get("/ui/task", dependencies=[read_metrics], response_class=FileResponse)
    def task_page(dag_id: str, run_id: str, task_id: str):  # required: the page reads them from its URL
        return _page("task.html")

    return app
