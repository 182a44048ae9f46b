"""A join that lives across calls: its stream buffer and algorithm keep their tuples between feeds.

The papers' algorithms are continuous: a tuple waits in H_S / Q (HYBRIDJOIN sec. 4.1, MESHJOIN
sec. 3.1) or IB / SB (SSIJ sec. IV-A) until its page or partition comes round, and the cost of a
page load is amortised over every tuple waiting on that page (HYBRIDJOIN sec. 4.4, eq. 2). A
:class:`JoinSession` keeps that queue alive while its caller hands it the stream in pieces (a
Spark micro-batch, a file): :meth:`~JoinSession.feed` appends tuples,
:meth:`~JoinSession.advance` steps the algorithm for a bounded slice and returns only what
completed, :meth:`~JoinSession.drain` empties it (end of input, a stop).

A slice ends when the algorithm has taken everything the buffer held (the stream is kept up
with; what waits is the papers' queue, bounded by the memory budget) - or when a step takes
nothing (MESHJOIN waits for w tuples, sec. 3.1) - and the slice's time is up (the caller gives
the time a continuous join would have stepped meanwhile) *and* no waiting tuple is due before the
slice's horizon. A tuple's due time is the earliest of its deadline (SSIJ sec. IV-F) and its
arrival + the maximum queue time; while a tuple due before the horizon waits, the session steps
with the buffer closed (the algorithms' end-of-stream mode: MESHJOIN admits a partial chunk,
SSIJ forces a join phase, HYBRIDJOIN loads the oldest tuple's page), so a quiet stream never
strands a tuple.

Row ids are the caller's and must increase from feed to feed (arrival order); they index the
caller's copy of the tuples (:func:`materialise`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .errors import BudgetError
from .idrank import MAX_BYTES_PER_ID, RankIndex
from .joins.base import JoinAlgorithm, JoinOutput, StreamBuffer
from .joins.plan import Plan, Planner
from .keys import sorted_distinct
from .reasons import labels

STALL_STEPS = 1000  # steps in a row without progress before the join is declared stuck
HEAD_WINDOW = 4096  # log entries the completed head is advanced over at a time
# a waiting tuple's entry in a session's log between slices (compact): id, due, done, and at most
# MAX_BYTES_PER_ID of the rank index that finds it there (:mod:`.idrank`)
LOG_BYTES_PER_TUPLE = 8 + 8 + 1 + int(MAX_BYTES_PER_ID)


class JoinSession:
    """One algorithm with its stream buffer, fed and stepped piece by piece."""

    def __init__(self, algorithm: JoinAlgorithm, clock, on_taken=None, on_left=None):
        self.algorithm = algorithm
        self.clock = clock
        self.buffer = StreamBuffer(algorithm.store.key_type, clock)
        self.on_taken = on_taken  # called with (row_ids, clock time) as tuples enter the algorithm
        self.on_left = on_left  # called with (row_ids, clock time) as tuples leave it
        self._ids = np.zeros(0, np.int64)  # every tuple fed and not compacted away, in feed order
        self._due = np.zeros(0, np.float64)  # when each must have left (inf: never forced)
        self._done = np.zeros(0, bool)
        self._head = 0  # tuples before it are all done
        self._index = RankIndex()  # where an id is in _ids
        self.fed = 0
        self.completed = 0
        self.forced_steps = 0
        # tuples that left before any step (fed to a rebuilt session with a key that cannot be in
        # R: :func:`...spark.joinstate.session_from`), handed out by the next slice
        self.settled: JoinOutput | None = None

    # -- what waits --------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Tuples fed that have not left (in the buffer or in the algorithm's structures)."""
        return self.fed - self.completed

    def pending_ids(self) -> np.ndarray:
        live = ~self._done[self._head:]
        return self._ids[self._head:][live]

    @property
    def log_bytes(self) -> int:
        """Bytes of the log of tuples fed (ids, due times, done flags, the ids' index) not compacted away."""
        return self._ids.nbytes + self._due.nbytes + self._done.nbytes + self._index.nbytes

    def earliest_due(self) -> float:
        live = ~self._done[self._head:]
        return float(self._due[self._head:][live].min()) if live.any() else np.inf

    # -- feeding and stepping ------------------------------------------------------------------
    def feed(self, row_ids: np.ndarray, keys: np.ndarray, due: np.ndarray | None = None) -> None:
        """Append tuples (ids increasing past every id fed before); ``due``: when each must
        have left (clock units, NaN/inf = no bound), also handed to the algorithm as its deadline."""
        row_ids = np.asarray(row_ids, np.int64)
        if not len(row_ids):
            return
        if (len(self._ids) and row_ids[0] <= self._ids[-1]) or (np.diff(row_ids) <= 0).any():
            raise ValueError("row ids must increase from feed to feed")
        due = np.full(len(row_ids), np.inf) if due is None else np.asarray(due, np.float64)
        self.buffer.append(row_ids, keys, np.where(np.isinf(due), np.nan, due))
        self._ids = np.concatenate([self._ids, row_ids])
        self._due = np.concatenate([self._due, np.nan_to_num(due, nan=np.inf)])
        self._done = np.concatenate([self._done, np.zeros(len(row_ids), bool)])
        self._index.update(self._ids, len(row_ids))
        self.fed += len(row_ids)

    def step(self) -> JoinOutput:
        """One iteration of the algorithm's outer loop; marks what it completed."""
        out = self.algorithm.step(self.buffer)
        now = self.clock()
        if self.on_taken is not None:
            for ids, t in self.buffer.taken:
                self.on_taken(ids, t)
        self.buffer.taken.clear()
        self._mark_done(out, now)
        return out

    def advance(self, horizon: float = -np.inf, until: float = -np.inf, max_pending: int | None = None) -> JoinOutput:
        """One slice: step until the buffer is taken in (or a step takes nothing), then on while
        the clock is before ``until`` and tuples wait (the time a continuous join would have
        stepped), then until no waiting tuple is due before ``horizon`` and at most
        ``max_pending`` wait (the oldest beyond it are forced out: the caller's memory for their
        rows is spent), then until no tuple is half joined
        (:attr:`~.joins.base.JoinAlgorithm.between_joins`); returns what completed."""
        outputs = self._step_while(lambda: self.buffer.available)
        outputs += self._step_while(lambda: self.pending and self.clock() < until)
        urgent = self._urgent(horizon, max_pending)
        if len(urgent):
            outputs += self._force(lambda: not self._done[urgent].all())
        if not self.algorithm.between_joins:  # every tuple's pairs in one slice
            outputs += self._force(lambda: not self.algorithm.between_joins)
        self._compact()
        return JoinOutput.concat(outputs, self.algorithm.schema)

    def work_ahead(self, keep_going) -> JoinOutput:
        """Step over the tuples already fed, while ``keep_going()`` and a step changes something -
        the papers' outer loop while no tuple arrives: HYBRIDJOIN loads the page of its oldest
        tuple (sec. 4.1), MESHJOIN waits for w tuples (sec. 3.1) - then until no tuple is half
        joined; returns what completed. A caller steps a session ahead with it while it has
        nothing to feed (a Spark step between micro-batches)."""
        outputs = self._step_while(lambda: self.pending and keep_going())
        if not self.algorithm.between_joins:
            outputs += self._force(lambda: not self.algorithm.between_joins)
        self._compact()
        return JoinOutput.concat(outputs, self.algorithm.schema)

    def _step_while(self, condition) -> list[JoinOutput]:
        """Step while ``condition()`` holds and a step changes something (a step that takes
        nothing and completes nothing: the algorithm waits for tuples, as MESHJOIN for w)."""
        outputs = []
        while condition():
            before = self._progress()
            outputs.append(self.step())
            if before == self._progress():
                break
        return outputs

    def _progress(self) -> tuple[int, int, int, int]:
        """What a step that moves the join on changes: the tuples in the buffer, inside the
        algorithm, in flight (a load handed to a reader: HYBRIDJOIN's read-ahead) and completed."""
        return self.buffer.available, self.algorithm.pending, self.algorithm.in_flight, self.completed

    def drain(self) -> JoinOutput:
        """Step until every tuple fed has left with all its pairs (the buffer is closed meanwhile,
        then reopened unless the stream had ended: :meth:`~.joins.base.StreamBuffer.close`): a
        range join's tuple leaves with its first pair and may still wait for pages, until no
        tuple is half joined (:attr:`~.joins.base.JoinAlgorithm.between_joins`)."""
        return JoinOutput.concat(self._force(lambda: self.pending or not self.algorithm.between_joins, final=True),
                                 self.algorithm.schema)

    def _urgent(self, horizon: float, max_pending: int | None = None) -> np.ndarray:
        """Positions (in the log) of the waiting tuples due before ``horizon``, and of the oldest
        beyond the newest ``max_pending``."""
        live = np.flatnonzero(~self._done[self._head:]) + self._head
        urgent = live[self._due[live] < horizon]
        if max_pending is not None and len(live) > max_pending:
            urgent = np.union1d(urgent, live[:len(live) - max(int(max_pending), 0)])
        return urgent

    def _force(self, waiting, final: bool = False) -> list[JoinOutput]:
        """Step with the buffer closed (the algorithms' end-of-stream mode) while ``waiting()``;
        ``final``: every tuple inside leaves before another is fed (a drain)."""
        outputs, stalled = [], 0
        was = (self.buffer.closed, self.buffer.final)  # a stream closed for good (close()) stays closed
        self.buffer.closed, self.buffer.final = True, final or was[1]
        try:
            while waiting():
                before = self._progress()
                outputs.append(self.step())
                self.forced_steps += 1
                stalled = 0 if before != self._progress() else stalled + 1
                if stalled >= STALL_STEPS:
                    raise RuntimeError(f"{self.algorithm.name} made no progress in {STALL_STEPS} steps "
                                       f"with {self.pending} tuples pending")
        finally:
            self.buffer.closed, self.buffer.final = was
        self._compact()
        return outputs

    def _mark_done(self, out: JoinOutput, now: float) -> None:
        left = left_ids(out, self.algorithm.one_row_per_match)
        if not len(left):
            return
        positions = self._index.positions(self._ids, left)
        again = self._done[positions]
        if (self._ids[positions] != left).any() or (again.any() and self.algorithm.one_row_per_match):
            raise RuntimeError(f"{self.algorithm.name} completed a tuple that was not waiting (twice, or never fed)")
        if again.any():  # more pairs of a tuple whose join spans several steps (a range join)
            left, positions = left[~again], positions[~again]
        self._done[positions] = True
        self.completed += len(left)
        if self.on_left is not None:
            self.on_left(left, now)
        while self._head < len(self._done):  # past the completed head, a window at a time
            window = self._done[self._head:self._head + HEAD_WINDOW]
            if window.all():
                self._head += len(window)
            else:
                self._head += int(np.argmin(window))
                break

    def compact(self) -> None:
        """Forget every completed entry of the log now, so that it holds one entry per waiting
        tuple (:data:`LOG_BYTES_PER_TUPLE`): a caller that keeps the session between slices, a
        Spark step across micro-batches, calls it at the end of each slice. Only between
        slices, when no tuple is half joined."""
        self._compact(0.0)

    def _compact(self, share: float = 1.0) -> None:
        """Forget the completed entries of the log once they are ``share`` of the waiting ones or
        more (1: the log holds at most two entries per waiting tuple; positions shift: only
        between slices, when no tuple is half joined)."""
        completed = len(self._ids) - self.pending
        if completed and completed >= share * self.pending and self.algorithm.between_joins:
            keep = ~self._done
            self._ids, self._due, self._done = self._ids[keep], self._due[keep], self._done[keep]
            self._index.update(self._ids)
            self._head = 0


