"""Change capture by triggers: every write to R, by any writer, becomes a version of R.

SSIJ sec. IV-E asks that "each stream tuple sees a consistent view of the database: either the
relation instance before or the relation instance after an update". The joins keep that promise
for the versions in R's change log (:mod:`.changes`, :mod:`.versioned`): inside a snapshot they
drop what they cached of the keys changed since the version they last saw, and the parts of a
micro-batch read one version through the before-images (:mod:`.versions`). Installs through the
provider write that log themselves; a plain ``UPDATE`` from another application would not.

:func:`enable_capture` makes the database write it for every writer, with no change to how
anyone writes R: three ``BEFORE`` triggers on R (insert, update, delete; ``FOR EACH ROW``) write,
inside the writer's own transaction and under a new version,

* the rows the changed key had just before the change into ``<R>__sj_before`` (none for a key
  the row inserts), so a read at an older version finds them (:class:`.versions.Overlay`); for
  an update that changes the key, the rows of both keys;
* the key into ``<R>__sj_changes`` (``op`` ``D`` when its last row goes, ``U`` otherwise).

Versions follow commit order, so a reader's snapshot sees a prefix of them and each transaction
whole or not at all: SQLite's writers take turns (one write transaction at a time); on
MySQL/MariaDB each trigger first moves the one row of ``<R>__sj_clock`` on, a row lock its
transaction then holds until it commits, so the writers of R take turns there too (two
transactions writing R wait for each other; ones that also wait for each other's rows of R
deadlock, and InnoDB rolls one back - the binary log has no such cost). ``REPLACE`` and
``INSERT ... ON DUPLICATE KEY UPDATE`` fire an insert and a delete or update trigger: two
versions, the first with the key's rows before either.

Rows that the triggers write are never pruned by them (a running job prunes them below its readers' horizon:
:mod:`.horizon`); installs through the provider cooperate
(:func:`.changes.install_changes` leaves the log to the triggers when they are there).
"""

from __future__ import annotations

from ..errors import ConfigError
from .binlog import BinlogCapture, BinlogFollower, binlog_table
from .changes import create_change_tables
from .sql import MYSQL, side_tables, table_exists
from .triggers import CLOCK_SUFFIX, TRIGGERS, capture_enabled, existing_triggers, trigger_names  # noqa: F401 (this API too)
from .system_time import history_columns
from .versions import before_table

class _Bodies:
    """The statements of the triggers, in ``store``'s dialect: the version a trigger writes under,
    and what it writes for a key."""

    def __init__(self, store):
        d = self.d = store.dialect
        self.qt, self.qk = d.quote(store.table), d.quote(store.key)
        self.qlog = d.quote(side_tables(store.table)[0])
        self.qbefore = d.quote(before_table(store.table))
        self.qclock = d.quote(store.table + CLOCK_SUFFIX)
        names = [c.name for c in store.columns] + history_columns(store)  # a system-versioned R: its periods too
        self.columns = ", ".join(d.quote(n) for n in names)
        self.r_columns = ", ".join(f"r.{d.quote(n)}" for n in names)
        self.history = " FOR SYSTEM_TIME ALL" if store.system_period else ""  # and every version

    @property
    def version(self) -> str:
        """The version this row's change is written under."""
        return "v" if self.d is MYSQL else f"(SELECT COALESCE(MAX(version), 0) + 1 FROM {self.qlog})"

    def before_images(self, *keys: str) -> str:
        """The rows of ``keys`` (``OLD.k``, ``NEW.k``) before the change, under this version."""
        where = " OR ".join(f"r.{self.qk} = {k}" for k in keys)
        return (f"INSERT INTO {self.qbefore} (version, {self.columns}) "
                f"SELECT {self.version}, {self.r_columns} FROM {self.qt}{self.history} r WHERE {where};")

    def logged(self, key: str, op: str) -> str:
        """``key`` into the change log under this version (after :meth:`before_images`: on
        SQLite the version is the log's next one until this row is in it)."""
        ignore = "IGNORE" if self.d is MYSQL else "OR IGNORE"
        return f"INSERT {ignore} INTO {self.qlog} (version, {self.qk}, op) VALUES ({self.version}, {key}, {op});"

    def logged_again(self, key: str, unless_equal_to: str) -> str:
        """A second key into this version's log (an update that changed the key)."""
        if self.d is MYSQL:
            return (f"INSERT IGNORE INTO {self.qlog} (version, {self.qk}, op) SELECT v, {key}, 'U' FROM DUAL "
                    f"WHERE NOT ({key} <=> {unless_equal_to});")
        return (f"INSERT OR IGNORE INTO {self.qlog} (version, {self.qk}, op) SELECT (SELECT MAX(version) FROM "
                f"{self.qlog}), {key}, 'U' WHERE {key} IS NOT {unless_equal_to};")

    def op_of_old(self) -> str:
        """``D`` when ``OLD``'s row is the last its key has, ``U`` otherwise."""
        return f"CASE WHEN (SELECT COUNT(*) FROM {self.qt} r WHERE r.{self.qk} = OLD.{self.qk}) > 1 THEN 'U' ELSE 'D' END"

    def statements(self, event: str) -> list[str]:
        old, new = f"OLD.{self.qk}", f"NEW.{self.qk}"
        if event == "INSERT":
            return [self.before_images(new), self.logged(new, "'U'")]
        if event == "DELETE":
            return [self.before_images(old), self.logged(old, self.op_of_old())]
        return [self.before_images(old, new), self.logged(old, self.op_of_old()), self.logged_again(new, old)]

    def create_trigger(self, name: str, event: str) -> str:
        body = self.statements(event)
        if self.d is MYSQL:
            body = ["DECLARE v BIGINT;", f"UPDATE {self.qclock} SET version = version + 1 WHERE id = 1;",
                    f"SELECT version INTO v FROM {self.qclock} WHERE id = 1;", *body]
        return (f"CREATE TRIGGER {self.d.quote(name)} BEFORE {event} ON {self.qt} FOR EACH ROW BEGIN "
                + " ".join(body) + " END")


