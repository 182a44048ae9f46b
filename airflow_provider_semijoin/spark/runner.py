"""Run a :class:`~.spec.JobSpec` as a Spark Structured Streaming query, exactly once.

The query is ``source (+ a heartbeat) -> foreachBatch(join steps -> sinks -> state)`` with a
checkpoint. Each micro-batch is collected to the driver as Arrow and fed to every join step,
which runs its algorithm for one bounded slice (:mod:`.joinstate`): the tuples whose page came
round leave - matched (to the matched sink) or unmatched with a reason (to the dead-letter
sink) - the others stay inside the join across micro-batches, as the papers' queue does, until
their page comes round or they have waited ``max_queue_time_s``. After the sinks, each step's
state (the rows still inside, those held for a retry) is written under the checkpoint for the
batch, before Spark commits it; a batch replayed after a crash restarts from the state after
the one before and rewrites its sinks, which replace what an earlier attempt at the same batch
wrote (:mod:`.sinks`), so every tuple leaves exactly once. End of input and a stop drain the
steps in a last micro-batch; at the end of input, where tuples are held for a retry
(``on_missing: retry``), the micro-batches go on, one each trigger, until their key appears or
their grace passes (:meth:`BatchProcessor._end_after`).

The heartbeat (:func:`.sources.with_heartbeat`) makes Spark run a micro-batch every trigger
even when the source is quiet, so a waiting tuple is forced out in time.

With ``partitions = N`` each step's tuples are split by page-aligned key ranges of R over N
instances of the algorithm running in Spark tasks (:mod:`.partitioned`).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.asof import check_event_time, check_lookup
from ..core.stores.system_time import check_declared
from ..core.errors import ConfigError, SemiJoinError
from ..core.metrics import latency_ms
from ..core.progress import ProgressRecord, write_line
from ..core.stores import open_store
from .jobstats import BatchCounts, JobCounts, JobSummary
from .joinstate import StateFiles, deadline_misses, with_deadlines, without_deadlines
from .executor_rows import batch_files, chosen_path
from .executor_steps import ExecutorSteps
from .sinks import dead_letter_rows, open_sink, sink_class
from ..core.reasons import CORRUPT_COLUMN, CORRUPT_REASON, MALFORMED_ROW
from .sources import (FILE_COLUMN, TICK_COLUMN, check_units, raised_in_python, repair_utf8, stream_frame, tuple_ids,
                      with_heartbeat)
from ..job.spec import JobSpec
from .step import JoinStep
from .stepstats import StepStats

log = logging.getLogger(__name__)

RETAIN_CONF = "spark.sql.streaming.minBatchesToRetain"
MAX_STATE_FILES = 10  # state files kept per step at most (each holds the whole queue)
STEP_SHARE = 0.5  # a slice steps for at least this share of the trigger interval while tuples wait
DUE_SAFETY = 2.0  # a tuple due within this many expected batch gaps is forced out now
GAP_DECAY = 0.8  # the expected gap between batch ends forgets a slow batch at this rate
DRAIN_WAIT_S = 120.0  # a stop waits this long for the draining micro-batch (at the end of input: after the last grace), then stops without it
END_OF_INPUT = "end_of_input"
END_WAIT_S = 60.0  # after the draining micro-batch, the query is given this long to end on its own
AHEAD_SWITCH_S = 0.0005  # the driver's GIL switch interval while steps work ahead (Python's default: 5 ms)


@dataclass
class BatchOutcome:
    """What one micro-batch did, as its progress record reports it (:meth:`BatchProcessor._record`)."""

    batch_id: int
    counts: BatchCounts  # the source's rows (heartbeats dropped), the tuples that left, the rows written, deadline misses
    arrivals: np.ndarray  # the arrival time of each tuple that left (or, from the parts on the executors, quantiles of them)
    reasons: dict  # the dead letter's rows by reason
    steps: list[StepStats]  # each join step's, in order
    started: float
    done: float
    drained: str | None  # why the batch drained the steps (None: it did not)
    cache_entries: int | None  # the first step's cache entries
    cache_hit_ratio: float | None  # the first cache hit ratio of the batch


class BatchProcessor:
    """``foreachBatch`` body: collect, feed every join step one slice, write the sinks, then the
    steps' carried state (before Spark commits the batch), report.

    A micro-batch drains the steps instead (every tuple inside leaves) when the job is to stop:
    a stop was requested (:meth:`request_drain`), the source ended (the bounded generator's last
    row, or a trigger that found no new file), or it is the last of ``max_batches``; the progress
    record then says ``drained`` and why. A stop is a pause: the tuples held for a retry stay in
    the checkpoint's state for the next run. The end of input is the end: the job drains until no
    tuple is held (:meth:`_end_after`).

    ``at_point(point, batch_id)`` is called at the named points of each batch (``batch``: before
    its sinks; ``sinks``: between the sinks and the state; ``state``: between the state and
    Spark's commit): the tests of exactly-once kill the driver there.

    ``units``: the unit a Parquet landing folder's timestamp columns are read in, decided at the
    start (:func:`.sources.read_files`); each micro-batch's files are checked against it before
    Spark or the executors read them (:func:`.sources.check_units`).
    """

    def __init__(self, spec: JobSpec, on_progress: Callable[[dict], None] | None, print_progress: bool,
                 clock=time.time, spark=None, at_point: Callable[[str, int], None] | None = None,
                 units: dict[str, str] | None = None):
        self.spec = spec
        self.units = units or {}
        self.at_point = at_point or (lambda point, batch_id: None)
        self.on_progress = on_progress
        self.print_progress = print_progress
        self.clock = clock
        retain = int(spark.conf.get(RETAIN_CONF, "100")) if spark is not None else 100
        self.files = StateFiles(Path(spec.checkpoint) / "sj_state", min(retain, MAX_STATE_FILES))
        self.steps = [
            JoinStep(step, i, spec.deadline, spec.db_retry_max_s, spark, spec.partitions, clock, spec.checkpoint)
            for i, step in enumerate(spec.steps)
        ]
        self.matched_sink = open_sink(spec.sinks.matched, spec.db_retry_max_s)
        self.dead_sink = open_sink(spec.sinks.dead_letter, spec.db_retry_max_s)
        self.counts = JobCounts()  # the totals since the job started
        self._reconnects_seen = (0, 0.0)
        self.failure: SemiJoinError | None = None
        self.stopping = threading.Event()  # query.stop() is under way (run_job holds busy)
        self.busy = threading.Lock()  # held by a micro-batch, and by run_job while it stops the query
        self.query = None  # set by run_job: the draining micro-batch has it end on its own (end_after_batch)
        self.ending = threading.Event()  # the draining micro-batch is done; the query ends after its commit
        self.drain_reason: str | None = None  # a stop asked for: the next batch drains
        self.drained: str | None = None  # set once a batch drained every step
        self.waits_for_grace = False  # the input ended with tuples held for a retry (:meth:`_end_after`)
        self._gap = spec.trigger_interval_s  # expected time to the end of the next batch (decayed)
        self.on_executors = None if spec.data_path != "executors" else ExecutorSteps(spark, spec, self.steps, self.files)
        self._switch_interval = sys.getswitchinterval()
        if spec.work_ahead and spec.partitions == 1:  # Spark's calls here wait for the GIL a step working ahead holds
            sys.setswitchinterval(AHEAD_SWITCH_S)  # at most this long (measured: Spark's share of a batch 1.4 -> 1.2 s)

    def request_drain(self, reason: str) -> None:
        """The next micro-batch drains every step (a stop: ``reason`` goes in its record). A stop
        asked while the end of input waits for held tuples' grace ends the job at that batch."""
        if self.drain_reason in (None, END_OF_INPUT):
            self.drain_reason = reason

    def held_for_retry(self) -> int:
        """Tuples the steps hold for a retry now."""
        return sum(step.held.num_rows for step in self.steps if step.held is not None)

    def grace_ends(self) -> float | None:
        """When the grace of the last tuple held for a retry passes (None: none is held)."""
        ends = [end for end in (step.grace_ends() for step in self.steps) if end is not None]
        return max(ends, default=None)

    def __call__(self, frame, batch_id: int) -> None:
        """Join the micro-batch. One that Spark starts while the query is being stopped runs to
        its end too, without the lock run_job holds: query.stop() cancelled Spark's running jobs
        before it waits for this call, and raising instead would end the query with an ERROR and
        a traceback. Spark may or may not commit it; either way its sinks and state are those of
        its batch id, so a replay rewrites them (exactly once).

        The micro-batch that drained the joins has the query end once Spark has committed it
        (:func:`end_after_batch`), so a stop never interrupts Spark writing its logs or
        planning the next batch."""
        while not self.busy.acquire(timeout=0.1):
            if self.stopping.is_set():
                self._join(frame, batch_id)
                return
        try:
            self._join(frame, batch_id)
        finally:
            self.busy.release()
        if self.drained is not None and self.query is not None and end_after_batch(self.query):
            self.ending.set()

    def _join(self, frame, batch_id: int) -> None:
        try:
            if self.on_executors is not None:  # the rows stay on the executors: the frame is not read here
                self.process_files(batch_id)
            else:
                if self.units:  # the frame is lazy: Spark reads the batch's files in toArrow, after this
                    check_units([uri for uri, _ in batch_files(self.spec.checkpoint, batch_id)], self.units)
                self.process(frame.toArrow(), batch_id)
        except SemiJoinError as exc:  # Spark wraps it in a long trace: run_job raises it as it is
            self.failure = exc
            raise

    def process(self, batch: pa.Table, batch_id: int) -> dict:
        self.at_point("batch", batch_id)
        started = self.clock()
        batch, source_rows = self._source_rows(batch)
        drain = self._drain_now(batch, source_rows)
        batch = with_deadlines(self._prepare(batch), self.spec.deadline)
        n_in = batch.num_rows
        dead = []
        if CORRUPT_COLUMN in batch.column_names:
            bad = pc.is_valid(batch[CORRUPT_COLUMN])
            dead.append(_source_dead_letters(batch.filter(bad)))
            batch = batch.filter(pc.invert(bad)).drop_columns([c for c in (CORRUPT_COLUMN, CORRUPT_REASON) if c in batch.column_names])
        share = STEP_SHARE * self.spec.trigger_interval_s / len(self.steps)
        horizon, until = started + DUE_SAFETY * self._gap, started + share
        rows, step_stats = batch, []
        replayed = self.files.read_versions(batch_id)  # a replay reads the versions its first attempt read
        for i, step in enumerate(self.steps):
            step.restore(self.files, batch_id)
            result = step.run(rows, batch_id, started, horizon, until, drain is not None,
                              None if replayed is None else replayed[i])
            until += share
            dead.append(result.dead)
            step_stats.append(result.stats)
            rows = result.passed
        cache_entries, cache_hit_ratio = self._cache_figures()
        if drain is None:  # the cut: the state after this batch is fixed
            for step in self.steps:
                step.refresh_if_due()
                if self.spec.work_ahead:
                    step.start_ahead()
        dead_rows = pa.concat_tables(dead, promote_options="default")
        if replayed is None:
            self.files.write_versions(batch_id, [[st.join.master_version, st.join.master_read_at] for st in step_stats])
        self.matched_sink.write(batch_id, without_deadlines(rows))
        self.dead_sink.write(batch_id, without_deadlines(dead_rows))
        self.at_point("sinks", batch_id)
        for step, stats in zip(self.steps, step_stats):
            step.write_state(self.files, batch_id)
            step.account(stats)
        self.at_point("state", batch_id)
        done = self.clock()
        self._gap = max(self.spec.trigger_interval_s, done - started, GAP_DECAY * self._gap)
        record = self._record(BatchOutcome(batch_id, self._left(n_in, rows, dead_rows, done), _arrivals(rows, dead_rows),
                                           _count(dead_rows["reason"]) if dead_rows.num_rows else {}, step_stats,
                                           started, done, drain, cache_entries, cache_hit_ratio))
        self._after(record, drain)
        return record

    def process_files(self, batch_id: int) -> dict:
        """``data_path: executors``: batch ``batch_id`` by its files (Spark's checkpoint names them),
        joined by the parts on the executors, which write the sinks, then their state pending until
        the driver commits it after the ``sinks`` point (:mod:`.executor_rows`); the driver reads
        R's version for the batch and adds up the parts' figures into the progress record."""
        self.at_point("batch", batch_id)
        started = self.clock()
        files = batch_files(self.spec.checkpoint, batch_id)
        check_units([uri for uri, _ in files], self.units)  # before the executors read them
        drain = self._drain_now(None, len(files))
        replayed = self.files.read_versions(batch_id)  # a replay reads the versions its first attempt read
        versions = replayed if replayed is not None else [
            [step.store.version(), self.clock() if step.store.has_change_log() else None] for step in self.steps]
        if replayed is None:
            self.files.write_versions(batch_id, versions)
        share = STEP_SHARE * self.spec.trigger_interval_s / len(self.steps)
        horizon = started + DUE_SAFETY * self._gap
        figures = self.on_executors.run(batch_id, files, versions, horizon,
                                        [started + share * (i + 1) for i in range(len(self.steps))], drain is not None)
        self.at_point("sinks", batch_id)  # every part wrote its sinks; its state is pending
        self.on_executors.commit_state(batch_id)
        self.at_point("state", batch_id)
        done = self.clock()
        self._gap = max(self.spec.trigger_interval_s, done - started, GAP_DECAY * self._gap)
        steps = self.on_executors
        record = self._record(BatchOutcome(batch_id, steps.counts(figures), steps.arrivals(figures), steps.reasons(figures),
                                           steps.step_stats(figures, done - started, versions), started, done, drain,
                                           None, None))
        self._after(record, drain)
        return record

    def queue_tuples(self) -> int:
        """Tuples inside the joins now."""
        if self.on_executors is not None:
            return self.on_executors.carried
        return sum(step.carried.count for step in self.steps)

    def _left(self, input_rows: int, matched: pa.Table, dead: pa.Table, done: float) -> BatchCounts:
        """The batch's counts of the tuples that left through the driver."""
        return BatchCounts(input_rows=input_rows, matched=self._tuples_of(matched), unmatched=dead.num_rows,
                           output_rows=matched.num_rows, deadline_misses=deadline_misses(done, matched, dead))

    def _after(self, record: dict, drain: str | None) -> None:
        """The batch's record out; after a drain, whether the job ends."""
        if drain is not None:
            self._end_after(drain)
        if self.print_progress:
            write_line(ProgressRecord.from_dict(record).to_line())
        if self.on_progress is not None:
            self.on_progress(record)

    def _end_after(self, drain: str) -> None:
        """After a batch that drained the steps: the job ends (the query, after Spark's commit),
        unless the input ended while tuples are held for a retry (``on_missing: retry``, or
        ``inferred_member`` with a grace). Then every later batch - one each trigger interval, the
        heartbeat's, as while the stream ran: a held tuple is retried each micro-batch, so the
        wait is no busier than the stream was - retries them, until each one's key appears in R
        (matched) or its grace passes (the step's final on-missing policy); the last grace bounds
        the wait (:func:`_await_stop`)."""
        held = self.held_for_retry()
        if drain != END_OF_INPUT or not held:
            self.drained = drain
            return
        if self.drain_reason is None:  # the source's later batches need not say so (the generator's are empty)
            self.drain_reason = END_OF_INPUT
        if not self.waits_for_grace:
            self.waits_for_grace = True
            left = max(self.grace_ends() - self.clock(), 0.0)
            self._say(f"end of input: the job waits up to {left:.1f} s for the grace of {held} tuples held for a "
                      f"retry, retried every micro-batch until their key appears in R or their grace passes")

    def _say(self, message: str) -> None:
        """A line for the task log: logged, and printed beside the progress lines by the driver."""
        log.info("%s", message)
        if self.print_progress:
            write_line(message)

    def _drain_now(self, batch: pa.Table | None, source_rows: int) -> str | None:
        """Why this batch drains the steps (None: it does not)."""
        if self.drained is not None or self.drain_reason is not None:  # the job is stopping: every batch drains
            return self.drained or self.drain_reason
        spec = self.spec
        if spec.stop.max_batches is not None and self.counts.batches + 1 >= spec.stop.max_batches:
            return "max_batches"
        if spec.stop.end_of_input:
            if spec.source.ends_when_idle and source_rows == 0 and self.counts.batches > 0:
                return END_OF_INPUT  # the trigger found no new file
            rows = spec.source.row_column
            if spec.source.bounded and rows is not None and batch.num_rows and pc.max(batch[rows]).as_py() + 1 >= spec.source.total_rows:
                return END_OF_INPUT
        return None

    @staticmethod
    def _source_rows(batch: pa.Table) -> tuple[pa.Table, int]:
        """The source's rows (heartbeat rows dropped), and how many there are."""
        if TICK_COLUMN in batch.column_names:
            batch = batch.filter(pc.is_null(batch[TICK_COLUMN])).drop_columns([TICK_COLUMN])
        return batch, batch.num_rows

    def _prepare(self, batch: pa.Table) -> pa.Table:
        batch = repair_utf8(batch)
        ids = tuple_ids(batch, self.spec.source)
        if FILE_COLUMN in batch.column_names:
            batch = batch.drop_columns([FILE_COLUMN])
        if "sj_id" in batch.column_names:
            batch = batch.drop_columns(["sj_id"])
        return batch.add_column(0, "sj_id", ids)

    def _cache_figures(self) -> tuple[int | None, float | None]:
        """The first step's cache entries and the first cache hit ratio of this batch (read before
        the steps work ahead: then their threads hold the algorithms)."""
        ratios = [r for r in (step.cache_hit_ratio_delta() for step in self.steps) if r is not None]
        return self.steps[0].algorithm.stats().get("cache_entries"), ratios[0] if ratios else None

    def _record(self, batch: BatchOutcome) -> dict:
        """The batch's progress record; its counts go into the job's totals."""
        steps, done, counts = batch.steps, batch.done, batch.counts
        latency = latency_ms(np.maximum(done - batch.arrivals, 0.0))
        counts.reconnects, counts.reconnect_wait_s = self._reconnects()
        total = self.counts
        total.add(counts)
        joins = [st.join for st in steps]
        join_seconds = sum(j.wall_s for j in joins)
        record = ProgressRecord(
            algorithm="+".join(step.algorithm.name for step in self.steps),
            batch_id=batch.batch_id,
            time=done,
            input_rows=counts.input_rows,
            matched=counts.matched,
            unmatched=counts.unmatched,
            output_rows=counts.output_rows,
            service_rate_tps=round(counts.input_rows / join_seconds, 1) if join_seconds > 0 else None,
            batch_duration_s=round(done - batch.started, 6),
            ahead_s=round(sum(j.ahead_s for j in joins), 6),
            ahead_bytes=int(sum(j.ahead_bytes for j in joins)),
            queue_tuples=sum(st.held_for_retry + st.carried for st in steps),
            peak_queue_tuples=max((j.pending + j.left for j in joins), default=0),
            queue_bytes=int(sum(st.queue_bytes for st in steps)),
            carried_file_bytes=int(sum(st.carried_file_bytes for st in steps)),
            drained=batch.drained,
            cache_entries=batch.cache_entries,
            cache_hit_ratio=batch.cache_hit_ratio,
            disk_queries=int(sum(j.disk_queries for j in joins)),
            disk_rows=int(sum(j.disk_rows for j in joins)),
            latency_ms_p50=latency["p50"],
            latency_ms_p99=latency["p99"],
            deadline_misses=counts.deadline_misses,
            memory_bytes=int(sum(j.structure_bytes for j in joins)),
            structure_bytes_peak=int(sum(j.structure_bytes_peak for j in joins)),
            memory_budget_bytes=int(sum(st.memory_budget_bytes for st in steps)),
            memory_peak_bytes=int(sum(st.memory_peak_bytes for st in steps)),
            unmatched_by_reason=batch.reasons,
            total_input_rows=total.input_rows,
            total_matched=total.matched,
            total_unmatched=total.unmatched,
            total_deadline_misses=total.deadline_misses,
            master_versions=[j.master_version for j in joins],
            master_staleness_s=[None if j.master_read_at is None else round(max(done - j.master_read_at, 0.0), 3)
                                for j in joins],
            reconnects=counts.reconnects,
            reconnect_wait_s=round(counts.reconnect_wait_s, 3),
            total_reconnects=total.reconnects,
            total_reconnect_wait_s=round(total.reconnect_wait_s, 3),
            part_rebuilds=sum(j.rebuilds for j in joins),
        ).to_dict()
        total.last_record = record
        return record

    def _tuples_of(self, rows: pa.Table) -> int:
        """The stream tuples ``rows`` hold: one row each where every step passes one row per tuple
        (the ids need not be counted: ``pc.unique`` over a million string ids took 0.27 s of a
        3.6 s micro-batch), else the distinct ``sj_id``."""
        if not rows.num_rows or all(step.one_row_per_tuple for step in self.steps):
            return rows.num_rows
        return len(pc.unique(rows["sj_id"]))

    def _reconnects(self) -> tuple[int, float]:
        """Reconnects and seconds waited for the databases since the last record (stores, sinks)."""
        counters = [step.store.counters for step in self.steps]
        now = (sum(c.reconnects for c in counters), sum(c.reconnect_wait_s for c in counters))
        for sink in (self.matched_sink, self.dead_sink):
            now = (now[0] + sink.reconnects, now[1] + sink.reconnect_wait_s)
        before, self._reconnects_seen = self._reconnects_seen, now
        return now[0] - before[0], now[1] - before[1]

    def close(self) -> None:
        for step in self.steps:
            step.close()
        sys.setswitchinterval(self._switch_interval)
        self.matched_sink.close()
        self.dead_sink.close()


def check_as_of(step, index: int, store, types: dict, available: set | None) -> None:
    """An as-of step's table has its version columns - or is system-versioned, as declared -
    and the stream (when its columns are known) its event time: one sentence before any work
    (:mod:`..core.asof`, :mod:`..core.stores.system_time`)."""
    try:
        check_declared(store.connection, store.table, step.as_of.system_time, step.as_of.lookup.version_columns)
        stream = None if available is None else available - {"sj_arrival"}
        if not step.as_of.system_time:
            check_lookup(step.as_of.lookup, types, store.table, stream)
            return
        if store.captured_from_binlog():
            raise ConfigError(f"as_of.system_time: {store.table!r} has its changes captured from the binary log, whose "
                              "before-images of a system-versioned R lack its history; expected triggers "
                              "(semijoin changes disable, then change_capture: triggers)")
        check_event_time(step.as_of.lookup, stream)
    except ConfigError as exc:
        raise ConfigError(f"steps[{index}].{exc}") from None


def _source_dead_letters(rows: pa.Table) -> pa.Table:
    """The rows the source could not give as tuples, in the dead letter's form: the reason the
    source gave (``CORRUPT_REASON``: a Redis entry's), else ``malformed_row`` (a landing file's)."""
    if CORRUPT_REASON not in rows.column_names:
        return dead_letter_rows(rows, -1, MALFORMED_ROW)
    return dead_letter_rows(rows.drop_columns([CORRUPT_REASON]), -1, rows[CORRUPT_REASON].combine_chunks())


def _arrivals(*left: pa.Table) -> np.ndarray:
    """The arrival time of each row of ``left`` (the tuples that left)."""
    return np.concatenate([t["sj_arrival"].to_numpy() for t in left if t.num_rows] or [np.zeros(0)])


def _count(values: pa.ChunkedArray) -> dict:
    counts = pc.value_counts(values.combine_chunks())
    return {str(v["values"]): int(v["counts"]) for v in counts.to_pylist()}


def check_job(spec: JobSpec) -> None:
    """Everything that can fail before the query starts: source folder, stores, columns, sinks."""
    spec.source.check_ready()
    available = _source_columns(spec)
    for i, step in enumerate(spec.steps):
        try:
            store = open_store(step.master.url, step.master.table, step.master.key, step.master.select)
        except SemiJoinError as exc:
            raise ConfigError(f"steps[{i}].master: {exc}") from None
        with store:
            select = list(store.select)
            types = {c.name: c.arrow_type for c in store.columns}
            if step.as_of is not None:
                check_as_of(step, i, store, types, available)
        if available is not None and step.column not in available:
            raise ConfigError(
                f"steps[{i}].column: {step.column!r} is not a column of the stream (columns: {sorted(available - {'sj_arrival'})})"
            )
        if available is not None:
            outputs = [step.rename.get(c, c) for c in select]
            clash = sorted(set(outputs) & available)
            if clash:
                raise ConfigError(f"steps[{i}].master.select: column {clash[0]!r} is already a stream column; rename it")
            available |= set(outputs)
            if step.drop_column:
                available.discard(step.column)
        if step.on_missing == "unknown_member":
            unknown = sorted(set(step.unknown_member) - {step.rename.get(c, c) for c in select} - set(select))
            if unknown:
                raise ConfigError(f"steps[{i}].unknown_member: {unknown[0]!r} is not a selected master column ({select})")
    for name in ("matched", "dead_letter"):
        target = getattr(spec.sinks, name)
        sink_class(target).check_ready(target, f"sinks.{name}")


def check_sink_columns(spec: JobSpec, columns: list[str]) -> None:
    """The matched sink can hold the stream's columns (:meth:`.sinks.Sink.check_columns`), checked
    before the query starts; the dead letter has a fixed schema of its own."""
    kept = [c for c in columns if c not in (FILE_COLUMN, CORRUPT_COLUMN, CORRUPT_REASON)]  # (dropped before the sinks)
    sink_class(spec.sinks.matched).check_columns(kept, "sinks.matched")


def _source_columns(spec: JobSpec) -> set[str] | None:
    """The stream's columns when known before Spark starts (generator, files with a schema)."""
    ddl = spec.source.stream_ddl
    if ddl is None:
        return None
    return {part.strip().split()[0].strip("`") for part in ddl.split(",") if part.strip()}


def run_job(
    spec: JobSpec,
    *,
    spark=None,
    on_progress: Callable[[dict], None] | None = None,
    stop_event: threading.Event | None = None,
    print_progress: bool = False,
    clock=time.time,
    poll_s: float = 0.2,
    at_point: Callable[[str, int], None] | None = None,
) -> dict:
    """Run ``spec`` until its stop condition; returns the summary (also on a requested stop).
    ``at_point``: called at the named points of each micro-batch (:class:`BatchProcessor`)."""
    check_job(spec)
    from .session import get_spark

    spark = spark or get_spark(partitions=spec.partitions)
    data_path, why = chosen_path(spec, spark.conf)
    log.info("%s", why)
    if print_progress:
        write_line(why)
    spec = replace(spec, data_path=data_path)
    frame, units = stream_frame(spark, spec.source, spec.arrival_column, spec.db_retry_max_s)
    check_sink_columns(spec, frame.columns)
    columns = set(frame.columns)  # known now for every source (an inferred schema, a Spark source's)
    first = spec.steps[0].column
    if first not in columns:
        raise ConfigError(f"steps[0].column: {first!r} is not a column of the stream (columns: {sorted(columns - {FILE_COLUMN, 'sj_arrival', CORRUPT_COLUMN, CORRUPT_REASON})})")
    processor = BatchProcessor(spec, on_progress, print_progress, clock, spark, at_point, units)
    writer = (with_heartbeat(spark, frame).writeStream.foreachBatch(processor)
              .option("checkpointLocation", spec.checkpoint).queryName(spec.name)
              .trigger(processingTime=f"{spec.trigger_interval_s} seconds"))
    started = clock()
    query = processor.query = writer.start()
    try:
        reason = _await_stop(spec, processor, query, stop_event, started, clock, poll_s)
        if processor.drained is not None and processor.ending.wait(END_WAIT_S):
            _terminated(query, END_WAIT_S)  # it ends on its own after the draining batch's commit
        processor.stopping.set()
        with processor.busy:  # stop between micro-batches, never inside one
            query.stop()
        exception = query.exception()
        if exception is not None:
            if processor.failure is not None:  # our own one-sentence error (a database past its retry bound)
                raise processor.failure
            raise raised_in_python(str(exception)) or RuntimeError(f"the streaming query failed: {str(exception).splitlines()[0]}")
    finally:
        if query.isActive:
            query.stop()
        processor.close()
    return JobSummary(
        job=spec.name, stopped_by=reason, drained=processor.drained, counts=processor.counts,
        held_for_retry=processor.held_for_retry(),
        queue_tuples=processor.queue_tuples(), duration_s=clock() - started,
    ).to_dict()


def _await_stop(spec: JobSpec, processor: BatchProcessor, query, stop_event, started: float, clock,
                poll_s: float) -> str:
    """Wait for a stop condition, have the next micro-batch drain the joins, and wait for it
    (at most DRAIN_WAIT_S, after the last held tuple's grace at the end of input: then the
    tuples inside stay in the checkpoint's state); the reason. A stop asked while the end of
    input waits for held tuples' grace is a pause: it ends the job at the next batch."""
    reason, asked = None, None
    while True:
        if _terminated(query, poll_s):
            return reason or processor.drained or "query_ended"
        if processor.drained is not None:
            return reason or processor.drained
        if reason in (None, END_OF_INPUT):
            found = _stop_reason(spec, processor.counts, stop_event, started, clock, query)
            if found is not None and found != reason:
                reason, asked = found, clock()
                processor.request_drain(reason)
        if reason is not None and clock() - max(asked, _grace_ends(processor, reason)) > DRAIN_WAIT_S:
            log.warning("no micro-batch drained the joins within %.0f s of the stop (%s); the tuples inside "
                        "stay in the checkpoint's state", DRAIN_WAIT_S, reason)
            return reason


def _grace_ends(processor: BatchProcessor, reason: str) -> float:
    """At the end of input, when the last held tuple's grace passes (0: none is held, or a pause)."""
    ends = processor.grace_ends() if reason == END_OF_INPUT else None
    return ends if ends is not None else 0.0


def end_after_batch(query) -> bool:
    """Have the streaming query end on its own once the running micro-batch has committed.

    ``query.stop()`` interrupts Spark's stream thread wherever it is: writing the offset or
    commit log (Hadoop's local file system then logs the InterruptedException of its ``chmod``
    with a Java stack trace) or planning the next batch. A query whose state is TERMINATED
    instead leaves its trigger loop after the running batch, and a later ``stop()`` finds no
    thread to interrupt. Spark has no public call for that, so this sets the state of Spark 4's
    ``StreamExecution`` through the JVM; False (and the plain stop) where that is not possible."""
    try:
        from pyspark import SparkContext

        cls = SparkContext._jvm.java.lang.Class.forName("org.apache.spark.sql.execution.streaming.runtime.TERMINATED$")
        query._jsq.streamingQuery().state().set(cls.getField("MODULE$").get(None))
        return True
    except Exception as exc:  # noqa: BLE001 - another Spark version: py4j's errors
        log.info("the query is stopped by query.stop() (%s)", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return False


def _terminated(query, timeout_s: float) -> bool:
    """Whether the query ended within ``timeout_s``; a failed query counts as ended (its
    exception is read from ``query.exception()``: awaitTermination raises it)."""
    try:
        return bool(query.awaitTermination(timeout_s))
    except Exception:
        return True


def _stop_reason(spec: JobSpec, counts: JobCounts, stop_event, started: float, clock, query) -> str | None:
    """A stop asked from outside (an event, the stop file), or the job's own bound reached."""
    stop = spec.stop
    if stop_event is not None and stop_event.is_set():
        return "stop_requested"
    if stop.stop_file and Path(stop.stop_file).exists():
        return "stop_file"
    if stop.duration_s is not None and clock() - started >= stop.duration_s:
        return "duration"
    if stop.max_batches is not None and counts.batches >= stop.max_batches:
        return "max_batches"
    if stop.end_of_input and spec.source.bounded and _committed_rows(query) >= spec.source.total_rows:
        return END_OF_INPUT
    return None


def _committed_rows(query) -> int:
    """Rows of the generator up to the last completed micro-batch (counted over restarts too)."""
    progress = query.lastProgress
    for source in (progress or {}).get("sources") or []:  # the generator's offset: {"row": n, ...}
        end = source.get("endOffset")
        offset = json.loads(end) if isinstance(end, str) and end.startswith("{") else end
        if isinstance(offset, dict) and "row" in offset:
            return int(offset["row"])
    return 0


def load_spec(path: str) -> JobSpec:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"spec: file {path!r} does not exist") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"spec: {path!r} is not JSON ({exc.msg} at line {exc.lineno})") from None
    return JobSpec.from_dict(data)
