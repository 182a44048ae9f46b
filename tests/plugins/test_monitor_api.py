"""The monitor's endpoints through Airflow's own API server app (FastAPI TestClient).

The app is the one ``airflow api-server`` serves (``create_app``), with the plugin found through
its ``airflow.plugins`` entry point; task instances are created from serialised DAGs and the
XComs stored as the execution API stores a task's ``ti.xcom_push``.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlencode

import pytest
from airflow_stack import PLUGIN_ENTRY_POINT, REPO, MonitorAirflow, declared_entry_points

from airflow_provider_semijoin.core.progress import (
    XCOM_HISTORY,
    XCOM_INFO,
    XCOM_LATEST,
    ProgressHistory,
    ProgressRecord,
)

PLUGIN_DIR = REPO / "airflow_provider_semijoin" / "plugins"
INFO = {
    "algorithm": "cachejoin",
    "paper": "CACHEJOIN (Naeem et al. 2012, sec. 4)",
    "params": {"threshold": 2, "eviction": "random"},
    "memory_budget_bytes": 1048576,
    "memory_split": {"cache_bytes": 378694, "inner.stream_table_bytes": 658032, "inner.page_rows": 236},
}


def record(batch_id: int, at: float, **changes) -> dict:
    fields = dict(
        algorithm="cachejoin",
        batch_id=batch_id,
        time=at,
        input_rows=1000 + 100 * batch_id,
        matched=980,
        unmatched=20 + batch_id,
        output_rows=980,
        service_rate_tps=50_000.0 + 1000 * batch_id,
        batch_duration_s=0.5,
        peak_queue_tuples=700,
        cache_hit_ratio=0.25 + 0.05 * batch_id,
        disk_queries=40 + batch_id,
        latency_ms_p50=12.0,
        latency_ms_p99=80.0 + batch_id,
        deadline_misses=batch_id,
        total_input_rows=(batch_id + 1) * 1000,
        total_unmatched=(batch_id + 1) * 20,
        total_deadline_misses=batch_id * (batch_id + 1) // 2,
    )
    fields.update(changes)
    return ProgressRecord(**fields).to_dict()


def publish(airflow, dag_id, run_id, task_id, batches: int, *, info=INFO) -> list[dict]:
    """Push what an operator pushes: info at the start, then latest + history after each batch."""
    if info is not None:
        airflow.push(dag_id, run_id, task_id, XCOM_INFO, info)
    history = ProgressHistory()
    records = [record(b, 1_800_000_000.0 + 2 * b) for b in range(batches)]
    for rec in records:
        history.append(rec)
        airflow.push(dag_id, run_id, task_id, XCOM_LATEST, rec)
        airflow.push(dag_id, run_id, task_id, XCOM_HISTORY, history.to_dict())
    return records


def task_query(dag_id, run_id, task_id, **extra) -> dict:
    return {"dag_id": dag_id, "run_id": run_id, "task_id": task_id, **extra}


@pytest.fixture(scope="module")
def run_a(monitor_airflow):
    """A run of dag_a in every phase: running, waiting for its first batch, ended, ended long ago."""
    a = monitor_airflow
    run = a.new_run("dag_a")
    a.set_state("dag_a", run, "join_running", "running", started_ago_s=30)
    publish(a, "dag_a", run, "join_running", 3)
    a.set_state("dag_a", run, "join_waiting", "running", started_ago_s=5)
    a.push("dag_a", run, "join_waiting", XCOM_INFO, INFO)
    a.set_state("dag_a", run, "join_done", "success", started_ago_s=900, ended_ago_s=600)
    publish(a, "dag_a", run, "join_done", 4)
    a.set_state("dag_a", run, "join_old", "success", started_ago_s=3 * 86400 + 60, ended_ago_s=3 * 86400)
    publish(a, "dag_a", run, "join_old", 2)
    a.set_state("dag_a", run, "plain", "success", started_ago_s=20, ended_ago_s=10)
    a.push("dag_a", run, "plain", "return_value", {"algorithm": "not a join"})
    return run


@pytest.fixture(scope="module")
def run_b(monitor_airflow):
    """A running join of dag_b (team_b: alice may not read it)."""
    run = monitor_airflow.new_run("dag_b")
    monitor_airflow.set_state("dag_b", run, "join_running", "running")
    publish(monitor_airflow, "dag_b", run, "join_running", 2)
    return run


def joins_of(client, run_id, **params) -> dict[str, dict]:
    response = client.get("/semijoin/api/joins", params=params)
    assert response.status_code == 200, response.text
    return {j["task_id"]: j for j in response.json()["joins"] if j["run_id"] == run_id}


# --------------------------------------------------------------------------- registration


def test_setup_cfg_declares_the_plugin_entry_point():
    assert declared_entry_points()["airflow.plugins"] == {"semijoin": PLUGIN_ENTRY_POINT}


def test_airflow_lists_the_plugin_with_its_app_and_views(monitor_airflow):
    response = monitor_airflow.client("admin").get("/api/v2/plugins")
    assert response.status_code == 200, response.text
    (plugin,) = [p for p in response.json()["plugins"] if p["name"] == "semijoin"]
    assert "airflow.plugins" in plugin["source"] and PLUGIN_ENTRY_POINT.split(":")[0] in plugin["source"]
    assert [app["url_prefix"] for app in plugin["fastapi_apps"]] == ["/semijoin"]
    views = {v["destination"]: v for v in plugin["external_views"]}
    assert views["nav"]["href"] == "/semijoin/ui/"
    task_view = views["task_instance"]["href"]
    assert task_view.startswith("/semijoin/ui/task?")
    assert {"{DAG_ID}", "{RUN_ID}", "{TASK_ID}", "{MAP_INDEX}"} <= set(re.findall(r"\{[A-Z_]+\}", task_view))


def test_every_absolute_url_follows_the_base_path(monkeypatch):
    """Behind ``[api] base_url`` with a path, the views, the listed pages and the operators' extra
    link start with that path, and the extra link keeps a mapped task's map index."""
    from airflow_provider_semijoin.operators.job import SemiJoinMetricsLink
    from airflow_provider_semijoin.plugins.semijoin_plugin import SemiJoinPlugin
    from airflow_provider_semijoin.urls import task_page_url

    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://example.test:8080/data/airflow/")
    views = {v["destination"]: v for v in SemiJoinPlugin().external_views}
    assert views["nav"]["href"] == "/data/airflow/semijoin/ui/"
    assert views["nav"]["icon"] == views["task_instance"]["icon"] == "/data/airflow/semijoin/static/icon.svg"
    assert views["task_instance"]["href"].startswith("/data/airflow/semijoin/ui/task?dag_id={DAG_ID}&")
    assert task_page_url("d", "r 1", "t") == "/data/airflow/semijoin/ui/task?dag_id=d&run_id=r+1&task_id=t"

    class Key:
        dag_id, run_id, task_id, map_index = "d", "r", "t", 3

    assert SemiJoinMetricsLink().get_link(None, ti_key=Key) == "/data/airflow/semijoin/ui/task?dag_id=d&run_id=r&task_id=t&map_index=3"
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://localhost:8080")  # at the root: no prefix
    assert SemiJoinPlugin().external_views[0]["href"] == "/semijoin/ui/"


