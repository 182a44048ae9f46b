"""Run a :class:`~.spec.JobSpec` as a Spark Structured Streaming query, exactly once.

The query is ``source -> foreachBatch(join steps -> sinks)`` with a checkpoint. Each micro-batch
is collected to the driver as Arrow and *drained* through every join step before the batch
returns (:func:`..core.runner.run_join`), so when Spark commits the batch every tuple of it has
left: matched (to the matched sink) or unmatched with a reason (to the dead-letter sink), or is
held for a retry whose state is saved under the checkpoint for that batch. The sinks replace
what an earlier attempt at the same batch wrote (:mod:`.sinks`), so a batch replayed after a
crash never duplicates a row. The algorithms (and their caches, page statistics, frequency
recorders) live on across micro-batches; correctness never depends on them.

With ``partitions = N`` a batch is split by page-aligned key ranges of R over N instances of
the algorithm running in Spark tasks (:mod:`.partitioned`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..core.errors import ConfigError, SemiJoinError, shown
from ..core.joins.registry import create
from ..core.metrics import latency_ms
from ..core.progress import ProgressRecord
from ..core.reasons import Unmatched
from ..core.runner import run_join
from ..core.stores import open_store
from ..core.stores.sql import IDENTIFIER
from .sinks import dead_letter_rows, open_sink
from .sources import (
    CORRUPT_COLUMN, FILE_COLUMN, check_source, generator_schema, generator_settings, repair_utf8, stream_frame, tuple_ids,
)
from .spec import DeadlineSpec, JobSpec, StepSpec

log = logging.getLogger(__name__)

NOT_IN_MASTER = Unmatched.NOT_IN_MASTER.label
NULL_KEY = Unmatched.NULL_KEY.label
MALFORMED = "malformed_row"
RETRY_SINCE = "sj_retry_since"


@dataclass
class StepResult:
    passed: pa.Table
    dead: pa.Table
    stats: dict


class JoinStep:
    """One join step of the job: its store and algorithm (alive across micro-batches), its
    on-missing policy and, for ``retry``, the tuples held until their key appears in R."""

    def __init__(self, spec: StepSpec, index: int, state_dir: Path, deadline: DeadlineSpec | None = None,
                 retry_max_s: float | None = None):
        self.spec = spec
        self.deadline = deadline
        self.index = index
        self.store = open_store(spec.master.url, spec.master.table, spec.master.key, spec.master.select,
                                retry_max_s=retry_max_s)
        self.algorithm = create(spec.algorithm, self.store, spec.memory_bytes, spec.params)
        self.select = list(self.store.select)
        self.state_dir = state_dir
        self.held: pa.Table | None = None  # retry: tuples waiting, with RETRY_SINCE
        self.held_after_batch: int | None = None
        self._hits = (0, 0)
        self.partitioned = None  # a PartitionedJoin when the job has partitions > 1

    # -- retry state (saved per batch, so a replayed batch starts from the state before it) ----
    def _state_path(self, batch_id: int) -> Path:
        return self.state_dir / f"retry-step{self.index}-batch{batch_id}.parquet"

    def _load_held(self, batch_id: int) -> pa.Table | None:
        if self.held_after_batch == batch_id - 1:
            return self.held
        earlier = [
            (int(p.stem.rsplit("batch", 1)[1]), p) for p in self.state_dir.glob(f"retry-step{self.index}-batch*.parquet")
        ]
        earlier = [(b, p) for b, p in earlier if b < batch_id]
        return pq.read_table(max(earlier)[1]) if earlier else None

    def _save_held(self, batch_id: int, held: pa.Table | None) -> None:
        self.held, self.held_after_batch = held, batch_id
        if self.spec.on_missing != "retry":
            return
        self.state_dir.mkdir(parents=True, exist_ok=True)
        path = self._state_path(batch_id)
        tmp = path.with_suffix(".tmp")
        pq.write_table(held if held is not None else pa.table({}), tmp)
        tmp.rename(path)
        for old in self.state_dir.glob(f"retry-step{self.index}-batch*.parquet"):
            if int(old.stem.rsplit("batch", 1)[1]) < batch_id - 1:
                old.unlink()

    # -- the join ------------------------------------------------------------------------------
    def run(self, rows: pa.Table, batch_id: int, now: float) -> StepResult:
        held = self._load_held(batch_id) if self.spec.on_missing == "retry" else None
        since = pa.array(np.full(rows.num_rows, now))
        if held is not None and held.num_rows:
            since = pa.concat_arrays([held[RETRY_SINCE].combine_chunks(), since])
            rows = pa.concat_tables([held.drop_columns([RETRY_SINCE]), rows], promote_options="default")
        if self.partitioned is not None:
            run = self.partitioned(rows)
        else:  # epoch clock: arrival times and deadlines reach the algorithm (SSIJ schedules by them)
            run = run_join(
                self.algorithm, rows, self.spec.column, clock=time.time,
                arrival=rows["sj_arrival"].to_numpy(zero_copy_only=False), deadline=deadlines_of(self.deadline, rows),
            )
        if not run.stats["exactly_once"]["ok"]:
            raise RuntimeError(f"steps[{self.index}] ({self.algorithm.name}) broke exactly-once: {run.stats['exactly_once']}")
        matched = self._rename(run.matched)
        unmatched = run.unmatched
        reason = unmatched["reason"]
        dead_parts, passed_parts, held_next = [], [matched], None
        policy = self.spec.on_missing
        if policy == "unknown_member":
            fill = pc.is_in(reason, pa.array([NOT_IN_MASTER, NULL_KEY]))
            members = unmatched.filter(fill).drop_columns(["reason"])
            passed_parts.append(self._unknown_member(members, matched.schema))
            unmatched = unmatched.filter(pc.invert(fill))
        elif policy == "retry":
            # unmatched rows keep their positions: find each one's RETRY_SINCE through its sj_id
            waiting_since = _lookup(rows["sj_id"], since, unmatched["sj_id"])
            absent = pc.equal(unmatched["reason"], NOT_IN_MASTER)
            keep = pc.and_(absent, pc.less(pc.subtract(now, waiting_since), self.spec.retry_grace_s))
            held_next = unmatched.filter(keep).drop_columns(["reason"])
            held_next = held_next.append_column(RETRY_SINCE, waiting_since.filter(keep))
            unmatched = unmatched.filter(pc.invert(keep))
        dead_parts.append(dead_letter_rows(unmatched.drop_columns(["reason"]), self.index, unmatched["reason"]))
        if policy == "retry":
            self._save_held(batch_id, held_next)
        passed = pa.concat_tables(passed_parts, promote_options="default")
        if self.spec.drop_column:
            passed = passed.drop_columns([self.spec.column])
        left = len(pc.unique(passed["sj_id"])) if passed.num_rows else 0
        left += unmatched.num_rows + (held_next.num_rows if held_next is not None else 0)
        if left != rows.num_rows:
            raise RuntimeError(f"steps[{self.index}]: {rows.num_rows} tuples entered but {left} left or wait for a retry")
        stats = run.stats
        stats.setdefault("master_version", self.store.seen_version)
        stats["held_for_retry"] = held_next.num_rows if held_next is not None else 0
        stats["retried"] = held.num_rows if held is not None else 0
        return StepResult(passed, pa.concat_tables(dead_parts), stats)

    def _rename(self, matched: pa.Table) -> pa.Table:
        names = [self.spec.rename.get(n, n) if n in self.select else n for n in matched.column_names]
        return matched.rename_columns(names)

    def _unknown_member(self, rows: pa.Table, schema: pa.Schema) -> pa.Table:
        for column in self.select:
            out = self.spec.rename.get(column, column)
            value = self.spec.unknown_member.get(out, self.spec.unknown_member.get(column))
            rows = rows.append_column(out, pa.array([value] * rows.num_rows).cast(schema.field(out).type))
        return rows.select(schema.names)

    def cache_hit_ratio_delta(self) -> float | None:
        extra = self.algorithm.counters.extra
        if "cache_probes" not in extra:
            return None
        hits, probes = extra["cache_hits"], extra["cache_probes"]
        d_hits, d_probes = hits - self._hits[0], probes - self._hits[1]
        self._hits = (hits, probes)
        return round(d_hits / d_probes, 4) if d_probes else None

    def close(self) -> None:
        self.store.close()


def _lookup(ids: pa.ChunkedArray, values: pa.Array, wanted: pa.ChunkedArray) -> pa.Array:
    index = pc.index_in(wanted, value_set=ids.combine_chunks())
    return values.take(index)


@dataclass
class JobState:
    batches: int = 0
    input_rows: int = 0
    matched: int = 0
    unmatched: int = 0
    output_rows: int = 0
    deadline_misses: int = 0
    reconnects: int = 0
    reconnect_wait_s: float = 0.0
    started: float = field(default_factory=time.time)
    last_record: dict | None = None


class BatchProcessor:
    """``foreachBatch`` body: collect, join through every step, write the sinks, report."""

    def __init__(self, spec: JobSpec, on_progress: Callable[[dict], None] | None, print_progress: bool,
                 clock=time.time, spark=None):
        self.spec = spec
        self.on_progress = on_progress
        self.print_progress = print_progress
        self.clock = clock
        self.state_dir = Path(spec.checkpoint) / "sj_state"
        self.steps = [
            JoinStep(step, i, self.state_dir, spec.deadline, spec.db_retry_max_s) for i, step in enumerate(spec.steps)
        ]
        if spec.partitions > 1:
            from .partitioned import PartitionedJoin

            for step in self.steps:
                step.partitioned = PartitionedJoin(spark, step.spec, spec.deadline, step.store, spec.partitions)
        self.matched_sink = open_sink(spec.sinks.matched, spec.db_retry_max_s)
        self.dead_sink = open_sink(spec.sinks.dead_letter, spec.db_retry_max_s)
        self.state = JobState()
        self._reconnects_seen = (0, 0.0)
        self.failure: SemiJoinError | None = None
        self.stopping = threading.Event()  # query.stop() is under way (run_job holds busy)
        self.busy = threading.Lock()  # held by a micro-batch, and by run_job while it stops the query

    def __call__(self, frame, batch_id: int) -> None:
        """Join the micro-batch. One that Spark starts while the query is being stopped runs to
        its end too, without the lock run_job holds: query.stop() cancelled Spark's running jobs
        before it waits for this call, and raising instead would end the query with an ERROR and
        a traceback. Spark may or may not commit it; either way its sinks and state are those of
        its batch id, so a replay rewrites them (exactly once)."""
        while not self.busy.acquire(timeout=0.1):
            if self.stopping.is_set():
                self._join(frame, batch_id)
                return
        try:
            self._join(frame, batch_id)
        finally:
            self.busy.release()

    def _join(self, frame, batch_id: int) -> None:
        try:
            self.process(frame.toArrow(), batch_id)
        except SemiJoinError as exc:  # Spark wraps it in a long trace: run_job raises it as it is
            self.failure = exc
            raise

    def process(self, batch: pa.Table, batch_id: int) -> dict:
        started = self.clock()
        batch = self._prepare(batch)
        n_in = batch.num_rows
        dead = []
        if CORRUPT_COLUMN in batch.column_names:
            bad = pc.is_valid(batch[CORRUPT_COLUMN])
            dead.append(dead_letter_rows(batch.filter(bad), -1, MALFORMED))
            batch = batch.filter(pc.invert(bad)).drop_columns([CORRUPT_COLUMN])
        rows, step_stats = batch, []
        join_seconds = 0.0
        for step in self.steps:
            result = step.run(rows, batch_id, started)
            dead.append(result.dead)
            step_stats.append(result.stats)
            join_seconds += result.stats["wall_s"]
            rows = result.passed
        dead_rows = pa.concat_tables(dead)
        self.matched_sink.write(batch_id, rows)
        self.dead_sink.write(batch_id, dead_rows)
        done = self.clock()
        record = self._record(batch_id, n_in, rows, dead_rows, step_stats, started, done, join_seconds)
        if self.print_progress:
            print(ProgressRecord.from_dict(record).to_line(), flush=True)
        if self.on_progress is not None:
            self.on_progress(record)
        return record

    def _prepare(self, batch: pa.Table) -> pa.Table:
        batch = repair_utf8(batch)
        ids = tuple_ids(batch, self.spec.source)
        if FILE_COLUMN in batch.column_names:
            batch = batch.drop_columns([FILE_COLUMN])
        if "sj_id" in batch.column_names:
            batch = batch.drop_columns(["sj_id"])
        return batch.add_column(0, "sj_id", ids)

    def _record(self, batch_id, n_in, matched, dead, step_stats, started, done, join_seconds) -> dict:
        left = pa.concat_tables(
            [matched.select(["sj_id", "sj_arrival"]), dead.select(["sj_id", "sj_arrival"])], promote_options="default"
        )
        arrival = left["sj_arrival"].to_numpy() if left.num_rows else np.zeros(0)
        latency = latency_ms(np.maximum(done - arrival, 0.0))
        deadlines = deadlines_of(self.spec.deadline, left)
        misses = int(np.sum(done > deadlines)) if deadlines is not None else 0
        n_matched = len(pc.unique(matched["sj_id"])) if matched.num_rows else 0
        s = self.state
        s.batches += 1
        s.input_rows += n_in
        s.matched += n_matched
        s.unmatched += dead.num_rows
        s.output_rows += matched.num_rows
        s.deadline_misses += misses
        reconnects, waited = self._reconnects()
        s.reconnects += reconnects
        s.reconnect_wait_s += waited
        first = self.steps[0]
        ratios = [r for r in (step.cache_hit_ratio_delta() for step in self.steps) if r is not None]
        record = ProgressRecord(
            algorithm="+".join(step.algorithm.name for step in self.steps),
            batch_id=batch_id,
            time=done,
            input_rows=n_in,
            matched=n_matched,
            unmatched=dead.num_rows,
            output_rows=matched.num_rows,
            service_rate_tps=round(n_in / join_seconds, 1) if join_seconds > 0 else None,
            batch_duration_s=round(done - started, 6),
            queue_tuples=sum(st["held_for_retry"] for st in step_stats) + sum(step.algorithm.pending for step in self.steps),
            peak_queue_tuples=n_in + sum(st["retried"] for st in step_stats),
            cache_entries=first.algorithm.stats().get("cache_entries"),
            cache_hit_ratio=ratios[0] if ratios else None,
            disk_queries=int(sum(st["disk_queries"] for st in step_stats)),
            disk_rows=int(sum(st["disk_rows"] for st in step_stats)),
            latency_ms_p50=latency["p50"],
            latency_ms_p99=latency["p99"],
            deadline_misses=misses,
            memory_bytes=int(sum(step.algorithm.structure_bytes() for step in self.steps)),
            unmatched_by_reason=_count(dead["reason"]) if dead.num_rows else {},
            total_input_rows=s.input_rows,
            total_matched=s.matched,
            total_unmatched=s.unmatched,
            total_deadline_misses=s.deadline_misses,
            master_versions=[st["master_version"] for st in step_stats],
            reconnects=reconnects,
            reconnect_wait_s=round(waited, 3),
            total_reconnects=s.reconnects,
            total_reconnect_wait_s=round(s.reconnect_wait_s, 3),
        ).to_dict()
        s.last_record = record
        return record

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
        self.matched_sink.close()
        self.dead_sink.close()


def deadlines_of(deadline: DeadlineSpec | None, rows: pa.Table) -> np.ndarray | None:
    """Each row's absolute deadline in epoch seconds (SSIJ sec. IV-F), or None without deadlines."""
    if deadline is None or rows.num_rows == 0:
        return None
    if deadline.max_latency_s is not None:
        return rows["sj_arrival"].to_numpy(zero_copy_only=False) + deadline.max_latency_s
    column = rows[deadline.column]
    if pa.types.is_timestamp(column.type):
        column = pc.divide(pc.cast(pc.cast(column, pa.timestamp("us")), pa.int64()), 1e6)
    return column.cast(pa.float64()).to_numpy(zero_copy_only=False)


