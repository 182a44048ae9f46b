"""``partitions = N``: one micro-batch split by page-aligned key ranges of R over N instances of
the algorithm, each running in a Spark task (``mapInArrow``) and reading only the pages of its
own keys.

The driver assigns every tuple to a part by its key (:class:`RangePartitioner`): the cut points
are page boundaries of R chosen so that each part receives about the same number of tuples,
counted over the micro-batches seen so far (with decay), so a Zipf-hot range does not land on
one instance together with half of R; the cuts move only when new ones would shrink the busiest
part's load by :data:`REBALANCE`, since each part's store sees its own key range only
(:meth:`..core.stores.base.MasterStore.restrict`: its page map, MESHJOIN's and SSIJ's cycles,
its loads) and an instance whose range moved is rebuilt. Each task keeps its algorithm
instances alive across micro-batches in the Python worker (``spark.python.worker.reuse``), one
per (step, part), with memory budget M/N each; they are rebuilt where a worker is new, which
costs warm-up, never correctness. All parts of a micro-batch read R at the version the driver
chose for it (:meth:`..core.stores.base.MasterStore.reading_at`), however late each task runs.
Every tuple belongs to exactly one part and each part is drained before the task returns, so
exactly-once holds as in the single-instance path.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.joins.registry import create
from ..core.keys import normalize
from ..core.runner import JoinRun, check_exactly_once, run_join
from ..core.stores import open_store
from .spec import DeadlineSpec, StepSpec

PART_COLUMN = "sj_part"
STATS_COLUMN = "sj_stats"
REASON_COLUMN = "reason"
DECAY = 0.8  # weight of the past micro-batches' key frequencies
PART_STATS = ("tuples_in", "wall_s", "disk_queries", "disk_rows", "disk_s")  # each part's, in the step's stats
REBALANCE = 1.25  # re-cut when that shrinks the busiest part's share of the (decayed) tuples this much

_INSTANCES: dict[tuple[str, int], object] = {}  # per Python worker: (step json, part) -> algorithm


class RangePartitioner:
    """Cut R's page map into N ranges of about equal observed stream frequency."""

    def __init__(self, store, parts: int, page_rows: int = 1000):
        self.parts = parts
        self.store = store
        self.page_map = store.page_map(page_rows)
        self.frequency = np.ones(self.page_map.n_pages)  # before any batch: every page alike
        self.cuts = self.cut_pages()

    def cut_pages(self) -> np.ndarray:
        """First page of parts 1..N-1 (non-decreasing) balancing the observed frequency."""
        cumulative = np.cumsum(self.frequency)
        targets = cumulative[-1] * np.arange(1, self.parts) / self.parts
        return np.searchsorted(cumulative, targets, side="left") + 1

    def _busiest(self, cuts: np.ndarray) -> float:
        part_of_page = np.searchsorted(cuts, np.arange(self.page_map.n_pages), side="right")
        return float(np.bincount(part_of_page, weights=self.frequency, minlength=self.parts).max())

    def _recut(self) -> None:
        """New cuts when they shrink the busiest part's load by REBALANCE (a hot page that
        outweighs a fair share cannot be split: no re-cut chases it)."""
        balanced = self.cut_pages()
        if self._busiest(self.cuts) > REBALANCE * self._busiest(balanced):
            self.cuts = balanced

    def key_ranges(self) -> list[tuple | None]:
        """Each part's key range ``(lo, hi)`` of R as R spells its page bounds (None: unbounded;
        the part of page 0 from below, the part of the last page upwards), or None for a part
        with no page."""
        n = self.page_map.n_pages
        firsts = np.minimum(np.r_[0, self.cuts], n)
        ends = np.minimum(np.r_[self.cuts, n], n)
        spelled = self.page_map.bound_values  # keys in a collation: their sort keys are not SQL values
        bounds = [b.item() for b in self.page_map.bounds] if spelled is None else list(spelled)
        return [
            None if first >= end else (None if p == 0 else bounds[first], None if end >= n else bounds[end])
            for p, (first, end) in enumerate(zip(firsts, ends))
        ]

    def assign(self, keys: pa.ChunkedArray) -> np.ndarray:
        """The part of each tuple; a key that cannot be in R (null, bad) goes to part 0."""
        normalized = normalize(keys, self.store.key_type)
        pages = np.zeros(len(normalized.valid), dtype=np.int64)
        if normalized.valid.any():
            found = np.searchsorted(self.page_map.bounds, normalized.keys[normalized.valid], side="right") - 1
            pages[normalized.valid] = np.clip(found, 0, self.page_map.n_pages - 1)
        self._recut()
        part = np.searchsorted(self.cuts, pages, side="right").astype(np.int32)
        seen = np.bincount(pages[normalized.valid], minlength=self.page_map.n_pages)
        self.frequency = DECAY * self.frequency + seen
        return part


