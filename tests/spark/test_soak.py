"""``semijoin soak`` (issue 13): a half-minute soak of the Spark pipeline on MariaDB with master-data
updates on a schedule; the CSV and the PNG exist with sane columns, every tuple left exactly once,
the structures stayed within the budget. Slopes are reported by the soak, not asserted here (a
shared machine moves them)."""

from __future__ import annotations

import csv
import uuid

import pytest

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.stores import DatabaseURL
from airflow_provider_semijoin.core.stores.sql import side_tables
from airflow_provider_semijoin.soak import COLUMNS, SERIES, SoakConfig, event_times, run_soak

pytestmark = [pytest.mark.mysql, pytest.mark.slow]


@pytest.fixture
def soak_table(mysql_url):
    table = f"soak_{uuid.uuid4().hex[:10]}"
    yield table
    connection = DatabaseURL.parse(mysql_url).connect()
    cursor = connection.cursor()
    for name in (table, *side_tables(table)):
        cursor.execute(f"DROP TABLE IF EXISTS `{name}`")
    cursor.execute("DELETE FROM semijoin_datasets WHERE table_name = %s", (table,))
    cursor.close()
    connection.close()


@pytest.mark.acceptance  # the soak machinery at a quarter minute: test_readme runs `semijoin soak` in the first tier
def test_half_minute_soak_writes_csv_png_and_keeps_exactly_once(spark, mysql_url, soak_table, tmp_path):
    """The soak's machinery at CI size (the leak hunt itself is `semijoin soak --minutes 30`, README)."""
    config = SoakConfig(minutes=0.5, out=tmp_path / "soak", master=mysql_url, table=soak_table, size="small",
                        rate=300, update_every_s=4, update_keys=40, sample_s=1, seed=3)
    lines = []
    result = run_soak(config, spark=spark, out=lines.append)

    assert result["exactly_once"]["ok"], result["exactly_once"]
    assert result["exactly_once"]["tuples"] > 750  # half a minute at 300 tuples/s, less a slow start on a busy machine
    assert result["updates"] >= 6, result["events"]
    assert 0 < result["memory_peak_bytes"] <= result["memory_budget_bytes"]
    with open(result["csv"]) as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0].keys()) == COLUMNS
    assert len(rows) >= 10  # every second (or later on a busy machine) for half a minute
    last = rows[-1]
    assert int(last["rss_tree_bytes"]) > int(last["rss_driver_bytes"]) > 50 * 2**20  # + the Spark JVM
    assert max(int(r["db_connections"]) for r in rows) >= 1  # the join's store (closed at the end)
    assert int(last["checkpoint_bytes"]) > 0 and int(last["history_bytes"]) > 0
    assert int(last["input_rows"]) == result["job"]["input_rows"]
    png = (tmp_path / "soak" / "soak.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    assert set(result["slopes_per_minute"]) == set(SERIES)
    assert all(s["per_minute"] is not None for s in result["slopes_per_minute"].values())
    assert any(line.startswith("memory_peak_bytes") for line in lines)


def test_event_schedule_is_drawn_from_the_seed():
    import numpy as np

    first = event_times(10.0, 120.0, np.random.default_rng(5))
    assert first == event_times(10.0, 120.0, np.random.default_rng(5))
    assert first != event_times(10.0, 120.0, np.random.default_rng(6))
    assert len(first) == 12 and all(i * 10 + 5 <= t < i * 10 + 10 for i, t in enumerate(first))
    assert event_times(None, 120.0, np.random.default_rng(5)) == []


def test_the_soaks_minutes_count_from_the_end_of_its_first_micro_batch(tmp_path):
    """A first micro-batch that takes longer than the soak (a cold worker on a loaded machine: 31.6 s
    of a half-minute soak once, which then streamed 0 tuples) does not eat the minutes: the stop
    comes ``duration_s`` after the first progress record, not after the start."""
    import threading

    from airflow_provider_semijoin.soak import Recorder, stop_after_streaming, streamed_s

    now = [100.0]
    recorder = Recorder(lambda: now[0], tmp_path / "soak.csv")
    stop, ended = threading.Event(), threading.Event()
    timer = threading.Thread(target=stop_after_streaming, args=(recorder, lambda: now[0], 30.0, stop, ended))
    timer.start()
    try:
        now[0] = 140.0  # 40 s of start-up, no micro-batch yet
        assert not stop.wait(0.5) and streamed_s(recorder, lambda: now[0]) == 0.0
        recorder.on_progress({"time": 1e9, "batch_id": 0, "total_input_rows": 0})
        now[0] = 169.0
        assert not stop.wait(0.5) and streamed_s(recorder, lambda: now[0]) == 29.0
        now[0] = 170.0
        assert stop.wait(5)
    finally:
        ended.set()
        timer.join(timeout=5)
    assert not timer.is_alive()


def test_kill_connection_needs_a_mysql_master(tmp_path):
    with pytest.raises(ConfigError, match=r"kill_every_s: KILL CONNECTION needs a MySQL master"):
        SoakConfig(minutes=1, out=tmp_path, master=f"sqlite:///{tmp_path}/m.db", kill_every_s=5)


def test_join_sessions_finds_this_process_connections(mysql_url):
    """KILL CONNECTION's victims: this process tree's sessions, not the monitor's own (a readlink of
    the vanished fd of the /proc/self/fd listing made it skip the whole process: no kill happened)."""
    from airflow_provider_semijoin.soak import join_sessions

    url = DatabaseURL.parse(mysql_url)
    join, monitor = url.connect(), url.connect()
    try:
        assert join.thread_id() in join_sessions(url, monitor)
        assert monitor.thread_id() not in join_sessions(url, monitor)
    finally:
        join.close()
        monitor.close()
