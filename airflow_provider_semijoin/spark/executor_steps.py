"""The driver's side of ``data_path: executors`` (:mod:`.executor_rows` has the parts' tasks): for
each step, the cut points of its key range, each part's token and one Spark job a batch
(:class:`ExecutorParts`); a pipeline's steps in turn, the rows a step's parts pass on read by the
next step's parts from files under the checkpoint (:class:`ExecutorSteps`); the parts' figures
added up into the batch's counts and each step's stats. The driver never holds a row: it reads
only the first batch's key column of each step, a control-plane sample of the keys for the cut
points (:class:`.partitioned.RangePartitioner`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..core.errors import ConfigError
from ..core.files import write_private_json
from ..core.session import LOG_BYTES_PER_TUPLE
from ..job.rowbytes import SPILLED_ROW_BYTES
from ..job.spec import JobSpec
from .executor_rows import BatchCall, PartsRun, Routes, bound_of, kept_bound, readable, serve_parts
from .joinstate import StateFiles
from .jobstats import BatchCounts
from .stepstats import PartsStats, PartStats, SliceStats, StepStats


@dataclasses.dataclass
class BatchFigures:
    """What the parts did in one micro-batch, added up on the driver."""

    parts: list  # each part's figures (dicts), in part order
    rebuilds: int

    @property
    def input_rows(self) -> int:
        return sum(p["slice"]["fed"] for p in self.parts)

    def total(self, name: str) -> int:
        return sum(p[name] for p in self.parts)

    def arrivals(self) -> np.ndarray:
        """The left tuples' arrival times, each part's quantiles repeated by its share."""
        points = [np.repeat(p["arrivals"], max(p["left"] // max(len(p["arrivals"]), 1), 1)) for p in self.parts if p["left"]]
        return np.concatenate(points) if points else np.zeros(0)

    def slice_stats(self) -> list[PartStats]:
        return [PartStats(p["part"], SliceStats(**p["slice"]), p["token"], p["worker"]) for p in self.parts]


class ExecutorParts:
    """The driver's side of one step: the cut points of its key range (chosen at the first batch
    with rows, kept in the checkpoint), each part's token, and one call a batch (:meth:`run`)."""

    CUTS = "executor_parts.json"

    def __init__(self, spark, spec: JobSpec, step, retain: int, name: str):
        self.spark, self.spec, self.step, self.retain, self.name = spark, spec, step, retain, name
        index = step.index
        self.folder = Path(spec.checkpoint) / "sj_state" / ("parts" if index == 0 else f"parts-step{index}")
        self.flow = str(Path(spec.checkpoint) / "sj_state" / "flow" / f"step={index}")  # rows for the next step
        self.tokens: dict[int, str] = {}
        self.carried = 0  # tuples inside the parts after the last batch
        self._queue_peak = 0
        self.run_spec: PartsRun | None = None
        room = step.spec.memory_bytes - step.algorithm_memory
        self.max_pending = max(int(room // (SPILLED_ROW_BYTES + LOG_BYTES_PER_TUPLE)) // spec.partitions, 0)
        self.memory = max(step.algorithm_memory // spec.partitions, 1)  # (the structures' share of M, sized for spilled rows)
        self.partitioner = step.partitioned.partitioner if step.partitioned is not None else None  # (one part: no cut)
        self.kept_cuts()

    @property
    def last(self) -> bool:
        return self.step.index == len(self.spec.steps) - 1

    def kept_cuts(self) -> dict | None:
        """The cut points this checkpoint's parts were cut at (None: a new checkpoint); a restart
        with another number of parts fails here, before any batch."""
        path = self.folder / self.CUTS
        if not path.exists():
            return None
        kept = json.loads(path.read_text())
        if kept["parts"] != self.spec.partitions:
            raise ConfigError(f"partitions: {self.spec.partitions}, but the checkpoint {self.spec.checkpoint!r} holds "
                              f"the state of {kept['parts']} parts; expected {kept['parts']}, or a new checkpoint")
        return kept

    def _cut(self, keys, empty: pa.Schema) -> Routes:
        """The routes cut by ``keys`` (the step's key column of its first batch with rows), kept in
        the checkpoint with the schema of a batch's rows. One part takes R's whole range, cut by nothing."""
        if self.partitioner is None:
            ranges = [(None, None)]
        else:
            self.partitioner.assign(keys)
            ranges = self.partitioner.key_ranges()
        self.folder.mkdir(parents=True, exist_ok=True)
        write_private_json(self.folder / self.CUTS, {
            "parts": self.spec.partitions, "ranges": [None if r is None else [kept_bound(b) for b in r] for r in ranges],
            "schema": empty.serialize().to_pybytes().hex()})
        return Routes(ranges, self.step.store.key_type)

    def _run_spec(self, files: list) -> PartsRun | None:
        """What the step's tasks share: the routes and schema kept in the checkpoint, or, at the
        first batch with files, cut and read from them; None while no file has come."""
        if self.run_spec is not None:
            return self.run_spec
        kept = self.kept_cuts()
        if kept is None and not files:
            return None
        spec, index, column = self.spec, self.step.index, self.step.spec.column
        source = spec.source
        columns = None if source.schema is None or index > 0 else [
            part.strip().split()[0].strip("`") for part in source.schema.split(",") if part.strip()]
        if kept is not None:
            empty = pa.ipc.read_schema(pa.py_buffer(bytes.fromhex(kept["schema"])))
            routes = Routes([None if r is None else tuple(bound_of(b) for b in r) for r in kept["ranges"]], self.step.store.key_type)
        else:
            empty = self._empty(files, columns)
            keys = None if self.partitioner is None else pa.concat_tables(
                [pq.read_table(readable(path), columns=[column]) for path, _ in files])[column]  # (the cut's sample)
            routes = self._cut(keys, empty)
        self.run_spec = PartsRun(self.name, self.step.spec, routes, self.memory, self.max_pending,
                                 str(self.folder), self.retain,
                                 spec.sinks.matched.path if self.last else self.flow, spec.sinks.dead_letter.path,
                                 columns, empty, spec.arrival_column, index, self.last, source.id_column)
        return self.run_spec

    def _empty(self, files: list, columns: list | None) -> pa.Schema:
        """The schema of a batch's rows, from the first file's (the source's: with the columns a
        part adds; the step before's rows: as they are)."""
        schema = pq.read_schema(readable(files[0][0]))
        if self.step.index > 0:
            return schema
        fields = [schema.field(c) for c in (columns or schema.names)]
        return pa.schema([pa.field("sj_id", pa.string()), *fields, pa.field("sj_arrival", pa.float64())])

    def run(self, batch_id: int, files: list, version: int, master_read_at: float | None, horizon: float,
            until: float, drain: bool) -> BatchFigures:
        """Batch ``batch_id`` over every part (none while no file has come: nothing is inside)."""
        run = self._run_spec(files)
        if run is None:
            return BatchFigures([], 0)
        call = BatchCall(batch_id, files, version, master_read_at, horizon, until, drain, dict(self.tokens))
        serve = functools.partial(serve_parts, run, call)
        context = self.spark.sparkContext
        slots = context.defaultParallelism
        figures = [json.loads(f) for f in context.parallelize(range(slots), slots).mapPartitions(functools.partial(serve, False)).collect()]
        wanted = set(run.routes.owners.tolist())
        served = [f["part"] for f in figures]
        if len(served) != len(set(served)) or not set(served) <= wanted:
            raise RuntimeError(f"batch {batch_id}: parts {sorted(served)} were served, each once expected of {sorted(wanted)}")
        missing = sorted(wanted - set(served))
        if missing:
            figures += [json.loads(f) for f in context.parallelize(missing, len(missing)).mapPartitions(
                functools.partial(serve, True)).collect()]
        if sorted(f["part"] for f in figures) != sorted(wanted):
            raise RuntimeError(f"batch {batch_id}: parts {sorted(f['part'] for f in figures)} left it, {sorted(wanted)} expected")
        rebuilds = len([p for p in missing if p in call.tokens])  # held warm, but no task found it
        self.tokens = {f["part"]: f["token"] for f in figures}
        done = BatchFigures(sorted(figures, key=lambda f: f["part"]), rebuilds)
        self.carried = done.total("carried")
        return done

    def passed_files(self, batch_id: int) -> list:
        """The files of the rows the step's parts passed on in batch ``batch_id`` (the next step's input)."""
        return [(str(self.run_spec.part_file(self.flow, batch_id, p)), 0.0) for p in self.run_spec.routes.owners.tolist()]

    def step_stats(self, figures: BatchFigures, wall_s: float, read_at: float | None) -> StepStats:
        """The step's stats of the batch from the parts' figures: their slices added up, the
        carried rows and the sessions' logs as the queue's bytes."""
        parts = len(self.run_spec.routes.owners) if self.run_spec is not None else 0
        stats = StepStats(PartsStats.merged(figures.slice_stats(), parts, wall_s, read_at, figures.rebuilds),
                          held_for_retry=0, retried=0, carried=self.carried, passed_tuples=figures.total("matched"),
                          memory_budget_bytes=self.step.spec.memory_bytes, algorithm_memory_bytes=self.step.algorithm_memory)
        queue_bytes = figures.total("queue_bytes")
        self._queue_peak = max(self._queue_peak, queue_bytes)
        stats.account(queue_bytes, figures.total("carried_file_bytes"), self._queue_peak)
        return stats


class ExecutorSteps:
    """The driver's side of a pipeline on the executors: each step's parts (:class:`ExecutorParts`)
    in turn, a Spark job each a batch; a step's parts write the rows they pass on, one file per
    (batch, part) under the checkpoint (``sj_state/flow/step=<i>``), which the next step's parts
    read and route by their own key; the last step's parts write the matched sink. Every step's
    parts write their dead letters, then their state, pending until :meth:`commit_state`. A
    replay runs every step again from its state before the batch, so each (batch, step, part)'s
    files come from one attempt."""

    def __init__(self, spark, spec: JobSpec, steps: list, files: StateFiles):
        name = uuid.uuid4().hex  # this driver's run
        self.steps = [ExecutorParts(spark, spec, step, files.retain, name) for step in steps]
        self.flows = Path(spec.checkpoint) / "sj_state" / "flow"

    @property
    def carried(self) -> int:
        """Tuples inside the steps' parts after the last batch."""
        return sum(step.carried for step in self.steps)

    def run(self, batch_id: int, files: list, versions: list, horizon: float, until: list, drain: bool) -> list[BatchFigures]:
        """Batch ``batch_id`` through every step (``versions``: R's version and read time for each,
        ``until``: each step's slice end); nothing while no file has come."""
        done = []
        for step, (version, read_at), step_until in zip(self.steps, versions, until):
            figures = step.run(batch_id, files, version, read_at, horizon, step_until, drain)
            if step.run_spec is None:  # (the first step's, before any file: nothing is inside any step)
                return [BatchFigures([], 0) for _ in self.steps]
            done.append(figures)
            if not step.last:
                files = step.passed_files(batch_id)
        for folder in self.flows.glob("step=*/batch=*"):  # what a replay of this batch or a later one never reads
            if int(folder.name.split("=")[1]) < batch_id:
                shutil.rmtree(folder, ignore_errors=True)
        return done

    def commit_state(self, batch_id: int) -> None:
        """Once every step's parts have written their sinks of batch ``batch_id``: their state
        after it, written pending, is the one a rebuild reads (:meth:`.executor_rows.PartsRun.commit_state`)."""
        for step in self.steps:
            if step.run_spec is not None:  # (none before the first file: no part ran)
                step.run_spec.commit_state(batch_id)

    @staticmethod
    def counts(figures: list[BatchFigures]) -> BatchCounts:
        """The batch's tuples: in (the first step's), matched (the last step's going on), unmatched
        (every step's dead letters)."""
        return BatchCounts(input_rows=figures[0].input_rows, matched=figures[-1].total("matched"),
                           unmatched=sum(f.total("unmatched") for f in figures), output_rows=figures[-1].total("output_rows"))

    @staticmethod
    def reasons(figures: list[BatchFigures]) -> dict:
        """The dead letters of every step's parts by reason."""
        out: dict = {}
        for part in (p for f in figures for p in f.parts):
            for reason, n in part["reasons"].items():
                out[reason] = out.get(reason, 0) + n
        return out

    @staticmethod
    def arrivals(figures: list[BatchFigures]) -> np.ndarray:
        """The arrival times of the tuples that left (each part's quantiles repeated by its share)."""
        points = [f.arrivals() for f in figures]
        return np.concatenate(points) if points else np.zeros(0)

    def step_stats(self, figures: list[BatchFigures], wall_s: float, versions: list) -> list[StepStats]:
        return [step.step_stats(f, wall_s, read_at) for step, f, (_, read_at) in zip(self.steps, figures, versions)]
