"""A running job's pruner of R's history (issue 68): :func:`.horizon.prune_history` every
``every_s`` seconds on a thread and a connection of its own, so the pruning is never on a
micro-batch's critical path; each round is bounded (:data:`MAX_TRANSACTIONS`), a failed round
is said in one log line and tried again at the next."""

from __future__ import annotations

import logging
import threading
import time

from .horizon import BATCH_ROWS, prune_history
from .sql import DatabaseURL

log = logging.getLogger(__name__)

MAX_TRANSACTIONS = 200  # write transactions a round (of BATCH_ROWS rows each): the rest waits for the next round


class HistoryPruner:
    """Prunes R ``table``'s history below its horizon every ``every_s`` seconds, the first round
    at once (a job restarted daily prunes daily); ``rows`` counts what it deleted."""

    def __init__(self, url: str, table: str, *, every_s: float, reader_ttl_s: float, keep_versions: int,
                 batch_rows: int = BATCH_ROWS, clock=time.time):
        self.url, self.table, self.every_s = url, table, every_s
        self.reader_ttl_s, self.keep_versions, self.batch_rows, self.clock = reader_ttl_s, keep_versions, batch_rows, clock
        self.rounds = self.rows = 0
        self.horizon: int | None = None  # the horizon of the last round
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"prune-{table}", daemon=True)

    def start(self) -> "HistoryPruner":
        self._thread.start()
        return self

    def _run(self) -> None:
        connection = None
        while True:
            try:
                connection = connection or DatabaseURL.parse(self.url).connect()
                self._round(connection)
            except Exception as exc:  # noqa: BLE001 - a lost server, a lock wait: the next round tries again
                log.warning("%s: pruning its history failed (%s); trying again in %g s", self.table,
                            str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__, self.every_s)
                connection = _closed(connection)
            if self._stop.wait(self.every_s):
                break
        _closed(connection)

    def _round(self, connection) -> None:
        pruned = prune_history(connection, self.table, self.clock(), reader_ttl_s=self.reader_ttl_s,
                               keep_versions=self.keep_versions, batch_rows=self.batch_rows,
                               max_transactions=MAX_TRANSACTIONS)
        deleted = sum(pruned.rows.values())
        self.rounds, self.rows, self.horizon = self.rounds + 1, self.rows + deleted, pruned.horizon.version
        if deleted:
            log.info("%s: pruned %d rows of history below version %d", self.table, deleted, pruned.horizon.version)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def start_pruner(store, url: str, options: dict | None) -> HistoryPruner | None:
    """A started pruner of ``store``'s R (opened from ``url``) with ``options`` (a step's
    ``prune_history``: every_s, reader_ttl_s, keep_versions); None when ``options`` is None or R
    has no change log."""
    if options is None or not store.has_change_log():
        return None
    return HistoryPruner(url, store.table, **options).start()


def _closed(connection) -> None:
    if connection is not None:
        try:
            connection.close()
        except Exception:  # noqa: BLE001 - a connection the server already dropped
            pass
    return None
