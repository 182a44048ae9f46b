"""One join step of a job: its store and algorithm, its on-missing policy and its carried state.

A step is the per-micro-batch unit of :mod:`.runner`: it feeds a micro-batch's tuples to its
algorithm for one bounded slice - in the driver through a :class:`~..core.session.JoinSession`,
or over N parts in Spark tasks (:mod:`.partitioned`) - keeps the tuples still inside across
micro-batches (:mod:`.joinstate`: the papers' queue, HYBRIDJOIN sec. 4.1, MESHJOIN sec. 3.1,
SSIJ sec. IV-A) and routes what completed through its on-missing policy: matched rows go on,
unmatched ones to the dead letter, to an unknown member, to an inferred member (a placeholder
row inserted into R, :mod:`..core.stores.inferred`), or are held for a retry.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.asof import pick_versions
from ..core.errors import ConfigError
from ..core.joins.base import CacheProbes, JoinOutput
from ..core.joins.registry import planner
from ..core.reasons import Unmatched, labels
from ..core.session import LOG_BYTES_PER_TUPLE, JoinSession, planned_for_rows
from ..core.stores import SnapshotLost, open_store
from ..core.stores.capture import changes_seen
from ..core.stores.pruner import start_pruner
from ..core.stores.inferred import InferredMembers
from .ahead import WorkAhead
from .joinstate import (JOIN_COLUMNS, RETRY_SINCE, SEQ, CarriedRows, StateFiles, due_times, session_from, slice_of,
                        with_deadlines)
from .partitioned import PartitionedJoin
from .sinks import dead_letter_rows
from .stepstats import SliceStats, StepStats
from ..job.kept_plans import keep_plan, stats_stamp
from ..job.rowbytes import SPILLED_ROW_BYTES
from ..job.spec import DeadlineSpec, StepSpec

NOT_IN_MASTER = Unmatched.NOT_IN_MASTER.label
NULL_KEY = Unmatched.NULL_KEY.label
NO_VERSION_VALID = Unmatched.NO_VERSION_VALID.label  # as-of: missing at the event time, on_missing's too
SNAPSHOT_ATTEMPTS = 50  # slices a lost session may restart (each time R moved meanwhile)


@dataclass
class StepResult:
    passed: pa.Table
    dead: pa.Table
    stats: StepStats


class JoinStep:
    """One join step of the job: its store and algorithm, its on-missing policy and its carried
    state - the tuples inside the join (:mod:`.joinstate`) and, for ``retry``, those held until
    their key appears in R. The algorithm, its caches and queue live across micro-batches; a
    replayed batch or a restart rebuilds them from the checkpoint's state (caches cold).

    The step's memory budget M covers the algorithm's structures *and* the full rows it carries
    for the tuples inside: the algorithm is built once, with the share of M that leaves room
    for the rows of every tuple it can hold (:func:`..core.session.planned_for_rows`) - at the
    start where the rows spill to the state file (their bytes in memory are known then), else
    once the first rows show how wide a tuple is - and each slice may leave at most as many tuples
    inside as the rest of M holds rows for (the oldest beyond are forced out), so the
    structures' peak plus the carried bytes stay within M (``memory_peak_bytes``)."""

    def __init__(self, spec: StepSpec, index: int, deadline: DeadlineSpec | None = None,
                 retry_max_s: float | None = None, spark=None, partitions: int = 1, clock=time.time,
                 checkpoint: str | None = None):
        self.spec = spec
        self.checkpoint = checkpoint  # where the step's plan is kept for the Airflow worker (:mod:`..job.kept_plans`)
        self.deadline = deadline
        self.index = index
        self.clock = clock
        self.store = open_store(spec.master.url, spec.master.table, spec.master.key, spec.master_select,
                                retry_max_s=retry_max_s)
        self.follower = None
        try:
            self.follower = changes_seen(self.store, spec.change_capture, spec.master_static, spec.master.url,
                                         f"steps[{index}].master", refresh=spec.refresh is not None)
            self.inferred = None if spec.on_missing != "inferred_member" else InferredMembers(
                self.store, spec.master.url, spec.inferred_member, f"steps[{index}].inferred_member", retry_max_s,
                spec.as_of.lookup if spec.as_of is not None else None)
        except BaseException:
            if self.follower is not None:
                self.follower.stop()
            self.store.close()
            raise
        self.pruner = start_pruner(self.store, spec.master.url, spec.prune_options)  # prune_history
        self.refreshed_at, self.refreshes = clock(), 0  # refresh: {every_s}: the last time R was read anew
        self.planner = planner(spec.algorithm, self.store, spec.params)  # R's statistics, read once for the step's life
        self.partitioned = None
        self._plan_at_start()
        self._queue_peak = 0
        # the columns R is read for that the output leaves out (an as-of lookup's version columns)
        self.version_columns = [c for c in self.store.select if c not in (spec.master.select or self.store.select)]
        self.select = [c for c in self.store.select if c not in self.version_columns]
        self.carried = CarriedRows()
        self.held: pa.Table | None = None  # retry: tuples waiting for their key, with RETRY_SINCE
        self.after_batch: int | None = None  # the batch the state in memory is after (None: fresh)
        self._hits = (0, 0)
        if partitions > 1:
            self.partitioned = PartitionedJoin(spark, spec, self.store, partitions, self.algorithm.one_row_per_match, clock)
            self.partitioned.memory = max(self.algorithm_memory // partitions, 1)
        self.session: JoinSession | None = None  # made with the algorithm (:meth:`_size_on_first_rows`)
        if self._algorithm is not None and self.partitioned is None:
            self.session = JoinSession(self._algorithm, clock)
        self.ahead = WorkAhead(clock)  # the session stepped between micro-batches (:mod:`.ahead`)
        self._ahead_done: tuple | None = None  # what it completed: (output, figures), for the next batch

    # -- the state after a batch (written before Spark commits it) ------------------------------
    @property
    def spills(self) -> bool:
        """The carried rows live in the mapped state file between batches (:meth:`CarriedRows.spill`);
        not where tuples are held for a retry, whose held rows share the file with another schema."""
        return not self.spec.retries

    def write_state(self, files: StateFiles, batch_id: int) -> None:
        """What the checkpoint keeps: the carried rows and the rows held for a retry (no sequence
        number: that tells them apart), one record batch at a time; then the carried rows are
        the file's, memory-mapped."""
        if self.held is None and self.carried.rows is not None:
            files.write_batches(self.index, batch_id, self.carried.rows.schema, self.carried.live_batches())
            if self.spills:
                self.carried.spill(files.mapped(self.index, batch_id))
            return
        held = self.held
        if held is not None:
            held = held.append_column(SEQ, pa.nulls(held.num_rows, pa.int64()))
        parts = [t for t in (self.carried.carried(), held) if t is not None]
        files.write(self.index, batch_id, pa.concat_tables(parts, promote_options="default") if parts
                    else pa.table({SEQ: pa.array([], pa.int64())}))

    def account(self, stats: StepStats) -> StepStats:
        """The step's memory after its batch (the state written): the structures' peak, and the
        carried rows, the rows held for a retry and the session's log (``queue_bytes``)."""
        queue_bytes = self.carried.nbytes + self._held_bytes() + stats.join.log_bytes
        self._queue_peak = max(self._queue_peak, queue_bytes)
        stats.account(queue_bytes, self.carried.mapped_bytes, self._queue_peak)
        return stats

    def restore(self, files: StateFiles, batch_id: int) -> None:
        """The state after ``batch_id - 1``: kept in memory (what was worked ahead since is this
        batch's), or read from the checkpoint with a fresh algorithm (a replay or a restart:
        caches cold, the queue whole, what was worked ahead dropped)."""
        self._stop_ahead()
        if self.after_batch is not None and self.after_batch == batch_id - 1:
            return
        self._ahead_done = None
        found = files.read(self.index, batch_id)
        if found is None and self.after_batch is None:  # a new query: nothing carried, the algorithm as built
            self.after_batch = batch_id - 1
            return
        table = found[1] if found is not None and found[1].num_rows else None
        held, mapped = None, table is not None and table[SEQ].null_count == 0 and self.spills
        if table is not None and table[SEQ].null_count:
            is_held = pc.is_null(table[SEQ])
            held = table.filter(is_held).drop_columns([c for c in JOIN_COLUMNS if c in table.column_names])
            table = table.filter(pc.invert(is_held))
        self.held = held if held is not None and held.num_rows else None
        table = table if table is not None and table.num_rows else None
        self.carried = CarriedRows(table, table.nbytes if mapped and table is not None else 0)
        carried = self.carried.carried()
        if carried is not None and not self.spills:
            self._size(self._row_bytes(carried))  # sized for the width of the rows carried
        elif self._algorithm is not None and self._algorithm.counters.tuples_in:  # (one that took no tuple is as built)
            self._replan()  # R may have moved since
            self._algorithm = self.planner.build(self.plan)  # caches cold
        if self.partitioned is not None:
            self.partitioned.restored(self.carried)
        elif self._algorithm is not None or carried is not None:
            self.session = session_from(self.algorithm, self.spec.column, carried, self.clock)
        self.after_batch = batch_id - 1

    # -- the join ------------------------------------------------------------------------------
    def run(self, rows: pa.Table, batch_id: int, now: float, horizon: float, until: float, drain: bool,
            replayed: list | None = None) -> StepResult:
        """Feed ``rows`` and step for one slice (``drain``: until nothing waits); what completed
        goes on: matched, or through the on-missing policy. ``replayed``: the version of R (and
        when it was the newest) the first attempt of this batch read; a replay reads it again."""
        retried = self.held.num_rows if self.held is not None else 0
        rows = with_deadlines(rows, self.deadline)
        if self.spec.retries:
            rows = rows.append_column(RETRY_SINCE, pa.array(np.full(rows.num_rows, now)))
            if self.held is not None:
                rows = pa.concat_tables([self.held, rows], promote_options="default")
            self.held = None
        before = self.carried.count
        tagged = self.carried.add(rows, due_times(rows, self.spec.max_queue_time_s), self._parts(rows))
        self._size_on_first_rows(tagged, before)
        max_pending = self._max_pending(tagged)
        if self.partitioned is not None:
            result, joined = self.partitioned.run(tagged, self.carried, horizon, until, drain, max_pending, replayed)
        else:
            with self._version_worked_ahead() if replayed is None else self.store.reading_at(*replayed):
                result, joined = self._with_ahead(*self._slice(tagged, horizon, until, drain, max_pending))
        if joined.master_read_at is None and self.spec.refresh is not None:
            joined.master_read_at = self.refreshed_at  # nothing cached is older than the last refresh
        if self.spec.as_of is not None:
            result = self._as_of(result)
        matched, unmatched = self.carried.take(result, self.algorithm.schema)
        if self.version_columns:
            matched = matched.drop_columns(self.version_columns)
        if not joined.balanced or self.carried.count != before + rows.num_rows - joined.left:
            raise RuntimeError(f"steps[{self.index}] ({self.algorithm.name}) broke exactly-once: {joined.to_dict()}")
        passed, dead, held_next = self._route(renamed(self.spec, self.select, matched), unmatched, now)
        self.held, self.after_batch = held_next, batch_id
        held = held_next.num_rows if held_next is not None else 0
        going_on = joined.left - dead.num_rows - held  # tuples passed on (a 1:K match: K rows)
        if going_on > passed.num_rows or (self.one_row_per_tuple and going_on != passed.num_rows):
            raise RuntimeError(f"steps[{self.index}]: {joined.left} tuples left the join but {passed.num_rows} rows "
                               f"went on, {dead.num_rows} to the dead letter and {held} wait for a retry")
        return StepResult(passed, dead, StepStats(
            joined, held_for_retry=held, retried=retried, carried=self.carried.count, passed_tuples=going_on,
            memory_budget_bytes=self.spec.memory_bytes, algorithm_memory_bytes=self.algorithm_memory))

    @property
    def one_row_per_tuple(self) -> bool:
        """Each tuple going on is one row: a unique key's, or the one version an as-of lookup keeps."""
        return self.algorithm.one_row_per_match or self.spec.as_of is not None

    # -- working ahead between micro-batches (:mod:`.ahead`) ----------------------------------------
    def refresh_if_due(self) -> None:
        """``refresh: {every_s}``: at a batch's end (the cut), once every_s seconds passed since the
        last, drop what the step cached of R - the algorithm's caches and the store's page maps -
        so R is read anew (where its changes cannot be captured); ``refreshes`` counts them."""
        if self.spec.refresh is None or self.clock() - self.refreshed_at < self.spec.refresh["every_s"]:
            return
        self.store.forget_page_maps()
        if self.partitioned is not None:
            self.partitioned.rebuild_all()
        else:
            self._rebuild(self.carried.carried())
        self.refreshed_at = self.clock()
        self.refreshes += 1

    def start_ahead(self) -> None:
        """Step the session on a thread until the next micro-batch (driver-side steps with tuples
        inside; called once the batch's slice is over and its output taken: the cut)."""
        if self.session is not None and self.session.pending and not self.ahead.running:
            self.ahead.start(self.session, f"step{self.index}")

    def _stop_ahead(self) -> None:
        """End the stepping ahead; keep what it completed for this batch. Where it failed (a
        database past its retry bound, R lost inside its snapshot), nothing it did counts: the
        session is rebuilt from the carried rows, the state at the cut, and the slice meets the
        failure again, if it lasts, where it is reported."""
        done, error = self.ahead.stop()
        self._ahead_done = done
        if error is not None:
            self._rebuild(self.carried.carried(), r_moved=isinstance(error, SnapshotLost))

    def _version_worked_ahead(self):
        """The slice reads R at the version the stepping ahead read, so every tuple leaving with
        this batch saw that one version (SSIJ sec. IV-E; the record's ``master_versions``);
        changes installed since are seen from the next batch on."""
        if self._ahead_done is None or not self.store.has_change_log():
            return contextlib.nullcontext()
        figures = self._ahead_done[1]
        return self.store.reading_at(figures.master_version, figures.master_read_at)

    def _rebuild(self, inside: pa.Table | None, r_moved: bool = True) -> None:
        """The algorithm anew (caches cold, its counters carried on) in a session fed the carried
        rows ``inside``: where R moved (a refresh, a snapshot lost while R changed) planned anew at
        the same share on R's statistics read again; else (a session lost, R as it was) built
        again from the step's plan, nothing of R read."""
        if r_moved:
            self._replan()
        if self._algorithm is None:  # none built yet (no rows seen): built from the plan when asked for
            return
        counters = self._algorithm.counters
        self._algorithm = self.planner.build(self.plan)
        self._algorithm.counters = counters
        self.session = session_from(self._algorithm, self.spec.column, inside, self.clock)
        if r_moved and self.sized:  # planned anew: the operator shows this plan
            self._keep_plan()

    def _keep_plan(self) -> None:
        """The plan the step runs with (its memory split, the rows' bytes it was sized for and a
        stamp of R's statistics it was planned on) kept beside the checkpoint for the operator
        (:mod:`..job.kept_plans`)."""
        if self.checkpoint is not None:
            keep_plan(self.checkpoint, self.index, self.spec, {
                "memory_split": {**self._algorithm.memory_split(),
                                 "carried_rows_bytes": self.spec.memory_bytes - self.algorithm_memory},
                "row_bytes": round(self.row_bytes, 1), "stats_stamp": stats_stamp(self.planner.stats),
                "planned_at": self.clock(),
            })

    def _replan(self) -> None:
        """R moved: the step's plan anew, at the same share, on R's statistics read again."""
        self.planner = planner(self.spec.algorithm, self.store, self.spec.params)
        self.plan = self.planner.plan(self.algorithm_memory)

    def _with_ahead(self, result: JoinOutput, stats: SliceStats) -> tuple[JoinOutput, SliceStats]:
        """The slice's output and figures with what was worked ahead before it."""
        done, self._ahead_done = self._ahead_done, None
        if done is None:
            return result, stats
        ahead, figures = done
        return JoinOutput.concat([ahead, result], self.algorithm.schema), stats.with_ahead(figures, ahead.nbytes)

    # -- the memory budget: structures + carried rows ------------------------------------------------
    @property
    def algorithm(self):
        """The step's algorithm, built once from its plan (:meth:`_plan_at_start`); one asked for
        before the first rows showed their width (an empty first batch) is built from the plan of
        the whole M, and sized again with the first rows."""
        if self._algorithm is None:
            self._algorithm = self.planner.build(self.plan)
        return self._algorithm

    def _plan_at_start(self) -> None:
        """The step's plan (``plan``): where the carried rows spill, a row's bytes are known
        before any is seen (:data:`..job.rowbytes.SPILLED_ROW_BYTES`), so the algorithm is sized for
        them and built once, now; else the plan of the whole M, built once the first rows show
        how wide they are (:meth:`_size_on_first_rows`)."""
        self._algorithm = None
        self.row_bytes: float | None = None  # a carried row's bytes the algorithm is sized for (once sized)
        if self.spills:
            self._size(float(SPILLED_ROW_BYTES))
        else:
            self.plan, self.algorithm_memory, self.sized = self.planner.plan(self.spec.memory_bytes), self.spec.memory_bytes, False

    def _size_on_first_rows(self, tagged: pa.Table, before: int) -> None:
        """With the first rows, nothing inside yet: the algorithm sized for their width (built
        once: none was built before), and the session over it."""
        if not self.sized and before == 0 and tagged.num_rows:
            self._size(self._row_bytes(tagged))
            self.session = JoinSession(self._algorithm, self.clock) if self.partitioned is None else None
        elif self.session is None and self.partitioned is None:
            self.session = JoinSession(self.algorithm, self.clock)

    def _size(self, row_bytes: float) -> None:
        """Size the algorithm anew (fresh) for rows of ``row_bytes`` each (state columns included):
        its plan from the step's planner (R's statistics as read at the start), built once."""
        self.plan, share = planned_for_rows(self.planner, self.spec.memory_bytes, row_bytes)
        self._algorithm, self.algorithm_memory, self.sized = self.planner.build(self.plan), share, True
        self.row_bytes = row_bytes
        self._keep_plan()
        if self.partitioned is not None:
            self.partitioned.memory = max(share // self.partitioned.parts, 1)
            self.partitioned.rebuild_all()

    def _row_bytes(self, rows: pa.Table) -> float:
        """Memory a carried tuple's row takes between batches: in the mapped state file, its
        sequence number and alive flag; else the row itself (state columns included)."""
        return float(SPILLED_ROW_BYTES) if self.spills else rows.nbytes / rows.num_rows

    def grace_ends(self) -> float | None:
        """When the grace of the last tuple held for a retry passes (None: none is held); the
        first micro-batch starting after it resolves the tuple (:meth:`_hold`)."""
        held = self.held  # read from the thread awaiting the stop too: one reference, an immutable table
        if held is None:
            return None
        return pc.max(held[RETRY_SINCE]).as_py() + self.spec.retry_grace_s

    def _held_bytes(self) -> int:
        return self.held.nbytes if self.held is not None else 0

    def _max_pending(self, tagged: pa.Table) -> int | None:
        """The most tuples that may stay inside after this slice: as many as the rest of M
        (beyond the structures' share and the rows held for a retry) holds rows for, at the
        width of the rows carried now."""
        if not self.sized:
            return None
        if not self.carried.count:
            return None
        per_tuple = self._row_bytes(self.carried.rows) + LOG_BYTES_PER_TUPLE
        room = self.spec.memory_bytes - self.algorithm_memory - self._held_bytes()
        return max(int(room // per_tuple), 0)

    def _slice(self, tagged: pa.Table, horizon: float, until: float, drain: bool, max_pending: int | None) -> tuple:
        """One slice in the driver; a session to R lost inside its snapshot while R moved
        (:class:`..core.stores.SnapshotLost`) rebuilds the session from the carried rows as they
        were before the slice (nothing has left yet) and runs the slice again."""
        for attempt in range(SNAPSHOT_ATTEMPTS):
            try:
                return slice_of(self.session, self.spec.column, tagged, horizon, until, drain, self.clock, max_pending)
            except SnapshotLost:
                if attempt == SNAPSHOT_ATTEMPTS - 1:
                    raise
                self._ahead_done = None  # its tuples are in the carried rows: the new session joins them again
                first = tagged[SEQ][0].as_py() if tagged.num_rows else self.carried.next_seq
                inside = self.carried.carried()
                self._rebuild(inside.filter(pc.less(inside[SEQ], first)) if inside is not None else None)
        raise AssertionError("unreachable")

    def _as_of(self, result: JoinOutput) -> JoinOutput:
        """Of each tuple's matched rows, the version valid at its event time (:mod:`..core.asof`)."""
        event_time = self.spec.as_of.event_time
        if not len(result.matched_ids):
            return result
        if self.carried.rows is not None and event_time not in self.carried.rows.column_names:
            raise ConfigError(f"steps[{self.index}].as_of.event_time: {event_time!r} is not a column of the stream "
                              f"(columns: {sorted(set(self.carried.rows.column_names) - {*JOIN_COLUMNS, 'sj_arrival'})})")
        return pick_versions(result, self.carried.values(event_time, result.matched_ids), self.spec.as_of.lookup)

    def _parts(self, rows: pa.Table) -> np.ndarray:
        if self.partitioned is None or rows.num_rows == 0:
            return np.zeros(rows.num_rows, np.int32)
        return self.partitioned.assign(rows[self.spec.column])

    def _route(self, matched: pa.Table, unmatched: pa.Table, now: float):
        """The on-missing policy: (rows going on, dead-letter rows, rows held for a retry)."""
        policy = self.spec.on_missing
        passed_parts, held_next = [matched], None
        if self.spec.retries:
            held_next, unmatched = self._hold(unmatched, now)
            passed_parts = [matched.drop_columns([RETRY_SINCE])]
        if policy == "unknown_member":
            members, unmatched = unknown_members(self.spec, self.select, matched.schema, unmatched)
            passed_parts.append(members)
        elif policy == "inferred_member":  # a null or bad key is never inferred: dead letter
            fits = self.inferred.can_hold(unmatched[self.spec.column])
            infer = pc.and_kleene(pc.equal(unmatched["reason"], NOT_IN_MASTER), fits)
            if self.spec.as_of is not None:  # nor a tuple without an event time
                infer = pc.and_kleene(infer, pc.is_valid(unmatched[self.spec.as_of.event_time]))
            members = unmatched.filter(infer).drop_columns(["reason"])
            unmatched = unmatched.filter(pc.invert(infer))
            if self.spec.as_of is None:
                passed_parts.append(self._inferred_member(members, passed_parts[0].schema))
            else:
                inferred, left = self._inferred_versions(members, passed_parts[0].schema)
                passed_parts.append(inferred)
                unmatched = pa.concat_tables([unmatched, left.select(unmatched.column_names)])
        passed, dead = went_on(self.spec, self.index, passed_parts, unmatched)
        return passed, dead, held_next

    def _hold(self, unmatched: pa.Table, now: float) -> tuple:
        """(the tuples held for a retry: key not in R, or no version valid at the event time, waited
        less than ``retry_grace_s``; the rest)."""
        waited = pc.subtract(now, unmatched[RETRY_SINCE])
        keep = pc.and_(pc.is_in(unmatched["reason"], pa.array([NOT_IN_MASTER, NO_VERSION_VALID])),
                       pc.less(waited, self.spec.retry_grace_s))
        held = unmatched.filter(keep).drop_columns(["reason"])
        return (held if held.num_rows else None), unmatched.filter(pc.invert(keep)).drop_columns([RETRY_SINCE])

    def _inferred_member(self, rows: pa.Table, schema: pa.Schema) -> pa.Table:
        """``on_missing: inferred_member``: the tuples whose key R lacks, matched with R's row of
        their key - the placeholder inserted for it, or the one an earlier attempt (a replay) or
        another writer inserted - all of the batch's keys in one transaction
        (:meth:`..core.stores.inferred.InferredMembers.rows_of`), joined back columnar."""
        keys = rows[self.spec.column]
        distinct = pc.unique(keys)
        found = self.inferred.rows_of(distinct) if rows.num_rows else None
        at = pc.index_in(keys, value_set=distinct)
        return with_master_columns(self.spec, self.select, rows, schema, lambda i, column, field_type: (
            found.column(1 + i).take(at) if found is not None else pa.array([], field_type)))

    def _inferred_versions(self, rows: pa.Table, schema: pa.Schema) -> tuple[pa.Table, pa.Table]:
        """``inferred_member`` with ``as_of``: the tuples whose key R lacked, each matched with the
        version of its key valid at its event time - the placeholder (valid at every time), or, where
        R's real rows arrived meanwhile, theirs (:func:`..core.asof.pick_versions`); (the tuples going
        on, those left with their reason: no version valid)."""
        if not rows.num_rows:
            return self._inferred_member(rows, schema), rows.append_column("reason", pa.array([], pa.string()))
        keys = rows[self.spec.column]
        distinct = pc.unique(keys)
        found, of_key = self.inferred.versions_of(distinct)
        at = pc.index_in(keys, value_set=distinct).to_numpy(zero_copy_only=False).astype(np.int64)
        per_key = np.bincount(of_key, minlength=len(distinct))  # found's rows are in key order (of_key sorted)
        first_of_key = np.cumsum(per_key) - per_key
        pairs = per_key[at]  # each tuple with every row of its key
        tuples = np.repeat(np.arange(rows.num_rows), pairs)
        rank = np.arange(len(tuples)) - np.repeat(np.cumsum(pairs) - pairs, pairs)  # the pair's among its tuple's
        versions = np.repeat(first_of_key[at], pairs) + rank
        master = found.drop_columns([self.spec.master.key]).take(pa.array(versions, pa.int64()))
        picked = pick_versions(JoinOutput(tuples, master, np.zeros(0, np.int64), np.zeros(0, np.int8)),
                               rows[self.spec.as_of.event_time].take(pa.array(tuples, pa.int64())),
                               self.spec.as_of.lookup)
        going_on = with_master_columns(self.spec, self.select, rows.take(pa.array(picked.matched_ids, pa.int64())), schema,
                                             lambda i, column, field_type: picked.master[column])
        left = rows.take(pa.array(picked.unmatched_ids, pa.int64()))
        reasons = pa.array(labels(picked.unmatched_reason), pa.string())
        return going_on, left.append_column("reason", reasons)

    def cache_hit_ratio_delta(self) -> float | None:
        counters = self.algorithm.counters
        if not isinstance(counters, CacheProbes):
            return None
        hits, probes = counters.cache_hits, counters.cache_probes
        d_hits, d_probes = hits - self._hits[0], probes - self._hits[1]
        self._hits = (hits, probes)
        return round(d_hits / d_probes, 4) if d_probes else None

    def close(self) -> None:
        self.ahead.stop()
        if self.pruner is not None:
            self.pruner.stop()
        if self.follower is not None:
            self.follower.stop()
        if self.inferred is not None:
            self.inferred.close()
        self.store.close()


def renamed(spec: StepSpec, select: list[str], matched: pa.Table) -> pa.Table:
    """``matched`` with R's ``select`` columns named as the step's output names them."""
    select = set(select)
    return matched.rename_columns([spec.rename.get(n, n) if n in select else n for n in matched.column_names])


def unknown_members(spec: StepSpec, select: list[str], schema: pa.Schema, unmatched: pa.Table) -> tuple[pa.Table, pa.Table]:
    """``on_missing: unknown_member``: (the tuples whose key is not in R, null, or has no version
    valid, with R's columns set to the step's values - each one Arrow scalar repeated, no Python
    list a row - in ``schema``; the rest of ``unmatched``, with their reasons)."""
    fill = pc.is_in(unmatched["reason"], pa.array([NOT_IN_MASTER, NULL_KEY, NO_VERSION_VALID]))
    rows, values = unmatched.filter(fill).drop_columns(["reason"]), spec.unknown_member

    def repeated(i: int, column: str, field_type: pa.DataType) -> pa.Array:
        value = values.get(spec.rename.get(column, column), values.get(column))
        return pa.repeat(pa.scalar(value).cast(field_type), rows.num_rows)

    return with_master_columns(spec, select, rows, schema, repeated), unmatched.filter(pc.invert(fill))


def with_master_columns(spec: StepSpec, select: list[str], rows: pa.Table, schema: pa.Schema, values_of) -> pa.Table:
    """``rows`` with R's ``select`` columns appended, each named as the output names it and cast
    to its type in ``schema`` (``values_of(i, column, type)``: the values of the ``i``-th
    selected column of R, one a row), in ``schema``'s order."""
    for i, column in enumerate(select):
        out = spec.rename.get(column, column)
        field_type = schema.field(out).type
        rows = rows.append_column(out, values_of(i, column, field_type).cast(field_type))
    return rows.select(schema.names)


def went_on(spec: StepSpec, index: int, passed_parts: list[pa.Table], unmatched: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(the rows going on to the next step or the matched sink, the natural key dropped where
    asked; ``unmatched`` as dead-letter rows of step ``index``)."""
    dead = dead_letter_rows(unmatched.drop_columns(["reason"]), index, unmatched["reason"])
    passed = pa.concat_tables(passed_parts, promote_options="default")
    if spec.drop_column:
        passed = passed.drop_columns([spec.column])
    return passed, dead

