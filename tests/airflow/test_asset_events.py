"""Master-data changes as asset events (triggers/versions.py): the event trigger over R's captured
versions, on SQLite and MariaDB, capture by triggers and by the binary log; and end to end, an
asset-scheduled DAG run by a real Airflow (scheduler, dag-processor, triggerer, API server: the
acceptance tier, ``pytest -m acceptance``).

The trigger's stream is fed its ticks one at a time (:class:`Polls`), as the triggerer's shared
stream does: each poll either fires an event or asks for the next tick without one, so "no event
without a commit" is an observation, not a wait. Commits come from connections of their own.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa
import pytest
from airflow.sdk import Asset
from airflow.sdk.execution_time.context import AssetStateStoreAccessors
from airflow.triggers.shared_stream import AdvanceItem, AdvanceOutcome
from airflow_stack import LocalAirflow, artifacts_dir

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.stores import DatabaseURL, store_for, write_table
from airflow_provider_semijoin.core.stores.binlog import BinlogCapture
from airflow_provider_semijoin.core.stores.capture import enable_capture
from airflow_provider_semijoin.core.stores.sql import write_transaction
from airflow_provider_semijoin.triggers.versions import CURSOR_KEY, STREAM, MasterDataVersionsTrigger, PollTicks, Tick


@pytest.fixture
def dim(backend, connections):
    """R = (nk, sk), keys 1..20, its writes captured by triggers, as connection ``dims``."""
    table = backend.table_name()
    write_table(backend.connection, table, pa.table({"nk": list(range(1, 21)), "sk": list(range(101, 121))}),
                primary_key="nk")
    enable_capture(store_for(backend.connection, table, "nk"))
    connections("dims", backend.url)
    return backend, table


def commit(url: str, *statements: str) -> None:
    """One transaction of another application: plain SQL on its own connection."""
    connection = DatabaseURL.parse(url).connect()
    cursor = connection.cursor()
    try:
        with write_transaction(connection, cursor):
            for statement in statements:
                cursor.execute(statement)
    finally:
        cursor.close()
        connection.close()


class AssetState:
    """An asset's state store as the triggerer hands it to an event trigger (its async get and
    set), kept in memory: what survives a triggerer restart."""

    def __init__(self):
        self.values = {}

    async def aget(self, key, default=None):
        return self.values.get(key, default)

    async def aset(self, key, value):
        self.values[key] = value

    def cursor(self) -> int | None:
        return self.values[CURSOR_KEY]["version"] if CURSOR_KEY in self.values else None


class Polls:
    """A trigger's stream fed one tick at a time: ``await polls.next()`` is the payload of the
    event that poll fired, or None when the trigger asked for its next tick without firing."""

    def __init__(self, trigger: MasterDataVersionsTrigger):
        self.ticks: list[Tick] = []
        self._asking, self._go = asyncio.Event(), asyncio.Event()
        self._events = trigger.filter_shared_stream(self._stream())
        self._pending = None

    async def _stream(self):
        while True:
            self._asking.set()
            await self._go.wait()
            self._go.clear()
            self.ticks.append(Tick())
            yield self.ticks[-1]

    async def next(self) -> dict | None:
        if self._pending is None:
            self._pending = asyncio.ensure_future(anext(self._events))
        await self._first(asyncio.ensure_future(self._asking.wait()))  # it asks for a tick (or failed)
        self._asking.clear()
        self._go.set()
        asking = asyncio.ensure_future(self._asking.wait())
        await self._first(asking)
        if not self._pending.done():
            return None
        asking.cancel()
        event, self._pending = self._pending.result(), None
        return event.payload

    async def _first(self, waiting):
        await asyncio.wait({self._pending, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if self._pending.done() and self._pending.exception() is not None:
            waiting.cancel()
            raise self._pending.exception()

    async def close(self):
        if self._pending is not None:
            self._pending.cancel()
            await asyncio.wait({self._pending})
        await self._events.aclose()


def polled(trigger, script):
    """Run ``await script(polls)`` on a stream of ``trigger`` in an event loop of its own."""
    async def main():
        polls = Polls(trigger)
        try:
            return await script(polls)
        finally:
            await polls.close()
            await trigger.cleanup()

    return asyncio.run(main())


def versions(event: dict | None):
    return None if event is None else (event["first_version"], event["last_version"])


def test_one_event_per_commit_batch_and_none_without(dim):
    """History before the trigger's first run does not fire; two transactions between two polls
    are one event of their versions (one a captured row); polls without a commit fire nothing."""
    backend, table = dim
    q = backend.quote(table)
    commit(backend.url, f"UPDATE {q} SET sk = 0 WHERE nk = 1")  # history: version 1
    trigger = MasterDataVersionsTrigger("dims", table, "nk", poll_interval=0.01)

    async def script(polls):
        seen = [await polls.next(), await polls.next()]
        commit(backend.url, f"UPDATE {q} SET sk = sk + 1000 WHERE nk IN (3, 4)")
        commit(backend.url, f"INSERT INTO {q} (nk, sk) VALUES (30, 130)")
        event = await polls.next()
        seen += [versions(event), await polls.next(), await polls.next()]
        commit(backend.url, f"DELETE FROM {q} WHERE nk = 5")
        seen += [versions(await polls.next()), await polls.next()]
        return seen, event

    seen, event = polled(trigger, script)
    assert seen == [None, None, (2, 4), None, None, (5, 5), None]
    assert set(event) == {"table", "master_conn_id", "first_version", "last_version", "committed_at", "seen_at"}
    assert (event["table"], event["master_conn_id"], event["committed_at"]) == (table, "dims", None)  # triggers: no time


def test_the_cursor_lives_in_the_asset_state_and_moves_once_the_event_was_stored(dim):
    """A re-created trigger (a triggerer restart: same arguments, same asset state) resumes from
    the asset's cursor: commits made while it was down fire once, history never; an event whose
    storing was not confirmed left the cursor before it, so it fires again (at least once)."""
    backend, table = dim
    q = backend.quote(table)
    commit(backend.url, f"UPDATE {q} SET sk = 0 WHERE nk = 1")  # history
    state, kwargs = AssetState(), MasterDataVersionsTrigger("dims", table, "nk").serialize()[1]

    def run(script):
        trigger = MasterDataVersionsTrigger(**kwargs)
        trigger.asset_state_store = state
        return polled(trigger, script)

    async def first(polls):
        assert await polls.next() is None
        # the first run recorded R's high-water mark at once, for this table
        assert state.values == {CURSOR_KEY: {"master_conn_id": "dims", "table": table, "version": 1}}
        commit(backend.url, f"UPDATE {q} SET sk = 1 WHERE nk IN (2, 3)")
        event = await polls.next()
        lost = AdvanceItem(polls.ticks[-1], AdvanceOutcome(acked=0, failed=1))  # never confirmed stored
        await PollTicks(0.01).advance([lost])
        return versions(event)

    assert run(first) == (2, 3) and state.cursor() == 1

    async def again(polls):
        event = await polls.next()  # fired again: its storing was not confirmed
        stored = [AdvanceItem(polls.ticks[-1], AdvanceOutcome(acked=1, failed=0))]
        await PollTicks(0.01).advance(stored)
        return versions(event), await polls.next()

    assert run(again) == ((2, 3), None) and state.cursor() == 3
    commit(backend.url, f"DELETE FROM {q} WHERE nk = 7")  # while no trigger runs

    async def after_restart(polls):
        return versions(await polls.next()), await polls.next()

    assert run(after_restart) == ((4, 4), None)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_cursor_the_asset_kept_for_another_table_is_not_this_ones(dim):
    """The asset's watcher now watches another table (or connection): its cursor there is not
    this table's, so the trigger starts anew from this table's version, history not firing."""
    backend, table = dim
    q = backend.quote(table)
    commit(backend.url, f"UPDATE {q} SET sk = 0 WHERE nk = 1")  # history: version 1
    state = AssetState()
    state.values[CURSOR_KEY] = {"master_conn_id": "dims", "table": "dim_before", "version": 99}
    trigger = MasterDataVersionsTrigger("dims", table, "nk")
    trigger.asset_state_store = state

    async def script(polls):
        seen = [await polls.next()]
        commit(backend.url, f"UPDATE {q} SET sk = 1 WHERE nk = 2")
        return seen + [versions(await polls.next())]

    assert polled(trigger, script) == [None, (2, 2)]
    assert state.values[CURSOR_KEY] == {"master_conn_id": "dims", "table": table, "version": 1}  # not yet stored


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_run_outside_a_triggerer_fires_each_batch_and_moves_its_cursor_once_taken(dim):
    backend, table = dim
    q = backend.quote(table)
    state = AssetState()
    trigger = MasterDataVersionsTrigger("dims", table, "nk", poll_interval=0.01, after_version=0)
    trigger.asset_state_store = state
    commit(backend.url, f"UPDATE {q} SET sk = 0 WHERE nk IN (1, 2)")

    async def main():
        events = trigger.run()
        try:
            first = (await anext(events)).payload
            cursor_while_held = state.cursor()
            commit(backend.url, f"UPDATE {q} SET sk = 1 WHERE nk = 9")
            second = (await anext(events)).payload
            return versions(first), cursor_while_held, versions(second)
        finally:
            await events.aclose()
            await trigger.cleanup()

    assert asyncio.run(main()) == ((1, 2), 0, (3, 3))
    assert state.cursor() == 2  # the first event was taken; the second not yet


@pytest.mark.mysql
def test_binlog_capture_one_event_per_transaction_batch_with_its_commit_time(binlog_backend, connections):
    """R captured from MariaDB's binary log, no join running: the trigger keeps the capture going;
    a transaction of three statements is one version, and the event carries its commit time."""
    backend = binlog_backend
    table = backend.table_name()
    write_table(backend.connection, table, pa.table({"nk": list(range(1, 11)), "sk": list(range(11, 21))}),
                primary_key="nk")
    with BinlogCapture(backend.url, table, "nk") as capture:
        capture.enable()
    connections("dims", backend.url)
    trigger = MasterDataVersionsTrigger("dims", table, "nk", poll_interval=0.01)

    async def script(polls):
        assert await polls.next() is None
        commit(backend.url, f"UPDATE `{table}` SET sk = 0 WHERE nk = 1", f"DELETE FROM `{table}` WHERE nk = 2",
               f"INSERT INTO `{table}` VALUES (40, 50)")
        event = None
        while event is None:  # the capture writes the version a capture lag after the commit
            event = await polls.next()
        return event, await polls.next()

    event, after = polled(trigger, script)
    assert (versions(event), after) == ((1, 1), None)
    assert event["committed_at"] is not None and event["committed_at"] <= event["seen_at"]
    password = backend.url.split("@")[0].rsplit(":", 1)[1]
    assert len(password) >= 8 and password not in str(event)


def test_a_table_without_change_capture_fails_in_one_sentence_naming_the_fix(backend, connections):
    table = backend.table_name()
    write_table(backend.connection, table, pa.table({"nk": [1, 2]}), primary_key="nk")
    connections("dims", backend.url)
    trigger = MasterDataVersionsTrigger("dims", table, "nk", poll_interval=0.01)

    async def first(polls):
        return await polls.next()

    with pytest.raises(ConfigError, match=rf"^table: changes to '{table}' are not captured, so no commit to it can "
                                          rf"become an asset event; capture them with `semijoin changes enable "
                                          rf"--master URL --table {table} --key nk` \(add --via binlog"):
        polled(trigger, first)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_several_assets_sharing_the_trigger_are_refused_in_one_sentence(dim):
    backend, table = dim
    trigger = MasterDataVersionsTrigger("dims", table, "nk")
    trigger.asset_state_store = AssetStateStoreAccessors(inlets=[Asset("dim_a"), Asset("dim_b")])

    async def first(polls):
        return await polls.next()

    with pytest.raises(ConfigError, match=rf"^table: several assets watch '{table}' through one "
                                          r"MasterDataVersionsTrigger .* watch it from one asset"):
        polled(trigger, first)


def test_serialized_it_is_the_same_trigger_with_a_stream_of_its_own():
    trigger = MasterDataVersionsTrigger("dims", "dim_product", "product_id", poll_interval=2, after_version=7)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider_semijoin.triggers.versions.MasterDataVersionsTrigger"
    assert kwargs == {"master_conn_id": "dims", "table": "dim_product", "key": "product_id", "poll_interval": 2,
                      "after_version": 7}
    assert MasterDataVersionsTrigger(**kwargs).serialize() == (classpath, kwargs)
    assert trigger.shared_stream_key() is None  # not in a triggerer: run() polls by itself
    trigger.trigger_id = 12
    assert trigger.shared_stream_key() == (STREAM, 12)
    assert MasterDataVersionsTrigger.create_shared_stream_producer(kwargs).poll_interval == 2


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"table": "dim; DROP TABLE x"}, r"^table: 'dim; DROP TABLE x' is not a valid identifier"),
        ({"key": ""}, r"^key: '' is not a valid identifier"),
        ({"poll_interval": 0}, r"^poll_interval: 0 is not a positive number of seconds$"),
        ({"after_version": -1}, r"^after_version: -1 is not a version >= 0$"),
        ({"after_version": True}, r"^after_version: True is not a version >= 0$"),
    ],
)
def test_arguments_are_checked_when_the_dag_is_parsed(arguments, message):
    with pytest.raises(ConfigError, match=message):
        MasterDataVersionsTrigger(**{"master_conn_id": "dims", "table": "dim", "key": "nk", **arguments})


# ------------------------------------------------------------------ end to end, with a real Airflow


def asset_state(airflow, asset_id: int):
    """The trigger's cursor in the asset's state store (None before its first run)."""
    response = airflow.api("GET", f"/api/v2/assets/{asset_id}/state-store/{CURSOR_KEY}")
    return response.json()["value"]["version"] if response.status_code == 200 else None


def finished_runs(airflow, at_least: int) -> list[dict] | None:
    """The successful runs of ``dim_changes`` once there are ``at_least`` of them (None before)."""
    response = airflow.api("GET", "/api/v2/dags/dim_changes/dagRuns", params={"order_by": "run_after"})
    assert response.status_code == 200, response.text
    runs = response.json()["dag_runs"]
    assert all(run["state"] != "failed" for run in runs), runs
    done = [run for run in runs if run["state"] == "success"]
    return done if len(done) >= at_least else None


def run_ranges(airflow, run: dict) -> list:
    path = f"/api/v2/dags/dim_changes/dagRuns/{run['dag_run_id']}/taskInstances/ranges/xcomEntries/return_value"
    response = airflow.api("GET", path)
    assert response.status_code == 200, response.text
    return response.json()["value"]


@pytest.mark.acceptance  # 85-120 s on the shared 2-core machine: four Airflow components, three DAG runs
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_an_asset_scheduled_dag_runs_once_per_commit_batch_and_not_again_without_one(tmp_path):
    """The real scheduler, dag-processor, triggerer and API server: ``dim_changes`` (dag_files/)
    runs once for a batch of plain-SQL commits to ``dim_product``, never for its history, once for
    a commit made while the triggerer was stopped (its cursor in the asset's state store), and once
    for a commit after that: three runs, each for the versions of its batch, and nothing between."""
    url = f"sqlite:///{tmp_path / 'master.db'}"
    connection = DatabaseURL.parse(url).connect()
    write_table(connection, "dim_product", pa.table({"nk": list(range(1, 21)), "sk": list(range(101, 121))}),
                primary_key="nk")
    enable_capture(store_for(connection, "dim_product", "nk"))
    connection.close()
    commit(url, 'UPDATE "dim_product" SET sk = 0 WHERE nk = 1')  # history: version 1
    (tmp_path / "airflow").mkdir()
    logs = artifacts_dir("asset-events") / "logs"
    airflow = LocalAirflow(tmp_path / "airflow", logs, [Path(__file__).parent / "dag_files" / "semijoin_dim_changes.py"],
                           env={"AIRFLOW_CONN_DIMS": url})
    try:
        airflow.start()
        assets = lambda: airflow.api("GET", "/api/v2/assets", params={"name_pattern": "dim_product"}).json()["assets"]  # noqa: E731
        (asset,) = airflow.wait("the DAG's asset", assets, timeout=120)
        airflow.wait("the watcher's first run to record R's version", lambda: asset_state(airflow, asset["id"]) == 1,
                     timeout=120)
        commit(url, 'UPDATE "dim_product" SET sk = sk + 1000 WHERE nk IN (3, 4)')
        commit(url, 'INSERT INTO "dim_product" (nk, sk) VALUES (30, 130)')  # versions 2-4
        airflow.wait("a run for the first batch", lambda: finished_runs(airflow, 1), timeout=120)
        airflow.wait("the cursor past the first batch", lambda: asset_state(airflow, asset["id"]) == 4, timeout=60)

        airflow.stop_component("triggerer")
        commit(url, 'DELETE FROM "dim_product" WHERE nk = 5')  # version 5, while no triggerer runs
        airflow.start_component("triggerer")
        airflow.wait("a run for the commit made meanwhile", lambda: finished_runs(airflow, 2), timeout=120)
        commit(url, 'UPDATE "dim_product" SET sk = 7 WHERE nk = 7')  # version 6
        runs = airflow.wait("a run for the last commit", lambda: finished_runs(airflow, 3), timeout=120)
        ranges = [run_ranges(airflow, run) for run in runs]
        events = airflow.api("GET", "/api/v2/assets/events", params={"asset_id": asset["id"]}).json()["asset_events"]
    finally:
        airflow.stop()
    assert ranges == [[[2, 4]], [[5, 5]], [[6, 6]]]
    assert sorted((e["extra"]["payload"]["first_version"], e["extra"]["payload"]["last_version"]) for e in events) == [
        (2, 4), (5, 5), (6, 6)]
    assert all(e["extra"]["payload"]["table"] == "dim_product" and "sqlite" not in str(e["extra"]) for e in events)
