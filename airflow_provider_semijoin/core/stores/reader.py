"""Reads of R on other database sessions, each on a thread of its own.

A page load spends most of its time waiting for the database (the server runs the query on the
other core while the client sleeps in the driver, which releases the GIL). HYBRIDJOIN's
read-ahead (:mod:`..joins.hybridjoin`) hands a load to a :class:`Reader` and joins the page
before it meanwhile, so the join's own work and the database's overlap; with more than one load
under way, the database serves them on as many sessions at once. Each session of the reader is
a *sibling* of the store (built as the store was, the same table, key, selected
columns and key range over a new connection, sharing no state with it), never the store's own:
one DB-API session must not serve two threads. A sibling's thread touches that sibling only;
what the siblings counted and a reconnect of their sessions reach the store on the store's thread
(:meth:`.base.MasterStore.read_result`).

A sibling reads R as the store does outside a snapshot: the newest committed version. So a
read-ahead is only for R read that way: :meth:`.base.MasterStore.reader` gives none inside a
snapshot (a change log, SSIJ sec. IV-E), where R is read on the store's own session.
"""

from __future__ import annotations

import copy
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable


class Reader:
    """Sibling stores (a session each) and, per sibling, the one thread that reads through it,
    in order. Reads are handed to the siblings in turn, so up to :attr:`sessions` run at once
    (HYBRIDJOIN's ``read_ahead`` loads under way)."""

    def __init__(self, make_sibling: Callable, first):
        self._make_sibling = make_sibling  # () -> another sibling store over a new session
        self.siblings, self._pools, self._handed = [], [], []
        self._turn = 0
        self._add(first)

    @property
    def sibling(self):
        """The first sibling."""
        return self.siblings[0]

    @property
    def sessions(self) -> int:
        return len(self.siblings)

    def widen(self, sessions: int) -> None:
        """Read on at least ``sessions`` sessions from now on."""
        while len(self.siblings) < sessions:
            self._add(self._make_sibling())

    def _add(self, sibling) -> None:
        self.siblings.append(sibling)
        self._pools.append(ThreadPoolExecutor(1, thread_name_prefix=f"semijoin-reader{len(self._pools)}"))
        self._handed.append(type(sibling.counters)())  # of its counters, what was added to the store's

    def submit(self, read: Callable) -> Future:
        """Start ``read(sibling)`` (it returns a :class:`.base.MasterPage`) on the next sibling in
        turn, after the reads handed to that sibling before; its future."""
        at = self._turn % len(self.siblings)
        self._turn += 1
        return self._pools[at].submit(read, self.siblings[at])

    def wait(self) -> None:
        """Return once every read submitted so far has finished."""
        for done in [pool.submit(lambda: None) for pool in self._pools]:
            done.result()

    def hand_over(self, counters) -> int:
        """Add what the siblings read since the last call to ``counters`` (the store's, which the
        join's statistics report), on the caller's thread; the siblings' reconnects among it."""
        reconnects = 0
        for at, sibling in enumerate(self.siblings):
            now, handed = copy.copy(sibling.counters), self._handed[at]
            for name, value in vars(now).items():
                setattr(counters, name, getattr(counters, name) + value - getattr(handed, name))
            reconnects += now.reconnects - handed.reconnects
            self._handed[at] = now
        return reconnects

    def close(self) -> None:
        """Wait for the reads running (cancel those queued), then close the siblings' sessions."""
        for pool in self._pools:
            pool.shutdown(wait=True, cancel_futures=True)
        for sibling in self.siblings:
            sibling.close()
