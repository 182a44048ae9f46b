"""The master-data update sensor (deferrable, reschedule), its trigger, and the install operator."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.stores import DatabaseURL, store_for, write_table
from airflow_provider_semijoin.core.stores.capture import enable_capture
from airflow_provider_semijoin.core.stores.changes import create_change_tables, pending_changes, stage_changes
from airflow_provider_semijoin.sensors.updates import MasterDataChangesSensor
from airflow_provider_semijoin.triggers.updates import MasterDataChangesTrigger, changes_ready
from airflow_provider_semijoin.workloads.master import generate_master
from metadata import xcom

SENSOR = "airflow_provider_semijoin.sensors.updates:MasterDataChangesSensor"
INSTALL = "airflow_provider_semijoin.operators.updates:InstallMasterChangesOperator"


@pytest.fixture
def dims(backend, connections):
    """R = (nk, sk) with keys 1..50 in the test's backend, as connection ``dims``."""
    table = backend.table_name()
    write_table(backend.connection, table, pa.table({"nk": list(range(1, 51)), "sk": list(range(101, 151))}), primary_key="nk")
    create_change_tables(backend.connection, table, "nk")
    connections("dims", backend.url)
    return backend, table


def changes(keys, sk_offset=1000, op="U") -> pa.Table:
    return pa.table({"op": [op] * len(keys), "nk": keys, "sk": [k + sk_offset for k in keys]})


def sk_of(backend, table, keys) -> dict:
    rows = backend.execute(f"SELECT nk, sk FROM {backend.quote(table)} WHERE nk IN ({', '.join(map(str, keys))})")
    return dict(rows)


def test_changes_ready():
    assert changes_ready(5, 100.0, 100.0, 5, None)
    assert not changes_ready(4, 100.0, 200.0, 5, None)  # no max delay: wait for a full batch
    assert changes_ready(4, 100.0, 130.0, 5, 30.0)
    assert not changes_ready(4, 100.0, 129.0, 5, 30.0)
    assert not changes_ready(0, None, 1e9, 5, 30.0)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_reschedule_mode_keeps_the_first_sighting_across_pokes(dims, make_dag):
    """3 changes never make a batch of 5; they are installed once the first sighting, kept in the
    task state store across reschedules, is max_delay_s old."""
    backend, table = dims
    stage_changes(backend.connection, table, "nk", changes([1, 2, 3]))
    dag_id = f"resched_{table}"
    dag = make_dag(dag_id, {
        "wait": (SENSOR, dict(master_conn_id="dims", table=table, key="nk", min_pending=5, max_delay_s=1.5,
                              mode="reschedule", poke_interval=1, timeout=60)),
        "install": (INSTALL, dict(master_conn_id="dims", table=table, key="nk")),
    }, edges=[("wait", "install")])
    started = time.monotonic()
    run = dag.test()
    assert str(run.state) == "success"
    assert time.monotonic() - started >= 1.5
    assert xcom(dag_id, "wait") == 3
    assert xcom(dag_id, "install") == {"version": 1, "keys": 3, "rows": 3}
    assert sk_of(backend, table, [1, 2, 3, 4]) == {1: 1001, 2: 1002, 3: 1003, 4: 104}
    assert pending_changes(backend.connection, table) == 0


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_deferrable_sensor_waits_in_the_trigger(dims, make_dag):
    backend, table = dims
    dag_id = f"defer_{table}"
    dag = make_dag(dag_id, {
        "wait": (SENSOR, dict(master_conn_id="dims", table=table, key="nk", deferrable=True, poke_interval=0.2, timeout=60)),
        "install": (INSTALL, dict(master_conn_id="dims", table=table, key="nk", max_rows=2)),
    }, edges=[("wait", "install")])

    def upstream():  # stages after the sensor has deferred
        time.sleep(1.5)
        connection = DatabaseURL.parse(backend.url).connect()
        stage_changes(connection, table, "nk", changes([7, 8, 9], op="U"))
        connection.close()

    stager = threading.Thread(target=upstream)
    stager.start()
    run = dag.test()
    stager.join()
    assert str(run.state) == "success"
    assert xcom(dag_id, "wait") == 3
    assert xcom(dag_id, "install") == {"version": 1, "keys": 2, "rows": 2}  # max_rows: the 2 oldest
    assert sk_of(backend, table, [7, 8, 9]) == {7: 1007, 8: 1008, 9: 109}
    assert pending_changes(backend.connection, table) == 1


