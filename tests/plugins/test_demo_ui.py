"""The demo's UI route, as a newcomer takes it: ``semijoin demo``, then the command it prints.

The demo (the README's first command at its defaults, :class:`DemoRun` of tests/conftest.py,
shared with the test of its summary) ends by printing an ``airflow api-server`` command on its
home and where the UI user's password is. Here that exact command runs, from a shell whose PATH does not hold the project's
virtualenv and with no AIRFLOW_* variable; headless Chromium logs in, opens the Semi-joins page
and the join task's Semi-join tab, and checks that they show the finished run's figures - the
ones the demo's summary printed. Then the same command runs behind a base path
(``[api] base_url = http://127.0.0.1:PORT/airflow``, as Airflow behind a path-prefix proxy):
the API answers there with links under the path, and every request of the browser stays under
it. Screenshots and the server's logs go to ``tests/artifacts/demo-ui/``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from airflow_stack import CHARTS, artifacts_dir, chart_state, log_in

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.acceptance, pytest.mark.timeout(1500)]

DAG_ID = "semijoin_sales_facts"
JOIN_TASK = "surrogate_keys"
PREFIX = "/airflow"


def number(text: str) -> int:
    return int(text.replace(",", ""))


class Summary:
    """What the demo printed: its figures and its UI route."""

    def __init__(self, out: str):
        self.run_id = re.search(r"^dag run  (\S+): success", out, re.M).group(1)
        self.algorithm = re.search(r"^join     (\S+) \(auto chose", out, re.M).group(1)
        self.batches = int(re.search(r"(\d+) micro-batches", out).group(1))
        self.input = number(re.search(r"^input    ([\d,]+) sales", out, re.M).group(1))
        self.dead = number(re.search(r"-> dead letters \(([\d,]+)\)", out).group(1))
        self.misses = number(re.search(r"s: ([\d,]+) of [\d,]+ sales missed it", out).group(1))
        self.command = re.search(r"^  (AIRFLOW_HOME=\S+ \S+/airflow api-server --port \d+)$", out, re.M).group(1)
        self.port = int(self.command.rsplit(" ", 1)[1])
        self.password_file = Path(re.search(r"log in as admin with the password in (\S+)$", out, re.M).group(1))

    @property
    def password(self) -> str:
        return json.loads(self.password_file.read_text())["admin"]

    @property
    def task_query(self) -> dict:
        return {"dag_id": DAG_ID, "run_id": self.run_id, "task_id": JOIN_TASK}


class PrintedServer:
    """The printed command in a shell of its own: no AIRFLOW_* variables, the venv not on PATH."""

    def __init__(self, command: str, log: Path, env: dict | None = None):
        venv_bin = str(Path(shlex.split(command)[1]).parent)
        clean = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        clean["PATH"] = os.pathsep.join(p for p in clean.get("PATH", "").split(os.pathsep) if p != venv_bin)
        clean.update(env or {})
        self.log = log
        with open(log, "w") as handle:
            self.process = subprocess.Popen(["bash", "-c", command], env=clean, stdout=handle,
                                            stderr=subprocess.STDOUT, start_new_session=True)

    def wait_healthy(self, root: str, timeout: float = 150) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"the API server ended with {self.process.returncode}; see {self.log}"
            try:
                if httpx.get(f"{root}/api/v2/monitor/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise AssertionError(f"the API server did not answer within {timeout} s; see {self.log}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def shots() -> Path:
    return artifacts_dir("demo-ui")


@pytest.fixture(scope="module")
def demo(readme_demo, shots) -> Summary:
    (shots / "logs" / "demo.out").write_text(readme_demo.out)  # the summary the pages are checked against
    assert readme_demo.proc.returncode == 0, readme_demo.out[-3000:] + readme_demo.proc.stderr[-3000:]
    return Summary(readme_demo.out)


def kpi(frame, label: str) -> str:
    return frame.locator(".kpi", has=frame.locator(".kpi-label", has_text=label)).locator(".kpi-value").inner_text()


def api_client(root: str, password: str) -> httpx.Client:
    token = httpx.post(f"{root}/auth/token", json={"username": "admin", "password": password}, timeout=10)
    assert token.status_code == 201, token.text
    return httpx.Client(base_url=root, headers={"Authorization": f"Bearer {token.json()['access_token']}"}, timeout=10)


def check_the_finished_run(page, root: str, demo: Summary, shots: Path, name: str) -> None:
    """The Semi-joins page and the task's tab show the run with the figures of the demo's summary."""
    task = api_client(root, demo.password).get("/semijoin/api/task", params=demo.task_query).json()
    assert task["history"]["points"] == demo.batches and task["latest"]["total_input_rows"] == demo.input
    page.goto(root + "/plugin/semijoin")
    listing = page.frame_locator("iframe[title='Semi-joins']")
    row = listing.locator(f"tr[data-task='{DAG_ID}/{demo.run_id}/{JOIN_TASK}/-1']")
    row.wait_for(timeout=60_000)
    assert row.get_attribute("data-state") == "success"
    cells = row.locator("td").all_inner_texts()
    assert cells[3] == demo.algorithm, cells
    assert [number(c) for c in cells[7:10]] == [demo.misses, demo.dead, demo.input], cells
    page.screenshot(path=str(shots / f"{name}-1-semijoins.png"), full_page=True)

    row.locator("a.task-link").click()  # the live page, in the same frame
    listing.locator("#charts:not([hidden]) #chart-rate svg").wait_for(timeout=30_000)
    airflow_link = listing.locator("#airflow-link")
    assert airflow_link.inner_text() == f"{DAG_ID} › {demo.run_id} › {JOIN_TASK}"
    assert airflow_link.evaluate("a => a.href").startswith(f"{root}/dags/{DAG_ID}/runs/")

    page.goto(f"{root}/dags/{DAG_ID}/runs/{demo.run_id}/tasks/{JOIN_TASK}/plugin/semijoin-task")
    tab = page.frame_locator("iframe[title='Semi-join']")
    tab.locator("#banner:not([hidden])").wait_for(timeout=60_000)
    assert tab.locator("#banner").inner_text().startswith("The task ended (success)")
    assert tab.locator("#algorithm").inner_text() == demo.algorithm.upper()
    assert number(kpi(tab, "Input")) == demo.input
    assert number(kpi(tab, "Unmatched")) == demo.dead
    assert number(kpi(tab, "Deadline misses")) == demo.misses
    charts = {chart: chart_state(tab, chart) for chart in CHARTS}
    assert all(state["drawing"] for state in charts.values()), charts
    # a bar per micro-batch; the lines skip the warm-up batch's missing values (no tuple, no latency)
    assert charts["chart-unmatched"]["points"] == charts["chart-deadline"]["points"] == demo.batches
    points = {chart: state["points"] for chart, state in charts.items()}
    assert all(demo.batches - 1 <= points[c] <= demo.batches for c in ("chart-rate", "chart-queue", "chart-disk")), points
    # latency and hit ratio exist for the batches in which tuples left: a carried queue (MESHJOIN holds
    # a tuple for its cycle over R, when ``auto`` chose it) may keep them all until the last batch drains
    assert all(1 <= points[c] <= demo.batches for c in ("chart-latency", "chart-cache")), points
    last = task["latest"]
    assert json.loads(charts["chart-unmatched"]["last"]) == [last["unmatched"]]
    assert json.loads(charts["chart-latency"]["last"]) == [last["latency_ms_p50"], last["latency_ms_p99"]]
    assert tab.locator("#chart-unmatched .chart-value").inner_text().endswith(f"total {demo.dead:,}")
    assert tab.locator("#chart-deadline .chart-value").inner_text().endswith(f"total {demo.misses:,}")
    page.screenshot(path=str(shots / f"{name}-2-task-tab.png"), full_page=True)


def browse_the_run(browser, root: str, demo: Summary, shots: Path, name: str) -> list[str]:
    """Log in and check the run's pages in a new browser context; returns the URLs it requested."""
    context = browser.new_context(viewport={"width": 1440, "height": 1400})
    requests: list[str] = []
    context.on("request", lambda r: requests.append(r.url))
    try:
        page = context.new_page()
        log_in(page, root, "admin", demo.password)
        check_the_finished_run(page, root, demo, shots, name)
    finally:
        context.close()
    return requests


