"""Deadline monitoring: the window ratio over a history, the operators' threshold option, and the
DeadlineMissSensor reading a join task's semijoin_history XCom."""

from __future__ import annotations

import pytest

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.progress import ProgressHistory
from airflow_provider_semijoin.core.deadline_watch import check_miss_ratio, window_misses
from airflow_provider_semijoin.sensors.deadline import DeadlineMissSensor
from airflow_provider_semijoin.workloads.master import generate_master
from metadata import xcom

JOIN = "airflow_provider_semijoin.operators.join:HybridJoinOperator"
WATCH = "airflow_provider_semijoin.sensors.deadline:DeadlineMissSensor"


def history_of(batches: list[tuple[float, int, int]], max_points: int = 600) -> dict:
    """A history of records (time, input rows, deadline misses) with running totals."""
    history = ProgressHistory(max_points=max_points)
    rows = misses = 0
    for t, n, m in batches:
        rows, misses = rows + n, misses + m
        history.append({"time": t, "input_rows": n, "deadline_misses": m, "total_input_rows": rows,
                        "total_deadline_misses": misses})
    return history.to_dict()


def test_window_counts_only_the_last_seconds():
    history = history_of([(0, 100, 90), (10, 100, 0), (20, 100, 5), (30, 100, 5)])
    assert window_misses(history, 15) == (10, 200)  # the points at 20 and 30
    assert window_misses(history, 100) == (100, 400)
    assert window_misses(None, 10) == (0, 0)
    assert check_miss_ratio(history, 0.04, 15, 100) == (
        "10 of 200 tuples (5.0%) missed their deadline in the last 15 s, above the threshold of 4.0%")
    assert check_miss_ratio(history, 0.05, 15, 100) is None  # 5% is not above 5%
    assert check_miss_ratio(history, 0.01, 15, 300) is None  # too few tuples to judge


def test_window_is_exact_after_the_history_thinned_its_past():
    batches = [(t, 10, 1 if t % 2 else 0) for t in range(1000)]
    thinned = history_of(batches, max_points=50)
    assert len(thinned["points"]) <= 50
    assert window_misses(thinned, 1e9) == (500, 10_000)  # the running totals keep the count exact


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"threshold": 1.5}, r"^threshold: 1\.5 is not a ratio in \[0, 1\)$"),
        ({"window_s": 0}, r"^window_s: 0 is not a positive number of seconds$"),
        ({"min_tuples": 0}, r"^min_tuples: 0 is not a positive integer$"),
    ],
)
def test_sensor_arguments(arguments, message):
    with pytest.raises(ConfigError, match=message):
        DeadlineMissSensor(**{"task_id": "w", "join_task_id": "j", "threshold": 0.1, **arguments})


@pytest.fixture
def master(tmp_path, connections):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    generate_master(url, "product", 1000, seed=1)
    connections("dims", {"conn_type": "semijoin_master", "extra": {"dialect": "sqlite", "path": str(tmp_path / "m.db")}})
    return url


def join_args(tmp_path, name: str, max_latency_s: float, **more) -> dict:
    return dict(column="nk", master_static=True, master_table="product", master_key="nk", select=["sk"], master_conn_id="dims", memory="1M",
                source={"kind": "generator", "rows_per_second": 400, "master_rows": 1000, "seed": 1},
                sinks={"matched": {"path": str(tmp_path / name / "m")}, "dead_letter": {"path": str(tmp_path / name / "d")}},
                checkpoint=str(tmp_path / name / "cp"), trigger_interval_s=0.3, deadline_max_latency_s=max_latency_s, **more)


def states(run) -> dict:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


def test_sensor_fails_or_alerts_on_a_breach(master, tmp_path, make_dag, spark):
    """An impossible deadline (1 ms after arrival; a micro-batch waits longer than that): every
    tuple misses it, the join only warns; one sensor fails on the breach, one lets an alert run."""
    dag = make_dag(f"deadlines_{tmp_path.name}", {
        "join": (JOIN, join_args(tmp_path, "late", 0.001, stop={"max_batches": 3}, deadline_miss_threshold=0.5,
                                 on_deadline_breach="warn")),
        "guard": (WATCH, dict(join_task_id="join", threshold=0.5, window_s=60, min_tuples=10, poke_interval=0.2, timeout=30)),
        "breach": (WATCH, dict(join_task_id="join", threshold=0.5, window_s=60, min_tuples=10, fail_on_breach=False,
                               poke_interval=0.2, timeout=30)),
    }, edges=[("join", "guard"), ("join", "breach")])
    run = dag.test()
    assert states(run) == {"join": "success", "guard": "failed", "breach": "success"}
    summary = xcom(dag.dag_id, "join")
    assert summary["deadline_misses"] == summary["input_rows"] > 0


def test_operator_stops_and_fails_on_a_breach_and_sensor_passes_a_met_deadline(master, tmp_path, make_dag, spark):
    dag = make_dag(f"deadline_ok_{tmp_path.name}", {
        "relaxed": (JOIN, join_args(tmp_path, "ok", 120.0, stop={"max_batches": 2})),
        "guard": (WATCH, dict(join_task_id="relaxed", threshold=0.01, min_tuples=10, poke_interval=0.2, timeout=30)),
        "breach": (WATCH, dict(join_task_id="relaxed", threshold=0.01, min_tuples=10, fail_on_breach=False,
                               poke_interval=0.2, timeout=30)),
        # endless: only the breach stops it
        "strict": (JOIN, join_args(tmp_path, "strict", 0.001, deadline_miss_threshold=0.2, deadline_min_tuples=50)),
    }, edges=[("relaxed", "guard"), ("relaxed", "breach")])
    run = dag.test()
    assert states(run) == {"relaxed": "success", "guard": "success", "breach": "skipped", "strict": "failed"}
    assert xcom(dag.dag_id, "relaxed")["deadline_misses"] == 0
    latest = xcom(dag.dag_id, "strict", "semijoin_metrics")
    assert latest["total_deadline_misses"] >= 50  # it stopped soon after the window held enough tuples