@pytest.mark.parametrize("deferrable", [True, False])
def test_a_sensor_watching_versions_fires_on_a_plain_update_by_another_application(dims, make_dag, deferrable):
    """R's writes captured (triggers): an UPDATE committed by another connection, no staging,
    moves R to a new version, and the sensor (in the triggerer, or poking) succeeds with it."""
    backend, table = dims
    enable_capture(store_for(backend.connection, table, "nk"))
    dag_id = f"versions_{int(deferrable)}_{table}"
    dag = make_dag(dag_id, {"wait": (SENSOR, dict(master_conn_id="dims", table=table, key="nk", watch="versions",
                                                   deferrable=deferrable, poke_interval=0.2, timeout=60))})

    def other_application():  # commits after the sensor's first look
        time.sleep(1.5)
        connection = DatabaseURL.parse(backend.url).connect()
        cursor = connection.cursor()
        cursor.execute(f"UPDATE {backend.quote(table)} SET sk = sk + 1000 WHERE nk IN (3, 4)")
        connection.commit()
        connection.close()

    writer = threading.Thread(target=other_application)
    writer.start()
    started = time.monotonic()
    run = dag.test()
    writer.join()
    assert str(run.state) == "success"
    assert time.monotonic() - started >= 1.5  # it waited for the commit: version 0 did not satisfy it
    assert xcom(dag_id, "wait") == 2  # a version a captured row
    assert sk_of(backend, table, [3, 4]) == {3: 1103, 4: 1104}


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_version_trigger_fires_past_its_version_only(dims):
    backend, table = dims
    enable_capture(store_for(backend.connection, table, "nk"))
    backend.execute(f"DELETE FROM {backend.quote(table)} WHERE nk = 9")
    trigger = MasterDataChangesTrigger("dims", table, "nk", poll_interval=0.1, after_version=0)
    again = MasterDataChangesTrigger(**trigger.serialize()[1])
    assert _first_event(trigger) == _first_event(again) == {"status": "ready", "version": 1}
    late = MasterDataChangesTrigger("dims", table, "nk", poll_interval=0.1, after_version=1)

    async def first_within(seconds):
        async def first():
            async for event in late.run():
                return event.payload
        try:
            return await asyncio.wait_for(first(), seconds)
        except TimeoutError:
            return None

    assert asyncio.run(first_within(0.5)) is None  # nothing past version 1 yet


def _first_event(trigger):
    async def first():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(first())


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_trigger_is_serializable_and_idempotent(dims):
    backend, table = dims
    stage_changes(backend.connection, table, "nk", changes([1, 2]))
    trigger = MasterDataChangesTrigger("dims", table, "nk", min_pending=2, poll_interval=0.1)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider_semijoin.triggers.updates.MasterDataChangesTrigger"
    again = MasterDataChangesTrigger(**kwargs)
    first, second = _first_event(trigger), _first_event(again)
    assert first["status"] == second["status"] == "ready"
    assert first["pending"] == second["pending"] == 2  # reading only: a second copy sees the same
    assert pending_changes(backend.connection, table) == 2


