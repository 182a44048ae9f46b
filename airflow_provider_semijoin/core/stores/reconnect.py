"""A MySQL connection that survives a lost session: every store query goes through it.

A join runs for months; its database session does not. A ``KILL CONNECTION`` from another
client, ``wait_timeout``, a server restart, a failover or a network blip end it, and the next
query fails with a lost-connection error (:data:`LOST_CONNECTION`). :class:`ReconnectingConnection`
wraps the DB-API connection the stores and table sinks use (``cursor()``, ``execute``,
``fetchall``): a statement that fails that way is retried on a new session, reconnecting with
bounded exponential backoff (:class:`RetryPolicy`; ``[semijoin] db_retry_max_s``, default
120 s). What a session held is restored before the retry:

* the driver's value converters (the stores switch them off for raw page loads);
* a read-only REPEATABLE READ snapshot that was open (the stores' one version of R, SSIJ sec.
  IV-E) is entered again, and the owner's ``on_reconnect(waited_s, in_snapshot)`` is told, so
  it can check that the new snapshot sees the same version of R (see
  :meth:`.base.MasterStore.reconnected`) and re-read what the restart may have changed;
* a write transaction cannot be restored (its statements were rolled back with the session):
  the failing statement raises :class:`TransactionLost` on the new session, and the writer
  redoes its whole transaction (the table sinks' writes are idempotent per micro-batch).

Past the bound the statement fails with :class:`StoreUnavailable`: one sentence naming the
server (host:port/db, never the password) and how long it tried. SQLite needs none of this
(a file has no session to lose; ``database is locked`` is its busy timeout's business).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from ..errors import ConfigError, SemiJoinError

# MySQL / MariaDB client and server error codes that mean "this session is gone": the server
# went away (2006), the connection was lost during a query (2013, 2055), the session was killed
# (1927 ER_CONNECTION_KILLED on MariaDB) or the server is shutting down (1053); while
# reconnecting also: cannot connect (2002 socket, 2003 TCP).
LOST_CONNECTION = frozenset({1053, 1927, 2002, 2003, 2006, 2013, 2055})

DEFAULT_RETRY_MAX_S = 120.0


class StoreUnavailable(SemiJoinError):
    """The database stayed unreachable longer than the retry bound."""


class TransactionLost(SemiJoinError):
    """A write transaction's session was lost: the caller redoes the whole transaction."""


def is_lost_connection(exc: BaseException) -> bool:
    """Whether ``exc`` (a driver error) means the session is gone rather than a bad query."""
    try:
        import MySQLdb
    except ImportError:  # pragma: no cover - SQLite-only installs
        return False
    if isinstance(exc, MySQLdb.InterfaceError):  # the connection object was closed under us
        return True
    return isinstance(exc, MySQLdb.OperationalError) and bool(exc.args) and exc.args[0] in LOST_CONNECTION