def enable_capture(store) -> bool:
    """Create R's change tables and capture triggers (and on MySQL its clock, at the log's last
    version) if missing, in one go; True when they were created now, False when they were there.
    A MySQL user without the TRIGGER privilege gets one sentence naming it."""
    names = trigger_names(store.table)
    existing = existing_triggers(store)
    if len(existing) == len(names):
        return False
    create_change_tables(store.connection, store.table, store.key)
    bodies = _Bodies(store)
    cursor = store.connection.cursor()
    try:
        if store.dialect is MYSQL:
            cursor.execute(f"CREATE TABLE IF NOT EXISTS {bodies.qclock} (id TINYINT NOT NULL PRIMARY KEY, "
                           "version BIGINT NOT NULL) ENGINE=InnoDB")
            cursor.execute(f"INSERT IGNORE INTO {bodies.qclock} (id, version) "
                           f"SELECT 1, COALESCE(MAX(version), 0) FROM {bodies.qlog}")
        for event, name in names.items():
            if name not in existing:
                cursor.execute(bodies.create_trigger(name, event))
        store.connection.commit()
    except Exception as exc:
        store.connection.rollback()
        if store.dialect is MYSQL and getattr(exc, "args", (None,))[0] in (1142, 1227, 1419):
            raise ConfigError(
                f"changes: the database refused to create triggers on {store.table!r} ({exc.args[-1]}); "
                "capturing its changes needs the TRIGGER privilege on it (GRANT TRIGGER ON db.* TO the user), "
                "and with the binary log on, SUPER or log_bin_trust_function_creators=1"
            ) from None
        raise
    finally:
        cursor.close()
    return True


def disable_capture(store) -> bool:
    """Stop capturing R's changes: drop its triggers (and clock), or its binary log capture's
    position table; the change log and before-images stay. True when there was something to stop."""
    existing = existing_triggers(store)
    binlog = store.dialect is MYSQL and table_exists(store.connection, binlog_table(store.table))
    cursor = store.connection.cursor()
    try:
        for name in sorted(existing):
            cursor.execute(f"DROP TRIGGER IF EXISTS {store.dialect.quote(name)}")
        if store.dialect is MYSQL:
            cursor.execute(f"DROP TABLE IF EXISTS {store.dialect.quote(store.table + CLOCK_SUFFIX)}")
            cursor.execute(f"DROP TABLE IF EXISTS {store.dialect.quote(binlog_table(store.table))}")
        store.connection.commit()
    finally:
        cursor.close()
    return bool(existing) or binlog


def enable_command(store) -> str:
    """The command that captures R's changes, for the sentences that ask for it."""
    return f"`semijoin changes enable --master URL --table {store.table} --key {store.key}`"


def changes_seen(store, change_capture: str | None, master_static: bool, url: str,
                 field: str = "master", refresh: bool = False):
    """Before a long-running join starts on ``store`` (opened from ``url``): every writer's
    changes to R will be seen - captured already, or ``change_capture`` (``triggers``,
    ``binlog``) captures them from now - or the user said ``master_static`` (only the
    provider's installs change R) or asked for a ``refresh`` of what it caches; else one
    sentence saying what to enable: a join that
    outlives a plain UPDATE of R would answer with old rows unwarned. Returns the
    :class:`.binlog_reads.BinlogFollower` this job runs for an R captured from the binary log
    (someone must read it while joins wait for its versions), else None; stop it at the end."""
    if change_capture == "triggers":
        enable_capture(store)
    elif change_capture == "binlog":
        with BinlogCapture(url, store.table, store.key) as capture:
            capture.enable()
        store.look_for_change_tables()
    if store.captures_writes():
        return BinlogFollower(url, store.table, store.key).start() if store.captured_from_binlog() else None
    if master_static or refresh:
        return None
    raise ConfigError(
        f"{field}: changes other writers make to {store.table!r} would not be seen by this running join; "
        f"capture them ({enable_command(store)}, or "
        "change_capture: triggers or binlog on the step), set refresh: {every_s: N} to read it anew every N s, "
        "or set master_static: true if nothing but this provider's installs changes it"
    )