def test_trigger_reports_an_unreachable_database():
    event = _first_event(MasterDataChangesTrigger("no_such_conn", "dim", "nk"))
    assert event == {"status": "error", "message": "ConfigError: master_conn_id: connection 'no_such_conn' is not defined "
                     "(add it in the Airflow UI, with `airflow connections add`, or as AIRFLOW_CONN_NO_SUCH_CONN)"}
    sensor = MasterDataChangesSensor(task_id="w", master_conn_id="no_such_conn", table="dim", key="nk")
    with pytest.raises(AirflowException, match=r"^waiting for changes to dim failed: ConfigError: master_conn_id: connection"):
        sensor.execute_complete({}, event)


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"table": "dim; DROP TABLE x"}, r"^table: 'dim; DROP TABLE x' is not a valid identifier"),
        ({"min_pending": 0}, r"^min_pending: 0 is not a positive integer$"),
        ({"max_delay_s": -5}, r"^max_delay_s: -5 is not a positive number of seconds$"),
        ({"watch": "binlog"}, r"^watch: 'binlog' is not one of \['pending', 'versions'\]$"),
        ({"after_version": 3}, r"^after_version: 3 is not a version >= 0 to wait past with watch='versions'$"),
        ({"watch": "versions", "after_version": -1}, r"^after_version: -1 is not a version >= 0"),
    ],
)
def test_sensor_arguments(arguments, message):
    with pytest.raises(ConfigError, match=message):
        MasterDataChangesSensor(**{"task_id": "w", "table": "dim", "key": "nk", **arguments})


def batches(folder) -> dict[int, pa.Table]:
    """A Parquet sink's micro-batches: {batch id: rows}."""
    return {int(p.name.split("=")[1]): pq.read_table(p / "part-0.parquet") for p in folder.glob("batch=*")}


def feasible_versions(observations, changed: dict) -> tuple[int, float]:
    """The versions of R one micro-batch is consistent with, as an interval [low, high].

    ``observations`` are (key, "new" | "old") pairs: the tuple saw the key's row after (or
    before) the change that ``changed[key]`` (its version) made; unchanged keys fit any version.
    """
    low, high = 0, float("inf")
    for key, seen in observations:
        if key not in changed:
            continue
        if seen == "new":
            low = max(low, changed[key])
        else:
            high = min(high, changed[key] - 1)
    return low, high