# --------------------------------------------------------------------------- the list


def test_joins_lists_running_and_recently_ended_semijoin_tasks(monitor_airflow, run_a):
    joins = joins_of(monitor_airflow.client("admin"), run_a)
    # join_old ended three days ago; not_started and plain never published join progress
    assert set(joins) == {"join_running", "join_waiting", "join_done"}
    running = joins["join_running"]
    last = record(2, 1_800_000_004.0)
    assert running["state"] == "running" and running["algorithm"] == "cachejoin"
    assert (running["batch_id"], running["updated_at"]) == (2, last["time"])
    assert running["service_rate_tps"] == last["service_rate_tps"]
    assert running["latency_ms_p99"] == last["latency_ms_p99"]
    assert running["deadline_misses"] == last["total_deadline_misses"] == 3
    assert running["unmatched"] == last["total_unmatched"] == 60
    assert running["page"] == "/semijoin/ui/task?" + urlencode(task_query("dag_a", run_a, "join_running"))
    # started, no micro-batch yet: listed with its algorithm and no figures
    waiting = joins["join_waiting"]
    assert waiting["algorithm"] == "cachejoin" and waiting["batch_id"] is None and waiting["service_rate_tps"] is None
    assert joins["join_done"]["state"] == "success" and joins["join_done"]["batch_id"] == 3


