"""An in-process Airflow (metadata DB, API server app, auth manager) for the monitor's API tests.

Two teams own one DAG each (multi-team mode, one DAG bundle per team): ``alice`` is a viewer of
team_a and may read ``dag_a`` only; ``admin`` may read everything. That is Airflow's own way to
refuse a user one DAG, so the tests see the API server's real authorization decisions.
"""

from __future__ import annotations

import os
import sys
import textwrap

import pytest
from airflow_stack import CHROMIUM, CHROMIUM_FLAGS, USERS, MonitorAirflow, airflow_config, checkout_entry_points, local_bundle

DAG_TASKS = ("join_running", "join_waiting", "join_done", "join_old", "not_started", "plain")
TEAM_DAGS = {"team_a": "dag_a", "team_b": "dag_b"}

DAG_FILE = textwrap.dedent(
    """
    import pendulum
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2025, 1, 1, tz="UTC")):
        for task_id in {tasks!r}:
            EmptyOperator(task_id=task_id)
    """
)


@pytest.fixture(scope="module")
def monitor_airflow(tmp_path_factory):
    """The in-process Airflow of one test module; the rest of the session gets its own back."""
    root = tmp_path_factory.mktemp("monitor-airflow")
    bundles = []
    for team, dag_id in TEAM_DAGS.items():
        folder = root / "bundles" / team
        folder.mkdir(parents=True)
        (folder / f"{dag_id}.py").write_text(DAG_FILE.format(dag_id=dag_id, tasks=DAG_TASKS))
        bundles.append(local_bundle(f"{team}_dags", folder, team))
    users = ",".join(f"{name}:{role}" + (f":{team}" if team else "") for name, (role, team) in USERS.items())
    env = airflow_config(root, users=users, bundles=bundles, multi_team=True)
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    shim = checkout_entry_points(root / "entry-points")
    if shim is not None:
        sys.path.insert(0, str(shim))
    _use_configured_db(forget_plugins=shim is not None)
    try:
        _prepare_db(TEAM_DAGS)
        yield MonitorAirflow()
    finally:
        if shim is not None:
            sys.path.remove(str(shim))
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        # give the rest of the session back the metadata DB and auth manager it had
        _use_configured_db(forget_plugins=shim is not None)


def _use_configured_db(*, forget_plugins: bool) -> None:
    """Point an already imported Airflow at the metadata DB of the current environment.

    Airflow binds its ORM when first imported; other test packages may have imported it with a
    DB of their own. With ``forget_plugins``, plugins and entry points are looked up again (the
    checkout's entry points were added to sys.path or removed from it).
    """
    from airflow import plugins_manager, settings
    from airflow._shared.module_loading import _get_grouped_entry_points
    from airflow.api_fastapi.app import purge_cached_app

    settings.configure_vars()
    settings.reconfigure_orm()
    purge_cached_app()
    if forget_plugins:
        for cached in (_get_grouped_entry_points, plugins_manager._get_plugins, plugins_manager.get_fastapi_plugins,
                       plugins_manager._get_ui_plugins):
            cached.cache_clear()


def _prepare_db(team_dags: dict[str, str]) -> None:
    """Migrate the metadata DB, create the teams, register the bundles and serialise their DAGs."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
    from airflow.models.team import Team
    from airflow.utils.db import initdb
    from airflow.utils.session import create_session

    initdb()
    with create_session() as session:
        for team in team_dags:
            if session.get(Team, team) is None:
                session.add(Team(name=team))
    manager = DagBundlesManager()
    with create_session() as session:
        manager.sync_bundles_to_db(session=session)
    for bundle in manager.get_all_dag_bundles():
        bundle.initialize()
        bag = BundleDagBag(bundle.path, bundle_path=bundle.path, bundle_name=bundle.name)
        assert not bag.import_errors, bag.import_errors
        sync_bag_to_db(bag, bundle.name, bundle_version=None)


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium (Debian's, through Playwright); fails, never skips, when it is missing."""
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: install Debian's chromium (.ci/setup installs it)"
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()
