"""Master-data changes as Airflow asset events: an event trigger over R's captured versions.

Once R's writes are captured (:mod:`..core.stores.capture`, ``semijoin changes enable``: triggers on
R, or MySQL/MariaDB's binary log), every commit by any writer - a plain ``UPDATE`` from another
application included - is a new version of R. :class:`MasterDataVersionsTrigger` watches them for an
``AssetWatcher``, so a DAG scheduled on the asset runs *because* the dimension changed (see
``example_dags/example_semijoin_asset_events.py``).

**One event per poll, not per version.** The capture triggers write a version per changed *row* (an
``UPDATE`` of 500 rows is 500 versions), the binary log's capture one per transaction: a DAG run per
row would be absurd, and a poll reads whole transactions only (a commit is in its read or not). So an
event is the commit batch that landed since the poll before: ``first_version`` to ``last_version``
(both included), ``committed_at`` (the binary log's commit time of the last one, ISO 8601; None with
triggers, which record no time), ``seen_at`` (the poll that saw them: every commit of the batch lies
between the poll before and it), ``table`` and ``master_conn_id`` - never a URL or a password. A task
reads what changed with ``store.changes_since(first_version - 1, last_version)``.

**The cursor** is R's version high-water mark, never a "has changed" state (that would fire at every
poll). Where it lives decides what a restart does: a trigger's keyword arguments are fixed when the
DAG is parsed, and a trigger re-created after a triggerer restart starts from them, so a cursor kept
there or in memory would fire for all of R's history (from version 0) or miss the commits made while
the triggerer was down (from the high-water mark at its start). Airflow 3.3 keeps an event trigger's
position in the watched asset's **state store** (``asset_state_store``, injected by the triggerer;
key :data:`CURSOR_KEY`, with the table and connection it is for): the first run records R's
high-water mark there (or ``after_version``), so history does not fire, and every later run - after
a restart, on another triggerer, with other arguments such as ``poll_interval`` - resumes from it.

**The cursor moves after Airflow stored the event.** The trigger runs in the triggerer's shared-stream
ack mode: a stream of its own (keyed by its trigger id) of one tick a poll (:class:`PollTicks`), whose
``advance`` Airflow calls only once the events fired on a tick were persisted to its metadata
database; that is where the cursor is written. A triggerer that dies before an event was stored fires
it again after its restart: a commit is never lost.

Limits: a triggerer killed between an event being stored and its cursor being written (about one of
its sync rounds, a second) fires that range again - at least once, not exactly once: a DAG run may
see a range twice, ``last_version`` tells. Several assets watching with the same arguments share one
trigger, which then has no single state store: it refuses that in one sentence. Outside a triggerer
(:meth:`MasterDataVersionsTrigger.run`, no asset) the cursor lives in the run only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from airflow.triggers.base import BaseEventTrigger, TriggerEvent
from airflow.triggers.shared_stream import AdvanceItem, AdvanceOutcome, SharedStreamProducer
from asgiref.sync import sync_to_async

from ..core.checks import check_identifier, check_number, check_positive  # light: the triggerer imports this on its loop
from ..core.errors import ConfigError
from . import serialized

CURSOR_KEY = "semijoin_version"  # the asset state store's key of the trigger's cursor
STREAM = "semijoin-master-versions"
_SEVERAL_ASSETS = "concrete inlets and outlets"  # how AssetStateStoreAccessors refuses to pick one of several assets
log = logging.getLogger(__name__)


def _iso(seconds: float | None) -> str | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, timezone.utc).isoformat()


@dataclass(frozen=True)
class HighWater:
    """R's newest version as one poll saw it."""

    version: int
    committed_at: float | None  # the binary log's commit time of ``version`` (None: triggers)
    seen_at: float


class Cursor:
    """Where the trigger's position lives: the watched asset's state store, which outlives the
    triggerer, as ``{"master_conn_id", "table", "version"}`` (a cursor kept for another table
    is not this one's); nowhere but the run without a store (a trigger run by hand)."""

    def __init__(self, state, master_conn_id: str | None, table: str):
        self.state, self.owner = state, {"master_conn_id": master_conn_id, "table": table}

    async def load(self) -> int | None:
        if self.state is None:
            return None
        try:
            value = await self.state.aget(CURSOR_KEY)
        except ValueError as exc:
            if _SEVERAL_ASSETS not in str(exc):
                raise
            raise ConfigError(
                f"table: several assets watch {self.owner['table']!r} through one MasterDataVersionsTrigger (the "
                "same arguments make one trigger), which has no single asset state store for its cursor; watch "
                "it from one asset and schedule the DAGs on that asset"
            ) from None
        if value is None:
            return None
        if not isinstance(value, dict) or {k: value.get(k) for k in self.owner} != self.owner:
            log.warning("the asset's cursor was kept for %s, not %s: starting anew", value, self.owner)
            return None
        return int(value["version"])

    async def save(self, version: int) -> None:
        if self.state is not None:
            await self.state.aset(CURSOR_KEY, {**self.owner, "version": int(version)})


@dataclass
class Tick:
    """One poll: the raw event of the trigger's stream and its broker payload at once. The trigger
    sets ``handled`` once it has read R, and ``reached`` (its cursor, the version it moves to) when
    it fired an event on it."""

    handled: asyncio.Event = field(default_factory=asyncio.Event)
    reached: tuple[Cursor, int] | None = None