def check_retry_max_s(value, what: str = "db_retry_max_s") -> float:
    """``value`` as a number of seconds > 0, or a ConfigError naming ``what``."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if isinstance(value, bool) or not 0 < seconds < float("inf"):
        raise ConfigError(f"{what}: {value!r} is not a positive number of seconds (how long to retry a lost database)")
    return seconds


@dataclass
class RetryPolicy:
    """Reconnect with exponential backoff: ``first_s``, x``factor`` up to ``cap_s`` between
    attempts, until ``max_s`` seconds have passed since the session was lost. ``clock`` and
    ``sleep`` are passed in (tests, and the job's own clock)."""

    max_s: float = DEFAULT_RETRY_MAX_S
    first_s: float = 0.05
    factor: float = 2.0
    cap_s: float = 2.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
        self.max_s = check_retry_max_s(self.max_s)


_SNAPSHOT_START = "START TRANSACTION WITH CONSISTENT SNAPSHOT"


def _statement(sql: str) -> str:
    return " ".join(sql.split()[:6]).upper()


class ReconnectingConnection:
    """A DB-API connection that reconnects (see the module docstring).

    ``connect`` opens a new raw session; ``server`` names it in messages (``host:port/db``).
    Everything not listed here is the current raw connection's (attribute reads and writes).
    """

    def __init__(self, connect: Callable[[], object], server: str, policy: RetryPolicy | None = None):
        object.__setattr__(self, "_connect", connect)
        object.__setattr__(self, "_state", {
            "raw": connect(), "server": server, "policy": policy or RetryPolicy(),
            "tx": None,  # None, "write", or the statements that opened a read-only snapshot (to replay)
            "prelude": [],  # SET TRANSACTION ... statements waiting for the next transaction
            "on_reconnect": None,
        })

    def sibling(self) -> "ReconnectingConnection":
        """A new session to the same server, reconnecting by the same policy (a store's second
        session, :meth:`.base.MasterStore.reader`)."""
        return ReconnectingConnection(self._connect, self.server, self.policy)

    # -- the wrapped connection ---------------------------------------------------------------
    @property
    def wrapped_connection(self):
        return self._state["raw"]

    @property
    def server(self) -> str:
        return self._state["server"]

    @property
    def policy(self) -> RetryPolicy:
        return self._state["policy"]

    @property
    def on_reconnect(self):
        return self._state["on_reconnect"]

    @on_reconnect.setter
    def on_reconnect(self, callback: Callable[[float, bool], None] | None) -> None:
        self._state["on_reconnect"] = callback

    def __getattr__(self, name):
        return getattr(self._state["raw"], name)

    def __setattr__(self, name, value):
        if name == "on_reconnect":
            object.__setattr__(self, name, value)
        else:
            setattr(self._state["raw"], name, value)

    def cursor(self) -> "_Cursor":
        return _Cursor(self)

    def commit(self) -> None:
        self.execute("COMMIT")

    def rollback(self) -> None:
        self.execute("ROLLBACK")

    def close(self) -> None:
        try:
            self._state["raw"].close()
        except Exception:  # an already lost session: nothing left to close
            pass

    # -- statements ----------------------------------------------------------------------------
    def execute(self, sql: str, params=None, many: bool = False):
        """Run one statement (``executemany`` when ``many``), reconnecting on a lost session;
        returns the raw cursor holding its result."""
        state = self._state
        while True:
            cursor = None
            try:  # a session closed after an earlier give-up fails already here
                cursor = state["raw"].cursor()
                (cursor.executemany if many else cursor.execute)(sql, params)
            except Exception as exc:
                _close_quietly(cursor)
                if not is_lost_connection(exc):
                    raise
                if self._recover(sql, exc):
                    continue
                return _Empty()
            self._track(sql)
            return cursor

    def _track(self, sql: str) -> None:
        state, head = self._state, _statement(sql)
        if head.startswith("SET TRANSACTION"):
            state["prelude"].append(sql)
        elif head.startswith(_SNAPSHOT_START) and "READ ONLY" in sql.upper():
            state["tx"], state["prelude"] = [*state["prelude"], sql], []
        elif head.startswith(("START TRANSACTION", "BEGIN")):
            state["tx"], state["prelude"] = "write", []
        elif head.startswith(("COMMIT", "ROLLBACK")):
            state["tx"] = None

    def _recover(self, sql: str, exc: BaseException) -> bool:
        """Reconnect after ``exc``; True when ``sql`` should run again on the new session."""
        state = self._state
        tx, head = state["tx"], _statement(sql)
        ending = head.startswith(("COMMIT", "ROLLBACK"))
        snapshot = isinstance(tx, list) and not ending
        # the same snapshot again (its owner then checks it sees the same R), or the
        # SET TRANSACTION statements waiting for the next transaction
        waited = self._reconnect(exc, tx if snapshot else ([] if tx else state["prelude"]))
        if tx == "write":
            state["tx"] = None
            if head.startswith("ROLLBACK"):
                return False  # rolled back with the session anyway
            outcome = "its COMMIT may or may not have landed" if ending else "its statements were rolled back"
            raise TransactionLost(
                f"the session to {self.server} was lost inside a write transaction ({_message(exc)}); {outcome}"
            )
        if ending:  # a read-only snapshot ends with its session: nothing to commit
            state["tx"] = None
        self._notify(waited, snapshot)
        return not ending

    def _notify(self, waited: float, in_snapshot: bool) -> None:
        callback = self._state["on_reconnect"]
        if callback is not None:
            callback(waited, in_snapshot)

    def _reconnect(self, first_error: BaseException, restore: list[str]) -> float:
        """Open a new session with backoff and run ``restore`` on it; returns the seconds it
        took. Past the policy's bound: :class:`StoreUnavailable`."""
        state, policy = self._state, self._state["policy"]
        _close_quietly(state["raw"])
        converter = getattr(state["raw"], "converter", None)
        started = policy.clock()
        delay, attempts, last = policy.first_s, 0, first_error
        while True:  # the first attempt at once (a killed session), then backing off
            waited = policy.clock() - started
            if waited >= policy.max_s:
                raise StoreUnavailable(
                    f"the database server {self.server} stayed unreachable for {waited:.1f} s "
                    f"({attempts} reconnect attempts, last error: {_message(last)}); "
                    "raise [semijoin] db_retry_max_s to wait longer"
                )
            if attempts:
                policy.sleep(min(delay, max(policy.max_s - waited, 0.0)))
                delay = min(delay * policy.factor, policy.cap_s)
            attempts += 1
            raw = None
            try:
                raw = self._connect()
                for statement in restore:
                    raw.cursor().execute(statement)
            except Exception as exc:
                _close_quietly(raw)
                if not is_lost_connection(exc):
                    raise
                last = exc
                continue
            if isinstance(converter, dict):
                raw.converter = converter
            state["raw"] = raw
            return policy.clock() - started


class _Cursor:
    """A cursor of :class:`ReconnectingConnection`: ``execute`` retries on a new session."""

    def __init__(self, connection: ReconnectingConnection):
        self._connection = connection
        self._result = _Empty()

    def execute(self, sql: str, params=None):
        self._result = self._connection.execute(sql, params)

    def executemany(self, sql: str, rows):
        self._result = self._connection.execute(sql, rows, many=True)

    def fetchall(self):
        return self._result.fetchall()

    def fetchone(self):
        return self._result.fetchone()

    @property
    def rowcount(self) -> int:
        return self._result.rowcount

    @property
    def description(self):
        return self._result.description

    def close(self) -> None:
        _close_quietly(self._result)


class _Empty:
    """The result of a statement that needed no retry (a read-only COMMIT on a new session)."""

    rowcount = 0
    description = None

    def fetchall(self):
        return ()

    def fetchone(self):
        return None

    def close(self) -> None:
        pass


def _close_quietly(thing) -> None:
    try:
        thing.close()
    except Exception:  # closing what a lost session left: nothing to do
        pass


def _message(exc: BaseException) -> str:
    return str(exc.args[-1]) if getattr(exc, "args", None) else type(exc).__name__