def _count(values: pa.ChunkedArray) -> dict:
    counts = pc.value_counts(values.combine_chunks())
    return {str(v["values"]): int(v["counts"]) for v in counts.to_pylist()}


def check_job(spec: JobSpec) -> None:
    """Everything that can fail before the query starts: source folder, stores, columns, sinks."""
    check_source(spec.source)
    available = _source_columns(spec)
    for i, step in enumerate(spec.steps):
        try:
            with open_store(step.master.url, step.master.table, step.master.key, step.master.select) as store:
                select = list(store.select)
        except SemiJoinError as exc:
            raise ConfigError(f"steps[{i}].master: {exc}") from None
        if available is not None and step.column not in available:
            raise ConfigError(
                f"steps[{i}].column: {step.column!r} is not a column of the stream (columns: {sorted(available)})"
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
        if target.kind == "table":
            from ..core.stores.sql import DatabaseURL

            try:
                DatabaseURL.parse(target.url).connect().close()
            except ConfigError as exc:
                raise ConfigError(f"sinks.{name}: {exc}") from None


def check_table_sink_columns(spec: JobSpec, columns: list[str]) -> None:
    """A table sink quotes the stream's column names as SQL identifiers: a name it cannot hold
    (``amount; DROP TABLE r`` in a CSV header) fails here, before the query starts, not in the
    first micro-batch. The dead letter has a fixed schema of its own."""
    if spec.sinks.matched.kind != "table":
        return
    for column in columns:
        if column not in (FILE_COLUMN, CORRUPT_COLUMN) and not IDENTIFIER.match(column):
            raise ConfigError(
                f"sinks.matched: stream column {shown(column)} is not a valid identifier for a table sink "
                "(expected letters, digits and _, at most 64 characters; rename it in the source)"
            )


def _source_columns(spec: JobSpec) -> set[str] | None:
    """The stream's columns when known before Spark starts (generator, files with a schema)."""
    source = spec.source
    if source.kind == "generator":
        ddl = generator_schema(generator_settings(source))
    elif source.kind == "files" and source.schema is not None:
        ddl = source.schema
    else:
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
) -> dict:
    """Run ``spec`` until its stop condition; returns the summary (also on a requested stop)."""
    check_job(spec)
    from .session import get_spark

    spark = spark or get_spark()
    frame = stream_frame(spark, spec.source, spec.arrival_column)
    check_table_sink_columns(spec, frame.columns)
    if spec.source.kind == "files":
        columns = set(frame.columns)
        first = spec.steps[0].column
        if first not in columns:
            raise ConfigError(f"steps[0].column: {first!r} is not a column of the stream (columns: {sorted(columns - {FILE_COLUMN, 'sj_arrival', CORRUPT_COLUMN})})")
    processor = BatchProcessor(spec, on_progress, print_progress, clock, spark)
    writer = frame.writeStream.foreachBatch(processor).option("checkpointLocation", spec.checkpoint).queryName(spec.name)
    stop = spec.stop
    if stop.end_of_input and spec.source.kind == "files":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{spec.trigger_interval_s} seconds")
    started = clock()
    query = writer.start()
    reason = None
    try:
        while reason is None:
            if _terminated(query, poll_s):
                reason = "end_of_input"
                break
            reason = _stop_reason(spec, processor.state, stop_event, started, clock, query)
        with processor.busy:  # stop between micro-batches, never inside one
            processor.stopping.set()
            query.stop()
        exception = query.exception()
        if exception is not None:
            if processor.failure is not None:  # our own one-sentence error (a database past its retry bound)
                raise processor.failure
            raise RuntimeError(f"the streaming query failed: {str(exception).splitlines()[0]}")
    finally:
        if query.isActive:
            query.stop()
        processor.close()
    s = processor.state
    return {
        "job": spec.name,
        "stopped_by": reason,
        "batches": s.batches,
        "input_rows": s.input_rows,
        "matched": s.matched,
        "unmatched": s.unmatched,
        "output_rows": s.output_rows,
        "deadline_misses": s.deadline_misses,
        "reconnects": s.reconnects,
        "reconnect_wait_s": round(s.reconnect_wait_s, 3),
        "held_for_retry": sum(step.held.num_rows for step in processor.steps if step.held is not None),
        "duration_s": round(clock() - started, 3),
        "last_progress": s.last_record,
    }


