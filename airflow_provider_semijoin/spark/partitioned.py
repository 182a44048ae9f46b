"""``partitions = N``: a step's tuples split by page-aligned key ranges of R over N instances of
the algorithm, each running in a Spark task (``mapInArrow``) and reading only the pages of its
own keys.

The driver assigns every new tuple to a part by its key (:class:`RangePartitioner`; a key that
cannot be in R, null or bad, to no part: it leaves at once on the driver with its reason): the cut
points are page boundaries of R chosen so that each part receives about the same number of
tuples, counted over the micro-batches seen so far (with decay), so a Zipf-hot range does not
land on one instance together with half of R; the cuts move only when new ones would shrink the
busiest part's load by :data:`REBALANCE`, since each part's store sees its own key range only
(:meth:`..core.stores.base.MasterStore.restrict`: its page map, MESHJOIN's and SSIJ's cycles,
its loads). When they move, every tuple still inside the join is assigned again by the new cut
points and every part is rebuilt on its new range, so no part holds a tuple outside its range;
so are the tuples read back from the checkpoint (a restart, a replay), whose parts were those of
the cut points when they were written.
All parts of a micro-batch read R at the version the driver chose for it
(:meth:`..core.stores.base.MasterStore.reading_at`), however late each task runs.

Each part's :class:`~..core.session.JoinSession` (the algorithm with its queue) lives across
micro-batches in the Python worker (``spark.python.worker.reuse``), one per (step, part), with
memory budget M/N each. The driver keeps the full rows of the tuples inside (:mod:`.joinstate`)
and sends a task only the new tuples' sequence numbers, keys and due times, plus one control
row per part saying which state the part must be in (a token: the run, the call before this one
and the tuples it holds). A part whose worker does not hold that state - a new worker, another
worker than last time, a task retried after a failure, a session to R lost inside its snapshot
(:class:`..core.stores.SnapshotLost`) - says so without emitting anything, and the driver sends
it again with every tuple of the part (from its copy of the state after the batch before),
rebuilt on a fresh instance: warm-up costs, never correctness. Tasks return only the sequence
numbers that completed, with the master rows or the reason; the driver materialises them.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.joins.base import JoinOutput
from ..core.joins.registry import create
from ..core.keys import normalize
from ..core.session import left_ids
from ..core.stores import SnapshotLost, open_store
from ..job.spec import StepSpec
from .joinstate import DUE, PART, SEQ, CarriedRows, session_from, slice_of
from .stepstats import PartStats, PartsStats

TOKEN_COLUMN = "sj_token"  # control rows: the state the part must hold ("" = rebuild from the rows sent)
REASON_CODE = "sj_reason"  # output: the unmatched reason code (null: matched)
STATS_COLUMN = "sj_stats"
DECAY = 0.8  # weight of the past micro-batches' key frequencies
REBALANCE = 1.25  # re-cut when that shrinks the busiest part's share of the (decayed) tuples this much
REBUILD_ATTEMPTS = 10  # calls that may find a part's state lost (each then sends the part whole)
CUT_PAGE_ROWS = 1000  # distinct keys of R per page of the partitioner's map: the cut points' granularity
OUTSIDE = -1  # the "part" of a tuple whose key cannot be in R (null, bad): no part gets it, it leaves at once

_PARTS: dict[tuple[str, int], tuple[str, object]] = {}  # per Python worker: (step json, part) -> (token, session)


class RangePartitioner:
    """Cut R's page map into N ranges of about equal observed stream frequency."""

    def __init__(self, store, parts: int, page_rows: int = 1000):
        self.parts = parts
        self.store = store
        self.page_map = store.page_map(page_rows)
        self.frequency = np.ones(self.page_map.n_pages)  # before any batch: every page alike
        self.cuts = self.cut_pages()
        self.moved = False  # the cut points moved since the flag was last cleared

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
            self.moved = self.moved or not np.array_equal(balanced, self.cuts)
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

    def pages(self, keys: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
        """The page of each key, and which keys can be in R (null, bad: page 0). A key below
        R's first page is on page 0, one above its last on the last page: :meth:`key_ranges`
        gives the parts of those pages no bound there, so the part a key is routed to sees it."""
        normalized = normalize(keys, self.store.key_type)
        pages = np.zeros(len(normalized.valid), dtype=np.int64)
        if normalized.valid.any():
            found = np.searchsorted(self.page_map.bounds, normalized.keys[normalized.valid], side="right") - 1
            pages[normalized.valid] = np.clip(found, 0, self.page_map.n_pages - 1)
        return pages, normalized.valid

    def _parts_of(self, pages: np.ndarray, valid: np.ndarray) -> np.ndarray:
        return np.where(valid, np.searchsorted(self.cuts, pages, side="right"), OUTSIDE).astype(np.int32)

    def part_of(self, keys: pa.ChunkedArray) -> np.ndarray:
        """The part of each key under the current cut points; a key that cannot be in R: :data:`OUTSIDE`."""
        return self._parts_of(*self.pages(keys))

    def assign(self, keys: pa.ChunkedArray) -> np.ndarray:
        """The part of each tuple (the cut points may move first: :attr:`moved`); a key that
        cannot be in R: :data:`OUTSIDE`."""
        pages, valid = self.pages(keys)
        self._recut()
        self.frequency = DECAY * self.frequency + np.bincount(pages[valid], minlength=self.page_map.n_pages)
        return self._parts_of(pages, valid)


def _part_session(step_json: str, part: int, memory: int, token: str, rows: pa.Table, key_range: tuple):
    """The part's session in this worker when it holds the state ``token`` names; a fresh one
    over the store restricted to ``key_range``, fed with ``rows``, when ``token`` is empty (a
    rebuild); None when the state is not here."""
    key = (step_json, part)
    if token:
        held = _PARTS.get(key)
        return held[1] if held is not None and held[0] == token else None
    step = StepSpec(**json.loads(step_json))
    held = _PARTS.pop(key, None)
    store = held[1].algorithm.store if held is not None else None
    if store is not None and store.key_range != key_range:  # the cuts moved
        store.close()
        store = None
    if store is None:
        store = open_store(step.master.url, step.master.table, step.master.key, step.master_select).restrict(*key_range)
    return session_from(create(step.algorithm, store, memory, step.params), step.column, rows)


def join_parts(step_json: str, memory: int, out_schema: pa.Schema, ranges: list, version: int, horizon: float,
               until: float, drain: bool, call: str, max_pending: int | None = None):
    """The ``mapInArrow`` function: one slice of each part of this task with its session.

    (A closure is pickled with copies of the module globals it names: the per-worker registry
    is reached only through module-level functions, which are pickled by reference.)"""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        batches = list(batches)
        if not batches:
            return
        table = pa.Table.from_batches(batches)
        for part in np.unique(table[PART].to_numpy()):
            rows = table.filter(pc.equal(table[PART], part))
            yield from join_part(step_json, int(part), memory, rows, out_schema, ranges[part], version, horizon, until,
                                 drain, call, max_pending).to_batches()

    return run


def join_part(step_json: str, part: int, memory: int, rows: pa.Table, out_schema: pa.Schema, key_range: tuple,
              version: int, horizon: float, until: float, drain: bool, call: str, max_pending: int | None = None) -> pa.Table:
    """One part's slice in this worker, reading R at ``version``: what completed and a stats
    row (or only a stats row saying ``lost`` when this worker does not hold the state the
    control row names, or lost its snapshot of R: the driver sends the part whole)."""
    token = rows.filter(pc.is_null(rows[SEQ]))[TOKEN_COLUMN][0].as_py()
    rows = rows.filter(pc.is_valid(rows[SEQ]))
    if key_range is None:  # a part with no page of R (more parts than pages): no tuple maps to it
        if rows.num_rows:
            raise RuntimeError(f"part {part} has no key range of R but was sent {rows.num_rows} tuples")
        return _stats_row(out_schema, PartStats(part))
    lost = _stats_row(out_schema, PartStats(part, lost=True))
    session = _part_session(step_json, part, memory, token, rows, key_range)
    if session is None:
        return lost
    try:
        with session.algorithm.store.reading_at(version):
            result, stats = slice_of(session, json.loads(step_json)["column"], rows if token else rows.slice(0, 0),
                                     horizon, until, drain, max_pending=max_pending)
    except SnapshotLost:  # the session's state is half stepped: forget it, the driver resends the part
        _PARTS.pop((step_json, part), None)
        session.algorithm.store.close()
        return lost
    _PARTS[(step_json, part)] = (state_token(call, session.pending_ids()), session)
    return pa.concat_tables([_output(result, out_schema), _stats_row(out_schema, PartStats(part, slice=stats))])


def state_token(call: str, seq: np.ndarray) -> str:
    """Names the state of a part after ``call``: the tuples it holds (how many, and their sum)."""
    return f"{call}:{len(seq)}:{int(np.sum(seq, dtype=np.int64))}"


def _output(result: JoinOutput, schema: pa.Schema) -> pa.Table:
    """What a part completed: sequence numbers, with the master row (matched) or the reason code."""
    n_matched, n_unmatched = len(result.matched_ids), len(result.unmatched_ids)
    columns = []
    for f in schema:
        if f.name == SEQ:
            columns.append(pa.array(np.concatenate([result.matched_ids, result.unmatched_ids]), pa.int64()))
        elif f.name == REASON_CODE:
            columns.append(pa.concat_arrays([pa.nulls(n_matched, pa.int8()), pa.array(result.unmatched_reason, pa.int8())]))
        elif f.name == STATS_COLUMN:
            columns.append(pa.nulls(n_matched + n_unmatched, pa.string()))
        else:
            master = result.master[f.name].combine_chunks().cast(f.type) if n_matched else pa.array([], f.type)
            columns.append(pa.concat_arrays([master, pa.nulls(n_unmatched, f.type)]))
    return pa.Table.from_arrays(columns, schema=schema)


def _stats_row(schema: pa.Schema, stats: PartStats) -> pa.Table:
    columns = [pa.array([stats.to_json()] if f.name == STATS_COLUMN else [None], f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


class PartitionedJoin:
    """Runs one join step's slice as N Spark tasks; returns what :func:`.joinstate.slice_of` returns.
    ``spark`` None: the parts' function runs in this process, part after part, over the rows each
    part's task would get (the code Spark's tasks run, tested without Spark)."""

    def __init__(self, spark, step: StepSpec, store, parts: int, one_row_per_match: bool, clock=time.time):
        self.spark = spark
        self.one_row_per_match = one_row_per_match
        self.step = step
        self.parts = parts
        self.clock = clock
        self.partitioner = RangePartitioner(store, parts, CUT_PAGE_ROWS)
        self.schema = store.schema
        self.step_json = json.dumps(dataclasses.asdict(step))
        self.memory = max(step.memory_bytes // parts, 1)
        self.run_id = uuid.uuid4().hex
        self.calls = 0
        self.rebuild: set[int] = set(range(parts))
        self.version_read_at: float | None = None  # when the driver chose the version the parts of the batch read
        self._outside_carried = False  # carried tuples may have been assigned OUTSIDE (their parts were assigned again)

    def rebuild_all(self) -> None:
        """Every part starts again from the carried rows (the algorithm was sized anew, R is read anew)."""
        self.rebuild = set(range(self.parts))

    def restored(self, carried: CarriedRows) -> None:
        """The carried rows were read from the checkpoint: their parts are those of the cut
        points when they were written (another driver's, before a restart; or the cuts moved
        since, a replay), so they follow the current ones, and every part starts again from them."""
        self._follow_cuts(carried)
        self.rebuild_all()

    def _follow_cuts(self, carried: CarriedRows) -> None:
        """Assign every carried tuple again by the current cut points (a key R cannot hold any
        more - a string longer than R's longest key now - gets :data:`OUTSIDE`: it leaves with the next call)."""
        if carried.rows is not None:
            carried.repart(self.partitioner.part_of(carried.rows[self.step.column]))
            self._outside_carried = True

    def assign(self, keys: pa.ChunkedArray) -> np.ndarray:
        return self.partitioner.assign(keys)

    def run(self, tagged: pa.Table, carried: CarriedRows, horizon: float, until: float,
            drain: bool, max_pending: int | None = None, replayed: list | None = None) -> tuple[JoinOutput, PartsStats]:
        """One slice over every part: ``tagged`` are the new tuples (already in ``carried``);
        ``max_pending``: the most the parts may hold together after it (each its share);
        ``replayed``: the version (and its time) the first attempt of this batch read."""
        started = self.clock()
        if self.partitioner.moved:  # the tuples inside follow the new cut points; every part is rebuilt from them
            self._follow_cuts(carried)
            self.rebuild_all()
            self.partitioner.moved = False
        outside = self._outside(tagged, carried)
        call, before = f"{self.run_id}:{self.calls}", f"{self.run_id}:{self.calls - 1}"
        tokens = {p: "" if p in self.rebuild else state_token(before, self._held_before(carried, tagged, p))
                  for p in range(self.parts)}
        ranges = self.partitioner.key_ranges()
        if replayed is None:
            version = self.partitioner.store.version()  # one version of R for every part of this batch
            self.version_read_at = self.clock()
        else:
            version, self.version_read_at = replayed
        out, stats = [], []
        for _ in range(REBUILD_ATTEMPTS):
            more_out, more = self._call(self._rows(tagged, carried, tokens), ranges, version, call, horizon, until, drain,
                                        None if max_pending is None else max_pending // self.parts)
            out += more_out
            stats += [s for s in more if not s.lost]
            lost = sorted(s.part for s in more if s.lost)
            if not lost:
                break
            tokens = {p: "" for p in lost}  # those workers do not hold the part's state: send each whole
        else:
            raise RuntimeError(f"steps ({self.step.algorithm}): parts {lost} lost their state {REBUILD_ATTEMPTS} times in a row")
        self.calls += 1
        self.rebuild = set()
        result = JoinOutput.concat([outside, *out], self.schema)
        summary = PartsStats.merged(stats, self.parts, self.clock() - started, self.version_read_at)
        summary.left += len(outside)
        if len(left_ids(result, self.one_row_per_match)) != summary.left:  # a tuple that left in two parts
            summary.balanced = False
        return result, summary

    def _outside(self, tagged: pa.Table, carried: CarriedRows) -> JoinOutput:
        """The tuples whose key cannot be in R (part :data:`OUTSIDE`: the new ones, and the carried
        ones after their parts were assigned again), leaving at once with their reason, unmatched:
        no part is sent them."""
        rows = carried.of_part(OUTSIDE) if self._outside_carried else tagged.filter(pc.equal(tagged[PART], OUTSIDE))
        self._outside_carried = False
        reason = normalize(rows[self.step.column], self.partitioner.store.key_type).reason if rows is not None else []
        seq = rows[SEQ].to_numpy() if rows is not None else np.zeros(0, np.int64)
        return JoinOutput(np.zeros(0, np.int64), self.schema.empty_table(), seq, np.asarray(reason, np.int8))

    @staticmethod
    def _held_before(carried: CarriedRows, tagged: pa.Table, part: int) -> np.ndarray:
        """Sequence numbers part ``part`` held after the last call: its carried ones but the new."""
        rows = carried.of_part(part)
        seq = rows[SEQ].to_numpy() if rows is not None else np.zeros(0, np.int64)
        return seq[seq < tagged[SEQ][0].as_py()] if tagged.num_rows else seq

    def _rows(self, tagged: pa.Table, carried: CarriedRows, tokens: dict[int, str]) -> pa.Table:
        """Per part of ``tokens``: a control row with its token, and its new tuples (token "":
        every tuple of the part, to rebuild it)."""
        column = self.step.column
        n = len(tokens)
        pieces = [pa.table({SEQ: pa.nulls(n, pa.int64()), column: pa.nulls(n, tagged.schema.field(column).type),
                            DUE: pa.nulls(n, pa.float64()), PART: pa.array(list(tokens), pa.int32()),
                            TOKEN_COLUMN: pa.array(list(tokens.values()), pa.string())})]
        kept = [p for p, token in tokens.items() if token]
        pieces.append(tagged.filter(pc.is_in(tagged[PART], pa.array(kept, pa.int32()))))
        pieces += [carried.of_part(p) for p, token in tokens.items() if not token]
        return pa.concat_tables([pieces[0]] + [
            t.select([SEQ, column, DUE, PART]).append_column(TOKEN_COLUMN, pa.nulls(t.num_rows, pa.string()))
            for t in pieces[1:] if t is not None])

    def _call(self, rows: pa.Table, ranges: list, version: int, call: str, horizon: float, until: float,
              drain: bool, max_pending: int | None) -> tuple[list[JoinOutput], list[PartStats]]:
        out_schema = pa.schema([pa.field(SEQ, pa.int64()), pa.field(REASON_CODE, pa.int8())] + list(self.schema)
                               + [pa.field(STATS_COLUMN, pa.string())])
        tasks = join_parts(self.step_json, self.memory, out_schema, ranges, version, horizon, until, drain, call, max_pending)
        if self.spark is None:  # in this process: each part's rows, as its task would get them
            result = pa.concat_tables([pa.Table.from_batches(list(tasks(rows.filter(pc.equal(rows[PART], p)).to_batches())),
                                                             out_schema) for p in np.unique(rows[PART].to_numpy())])
        else:
            from pyspark.sql.pandas.types import from_arrow_schema

            frame = self.spark.createDataFrame(rows.combine_chunks()).repartition(self.parts, PART)  # (Spark 4.0 reads a table's first chunk only)
            result = frame.mapInArrow(tasks, from_arrow_schema(out_schema)).toArrow()
        is_stats = pc.is_valid(result[STATS_COLUMN])
        stats = [PartStats.from_json(s) for s in result.filter(is_stats)[STATS_COLUMN].to_pylist()]
        data = result.filter(pc.invert(is_stats))
        matched = data.filter(pc.is_null(data[REASON_CODE]))
        unmatched = data.filter(pc.is_valid(data[REASON_CODE]))
        output = JoinOutput(matched[SEQ].to_numpy(), matched.select(self.schema.names),
                            unmatched[SEQ].to_numpy(), unmatched[REASON_CODE].to_numpy().astype(np.int8))
        return [output], stats