def test_the_printed_command_serves_the_finished_run(demo, shots, browser):
    server = PrintedServer(demo.command, shots / "logs" / "api-server.log")
    root = f"http://localhost:{demo.port}"
    try:
        server.wait_healthy(root)
        browse_the_run(browser, root, demo, shots, "root")
    finally:
        server.stop()
    assert demo.password not in server.log.read_text(errors="replace")


def test_under_a_base_path_every_link_and_request_stays_under_it(demo, shots, browser):
    root = f"http://127.0.0.1:{demo.port}{PREFIX}"
    server = PrintedServer(demo.command, shots / "logs" / "api-server-base-path.log",
                           env={"AIRFLOW__API__BASE_URL": root})
    try:
        server.wait_healthy(root)
        # the API: views, listed pages and redirects under the base path
        api = api_client(root, demo.password)
        (plugin,) = [p for p in api.get("/api/v2/plugins").json()["plugins"] if p["name"] == "semijoin"]
        views = {v["destination"]: v for v in plugin["external_views"]}
        assert views["nav"]["href"] == f"{PREFIX}/semijoin/ui/" and views["nav"]["icon"] == f"{PREFIX}/semijoin/static/icon.svg"
        assert views["task_instance"]["href"].startswith(f"{PREFIX}/semijoin/ui/task?dag_id={{DAG_ID}}&")
        host = f"http://127.0.0.1:{demo.port}"
        assert api.get(host + views["nav"]["href"]).status_code == 200
        assert httpx.get(host + views["nav"]["icon"], timeout=10).headers["content-type"].startswith("image/svg")
        (join,) = [j for j in api.get("/semijoin/api/joins").json()["joins"] if j["run_id"] == demo.run_id]
        assert join["page"] == f"{PREFIX}/semijoin/ui/task?{urlencode(demo.task_query)}"
        assert api.get(host + join["page"]).status_code == 200
        anonymous = httpx.get(host + join["page"], follow_redirects=False, timeout=10)
        assert anonymous.status_code == 303 and anonymous.headers["location"].startswith(f"{PREFIX}/auth/login?next=")

        # the browser: every request of the UI and the monitor goes to the base path
        requests = browse_the_run(browser, root, demo, shots, "base-path")
    finally:
        server.stop()
    monitor = [url for url in requests if "/semijoin/" in url]
    assert any(url.startswith(f"{root}/semijoin/static/monitor.js") for url in monitor), monitor[:5]
    # network requests only (the UI's blob: and data: URLs are made in the page)
    outside = [url for url in requests if url.startswith(("http:", "https:")) and not url.startswith(root + "/")]
    assert outside == [], outside[:10]