def test_joins_window_and_limit(monitor_airflow, run_a):
    client = monitor_airflow.client("admin")
    assert "join_old" in joins_of(client, run_a, hours=24 * 4)
    response = client.get("/semijoin/api/joins", params={"limit": 1})
    assert response.status_code == 200 and len(response.json()["joins"]) == 1
    for bad in ({"hours": 0}, {"limit": 0}, {"hours": "soon"}):
        assert client.get("/semijoin/api/joins", params=bad).status_code == 422


def test_joins_shows_only_the_dags_the_user_may_read(monitor_airflow, run_a, run_b):
    alice = monitor_airflow.client("alice")
    assert joins_of(alice, run_b) == {}
    assert "join_running" in joins_of(alice, run_a)
    assert set(joins_of(monitor_airflow.client("admin"), run_b)) == {"join_running"}


def test_joins_requires_a_logged_in_user(monitor_airflow):
    response = monitor_airflow.client(None).get("/semijoin/api/joins")
    assert response.status_code == 401
    assert "joins" not in response.text


# --------------------------------------------------------------------------- one task


def test_task_returns_info_latest_record_and_history_columns(monitor_airflow, run_a):
    query = task_query("dag_a", run_a, "join_running")
    response = monitor_airflow.client("alice").get("/semijoin/api/task", params=query)
    assert response.status_code == 200, response.text
    task = response.json()
    assert (task["phase"], task["live"], task["state"]) == ("running", True, "running")
    assert task["info"] == INFO
    assert task["latest"] == record(2, 1_800_000_004.0)
    history = task["history"]
    assert history["points"] == 3
    series = history["series"]
    assert series["time"] == [1_800_000_000.0, 1_800_000_002.0, 1_800_000_004.0]
    assert series["service_rate_tps"] == [50_000.0, 51_000.0, 52_000.0]
    assert series["latency_ms_p99"] == [80.0, 81.0, 82.0]
    assert series["deadline_misses"] == [0, 1, 2] and series["unmatched"] == [20, 21, 22]
    # disk queries per second of micro-batch work: 40, 41, 42 queries in 0.5 s
    assert series["disk_queries_per_s"] == [80.0, 82.0, 84.0]


def test_a_record_pushed_before_its_history_is_on_the_charts_too(monitor_airflow):
    """The operator pushes the latest record, then the history: a read in between stays consistent."""
    a = monitor_airflow
    run = a.new_run("dag_a")
    a.set_state("dag_a", run, "join_running", "running")
    publish(a, "dag_a", run, "join_running", 2)
    newer = record(2, 1_800_000_004.0)
    a.push("dag_a", run, "join_running", XCOM_LATEST, newer)  # its history has not been pushed yet
    task = a.client("admin").get("/semijoin/api/task", params=task_query("dag_a", run, "join_running")).json()
    assert task["latest"] == newer
    assert task["history"]["series"]["batch_id"] == [0, 1, 2]
    assert task["history"]["series"]["service_rate_tps"][-1] == newer["service_rate_tps"]
    # once the history has it, it is not there twice
    publish(a, "dag_a", run, "join_running", 3)
    task = a.client("admin").get("/semijoin/api/task", params=task_query("dag_a", run, "join_running")).json()
    assert task["history"]["series"]["batch_id"] == [0, 1, 2]


def test_task_with_no_metrics_yet(monitor_airflow, run_a):
    client = monitor_airflow.client("admin")
    waiting = client.get("/semijoin/api/task", params=task_query("dag_a", run_a, "join_waiting")).json()
    assert (waiting["phase"], waiting["live"]) == ("waiting_first_batch", True)
    assert waiting["info"] == INFO and waiting["latest"] is None
    assert waiting["history"]["points"] == 0
    assert all(values == [] for values in waiting["history"]["series"].values())
    not_started = client.get("/semijoin/api/task", params=task_query("dag_a", run_a, "not_started")).json()
    assert (not_started["phase"], not_started["state"], not_started["info"]) == ("not_started", None, None)