@pytest.mark.mysql
@pytest.mark.parametrize("backend", ["mysql"], indirect=True)
def test_installs_while_a_join_runs_every_batch_sees_one_version(backend, connections, make_dag, tmp_path, spark):
    """Upstream stages 300 changes (updates and deletes) to a MariaDB master while a CACHEJOIN task
    streams 24 micro-batches over it; an update DAG in another Airflow process (deferrable sensor -> install, three
    times) installs them. Every micro-batch's output equals the join with one version of R."""
    table = backend.table_name()
    generate_master(backend.connection, table, 2000, seed=3, reuse=False)
    create_change_tables(backend.connection, table, "nk")
    connections("dims", backend.url)
    original = dict(backend.execute(f"SELECT nk, sk FROM `{table}`"))
    rng = np.random.default_rng(5)
    keys = [int(k) for k in rng.choice(sorted(original), 300, replace=False)]  # each key changes once
    deleted = set(keys[::5])

    updates_dag = f"updates_{table}"
    chain = {}
    for i in range(3):
        chain[f"wait{i}"] = (SENSOR, dict(master_conn_id="dims", table=table, key="nk", min_pending=60,
                                          deferrable=True, poke_interval=0.3, timeout=60))
        chain[f"install{i}"] = (INSTALL, dict(master_conn_id="dims", table=table, key="nk"))
    names = list(chain)
    make_dag(updates_dag, chain, edges=list(zip(names, names[1:])))
    join_dag = make_dag(f"joinupd_{table}", {"join": (
        "airflow_provider_semijoin.operators.join:CacheJoinOperator",
        dict(column="nk", master_static=True, master_table=table, master_key="nk", select=["sk"], master_conn_id="dims", memory="1M",
             source={"kind": "generator", "rows_per_second": 400, "master_rows": 2000, "missing": 0.05, "seed": 2},
             sinks={"matched": {"path": str(tmp_path / "matched")}, "dead_letter": {"path": str(tmp_path / "dead")}},
             checkpoint=str(tmp_path / "cp"), stop={"max_batches": 24}, trigger_interval_s=0.5),
    )})

    # the update DAG runs in an Airflow process of its own, with its own metadata DB
    env = {**os.environ, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'updates.db'}"}
    # copied by a child process: a copy made here would open and close airflow.db in this process, which drops
    # this process's POSIX locks on it (SQLite's), and a later airflow CLI could then delete its WAL
    copy = "import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))"
    subprocess.run([sys.executable, "-c", copy, Path(os.environ["AIRFLOW_HOME"]) / "airflow.db", tmp_path / "updates.db"],
                   check=True, timeout=120)
    updater = subprocess.Popen([sys.executable, "-m", "airflow", "dags", "test", updates_dag],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output, waiting = [], threading.Event()

    def read_updater():  # its first sensor has deferred: the trigger polls the pending changes
        for line in updater.stdout:
            output.append(line)
            if "running trigger in line" in line:
                waiting.set()

    reader = threading.Thread(target=read_updater, daemon=True)
    reader.start()
    assert waiting.wait(120), "".join(output)[-3000:]

    def upstream():  # stages 20 changes every 0.3 s once the join's first micro-batch is out
        connection = DatabaseURL.parse(backend.url).connect()
        while not list((tmp_path / "matched").glob("batch=*")):
            time.sleep(0.1)
        for start in range(0, len(keys), 20):
            part = keys[start:start + 20]
            stage_changes(connection, table, "nk", pa.table({
                "op": ["D" if k in deleted else "U" for k in part], "nk": part,
                "sk": [original[k] + 1_000_000 for k in part]}))
            time.sleep(0.3)
        connection.close()

    stager = threading.Thread(target=upstream)
    stager.start()
    try:
        run = join_dag.test()
    finally:
        stager.join()
        updater.wait(timeout=90)
        reader.join()
    assert updater.returncode == 0, "".join(output)[-3000:]
    assert str(run.state) == "success"

    changed = {int(k): int(v) for v, k in backend.execute(f"SELECT version, nk FROM `{table}__sj_changes`")}
    assert max(changed.values()) == 3 and len(changed) >= 180  # three installs, most of the changes
    matched, dead = batches(tmp_path / "matched"), batches(tmp_path / "dead")
    ids, seen_versions = [], []
    for batch_id in sorted(set(matched) | set(dead)):
        observations = []
        rows = matched.get(batch_id)
        if rows is not None:
            ids += sorted(set(rows["sj_id"].to_pylist()))
            for k, sk in zip(rows["nk"].to_pylist(), rows["sk"].to_pylist()):
                assert k not in deleted or k not in changed or sk == original[k], (batch_id, k, sk)
                assert sk in (original[k], original[k] + 1_000_000), (batch_id, k, sk)
                observations.append((k, "new" if sk != original[k] else "old"))
        rows = dead.get(batch_id)
        if rows is not None:
            ids += rows["sj_id"].to_pylist()
            for reason, payload in zip(rows["reason"].to_pylist(), rows["row"].to_pylist()):
                k = json.loads(payload)["nk"]
                if k in original:  # a key of R that left unmatched: it was deleted before this batch
                    assert reason == "not_in_master" and k in deleted, (batch_id, k, reason)
                    observations.append((k, "new"))
                elif k is not None and k in changed:
                    observations.append((k, "old"))
        low, high = feasible_versions(observations, changed)
        assert low <= high, (f"micro-batch {batch_id} mixes versions of R: needs >= {low} and <= {high}",
                             [(k, seen, changed[k], k in deleted) for k, seen in observations if k in changed])
        seen_versions.append((low, high))
    assert sorted(int(i) for i in ids) == list(range(xcom(join_dag.dag_id, "join")["input_rows"]))  # exactly once
    assert any(high < 3 for _, high in seen_versions) and any(low > 0 for low, _ in seen_versions), (
        "the installs did not happen while the join ran", seen_versions)
