"""Wait for changes to a master table (deferrable, or poke / reschedule mode).

``watch="versions"``: R's real changes. When every writer's changes to R are captured
(:mod:`..core.stores.capture`: ``semijoin changes enable``), each commit - a plain ``UPDATE``
from any application included - is a new version of R; the sensor succeeds once R is at a
version newer than the one it saw at its first poke (or ``after_version``), and its XCom is that
version. Running joins see it by themselves; the sensor is for what else should follow a change.

``watch="pending"`` (the default): staged changes.

Upstream systems stage changes to R in ``<R>__sj_pending`` (:func:`..core.stores.changes.stage_changes`);
this sensor succeeds when a batch is ready - ``min_pending`` changes wait, or some have waited
``max_delay_s`` seconds - and a downstream :class:`~..operators.updates.InstallMasterChangesOperator`
installs them in one transaction with the SSIJ semantics (sec. IV-E) while joins run against R.
It never looks at ``information_schema.UPDATE_TIME`` (MySQL caches it for a day).

Deferrable (``deferrable=True``): the waiting happens in the triggerer
(:class:`~..triggers.updates.MasterDataChangesTrigger`). In ``reschedule`` mode the time the
pending changes were first seen is kept in ``context["task_state_store"]`` across pokes.
"""

from __future__ import annotations

import time
from datetime import timedelta

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException

from ..core.checks import check_positive
from ..core.errors import ConfigError
from ..core.stores.sql import check_identifier
from ..triggers.updates import MasterDataChangesTrigger, changes_ready, count_pending, master_version

PENDING_SINCE = "semijoin_pending_since"
AFTER_VERSION = "semijoin_after_version"
WATCHES = ("pending", "versions")


class MasterDataChangesSensor(BaseSensorOperator):
    """Succeed when changes to ``table`` are ready to install; its XCom is the pending count.

    :param master_conn_id: the master database (see :class:`~..hooks.master.MasterDataHook`).
    :param table: R; :param key: R's join key (the change tables are keyed by it).
    :param min_pending: changes that make a batch.
    :param max_delay_s: or install fewer once the first of them has waited this long.
    :param deferrable: wait in the triggerer instead of a worker slot.
    :param watch: ``pending`` (staged changes, the XCom their count) or ``versions`` (R's real
        changes, the XCom R's new version).
    :param after_version: with ``versions``: the version to wait past (default: R's version at
        the first poke).
    """

    template_fields = ("master_conn_id", "table", "key")
    ui_color = "#d7ecf5"

    def __init__(
        self,
        *,
        table: str,
        key: str,
        master_conn_id: str | None = None,
        min_pending: int = 1,
        max_delay_s: float | None = None,
        deferrable: bool = False,
        watch: str = "pending",
        after_version: int | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if watch not in WATCHES:
            raise ConfigError(f"watch: {watch!r} is not one of {list(WATCHES)}")
        if after_version is not None and (watch != "versions" or not isinstance(after_version, int)
                                          or isinstance(after_version, bool) or after_version < 0):
            raise ConfigError(f"after_version: {after_version!r} is not a version >= 0 to wait past with watch='versions'")
        self.watch = watch
        self.after_version = after_version
        if "{{" not in str(table):
            check_identifier(table, "table")
        if "{{" not in str(key):
            check_identifier(key, "key")
        check_positive("min_pending", min_pending, integer=True)
        check_positive("max_delay_s", max_delay_s, "a positive number of seconds", optional=True)
        self.master_conn_id = master_conn_id
        self.table = table
        self.key = key
        self.min_pending = min_pending
        self.max_delay_s = max_delay_s
        self.deferrable = deferrable
        self._pending_since: float | None = None

    def _after_version(self, context) -> int:
        """The version to wait past: given, or R's at the first poke (kept across reschedules)."""
        if self.after_version is None:
            store = context["task_state_store"] if self.reschedule else None
            seen = store.get(AFTER_VERSION) if store is not None else None
            self.after_version = seen if seen is not None else master_version(self.master_conn_id, self.table, self.key)
            if store is not None:
                store.set(AFTER_VERSION, self.after_version)
        return self.after_version

    def poke(self, context) -> PokeReturnValue:
        if self.watch == "versions":
            after = self._after_version(context)
            version = master_version(self.master_conn_id, self.table, self.key)
            self.log.info("%s is at version %d (waiting past %d)", self.table, version, after)
            return PokeReturnValue(is_done=version > after, xcom_value=version if version > after else None)
        pending = count_pending(self.master_conn_id, self.table, self.key)
        now = time.time()
        # a rescheduled sensor is a new process at every poke: keep the sighting in the task's state store
        store = context["task_state_store"] if self.reschedule else None
        since = store.get(PENDING_SINCE) if self.reschedule else self._pending_since
        since = (since or now) if pending else None
        if self.reschedule:
            store.set(PENDING_SINCE, since)
        else:
            self._pending_since = since
        self.log.info("%d pending changes to %s", pending, self.table)
        ready = changes_ready(pending, since, now, self.min_pending, self.max_delay_s)
        return PokeReturnValue(is_done=ready, xcom_value=pending if ready else None)

    def execute(self, context):
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)  # ready already: no deferral
        if first.is_done:
            return first.xcom_value
        self.defer(
            trigger=MasterDataChangesTrigger(
                self.master_conn_id, self.table, self.key, self.min_pending, self.max_delay_s,
                float(self.poke_interval), self._pending_since,
                self.after_version if self.watch == "versions" else None,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) if self.timeout else None,
        )

    def execute_complete(self, context, event: dict):
        if event.get("status") != "ready":
            raise AirflowException(f"waiting for changes to {self.table} failed: {event.get('message')}")
        if self.watch == "versions":
            self.log.info("%s is at version %d", self.table, event["version"])
            return event["version"]
        self.log.info("%d pending changes to %s are ready (the first waited %.1f s)", event["pending"], self.table, event["waited_s"])
        return event["pending"]
