"""A throwaway Airflow for the tests: its configuration, this checkout's entry points, and a
real local Airflow (:class:`LocalAirflow`: api-server, scheduler, dag-processor, triggerer).

The monitor's in-process API tests, its browser test and the asset-event test run Airflow against
a temporary ``AIRFLOW_HOME`` with a SQLite metadata database, the simple auth manager and a fixed
JWT secret.

Airflow finds the plugin through the ``airflow.plugins`` entry point of the installed
distribution. A virtualenv installed before setup.cfg gained an entry point (``.ci/setup``
reinstalls when setup.cfg changes; a shared development venv may lag behind) would hide it, so
:func:`checkout_entry_points` publishes the entry points that setup.cfg declares and the
installed metadata lacks, in a small ``.dist-info`` of their own - what ``pip install -e .``
of this checkout would give. With an up-to-date install it writes nothing.
"""

from __future__ import annotations

import configparser
import importlib.metadata as md
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx

DIST = "airflow-provider-semijoin"
REPO = Path(__file__).resolve().parents[1]
JWT_SECRET = "semijoin-monitor-tests-" + "0123456789abcdef" * 4  # >= 64 bytes for HS512
PLUGIN_ENTRY_POINT = "airflow_provider_semijoin.plugins.semijoin_plugin:SemiJoinPlugin"
# the API tests' users: name -> (role, team); alice may read team_a's DAGs only
USERS = {"admin": ("admin", None), "alice": ("viewer", "team_a")}
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")


def declared_entry_points() -> dict[str, dict[str, str]]:
    """``[options.entry_points]`` of this checkout's setup.cfg: {group: {name: value}}."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(REPO / "setup.cfg")
    groups = {}
    for group, body in parser["options.entry_points"].items():
        lines = [line.strip() for line in body.strip().splitlines() if line.strip()]
        groups[group] = dict(tuple(part.strip() for part in line.split("=", 1)) for line in lines)
    return groups


def checkout_entry_points(folder: Path) -> Path | None:
    """A sys.path entry with the entry points the installed metadata lacks, or None if it lacks none."""
    installed = {(ep.group, ep.name, ep.value) for ep in md.distribution(DIST).entry_points}
    missing = {
        group: {name: value for name, value in eps.items() if (group, name, value) not in installed}
        for group, eps in declared_entry_points().items()
    }
    missing = {group: eps for group, eps in missing.items() if eps}
    if not missing:
        return None
    info = folder / "airflow_provider_semijoin_checkout-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: airflow-provider-semijoin-checkout\nVersion: 0\n")
    (info / "entry_points.txt").write_text(
        "".join(
            f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in eps.items()) + "\n"
            for group, eps in missing.items()
        )
    )
    return folder


CHROMIUM = Path("/usr/bin/chromium")  # Debian's chromium, driven by Playwright (no browser download)
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-extensions"]
CHARTS = ("chart-rate", "chart-latency", "chart-cache", "chart-queue", "chart-disk", "chart-deadline", "chart-unmatched")


def artifacts_dir(name: str) -> Path:
    """A fresh folder for a browser test's screenshots and logs: ``$SEMIJOIN_ARTIFACTS`` (default
    ``tests/artifacts``, not versioned) / ``name``, with ``logs/`` in it."""
    folder = Path(os.environ.get("SEMIJOIN_ARTIFACTS") or REPO / "tests" / "artifacts") / name
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "logs").mkdir(parents=True)
    return folder


def log_in(page, root: str, user: str, password: str) -> None:
    """Log in through Airflow's own login page (``root``: the UI's address, base path included)."""
    page.goto(root + "/")
    page.wait_for_url("**/auth/login**", timeout=30_000)
    page.locator("input[name=username]").fill(user)
    page.locator("input[name=password]").fill(password)
    page.locator("button[type=submit]").click()
    page.wait_for_url(lambda url: "/auth/" not in url, timeout=30_000)


def chart_state(frame, chart_id: str) -> dict:
    """What a monitor chart draws: its number of points, its last values and its SVG."""
    chart = frame.locator(f"#{chart_id}")
    return {
        "points": int(chart.get_attribute("data-points") or 0),
        "last": chart.get_attribute("data-last"),
        "drawing": chart.locator("svg").first.inner_html() if chart.locator("svg").count() else "",
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def airflow_config(root: Path, *, users: str, bundles: list[dict] | None = None, multi_team: bool = False) -> dict:
    """Environment variables of a throwaway Airflow under ``root`` (home, SQLite DB, auth).

    ``users`` is ``[core] simple_auth_manager_users`` (``name:role[:team|team]``, comma
    separated); their passwords are read from ``root/passwords.json``, written by the caller.
    ``bundles`` replaces the DAG bundle list (each may carry a ``team_name``).
    """
    home = root / "airflow-home"
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{root / 'airflow.db'}",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__MULTI_TEAM": str(multi_team),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": users,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(root / "passwords.json"),
        "AIRFLOW__API_AUTH__JWT_SECRET": JWT_SECRET,
        "AIRFLOW__API__SECRET_KEY": JWT_SECRET,
    }
    if bundles is not None:
        env["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"] = json.dumps(bundles)
    return env


def local_bundle(name: str, path: Path, team: str | None = None) -> dict:
    bundle = {
        "name": name,
        "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
        "kwargs": {"path": str(path)},
    }
    if team:
        bundle["team_name"] = team
    return bundle


class MonitorAirflow:
    """The metadata DB and API server app of the tests, and helpers to put task instances in it."""

    def __init__(self):
        from airflow.api_fastapi.app import create_app, get_auth_manager, purge_cached_app

        purge_cached_app()
        self.app = create_app()
        self.auth_manager = get_auth_manager()

    def client(self, user: str | None):
        """A TestClient of the API server, authenticated as ``user`` (None: no token)."""
        from fastapi.testclient import TestClient

        from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

        client = TestClient(self.app)
        if user is not None:
            role, team = USERS[user]
            token = self.auth_manager.generate_jwt(
                SimpleAuthManagerUser(username=user, role=role, teams=[team] if team else None)
            )
            client.headers["Authorization"] = f"Bearer {token}"
        return client

    @staticmethod
    def new_run(dag_id: str) -> str:
        """A new manual run of ``dag_id`` with its task instances (no state yet); returns its run id."""
        from airflow.models.serialized_dag import SerializedDagModel
        from airflow.utils.session import create_session
        from airflow.utils.state import DagRunState
        from airflow.utils.types import DagRunTriggeredByType, DagRunType

        now = datetime.now(timezone.utc)
        run_id = f"manual__{now.isoformat()}"
        with create_session() as session:
            dag = SerializedDagModel.get_dag(dag_id, session=session)
            dag.create_dagrun(
                run_id=run_id,
                run_after=now,
                run_type=DagRunType.MANUAL,
                triggered_by=DagRunTriggeredByType.TEST,
                state=DagRunState.RUNNING,
                session=session,
            )
        return run_id

    @staticmethod
    def set_state(dag_id, run_id, task_id, state, *, started_ago_s: float = 60, ended_ago_s: float | None = None):
        from sqlalchemy import update

        from airflow.models.taskinstance import TaskInstance as TI
        from airflow.utils.session import create_session

        now = datetime.now(timezone.utc)
        with create_session() as session:
            session.execute(
                update(TI)
                .where(TI.dag_id == dag_id, TI.run_id == run_id, TI.task_id == task_id)
                .values(
                    state=state,
                    try_number=1,
                    start_date=now - timedelta(seconds=started_ago_s),
                    end_date=None if ended_ago_s is None else now - timedelta(seconds=ended_ago_s),
                )
            )

    @staticmethod
    def push(dag_id, run_id, task_id, key, value):
        """Store an XCom as the execution API does for a task's ``ti.xcom_push`` (already serialised)."""
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session

        with create_session() as session:
            XComModel.set(key, value, dag_id=dag_id, run_id=run_id, task_id=task_id, serialize=False, session=session)