class PollTicks(SharedStreamProducer):
    """The producer of a trigger's stream: a tick, then the next ``poll_interval`` seconds after
    the trigger handled it; :meth:`advance` writes the cursor of the events Airflow stored."""

    def __init__(self, poll_interval: float):
        self.poll_interval = poll_interval

    async def open_stream(self):
        while True:
            tick = Tick()
            yield tick, tick
            await tick.handled.wait()
            await asyncio.sleep(self.poll_interval)

    async def advance(self, batch) -> None:
        """The cursor moves to the last event of the batch's stored prefix: an event not stored
        (its tick not clean) keeps it before, and a restart fires it again."""
        reached = None
        for item in batch:
            if not item.outcome.is_clean:
                break
            reached = item.broker_payload.reached or reached
        if reached is not None:
            cursor, version = reached
            await cursor.save(version)

    async def taken(self):
        """The ticks without a triggerer's shared stream: a tick is advanced once its consumer
        moved past it (asked for the next one), as the triggerer does minus the storing."""
        ticks = self.open_stream()
        while True:
            tick, _ = await anext(ticks)
            yield tick
            await self.advance([AdvanceItem(tick, AdvanceOutcome(acked=1, failed=0))])


class MasterDataVersionsTrigger(BaseEventTrigger):
    """Fires an asset event for each batch of new versions of ``table`` (see the module).

    :param master_conn_id: the master database (:class:`~..hooks.master.MasterDataHook`).
    :param table: R, whose writes are captured; :param key: its join key.
    :param poll_interval: seconds between two reads of R's version.
    :param after_version: where a first run starts (default: R's version then, so history does
        not fire); a cursor in the asset's state store wins over it.
    """

    def __init__(
        self,
        master_conn_id: str | None,
        table: str,
        key: str,
        poll_interval: float = 5.0,
        after_version: int | None = None,
    ) -> None:
        super().__init__()
        self.master_conn_id = master_conn_id
        self.table = check_identifier(table, "table")
        self.key = check_identifier(key, "key")
        self.poll_interval = check_positive("poll_interval", poll_interval, "a positive number of seconds")
        self.after_version = check_number("after_version", after_version, "a version >= 0", integer=True,
                                          minimum=0, optional=True)
        self._follower = None  # the binary log's capturer this trigger keeps going (binlog capture)

    def serialize(self) -> tuple[str, dict]:
        return serialized(self, ("master_conn_id", "table", "key", "poll_interval", "after_version"))

    # -- the triggerer's shared stream, ack mode: a stream of this trigger's own -------------------
    def shared_stream_key(self):
        return None if self.trigger_id is None else (STREAM, self.trigger_id)

    @classmethod
    def create_shared_stream_producer(cls, kwargs: dict) -> PollTicks:
        return PollTicks(kwargs["poll_interval"])

    async def filter_shared_stream(self, shared_stream):
        cursor = Cursor(self.asset_state_store, self.master_conn_id, self.table)
        position = await self._start(cursor)
        read = sync_to_async(self.high_water)
        async for tick in shared_stream:
            try:
                seen = await read()
            finally:
                tick.handled.set()
            if seen.version < position:  # R's change log was made anew (capture disabled, tables dropped)
                self.log.warning("%s is at version %d, before this trigger's cursor %d: following it from there",
                                 self.table, seen.version, position)
                position = seen.version
                await cursor.save(position)
            elif seen.version > position:
                tick.reached = (cursor, seen.version)
                yield TriggerEvent(self.payload(position, seen))
                position = seen.version

    async def run(self):
        """Outside the triggerer's shared stream (a test, a call by hand): the same events; the
        cursor moves once the caller took an event (asked for the next one)."""
        async for event in self.filter_shared_stream(PollTicks(self.poll_interval).taken()):
            yield event

    async def cleanup(self) -> None:
        if self._follower is not None:
            await sync_to_async(self._follower.stop)()
            self._follower = None

    # -- reading R -----------------------------------------------------------------------------
    async def _start(self, cursor: Cursor) -> int:
        """The cursor: the asset's, else ``after_version`` or R's version now, recorded at once."""
        stored = await cursor.load()
        if stored is not None:
            return stored
        start = self.after_version
        if start is None:
            start = (await sync_to_async(self.high_water)()).version
        await cursor.save(start)
        return start

    def high_water(self) -> HighWater:
        """R's newest version (blocking: run it in a thread). R's writes must be captured; with
        the binary log, this trigger keeps its capture going (one capturer a table: when a
        running join's holds it, this one waits)."""
        from ..core.stores.binlog import BinlogFollower
        from ..core.stores.capture import enable_command
        from ..hooks.master import MasterDataHook

        hook = MasterDataHook(self.master_conn_id)
        with hook.open_store(self.table, self.key) as store:
            if not store.captures_writes():
                raise ConfigError(
                    f"table: changes to {self.table!r} are not captured, so no commit to it can become an asset "
                    f"event; capture them with {enable_command(store)} (add --via binlog to read MySQL/MariaDB's "
                    "binary log instead of putting triggers on it)"
                )
            if store.captured_from_binlog():
                if self._follower is None:
                    self._follower = BinlogFollower(hook.get_url(), self.table, self.key).start()
                if self._follower.error is not None:
                    raise self._follower.error
            version = store.version()
            return HighWater(version, store.committed_at(version), time.time())

    def payload(self, after: int, seen: HighWater) -> dict:
        """The event of the versions ``after + 1`` to ``seen.version``."""
        return {
            "table": self.table,
            "master_conn_id": self.master_conn_id,
            "first_version": after + 1,
            "last_version": seen.version,
            "committed_at": _iso(seen.committed_at),
            "seen_at": _iso(seen.seen_at),
        }