def _instance(step_json: str, part: int, key_range: tuple, memory: int):
    """The algorithm of (step, part) over the store restricted to ``key_range``."""
    key = (step_json, part)
    if key in _INSTANCES and _INSTANCES[key].store.key_range != key_range:  # the cuts moved
        _INSTANCES.pop(key).store.close()
    if key not in _INSTANCES:
        step = StepSpec(**json.loads(step_json))
        store = open_store(step.master.url, step.master.table, step.master.key, step.master.select).restrict(*key_range)
        _INSTANCES[key] = create(step.algorithm, store, memory, step.params)
    return _INSTANCES[key]


def join_parts(step_json: str, deadline_json: str | None, memory: int, out_schema: pa.Schema,
               ranges: list, version: int):
    """The ``mapInArrow`` function: join each part of this task's rows with its instance."""
    step = json.loads(step_json)
    deadline = DeadlineSpec(**json.loads(deadline_json)) if deadline_json else None

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from .runner import deadlines_of

        batches = list(batches)
        if not batches:
            return
        table = pa.Table.from_batches(batches)
        for part in np.unique(table[PART_COLUMN].to_numpy()):
            rows = table.filter(pc.equal(table[PART_COLUMN], part)).drop_columns([PART_COLUMN])
            algorithm = _instance(step_json, int(part), ranges[part], memory)
            with algorithm.store.reading_at(version):
                done = run_join(
                    algorithm, rows, step["column"], clock=time.time,
                    arrival=rows["sj_arrival"].to_numpy(zero_copy_only=False), deadline=deadlines_of(deadline, rows),
                )
            stats = {k: v for k, v in done.stats.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            stats["master_version"] = algorithm.store.seen_version
            for piece in (done.matched, done.unmatched):
                yield from _conform(piece, out_schema).to_batches()
            yield from _stats_row(out_schema, stats).to_batches()

    return run


def _conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    columns = [rows[f.name].cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def _stats_row(schema: pa.Schema, stats: dict) -> pa.Table:
    columns = [pa.array([json.dumps(stats)] if f.name == STATS_COLUMN else [None], f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


class PartitionedJoin:
    """Runs one join step of a micro-batch as N Spark tasks; returns what run_join returns."""

    def __init__(self, spark, step: StepSpec, deadline: DeadlineSpec | None, store, parts: int):
        self.spark = spark
        self.step = step
        self.parts = parts
        self.partitioner = RangePartitioner(store, parts)
        self.master_schema = store.schema
        self.step_json = json.dumps(dataclasses.asdict(step))
        self.deadline_json = json.dumps(vars(deadline)) if deadline else None
        self.memory = max(step.memory_bytes // parts, 1)

    def __call__(self, rows: pa.Table) -> JoinRun:
        from pyspark.sql.pandas.types import from_arrow_schema

        started = time.time()
        out_schema = pa.schema(
            list(rows.schema) + list(self.master_schema)
            + [pa.field(REASON_COLUMN, pa.string()), pa.field(STATS_COLUMN, pa.string())]
        )
        tagged = rows.append_column(PART_COLUMN, pa.array(self.partitioner.assign(rows[self.step.column]), pa.int32()))
        version = self.partitioner.store.version()  # one version of R for every part of this batch
        frame = self.spark.createDataFrame(tagged).repartition(self.parts, PART_COLUMN)
        result = frame.mapInArrow(
            join_parts(self.step_json, self.deadline_json, self.memory, out_schema, self.partitioner.key_ranges(), version),
            from_arrow_schema(out_schema),
        ).toArrow()
        is_stats = pc.is_valid(result[STATS_COLUMN])
        stats_rows = [json.loads(s) for s in result.filter(is_stats)[STATS_COLUMN].to_pylist()]
        data = result.filter(pc.invert(is_stats)).drop_columns([STATS_COLUMN])
        unmatched_mask = pc.is_valid(data[REASON_COLUMN])
        matched = data.filter(pc.invert(unmatched_mask)).drop_columns([REASON_COLUMN])
        unmatched = data.filter(unmatched_mask).select(rows.column_names + [REASON_COLUMN])
        position = pc.index_in(matched["sj_id"], value_set=rows["sj_id"].combine_chunks()).to_numpy()
        left = pc.index_in(unmatched["sj_id"], value_set=rows["sj_id"].combine_chunks()).to_numpy()
        stats = {
            "wall_s": time.time() - started,
            "disk_queries": sum(s.get("disk_queries", 0) for s in stats_rows),
            "disk_rows": sum(s.get("disk_rows", 0) for s in stats_rows),
            "master_version": max((s["master_version"] for s in stats_rows), default=0),
            "parts": len(stats_rows),
            "part_stats": [{k: s.get(k) for k in PART_STATS} for s in stats_rows],  # where the time goes
            "exactly_once": check_exactly_once(rows.num_rows, position, left),
        }
        return JoinRun(matched, unmatched, stats, completed_at=np.full(rows.num_rows, time.time()))
