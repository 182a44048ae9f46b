"""The join state a step carries from one micro-batch to the next, and its checkpoint files.

Without a drain at the end of each micro-batch (issue 11) a tuple may enter in batch N and leave
in batch N+k, when its page comes round (HYBRIDJOIN sec. 4, MESHJOIN sec. 3.1, SSIJ sec. IV-A).
The state of a step after batch N is therefore:

* in memory, per (step, part): a :class:`~..core.session.JoinSession` (the algorithm with its
  queue) fed with each tuple's sequence number ``sj_seq``, its join key and its due time;
* on the driver, per step: :class:`CarriedRows`, the full rows of the tuples still inside the
  join, as one Arrow table sorted by ``sj_seq``; a completed ``sj_seq`` is materialised from it;
* in the checkpoint: :class:`StateFiles`, that table (and the rows held for a retry) written
  after the batch's sinks and before Spark commits the batch, one Arrow IPC file per (step,
  batch id), atomically (temporary name, rename), the oldest pruned like Spark's
  ``minBatchesToRetain`` (at most 10 kept: each file holds the whole queue, where Spark's state
  store keeps deltas). Once written, the file *is* the carried rows: memory-mapped, so between
  batches the driver keeps no row of a tuple inside in memory (:meth:`CarriedRows.spill`).

A batch N replayed after a crash reads the state after N-1 (the newest file of a batch before
N), builds a fresh algorithm fed with those tuples in their order (caches start cold, the queue
is whole) and rewrites batch N's sinks (which replace what the first attempt wrote), so every
tuple leaves exactly once. Spark's own state store (``transformWithStateInPandas`` + RocksDB)
does not serve here: the join runs in ``foreachBatch`` on the driver (and in one Spark job of
plain tasks a batch for partitions, :mod:`.partitioned`), outside any stateful operator, and a state store can only be written from inside
one; making the join such an operator would move it into grouped tasks whose per-key calls
cannot step one algorithm over the whole queue.

A tuple's due time is the earliest of its deadline (the job's ``deadline``) and its arrival + the
step's ``max_queue_time_s``; :meth:`CarriedJoin.run` forces out every tuple due before the
expected end of the next micro-batch. The deadline is computed once, where the tuple enters
(:func:`with_deadlines`), and rides with its row as the column ``sj_deadline`` - carried, held
for a retry, matched or in the dead letter - until the progress record counts whether it was
missed (:func:`deadline_misses`); the sinks do not get it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.files import write_arrow, write_whole
from ..core.joins.base import JoinAlgorithm, JoinOutput
from ..core.micros import epoch_micros
from ..core.runner import feed_keys, one_version_of_r
from ..core.session import JoinSession, left_ids, materialise
from ..job.spec import DeadlineSpec
from .stepstats import SliceStats

SEQ = "sj_seq"  # a tuple's number in its step, increasing in arrival order (the session's row id)
DUE = "sj_due"  # epoch seconds by which the tuple must have left (inf: never forced)
PART = "sj_part"  # the part (partitions = N) that holds the tuple
RETRY_SINCE = "sj_retry_since"  # set on rows held for a retry (not inside the join)
DEADLINE = "sj_deadline"  # with a job's deadline: a tuple's, epoch seconds (NaN: none), carried until it leaves the job
JOIN_COLUMNS = (SEQ, DUE, PART)
MAX_CHUNKS = 1024  # chunks the carried rows may be in before they are made one (a take over many small ones is slow)
STATE_CHUNK_ROWS = 65_536  # rows per record batch of a state file: what a spill or a write copies at a time


def with_deadlines(rows: pa.Table, deadline: DeadlineSpec | None) -> pa.Table:
    """``rows`` with each tuple's absolute deadline in epoch seconds (SSIJ sec. IV-F; NaN: none)
    as the column :data:`DEADLINE`, computed once where the tuple enters the job (the batch, a
    step used alone) from its arrival or its deadline column; rows that carry it already (a
    step after the first, rows held for a retry) keep theirs. Without deadlines: ``rows``."""
    if deadline is None or DEADLINE in rows.column_names:
        return rows
    return rows.append_column(DEADLINE, pa.array(_deadlines(deadline, rows), pa.float64()))


def _deadlines(deadline: DeadlineSpec, rows: pa.Table) -> np.ndarray:
    if deadline.max_latency_s is not None:
        return rows["sj_arrival"].to_numpy(zero_copy_only=False) + deadline.max_latency_s
    column = rows[deadline.column]
    if pa.types.is_timestamp(column.type):  # to the microsecond, nanoseconds floored
        column = pc.divide(epoch_micros(column), 1e6)
    return column.cast(pa.float64()).to_numpy(zero_copy_only=False)


def without_deadlines(rows: pa.Table) -> pa.Table:
    """``rows`` as the sinks take them: without the :data:`DEADLINE` they carried."""
    return rows.drop_columns([DEADLINE]) if DEADLINE in rows.column_names else rows


def deadline_misses(done: float, *left: pa.Table) -> int:
    """Rows of the tables ``left`` (leaving a micro-batch at ``done``: matched, dead letter) whose
    :data:`DEADLINE` passed before ``done`` (none without deadlines)."""
    return sum(int(np.sum(done > rows[DEADLINE].to_numpy(zero_copy_only=False)))
               for rows in left if rows.num_rows and DEADLINE in rows.column_names)


def due_times(rows: pa.Table, max_queue_time_s: float | None) -> np.ndarray:
    """When each tuple must have left (epoch seconds, inf: no bound): its deadline (the column
    :data:`DEADLINE`, :func:`with_deadlines`), or its arrival + ``max_queue_time_s`` if that is earlier."""
    due = np.full(rows.num_rows, np.inf)
    if max_queue_time_s is not None and rows.num_rows:
        due = rows["sj_arrival"].to_numpy(zero_copy_only=False) + max_queue_time_s
    if DEADLINE not in rows.column_names:
        return due
    deadlines = rows[DEADLINE].to_numpy(zero_copy_only=False)
    return np.fmin(due, np.where(np.isnan(deadlines), np.inf, deadlines))


class CarriedRows:
    """The full rows of a step's tuples inside the join (sorted by ``sj_seq``), with the next
    sequence number; what completes is materialised from here and leaves it.

    Between micro-batches the rows live in the checkpoint's state file of the last batch
    (:meth:`spill`, after :class:`StateFiles` wrote it), memory-mapped: the join needs a tuple's
    key, which H_S holds, and its row only when it leaves. What the step then holds in memory
    per carried tuple is its sequence number while a batch looks rows up, and an alive flag
    (:data:`..job.rowbytes.SPILLED_ROW_BYTES`); a completed row is read back from the file (the page cache)
    when it leaves. Rows added in a batch are that batch's own input until the batch's state
    is written and mapped.
    """

    def __init__(self, rows: pa.Table | None = None, mapped_bytes: int = 0):
        self.rows = rows if rows is not None and rows.num_rows else None
        self.next_seq = int(pc.max(rows[SEQ]).as_py()) + 1 if self.rows is not None else 0
        self._alive: np.ndarray | None = None  # per row of ``rows``: still inside (None: every row)
        self._count = self.rows.num_rows if self.rows is not None else 0
        self.mapped_bytes = mapped_bytes if self.rows is not None else 0  # bytes of ``rows`` in the mapped file
        self._mapped_part_bytes = self._part_bytes() if self.mapped_bytes else 0  # of them, the part column's

    @property
    def count(self) -> int:
        return self._count

    def carried(self) -> pa.Table | None:
        """The rows inside the join (None when there is none); a copy where some have left since
        the rows were mapped."""
        if not self._count:
            return None
        return self.rows if self._alive is None else self.rows.filter(pa.array(self._alive))

    @property
    def nbytes(self) -> int:
        """Bytes in memory: the rows not in the mapped file, and the alive flags."""
        if self.rows is None:
            return 0
        return self.rows.nbytes - self.mapped_bytes + (self._alive.nbytes if self._alive is not None else 0)

    def add(self, rows: pa.Table, due: np.ndarray, part: np.ndarray) -> pa.Table:
        """Number ``rows`` (append them); returns them with their state columns."""
        seq = np.arange(self.next_seq, self.next_seq + rows.num_rows, dtype=np.int64)
        self.next_seq += rows.num_rows
        tagged = (rows.append_column(SEQ, pa.array(seq)).append_column(DUE, pa.array(due, pa.float64()))
                  .append_column(PART, pa.array(part, pa.int32())))
        if self.rows is None:
            self.rows = tagged
        else:
            self.rows = pa.concat_tables([self.rows, tagged], promote_options="default")
        if self._alive is not None:
            self._alive = np.concatenate((self._alive, np.ones(rows.num_rows, bool)))
        self._count += rows.num_rows
        return tagged

    def take(self, result: JoinOutput, schema: pa.Schema) -> tuple[pa.Table, pa.Table]:
        """The matched and unmatched rows of ``result`` (stream columns without the state ones);
        they leave the carried rows."""
        matched_at, unmatched_at = self._positions(result.matched_ids, result.unmatched_ids)
        matched, unmatched = materialise(self.rows, result, schema, matched_at, unmatched_at)
        if len(result):
            keep = np.ones(self.rows.num_rows, bool) if self._alive is None else self._alive
            keep[matched_at] = False
            keep[unmatched_at] = False
            self._count = int(keep.sum())  # (a sum over the flags: cheaper than deduplicating the positions that left)
            if self.mapped_bytes:  # the mapped rows stay where they are until the next spill
                self._alive = keep
            else:
                self.rows = self.rows.filter(pa.array(keep))  # (a mask: half the time of taking the kept positions)
                if self.rows[SEQ].num_chunks > MAX_CHUNKS:  # the chunks of many batches, most of them thinned out
                    self.rows = self.rows.combine_chunks()
        return matched.drop_columns(list(JOIN_COLUMNS)), unmatched.drop_columns(list(JOIN_COLUMNS))

    def values(self, column: str, ids: np.ndarray) -> pa.ChunkedArray:
        """``column`` of the carried rows of sequence numbers ``ids`` (each inside), in their order."""
        (at,) = self._positions(ids)
        return self.rows[column].take(pa.array(at, pa.int64()))

    def _positions(self, *ids: np.ndarray) -> list[np.ndarray]:
        """The rows of ``rows`` that hold each sequence number of ``ids`` (every one is there).
        The rows are in ``sj_seq`` order, with gaps where tuples left: while the numbers span
        at most four times the rows (in the bench's pipelines HYBRIDJOIN carries 1.65M rows
        over 2.0M numbers, CACHEJOIN-L 350k over 1.35M), a table from number to row (int32,
        at most 16 bytes a row, held only during the take) answers each in one read: 1M numbers
        in 6.8 and 1.1 ms for those two shapes, against 30.8 and 9.1 ms of binary search (and
        26.5 and 3.6 ms through a rank index built for the lookup, :mod:`..core.idrank`);
        sparser numbers by binary search."""
        n = self.rows.num_rows
        if not n:
            return [np.zeros(0, np.int64) for _ in ids]
        first, last = self.rows[SEQ][0].as_py(), self.rows[SEQ][-1].as_py()
        if last - first + 1 > 4 * n or n >= 2**31:
            seq = self.rows[SEQ].combine_chunks().to_numpy()
            return [np.searchsorted(seq, wanted) for wanted in ids]
        row_of = np.full(last - first + 1, -1, np.int32)  # a number in a gap (never asked for) is no row
        start = 0
        for chunk in self.rows[SEQ].chunks:
            row_of[chunk.to_numpy() - first] = np.arange(start, start + len(chunk), dtype=np.int32)
            start += len(chunk)
        return [row_of[wanted - first] for wanted in ids]

    def live_batches(self, chunk_rows: int = STATE_CHUNK_ROWS):
        """The rows inside the join as record batches of at most ``chunk_rows``, without copying
        more than one batch at a time (what :meth:`StateFiles.write_batches` writes)."""
        if not self._count:
            return
        start = 0
        for batch in self.rows.to_batches(max_chunksize=chunk_rows):
            alive = None if self._alive is None else self._alive[start:start + batch.num_rows]
            start += batch.num_rows
            if alive is None:
                yield batch
            elif alive.any():
                yield batch.filter(pa.array(alive))

    def spill(self, mapped: pa.Table) -> None:
        """The rows inside are now those of ``mapped`` (the state file just written, memory-mapped)."""
        if mapped.num_rows != self._count:
            raise RuntimeError(f"the state file holds {mapped.num_rows} rows, {self._count} are inside the join")
        self.rows = mapped if mapped.num_rows else None
        self._alive = None
        self.mapped_bytes = mapped.nbytes if mapped.num_rows else 0
        self._mapped_part_bytes = self._part_bytes() if mapped.num_rows else 0

    def _part_bytes(self) -> int:
        return self.rows.column(PART).nbytes

    def repart(self, parts: np.ndarray) -> None:
        """Assign the carried tuples (every row of ``rows``) to parts again (the cut points moved)."""
        if self.rows is not None:
            self.mapped_bytes -= self._mapped_part_bytes  # the new column is in memory, the file's is no longer read
            self._mapped_part_bytes = 0
            self.rows = self.rows.set_column(self.rows.schema.get_field_index(PART), PART, pa.array(parts, pa.int32()))

    def seq_and_part(self) -> tuple[np.ndarray, np.ndarray]:
        """The sequence number and part of each tuple inside (without reading the rows' other columns)."""
        if not self._count:
            return np.zeros(0, np.int64), np.zeros(0, np.int32)
        seq, part = self.rows[SEQ].to_numpy(), self.rows[PART].to_numpy()
        return (seq, part) if self._alive is None else (seq[self._alive], part[self._alive])

    def of_part(self, part: int) -> pa.Table | None:
        if self.rows is None:
            return None
        mine = pc.equal(self.rows[PART], part)
        return self.rows.filter(mine if self._alive is None else pc.and_(mine, pa.array(self._alive)))


def in_seq_order(rows: pa.Table) -> pa.Table:
    """``rows`` sorted by ``sj_seq``, the order a session takes them in (rows that crossed a
    shuffle come in any order; the driver's own are in order already)."""
    if rows.num_rows < 2 or (np.diff(rows[SEQ].to_numpy()) > 0).all():  # the driver's own rows are in order already
        return rows
    return rows.sort_by(SEQ)


def session_from(algorithm: JoinAlgorithm, column: str, rows: pa.Table | None, clock=time.time) -> JoinSession:
    """A session over a fresh ``algorithm`` fed with carried ``rows`` (in any order).

    A tuple whose key cannot be in R leaves unmatched with the next slice, with its reason, as
    in :func:`slice_of` (:attr:`..core.session.JoinSession.settled`): a store opened anew (a
    restart; a part rebuilt in another worker, :mod:`.partitioned`, whose driver routes a null or
    bad key to no part) holds string keys at the width of R's longest key now, so a carried key
    longer than every key R has since its longest were deleted cannot be in R any more."""
    session = JoinSession(algorithm, clock)
    if rows is not None and rows.num_rows:
        rows = in_seq_order(rows)
        invalid, _ = feed_keys(algorithm, rows[column], rows[SEQ].to_numpy(), rows[DUE].to_numpy(), clock, session)
        session.settled = invalid if len(invalid) else None
    return session


def _settled(session: JoinSession) -> list[JoinOutput]:
    """What left ``session`` before any step (handed out once)."""
    settled, session.settled = session.settled, None
    return [settled] if settled is not None else []


def slice_of(session: JoinSession, column: str, rows: pa.Table, horizon: float, until: float, drain: bool,
             clock=time.time, max_pending: int | None = None) -> tuple[JoinOutput, SliceStats]:
    """Feed ``rows`` (with their state columns, in any order) to ``session`` and step it for one slice (or a
    drain), inside one version of R; returns what completed and the slice's figures.
    ``horizon``: tuples due before it leave now; ``until``: the slice steps at least until then
    while tuples wait; ``max_pending``: the most that may wait after it, the oldest beyond
    are forced out (:meth:`..core.session.JoinSession.advance`)."""
    algorithm = session.algorithm
    io_before = _io(algorithm)
    started = clock()
    settled = _settled(session)
    pending_before = session.pending + sum(len(s) for s in settled)
    rows = in_seq_order(rows)
    with one_version_of_r(algorithm) as invalidated:
        invalid, _ = feed_keys(algorithm, rows[column], rows[SEQ].to_numpy(), rows[DUE].to_numpy(), clock, session)
        out = session.drain() if drain else session.advance(horizon, until, max_pending)
    session.compact()  # between batches the log holds the waiting tuples only
    result = JoinOutput.concat([*settled, invalid, out], algorithm.schema)
    return result, _slice_stats(session, result, io_before, started, pending_before, rows.num_rows, invalidated, clock)


def ahead_of(session: JoinSession, keep_going, clock=time.time) -> tuple[JoinOutput, SliceStats]:
    """Step ``session`` over the tuples inside (no new tuple is fed meanwhile) while ``keep_going()``
    (:meth:`..core.session.JoinSession.work_ahead`), inside one version of R; what completed
    and the figures, as :func:`slice_of`'s."""
    io_before = _io(session.algorithm)
    settled = _settled(session)
    started, pending_before = clock(), session.pending + sum(len(s) for s in settled)
    with one_version_of_r(session.algorithm) as invalidated:
        result = JoinOutput.concat([*settled, session.work_ahead(keep_going)], session.algorithm.schema)
    session.compact()
    return result, _slice_stats(session, result, io_before, started, pending_before, 0, invalidated, clock)


def _io(algorithm: JoinAlgorithm) -> tuple[int, int]:
    """The queries to R and the rows they read so far."""
    counters = algorithm.store.counters
    return counters.queries, counters.rows


def _slice_stats(session: JoinSession, result: JoinOutput, io_before: tuple[int, int], started: float,
                 pending_before: int, fed: int, invalidated: int, clock) -> SliceStats:
    algorithm = session.algorithm
    queries, rows = _io(algorithm)
    left = len(left_ids(result, algorithm.one_row_per_match))
    return SliceStats(
        wall_s=clock() - started, disk_queries=queries - io_before[0], disk_rows=rows - io_before[1],
        master_version=algorithm.store.seen_version, master_read_at=algorithm.store.read_at, invalidated=invalidated,
        fed=fed, left=left, pending=session.pending, forced_steps=session.forced_steps,
        balanced=pending_before + fed == left + session.pending, structure_bytes=algorithm.structure_bytes(),
        structure_bytes_peak=algorithm.counters.structure_bytes_peak, log_bytes=session.log_bytes,
    )


class StateFiles:
    """One Arrow IPC file per (step, batch id) under ``folder``: the state after that batch.
    One written ``pending`` is under a name no reader takes until :meth:`commit` renames it."""

    def __init__(self, folder: Path, retain: int):
        self.folder = Path(folder)
        self.retain = max(int(retain), 1)

    def _path(self, step: int, batch_id: int, pending: bool = False) -> Path:
        return self.folder / f"{'pending-' if pending else ''}step{step}-batch{batch_id}.arrow"

    def _batches(self, step: int) -> list[int]:
        if not self.folder.is_dir():
            return []
        return sorted(int(p.stem.rsplit("batch", 1)[1]) for p in self.folder.glob(f"step{step}-batch*.arrow"))

    def write(self, step: int, batch_id: int, table: pa.Table) -> None:
        """Atomically: a reader sees the whole file or none; older files beyond ``retain`` go."""
        self.write_batches(step, batch_id, table.schema, table.to_batches(max_chunksize=STATE_CHUNK_ROWS))

    def write_batches(self, step: int, batch_id: int, schema: pa.Schema, batches, pending: bool = False) -> None:
        """:meth:`write` of a table given as its record ``batches`` (written one at a time)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        write_whole(self._path(step, batch_id, pending), lambda partial: write_arrow(partial, schema, batches))
        if not pending:
            self._prune(step, batch_id)

    def commit(self, step: int, batch_id: int) -> None:
        """The state of ``step`` after ``batch_id`` written ``pending``, renamed to the name
        :meth:`read` takes (atomically: a replaced file stays whole for whoever mapped it)."""
        os.replace(self._path(step, batch_id, pending=True), self._path(step, batch_id))
        self._prune(step, batch_id)

    def _prune(self, step: int, batch_id: int) -> None:
        for old in self._batches(step):
            if old <= batch_id - self.retain or old > batch_id:  # a later file is from an attempt never committed
                self._path(step, old).unlink(missing_ok=True)

    def write_versions(self, batch_id: int, versions: list) -> None:
        """The version of R each step of ``batch_id`` read, and when it was R's newest, written
        before its sinks: a replay of the batch reads them again (:meth:`read_versions`)."""
        from ..core.files import write_private_json

        self.folder.mkdir(parents=True, exist_ok=True)
        write_private_json(self.folder / f"versions-batch{batch_id}.json", versions)
        for path in self.folder.glob("versions-batch*.json"):
            old = int(path.stem.rsplit("batch", 1)[1])
            if old <= batch_id - self.retain or old > batch_id:
                path.unlink(missing_ok=True)

    def read_versions(self, batch_id: int) -> list | None:
        """What :meth:`write_versions` wrote for ``batch_id`` (None: its first attempt)."""
        path = self.folder / f"versions-batch{batch_id}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def read(self, step: int, before: int) -> tuple[int, pa.Table] | None:
        """The newest state of ``step`` written for a batch before ``before`` (None: none)."""
        earlier = [b for b in self._batches(step) if b < before]
        if not earlier:
            return None
        return earlier[-1], self.mapped(step, earlier[-1])

    def mapped(self, step: int, batch_id: int, pending: bool = False) -> pa.Table:
        """The state of ``step`` after ``batch_id``, memory-mapped: its rows stay in the file (the
        page cache) until read; the file may be renamed or pruned meanwhile, the mapping keeps it."""
        return pa.ipc.open_file(pa.memory_map(str(self._path(step, batch_id, pending)), "r")).read_all()
