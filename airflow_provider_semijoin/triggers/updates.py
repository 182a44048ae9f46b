"""The trigger of the master-data update sensor: it waits in the triggerer for pending changes,
or for a new version of R (``after_version``: every writer's commit, when R's writes are captured).

Pending changes are rows in R's ``<R>__sj_pending`` table (:mod:`..core.stores.changes`), which
upstream systems fill and :class:`~..operators.updates.InstallMasterChangesOperator` installs.
The trigger only reads (it is idempotent: several copies of it may run after a triggerer
restart and they all report the same thing); its blocking database calls run in a thread
through ``sync_to_async``, never in the triggerer's event loop.
"""

from __future__ import annotations

import asyncio
import time

from asgiref.sync import sync_to_async
from airflow.triggers.base import BaseTrigger, TriggerEvent

from . import serialized


def changes_ready(pending: int, pending_since: float | None, now: float, min_pending: int, max_delay_s: float | None) -> bool:
    """True when a batch should be installed: ``min_pending`` changes wait, or some changes have
    waited ``max_delay_s`` seconds (so a trickle of updates is not held back forever)."""
    if pending >= min_pending:
        return True
    return pending > 0 and max_delay_s is not None and pending_since is not None and now - pending_since >= max_delay_s


def count_pending(master_conn_id: str | None, table: str, key: str) -> int:
    """Pending changes of R (its change tables are created when missing, so upstream can stage)."""
    from ..core.stores.changes import create_change_tables, pending_changes
    from ..hooks.master import MasterDataHook

    connection = MasterDataHook(master_conn_id).get_conn()
    try:
        create_change_tables(connection, table, key)
        return pending_changes(connection, table)
    finally:
        connection.close()


def master_version(master_conn_id: str | None, table: str, key: str) -> int:
    """R's version: its change log's last one (0 without a log), moved on by installs and, when
    R's writes are captured (:mod:`..core.stores.capture`), by every writer's commit."""
    from ..hooks.master import MasterDataHook

    with MasterDataHook(master_conn_id).open_store(table, key) as store:  # closes its binlog side session too
        return store.version()


class MasterDataChangesTrigger(BaseTrigger):
    """Fires once changes to ``table`` are ready to install (see :func:`changes_ready`).

    ``pending_since`` carries, across a deferral, the time pending changes were first seen.
    """

    def __init__(
        self,
        master_conn_id: str | None,
        table: str,
        key: str,
        min_pending: int = 1,
        max_delay_s: float | None = None,
        poll_interval: float = 5.0,
        pending_since: float | None = None,
        after_version: int | None = None,
    ) -> None:
        super().__init__()
        self.after_version = after_version  # watching R's versions: fire once one is newer than this
        self.master_conn_id = master_conn_id
        self.table = table
        self.key = key
        self.min_pending = min_pending
        self.max_delay_s = max_delay_s
        self.poll_interval = poll_interval
        self.pending_since = pending_since

    def serialize(self) -> tuple[str, dict]:
        return serialized(self, ("master_conn_id", "table", "key", "min_pending", "max_delay_s", "poll_interval",
                                 "pending_since", "after_version"))

    async def run(self):
        if self.after_version is not None:
            read, ready = master_version, self._version_ready
        else:
            read, ready = count_pending, self._pending_ready()
        read = sync_to_async(read)
        while True:
            try:
                value = await read(self.master_conn_id, self.table, self.key)
            except Exception as exc:  # reported to the sensor, which fails with it
                yield TriggerEvent({"status": "error", "message": f"{type(exc).__name__}: {exc}"})
                return
            event = ready(value)
            if event is not None:
                yield TriggerEvent(event)
                return
            await asyncio.sleep(self.poll_interval)

    def _version_ready(self, version: int) -> dict | None:
        return {"status": "ready", "version": version} if version > self.after_version else None

    def _pending_ready(self):
        """A check of the pending count that keeps when pending changes were first seen."""
        since = self.pending_since

        def ready(pending: int) -> dict | None:
            nonlocal since
            now = time.time()
            since = (since or now) if pending else None
            if changes_ready(pending, since, now, self.min_pending, self.max_delay_s):
                return {"status": "ready", "pending": pending, "waited_s": round(now - since, 3)}
            return None

        return ready
