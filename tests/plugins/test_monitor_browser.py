"""End to end: a real Airflow, a running semi-join task, and the monitor in headless Chromium.

Starts ``airflow api-server``, ``scheduler``, ``dag-processor`` and ``triggerer`` on a free port
in a temporary AIRFLOW_HOME (SQLite, LocalExecutor) with this checkout's provider, triggers
``semijoin_live_demo`` (dag_files/: a real join publishing its progress every second), logs in
through the UI, opens the plugin's navigation page and the task-instance tab, and checks that the
charts draw data points that change over time, the empty state of a task that has not started,
and the ended state. Screenshots go to ``$SEMIJOIN_ARTIFACTS`` (default ``tests/artifacts``)
under ``monitor/``, with the components' logs.

Needs Debian's ``chromium`` (``.ci/setup`` installs it) and the ``playwright`` package, which
drives that browser (no browser download). Without them the test fails, it does not skip.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlencode

import pytest
from airflow_stack import CHARTS, CHROMIUM, LocalAirflow, artifacts_dir, chart_state, log_in

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.timeout(300)]

DAG_ID = "semijoin_live_demo"
JOIN_TASK = "live_join"
DURATION_S = 35.0


def task(airflow, run_id: str, task_id: str) -> dict:
    """The monitor API's view of one task of the demo run."""
    query = {"dag_id": DAG_ID, "run_id": run_id, "task_id": task_id}
    response = airflow.api("GET", "/semijoin/api/task", params=query)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: install Debian's chromium (.ci/setup installs it)"
    artifacts = artifacts_dir("monitor")
    local = LocalAirflow(tmp_path_factory.mktemp("airflow-e2e"), artifacts / "logs",
                         [Path(__file__).parent / "dag_files" / f"{DAG_ID}.py"])
    local.artifacts = artifacts
    try:
        local.start()
        yield local
    finally:
        local.stop()