def test_task_after_the_end_keeps_its_history(monitor_airflow, run_a):
    query = task_query("dag_a", run_a, "join_done")
    task = monitor_airflow.client("admin").get("/semijoin/api/task", params=query).json()
    assert (task["phase"], task["live"], task["state"]) == ("ended", False, "success")
    assert task["end_date"] is not None and task["history"]["points"] == 4


def test_task_refuses_a_user_who_cannot_read_the_dag(monitor_airflow, run_b):
    query = task_query("dag_b", run_b, "join_running")
    alice = monitor_airflow.client("alice")
    response = alice.get("/semijoin/api/task", params=query)
    assert response.status_code == 403
    assert "cachejoin" not in response.text and "service_rate" not in response.text
    page = alice.get("/semijoin/ui/task", params=query)
    assert page.status_code == 403 and "may not read this DAG" in page.text
    assert monitor_airflow.client("admin").get("/semijoin/api/task", params=query).status_code == 200


def test_task_without_a_token_is_401_and_its_page_redirects_to_the_login(monitor_airflow, run_a):
    anonymous = monitor_airflow.client(None)
    query = task_query("dag_a", run_a, "join_running")
    assert anonymous.get("/semijoin/api/task", params=query).status_code == 401
    page = anonymous.get("/semijoin/ui/task", params=query, follow_redirects=False)
    assert page.status_code == 303
    location = page.headers["location"]
    assert location.startswith("/auth/login?next=") and "semijoin%2Fui%2Ftask" in location


def test_task_unknown_instance_is_404_and_the_unfilled_map_index_means_unmapped(monitor_airflow, run_a):
    client = monitor_airflow.client("admin")
    missing = client.get("/semijoin/api/task", params=task_query("dag_a", run_a, "no_such_task"))
    assert missing.status_code == 404 and "no_such_task" in missing.json()["detail"]
    mapped = task_query("dag_a", run_a, "join_running", map_index=3)
    assert client.get("/semijoin/api/task", params=mapped).status_code == 404
    # Airflow's UI leaves {MAP_INDEX} unfilled in a tab URL of an unmapped task
    placeholder = task_query("dag_a", run_a, "join_running", map_index="{MAP_INDEX}")
    unfilled = client.get("/semijoin/api/task", params=placeholder)
    assert unfilled.status_code == 200 and unfilled.json()["map_index"] == -1
    assert client.get("/semijoin/api/task", params={"dag_id": "dag_a"}).status_code == 422


# --------------------------------------------------------------------------- history storage


def test_history_is_one_bounded_xcom_per_task_and_survives_an_api_server_restart(monitor_airflow):
    from sqlalchemy import func, select

    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    a = monitor_airflow
    run = a.new_run("dag_a")
    a.set_state("dag_a", run, "join_running", "running")
    history = ProgressHistory()
    for b in range(1500):  # a long run: 1500 micro-batches of one second
        history.append(record(b, 1_800_000_000.0 + b))
        if b % 300 == 299:
            a.push("dag_a", run, "join_running", XCOM_HISTORY, history.to_dict())
    a.push("dag_a", run, "join_running", XCOM_LATEST, record(1499, 1_800_001_499.0))
    with create_session() as session:
        stored = session.scalar(
            select(func.count()).where(XComModel.run_id == run, XComModel.task_id == "join_running")
        )
    assert stored == 2  # one history, one latest record: each push replaced the previous value
    query = task_query("dag_a", run, "join_running")
    before = a.client("admin").get("/semijoin/api/task", params=query).json()["history"]
    assert 300 <= before["points"] <= 600
    assert before["series"]["time"][-1] == 1_800_001_499.0
    restarted = MonitorAirflow()  # a new API server app: nothing is kept in the old one's memory
    assert restarted.app is not a.app
    assert restarted.client("admin").get("/semijoin/api/task", params=query).json()["history"] == before


# --------------------------------------------------------------------------- pages and assets