def _terminated(query, timeout_s: float) -> bool:
    """Whether the query ended within ``timeout_s``; a failed query counts as ended (its
    exception is read from ``query.exception()``: awaitTermination raises it)."""
    try:
        return bool(query.awaitTermination(timeout_s))
    except Exception:
        return True


def _stop_reason(spec: JobSpec, state: JobState, stop_event, started: float, clock, query) -> str | None:
    stop = spec.stop
    if stop_event is not None and stop_event.is_set():
        return "stop_requested"
    if stop.stop_file and Path(stop.stop_file).exists():
        return "stop_file"
    if stop.duration_s is not None and clock() - started >= stop.duration_s:
        return "duration"
    if stop.max_batches is not None and state.batches >= stop.max_batches:
        return "max_batches"
    if stop.end_of_input and spec.source.bounded and _committed_rows(query) >= spec.source.total_rows:
        return "end_of_input"
    return None


def _committed_rows(query) -> int:
    """Rows of the generator up to the last completed micro-batch (counted over restarts too)."""
    progress = query.lastProgress
    if not progress or not progress.get("sources"):
        return 0
    end = progress["sources"][0].get("endOffset")
    offset = json.loads(end) if isinstance(end, str) else end
    return int(offset["row"]) if isinstance(offset, dict) and "row" in offset else 0


def load_spec(path: str) -> JobSpec:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"spec: file {path!r} does not exist") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"spec: {path!r} is not JSON ({exc.msg} at line {exc.lineno})") from None
    return JobSpec.from_dict(data)