def test_monitor_in_a_browser_while_a_join_runs(airflow, browser):
    shots = airflow.artifacts
    parsed = lambda: airflow.api("GET", f"/api/v2/dags/{DAG_ID}").status_code == 200  # noqa: E731
    airflow.wait("the DAG to be parsed", parsed, timeout=90)
    master_db = str(Path(airflow.env["AIRFLOW_HOME"]) / "master.db")
    conf = {"duration_s": DURATION_S, "master_db": master_db, "rate": 5_000.0}
    triggered = airflow.api("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", json={"logical_date": None, "conf": conf})
    assert triggered.status_code == 200, triggered.text
    run_id = triggered.json()["dag_run_id"]
    airflow.wait(
        "the join's first micro-batches",
        lambda: task(airflow, run_id, JOIN_TASK)["history"]["points"] >= 3,
        timeout=90,
    )

    context = browser.new_context(viewport={"width": 1440, "height": 1300})
    page = context.new_page()
    # everything the monitor's frames load must come from the API server (assets ship in the package)
    monitor_requests = []
    context.on("request", lambda r: monitor_requests.append(r.url) if "/semijoin/" in (r.frame.url or "") else None)
    log_in(page, airflow.base, "admin", airflow.password)

    # the navigation entry: every running semi-join task
    page.goto(airflow.base + "/plugin/semijoin")
    listing = page.frame_locator("iframe[title='Semi-joins']")
    row = listing.locator(f"tr[data-task='{DAG_ID}/{run_id}/{JOIN_TASK}/-1']")
    row.wait_for(timeout=30_000)
    assert row.get_attribute("data-state") == "running"
    cells = row.locator("td").all_inner_texts()
    assert cells[3] == "cachejoin" and "tuples/s" in cells[5], cells
    page.screenshot(path=str(shots / "1-nav-list-running.png"), full_page=True)
    row.locator("a.task-link").click()  # the row's link opens the live page in the same frame
    listing.locator("#charts:not([hidden]) #chart-rate svg").wait_for(timeout=20_000)
    assert listing.locator("#airflow-link").inner_text() == f"{DAG_ID} › {run_id} › {JOIN_TASK}"

    # the task-instance tab: live charts
    tab = f"{airflow.base}/dags/{DAG_ID}/runs/{run_id}/tasks/{JOIN_TASK}/plugin/semijoin-task"
    page.goto(tab)
    live = page.frame_locator("iframe[title='Semi-join']")
    live.locator("#charts:not([hidden]) #chart-rate svg").wait_for(timeout=30_000)
    first = {chart: chart_state(live, chart) for chart in CHARTS}
    assert all(state["points"] >= 3 for state in first.values()), first
    assert live.locator("#algorithm").inner_text() == "CACHEJOIN"
    assert "Master data version" in live.locator("#kpis").inner_text()  # no change log: version 0
    assert "cache_bytes" in live.locator("#memory").inner_text()
    assert "threshold" in live.locator("#params").inner_text()
    page.screenshot(path=str(shots / "2-task-tab-live.png"), full_page=True)
    # the page refreshes itself: more points, a different drawing, a few seconds later
    grown = first["chart-rate"]["points"] + 3
    airflow.wait("the charts to grow", lambda: chart_state(live, "chart-rate")["points"] >= grown, timeout=20)
    later = {chart: chart_state(live, chart) for chart in CHARTS}
    for chart in CHARTS:
        assert later[chart]["points"] > first[chart]["points"], (chart, first[chart], later[chart])
        assert later[chart]["drawing"] != first[chart]["drawing"], chart
    assert later["chart-rate"]["last"] != first["chart-rate"]["last"]
    page.screenshot(path=str(shots / "3-task-tab-live-later.png"), full_page=True)
    # the same page on its own (where the operators' extra link opens it), all of it
    standalone = context.new_page()  # same session cookie
    query = urlencode({"dag_id": DAG_ID, "run_id": run_id, "task_id": JOIN_TASK})
    standalone.goto(f"{airflow.base}/semijoin/ui/task?{query}")
    standalone.locator("#charts:not([hidden]) #chart-unmatched svg").wait_for(timeout=20_000)
    standalone.screenshot(path=str(shots / "3b-task-page-standalone.png"), full_page=True)
    standalone.close()

    # a task that has not started yet: the empty state
    page.goto(f"{airflow.base}/dags/{DAG_ID}/runs/{run_id}/tasks/summary/plugin/semijoin-task")
    waiting = page.frame_locator("iframe[title='Semi-join']")
    waiting.locator("#empty:not([hidden])").wait_for(timeout=20_000)
    assert waiting.locator("#empty-title").inner_text() == "This task has not started yet"
    assert waiting.locator("#charts").is_hidden()
    page.screenshot(path=str(shots / "4-task-tab-not-started.png"), full_page=True)

    # after the end: the full history, no more refreshing
    ended_phase = lambda: task(airflow, run_id, JOIN_TASK)["phase"] == "ended"  # noqa: E731
    airflow.wait("the join to end", ended_phase, timeout=DURATION_S + 60)
    page.goto(tab)
    ended = page.frame_locator("iframe[title='Semi-join']")
    ended.locator("#banner:not([hidden])").wait_for(timeout=20_000)
    assert ended.locator("#banner").inner_text().startswith("The task ended (success)")
    assert "not refreshing" in ended.locator("#status").inner_text()
    final = task(airflow, run_id, JOIN_TASK)
    # every micro-batch of the run is in the history and on the chart
    assert int(ended.locator("#chart-rate").get_attribute("data-points")) == final["history"]["points"]
    assert final["history"]["points"] == final["latest"]["batch_id"] + 1 >= 10
    assert final["latest"]["total_input_rows"] > 0 and final["state"] == "success"
    page.screenshot(path=str(shots / "5-task-tab-ended.png"), full_page=True)
    page.goto(airflow.base + "/plugin/semijoin")
    listing = page.frame_locator("iframe[title='Semi-joins']")
    done_row = listing.locator(f"tr[data-task='{DAG_ID}/{run_id}/{JOIN_TASK}/-1']")
    done_row.wait_for(timeout=20_000)
    assert done_row.get_attribute("data-state") == "success"
    page.screenshot(path=str(shots / "6-nav-list-ended.png"), full_page=True)
    assert any("/semijoin/static/monitor.js" in url for url in monitor_requests), monitor_requests[:5]
    assert [url for url in monitor_requests if not url.startswith(airflow.base + "/")] == []