class LocalAirflow:
    """Airflow's components as child processes, each in a process group of its own, on a free
    port in a temporary AIRFLOW_HOME (SQLite, LocalExecutor) with this checkout's provider; the
    DAG files ``dag_files`` are copied into its DAGS_FOLDER, ``env`` is added to its environment.
    Each component logs into ``logs/<component>.log``."""

    def __init__(self, root: Path, logs: Path, dag_files: list[Path], env: dict[str, str] | None = None):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.password = secrets.token_urlsafe(12)
        self.logs = logs
        (root / "passwords.json").write_text(json.dumps({"admin": self.password}))
        dags = root / "dags"
        dags.mkdir()
        for dag_file in dag_files:
            shutil.copy(dag_file, dags)
        shim = checkout_entry_points(root / "entry-points")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW") and k != "PYTHONPATH"}
        self.env.update(
            airflow_config(root, users="admin:admin"),
            PYTHONPATH=os.pathsep.join(str(p) for p in (shim, REPO) if p is not None),
            AIRFLOW__CORE__DAGS_FOLDER=str(dags),
            AIRFLOW__CORE__EXECUTOR="LocalExecutor",
            AIRFLOW__CORE__PARALLELISM="4",
            AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
            AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"{self.base}/execution/",
            AIRFLOW__API__HOST="127.0.0.1",
            AIRFLOW__API__PORT=str(self.port),
            AIRFLOW__API__BASE_URL=self.base,
            AIRFLOW__API__WORKERS="1",
            AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="2",
            AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC="1",
            AIRFLOW__LOGGING__LOGGING_LEVEL="INFO",
            **(env or {}),
        )
        self.processes: dict[str, subprocess.Popen] = {}
        self.token = None

    def start(self) -> None:
        self._airflow("db", "migrate")
        for component in COMPONENTS:
            self.start_component(component)
        self.wait("the API server to answer", lambda: self._health_ok(), timeout=90)
        response = httpx.post(f"{self.base}/auth/token", json={"username": "admin", "password": self.password})
        assert response.status_code == 201, response.text
        self.token = response.json()["access_token"]

    def start_component(self, component: str) -> None:
        log = open(self.logs / f"{component}.log", "a")
        self.processes[component] = subprocess.Popen(
            [sys.executable, "-m", "airflow", component],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop_component(self, component: str) -> None:
        self._stop([component])

    def stop(self) -> None:
        self._stop(list(self.processes))

    def _stop(self, components: list[str]) -> None:
        """SIGTERM to the components' process groups (their graceful stop), SIGKILL after 20 s."""
        processes = [self.processes.pop(component) for component in components]
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)

    def _airflow(self, *args) -> None:
        proc = subprocess.run(
            [sys.executable, "-m", "airflow", *args], env=self.env, capture_output=True, text=True, timeout=180
        )
        assert proc.returncode == 0, f"airflow {' '.join(args)} failed:\n{proc.stderr[-3000:]}"

    def _health_ok(self) -> bool:
        try:
            return httpx.get(f"{self.base}/api/v2/monitor/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def api(self, method: str, path: str, **kwargs) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.request(method, self.base + path, headers=headers, timeout=10, **kwargs)

    def wait(self, what: str, predicate, timeout: float, every: float = 1.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                exited = process.poll()
                assert exited is None, f"airflow {name} exited with {exited}; see {self.logs}/{name}.log"
            result = predicate()
            if result:
                return result
            time.sleep(every)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}; component logs in {self.logs}")