def test_pages_and_their_assets_are_served(monitor_airflow, run_a):
    client = monitor_airflow.client("alice")
    for url, params, script in (
        ("/semijoin/ui/", {}, "joins.js"),
        ("/semijoin/ui/task", task_query("dag_a", run_a, "join_running"), "task.js"),
    ):
        page = client.get(url, params=params)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assets = re.findall(r'(?:src|href)="\.\./static/([^"]+)"', page.text)
        assert script in assets and "monitor.js" in assets and "monitor.css" in assets
        for asset in assets:
            served = client.get(f"/semijoin/static/{asset}")
            assert served.status_code == 200, asset
            assert served.text == (PLUGIN_DIR / "static" / asset).read_text()
    assert client.get("/semijoin/static/icon.svg").headers["content-type"].startswith("image/svg+xml")
    assert client.get("/semijoin/static/../readings.py").status_code == 404


def test_every_asset_is_package_data():
    """setup.cfg's package_data covers every page and static file, so wheels ship them."""
    import configparser

    parser = configparser.ConfigParser()
    parser.read(REPO / "setup.cfg")
    patterns = [p.strip() for p in parser["options.package_data"]["*"].split(",")]
    files = [p for d in ("pages", "static") for p in (PLUGIN_DIR / d).iterdir()]
    assert len(files) >= 6
    assert [f.name for f in files if not any(Path(f.name).match(p) for p in patterns)] == []


def test_pages_load_nothing_from_outside_the_package():
    """No CDN: the pages reference only the package's own assets, the scripts fetch only our API."""
    for page in (PLUGIN_DIR / "pages").glob("*.html"):
        references = re.findall(r'(?:src|href)="([^"]*)"', page.read_text())
        assert references and all(ref.startswith(("../static/", "./")) for ref in references), (page.name, references)
    for asset in (PLUGIN_DIR / "static").iterdir():
        urls = set(re.findall(r"https?://[^\s\"'`)]+", asset.read_text()))
        assert urls <= {"http://www.w3.org/2000/svg"}, (asset.name, urls)  # an XML namespace, never fetched


def test_pages_put_server_data_into_the_document_as_text_only():
    """DAG, run and task ids are user data: the scripts never parse them as HTML."""
    for script in (PLUGIN_DIR / "static").glob("*.js"):
        text = script.read_text()
        assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write", text), script.name


def test_the_lazy_app_builds_the_monitor_once(monitor_airflow):
    from airflow_provider_semijoin.plugins.semijoin_plugin import SemiJoinPlugin

    (entry,) = SemiJoinPlugin.fastapi_apps
    lazy = entry["app"]
    first = monitor_airflow.client("admin").get("/semijoin/api/joins")
    built = lazy._app
    second = monitor_airflow.client("admin").get("/semijoin/api/joins")
    assert first.status_code == second.status_code == 200
    assert built is not None and lazy._app is built


@pytest.mark.parametrize(
    "state, info, metrics, expected",
    [
        (None, False, False, "not_started"),
        ("queued", False, False, "not_started"),
        ("running", False, False, "waiting_first_batch"),
        ("running", True, False, "waiting_first_batch"),
        ("running", True, True, "running"),
        ("up_for_retry", True, True, "running"),
        ("success", True, True, "ended"),
        ("failed", True, False, "ended"),
        ("skipped", False, False, "ended"),
    ],
)
def test_phase(state, info, metrics, expected):
    from airflow_provider_semijoin.plugins.readings import phase

    assert phase(state, info, metrics) == expected


def test_history_columns_tolerate_a_missing_or_older_history():
    from airflow_provider_semijoin.plugins.readings import history_columns

    assert history_columns(None)["time"] == [] and history_columns(None)["disk_queries_per_s"] == []
    # an older writer without some series: those come back as None, the rest as pushed
    old = {"series": ["time", "disk_queries", "batch_duration_s"], "points": [[1.0, 10, 0.0], [2.0, 12, 0.5]]}
    columns = history_columns(old)
    assert columns["time"] == [1.0, 2.0] and columns["cache_hit_ratio"] == [None, None]
    assert columns["disk_queries_per_s"] == [None, 24.0]  # no rate for a zero-length batch
    # a latest record older than the history's last point is not appended
    assert history_columns(old, {"time": 1.5, "disk_queries": 1, "batch_duration_s": 1.0})["time"] == [1.0, 2.0]
    assert history_columns(None, {"time": 3.0, "batch_id": 0})["batch_id"] == [0]