def sized_for_rows(planner: Planner, memory: int, row_bytes: float) -> tuple[JoinAlgorithm, int]:
    """The algorithm built once from :func:`planned_for_rows`' plan, and m, its structures' share."""
    plan, share = planned_for_rows(planner, memory, row_bytes)
    return planner.build(plan), share


def planned_for_rows(planner: Planner, memory: int, row_bytes: float) -> tuple[Plan, int]:
    """For a caller that keeps each waiting tuple's full row (``row_bytes``, plus its log entry)
    next to the algorithm - a Spark step's carried rows (:mod:`...spark.joinstate`) - within one
    budget of ``memory`` bytes: the plan of m, its structures' share, as large as
    m + capacity_tuples(m) * (row + log bytes) <= memory allows (capacity grows with m, so a
    smaller m than the first guess holds fewer rows). Returns the plan and m. Where even the
    smallest m the algorithm accepts (:meth:`.joins.plan.Planner.min_memory`) leaves rows for
    fewer tuples than it could hold, the session's ``max_pending`` keeps the rest out
    (:meth:`JoinSession.advance`).

    ``planner``: a :class:`.joins.plan.Planner`; the shares are compared on its plans (no I/O,
    no construction): ``auto`` predicts from the plan, a Spark step builds from it once."""
    per_tuple = float(row_bytes) + LOG_BYTES_PER_TUPLE
    whole = planner.plan(memory)  # (refuses a budget too small for the structures alone, in the algorithm's words)
    share = int(memory * memory / (memory + whole.capacity_tuples * per_tuple))  # capacity about linear in m
    try:
        plan = planner.plan(max(share, 1))
    except BudgetError:  # below the smallest budget (asked only then: where pages are sized from it, it reads their maps)
        plan = planner.plan(min(planner.min_memory(), memory))
    share = max(share, plan.memory)
    rows_room = memory - share
    if plan.capacity_tuples * per_tuple > rows_room:
        tighter = memory - int(plan.capacity_tuples * per_tuple)
        if tighter >= 1:
            try:
                plan, share = planner.plan(tighter), tighter
            except BudgetError:
                pass
    if memory - share < per_tuple:
        raise BudgetError(
            f"memory: {memory} bytes leaves no room for the rows of the tuples {whole.name} holds "
            f"({per_tuple:.0f} bytes each) next to its structures ({share} bytes); give at least {2 * (share + int(per_tuple) * 64)} bytes")
    return plan, share


def left_ids(out: JoinOutput, one_row_per_match: bool) -> np.ndarray:
    """The row ids ``out`` completes, each once (``one_row_per_match``: a tuple has one pair)."""
    matched = out.matched_ids if one_row_per_match else sorted_distinct(out.matched_ids)
    return np.concatenate([matched, out.unmatched_ids]) if len(out.unmatched_ids) else matched


def materialise(stream: pa.Table, result: JoinOutput, schema: pa.Schema, matched_at=None, unmatched_at=None) -> tuple[pa.Table, pa.Table]:
    """The matched table (stream columns + the selected master columns, one row per master row)
    and the unmatched one (stream columns + ``reason``) of ``result``; ``matched_at`` and
    ``unmatched_at`` are the rows of ``stream`` its matched and unmatched ids name (default: the
    ids are row positions)."""
    matched = stream.take(result.matched_ids if matched_at is None else matched_at)
    for name in schema.names:
        matched = matched.append_column(name, result.master[name])
    unmatched = stream.take(result.unmatched_ids if unmatched_at is None else unmatched_at).append_column(
        "reason", pa.array(labels(result.unmatched_reason), pa.string())
    )
    return matched, unmatched
