"""Reads of R on a second database session, on a thread of their own.

A page load spends most of its time waiting for the database (the server runs the query on the
other core while the client sleeps in the driver, which releases the GIL). HYBRIDJOIN's
read-ahead (:mod:`..joins.hybridjoin`) hands a load to a :class:`Reader` and joins the page
before it meanwhile, so the join's own work and the database's overlap. The reader owns a
second session (a *sibling* of the store: built as the store was, the same table, key, selected
columns and key range over a new connection, sharing no state with it), never the store's own:
one DB-API session must not serve two threads. The reader's thread touches the sibling only;
what it counted and a reconnect of its session reach the store on the store's thread
(:meth:`.base.MasterStore.read_result`).

The sibling reads R as the store does outside a snapshot: the newest committed version. So a
read-ahead is only for R read that way: :meth:`.base.MasterStore.reader` gives none inside a
snapshot (a change log, SSIJ sec. IV-E), where R is read on the store's own session.
"""

from __future__ import annotations

import copy
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable


class Reader:
    """A sibling store (its own session) and the one thread that reads through it, in order."""

    def __init__(self, sibling):
        self.sibling = sibling
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="semijoin-reader")
        self._handed = type(sibling.counters)()  # of the sibling's counters, what was added to the store's

    def submit(self, read: Callable) -> Future:
        """Start ``read(sibling)`` (it returns a :class:`.base.MasterPage`) after the reads submitted
        before it; its future."""
        return self._pool.submit(read, self.sibling)

    def wait(self) -> None:
        """Return once every read submitted so far has finished."""
        self._pool.submit(lambda: None).result()

    def hand_over(self, counters) -> int:
        """Add what the sibling read since the last call to ``counters`` (the store's, which the
        join's statistics report), on the caller's thread; the sibling's reconnects among it."""
        now = copy.copy(self.sibling.counters)
        for name, value in vars(now).items():
            setattr(counters, name, getattr(counters, name) + value - getattr(self._handed, name))
        reconnects = now.reconnects - self._handed.reconnects
        self._handed = now
        return reconnects

    def close(self) -> None:
        """Wait for the read running (cancel those queued), then close the sibling's session."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.sibling.close()
