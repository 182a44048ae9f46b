"""A step's join goes on between micro-batches (issue 11): the engine no longer waits for Spark.

A Structured Streaming query runs its micro-batches one after another. Between the end of
``foreachBatch`` for batch N and its start for N+1, Spark commits N, plans N+1, runs the source
and collects it to the driver; inside ``foreachBatch``, after the join's slice, the sinks and the
state file are written. A continuous join - the papers' outer loop, HYBRIDJOIN sec. 4.1,
MESHJOIN sec. 3.1 - would go on loading pages for the tuples in H_S meanwhile. With the join
run only inside the slice, that time is lost to it: Spark's and the sinks' seconds of a large
micro-batch run in series with the engine (``docs/measurements.md``).

:class:`WorkAhead` gives that time back. Once a micro-batch's slice is over and what it
completed has been taken out of the carried rows - the cut: the state after N is then fixed,
and every tuple inside is in it - a thread steps the session over the tuples inside (no new
tuple arrives meanwhile: :meth:`..core.session.JoinSession.work_ahead`) until the next
micro-batch begins (:meth:`WorkAhead.stop`). What it completed belongs to batch N+1: it leaves the carried rows
and is written with N+1's sinks. Exactly once holds as before: a crash before N+1 commits
loses nothing, since those tuples are in the state after N and a replay joins them again; a
batch that rebuilds its session from the checkpoint (a replay, a restart) drops what was
worked ahead. Only the thread touches the session while it runs; the carried rows, the sinks
and the state files stay the micro-batch's.

It does not empty the join, though: with no tuple arriving, each page load serves fewer tuples
as H_S empties (w, the tuples matched per load, grows with the tuples in H_S: HYBRIDJOIN sec.
4.4, eq. 2), so a page served early may have been served for more tuples a batch later. The
thread stops once half of the tuples inside at the cut have left (:data:`KEEP_INSIDE`) and
leaves the rest to the next batch, whose tuples fill H_S again. On two cores shared with Spark
and the database, what the thread spends on sparse pages (IN probes of a few keys each) is
taken from Spark's path. In the bench's pipelines (``semijoin bench --spark``; half and a
quarter kept alternated in one process, three quarters in rounds of their own), half gave
CACHEJOIN-L and HYBRIDJOIN the highest rate and the least CPU a tuple (CACHEJOIN-L: less
database CPU, more tuples in H_S at the cut); three quarters left the thread idle for most of
Spark's time (the table: ``docs/measurements.md``).

What the thread completed waits in memory until the next batch takes it, as a slice's output
does until its sinks are written: at most the tuples inside at the cut, not part of the
budget M, which bounds the join's structures and the tuples they hold.
"""

from __future__ import annotations

import logging
import threading
import time

from ..core.joins.base import JoinOutput
from ..core.session import JoinSession
from .joinstate import ahead_of
from .stepstats import SliceStats

log = logging.getLogger(__name__)

KEEP_INSIDE = 0.5  # the stepping ends when fewer than this share of the tuples inside at the cut are left


class WorkAhead:
    """One step's session stepped on a thread between two micro-batches."""

    def __init__(self, clock=time.time):
        self.clock = clock
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._result: tuple[JoinOutput, SliceStats] | None = None
        self._error: BaseException | None = None

    @property
    def running(self) -> bool:
        """Started and not stopped yet (it may have found nothing more to step)."""
        return self._thread is not None

    @property
    def finished(self) -> bool:
        """Started, and done stepping on its own (half of the tuples inside left, or the
        algorithm waits for new tuples)."""
        return self._thread is not None and not self._thread.is_alive()

    def start(self, session: JoinSession, name: str) -> None:
        """Step ``session`` on a thread until :meth:`stop`, half of the tuples inside now have
        left, or a step changes nothing (the algorithm waits for new tuples)."""
        if self._thread is not None:
            raise RuntimeError("the join is already worked ahead")
        self._stop.clear()
        self._result, self._error = None, None
        self._thread = threading.Thread(target=self._run, args=(session,), name=f"semijoin-ahead-{name}", daemon=True)
        self._thread.start()

    def _run(self, session: JoinSession) -> None:
        try:
            floor = KEEP_INSIDE * session.pending
            self._result = ahead_of(session, lambda: not self._stop.is_set() and session.pending > floor, self.clock)
        except BaseException as exc:  # noqa: BLE001 - handed to the micro-batch that stops the thread
            self._error = exc

    def stop(self) -> tuple[tuple[JoinOutput, SliceStats] | None, BaseException | None]:
        """End the stepping (after the step under way) and return (what completed and its figures,
        None when it failed) and the error it failed with. After a failure the session is in an
        unknown state: the caller rebuilds it from the carried rows (the state after the cut)."""
        if self._thread is None:
            return None, None
        self._stop.set()
        self._thread.join()
        self._thread = None
        result, error = self._result, self._error
        self._result, self._error = None, None
        if error is not None:
            log.info("working ahead stopped on %s: %s; the join is rebuilt from its carried tuples",
                     type(error).__name__, str(error).splitlines()[0] if str(error) else "")
        return result, error
