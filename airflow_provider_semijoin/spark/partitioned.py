"""``partitions = N``: a step's tuples split by page-aligned key ranges of R over N instances of
the algorithm, each kept in a Spark executor's Python worker between micro-batches and reading
only the pages of its own keys. This is the driver's data path (``data_path: driver``, and
``auto`` for a job the executors' path does not run): the rows pass through the driver;
:mod:`.executor_rows` keeps them on the executors.

The driver assigns every new tuple to a part by its key (:class:`RangePartitioner`; a key that
cannot be in R, null or bad, to no part: it leaves at once on the driver with its reason): the cut
points are page boundaries of R chosen so that each part receives about the same load, counted
over the micro-batches seen so far (with decay) - a page's tuples, saturating at
:data:`SATURATION` times a page's mean, since one read of a page serves all its tuples waiting -
so a Zipf-hot range does not land on one instance together with half of R; the first keys seen
cut at once, and later cuts move only when new ones would shrink the busiest part's load by
:data:`REBALANCE`, since each part's store sees its own key range only
(:meth:`..core.stores.base.MasterStore.restrict`: its page map, MESHJOIN's and SSIJ's cycles,
its loads). When they move, every tuple still inside the join is assigned again by the new cut
points and every part is rebuilt on its new range, so no part holds a tuple outside its range;
so are the tuples read back from the checkpoint (a restart, a replay), whose parts were those of
the cut points when they were written.
All parts of a micro-batch read R at the version the driver chose for it
(:meth:`..core.stores.base.MasterStore.reading_at`), however late each task runs.

Each part's :class:`~..core.session.JoinSession` (the algorithm with its queue) lives across
micro-batches in a Python worker (``spark.python.worker.reuse``), one per (step, part), with
memory budget M/N each. The driver keeps the full rows of the tuples inside (:mod:`.joinstate`). A
call is one Spark job of exactly as many tasks as requests, without a shuffle
(``sc.parallelize(range(len(requests))).mapPartitions(serve_sent)``, the requests one broadcast):
one request per core of the executors (so every Python worker gets one; at least one per worker
that holds parts' states), each naming every held part with its new tuples' sequence numbers, keys
and due times (zstd Arrow IPC) and the state it must hold (a token the worker named in its last
output, and a digest of the tuples held), so that a task serves the parts its worker holds
wherever the scheduler runs it - Spark places tasks without regard to Python state, and the
DataFrame path this replaced (createDataFrame, a shuffle by part, ``mapInArrow``, ``toArrow``)
found a part's state again only by chance, rebuilding about one part a batch at 2 s of Spark a
batch - and one request per part to build (its first call, after a re-cut) with every tuple of the
part. A part that no task served - its worker went away, restarted, or lost its session to R
inside its snapshot (:class:`..core.stores.SnapshotLost`) - is sent again with every tuple of the
part (from the driver's copy of the state after the batch before) and rebuilt on a fresh instance:
warm-up costs, never correctness, counted in the step's stats (``rebuilds``) and the progress
record (``part_rebuilds``). A token is a nonce known to the driver only once the output it names
has reached it, so the state of a task whose output was lost (a task failed, retried elsewhere)
never matches again. Tasks return only the sequence numbers that completed, with the master rows
or the reason (zstd Arrow IPC, with the task's status: ``spark.task.maxDirectResultSize``); the
driver materialises them.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import socket
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

REASON_CODE = "sj_reason"  # output: the unmatched reason code (null: matched)
DECAY = 0.8  # weight of the past micro-batches' key frequencies
REBALANCE = 1.25  # re-cut when that shrinks the busiest part's share of the (decayed) load this much
REBUILD_ATTEMPTS = 10  # calls that may find a part's state lost (each then sends the part whole)
CUT_PAGE_ROWS = 1000  # distinct keys of R per page of the partitioner's map: the cut points' granularity
SATURATION = 10  # a page of more than this many times the mean tuples of a page weighs no more (:class:`RangePartitioner`)
OUTSIDE = -1  # the "part" of a tuple whose key cannot be in R (null, bad): no part gets it, it leaves at once

IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="zstd")

_PARTS: dict[tuple[str, int], tuple[str, object]] = {}  # per Python worker: (step json, part) -> (token, session)


class RangePartitioner:
    """Cut R's page map into N ranges of about equal observed load: a page's tuples, but no
    more than the mean tuples of a page (a page's reads serve all its tuples waiting: a hot
    page's many cost little more than a page's few). By tuples alone a Zipf stream's hottest
    page (58% of the partitions bench's tuples, 2 pages read a batch) made a part of its own, and
    the other part read the rest of R (14-48 pages a batch): 0.03 s against 0.08-0.35 s."""

    def __init__(self, store, parts: int, page_rows: int = 1000):
        self.parts = parts
        self.store = store
        self.page_map = store.page_map(page_rows)
        self.frequency = np.ones(self.page_map.n_pages)  # before any batch: every page alike
        self.cuts = self.cut_pages()
        self.moved = False  # the cut points moved since the flag was last cleared
        self.seen = False  # keys of R were assigned: the frequencies are the stream's

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
        tuples = np.bincount(pages[valid], minlength=self.page_map.n_pages)
        counts = np.minimum(tuples, SATURATION * tuples.sum() / len(tuples))
        if self.seen:
            self._recut()
            self.frequency = DECAY * self.frequency + counts
        elif valid.any():  # the first keys seen: cut by them at once (re-cutting after them would rebuild every part)
            self.frequency = DECAY * self.frequency + counts
            self._recut()
            self.seen = True
        return self._parts_of(pages, valid)


@dataclasses.dataclass(frozen=True)
class PartCall:
    """What every part of one call shares: the step, each part's memory and key range, the
    version of R to read and the slice's bounds (:func:`.joinstate.slice_of`)."""

    step_json: str
    memory: int
    ranges: list
    version: int
    horizon: float
    until: float
    drain: bool
    call: str  # names this call (the run and its number): a part's state token starts with it
    max_pending: int | None = None


@dataclasses.dataclass(frozen=True)
class PartInput:
    """One part's input in a request: ``token`` names the state the worker must hold to serve it
    ("": build the part here, afresh, from ``rows``: every tuple it holds), ``held`` the tuples
    that state holds (:func:`held_digest`), ``rows`` the new tuples (or every tuple, to build it)
    as Arrow IPC."""

    token: str
    held: str
    rows: bytes


def held_digest(seq: np.ndarray) -> str:
    """Names a set of sequence numbers (how many, and their sum): what a part's state holds."""
    return f"{len(seq)}:{int(np.sum(seq, dtype=np.int64))}"


def to_ipc(table: pa.Table) -> bytes:
    """``table`` as Arrow IPC, zstd-compressed: a part's output (its master rows: 6.6 MB for 59k
    tuples of the partitions bench) in a quarter of the bytes, its input (sequence numbers, keys,
    due times) in a ninth, for 5-16 ms to write; each byte less is one the JVMs need not copy."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=IPC_OPTIONS) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def worker_name() -> str:
    """The Python worker this runs in (the process whose module globals hold the parts)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def serve(call: PartCall, requests: Iterator[dict[int, PartInput]]) -> Iterator[tuple[str, bytes]]:
    """A Spark task (``mapPartitions``): of each request, the parts this worker serves - those it
    builds, and those whose state it holds - each as its stats (JSON) and what completed (IPC).
    A part whose state is not here yields nothing: another task serves it, or the driver sends it
    whole again. (Module-level functions are pickled by reference: the per-worker registry is
    this module's.)"""
    for request in requests:
        for part, sent in request.items():
            served = serve_part(call, part, sent)
            if served is not None:
                yield served


def serve_sent(call: PartCall, sent, indices: Iterator[int]) -> Iterator[tuple[str, bytes]]:
    """:func:`serve` over the requests at ``indices`` of the broadcast ``sent`` (a Spark task)."""
    requests = sent.value
    return serve(call, (requests[i] for i in indices))


def _held_session(call: PartCall, part: int, sent: PartInput):
    """The part's session when this worker holds the state ``sent`` names; a state of an earlier
    call that is not it is stale (the part was rebuilt elsewhere): dropped."""
    key = (call.step_json, part)
    held = _PARTS.get(key)
    if held is None:
        return None
    token, session = held
    if token == sent.token and held_digest(session.pending_ids()) == sent.held:
        return session
    if not token.startswith(f"{call.call}:"):  # (served already in this call by another task here: keep it)
        _PARTS.pop(key)
        session.algorithm.store.close()
    return None


def _built_session(call: PartCall, part: int, rows: pa.Table):
    """A fresh session of the part over the store restricted to its key range (the one this
    worker held for the part reused when the range is the same), fed with ``rows``."""
    step = StepSpec(**json.loads(call.step_json))
    key_range = call.ranges[part]
    held = _PARTS.pop((call.step_json, part), None)
    store = held[1].algorithm.store if held is not None else None
    if store is not None and store.key_range != key_range:  # the cuts moved
        store.close()
        store = None
    if store is None:
        store = open_store(step.master.url, step.master.table, step.master.key, step.master_select).restrict(*key_range)
    else:  # built anew (a refresh among the reasons): R's pages read anew too
        store.forget_page_maps()
    return session_from(create(step.algorithm, store, call.memory, step.params), step.column, rows)


def serve_part(call: PartCall, part: int, sent: PartInput) -> tuple[str, bytes] | None:
    """One part's slice in this worker, reading R at the call's version: its stats and what
    completed; None when this worker does not hold the state ``sent`` names, or lost its
    snapshot of R (the driver then sends the part whole)."""
    if sent.token:  # the state held here, fed the new tuples (another worker's part: not even read)
        session = _held_session(call, part, sent)
        if session is None:
            return None
        new = from_ipc(sent.rows)
    else:  # built here from every tuple of the part: none is new to it
        rows = from_ipc(sent.rows)
        session, new = _built_session(call, part, rows), rows.slice(0, 0)
    try:
        with session.algorithm.store.reading_at(call.version):
            result, stats = slice_of(session, json.loads(call.step_json)["column"], new,
                                     call.horizon, call.until, call.drain, max_pending=call.max_pending)
    except SnapshotLost:  # the session's state is half stepped: forget it
        _PARTS.pop((call.step_json, part), None)
        session.algorithm.store.close()
        return None
    token = f"{call.call}:{uuid.uuid4().hex}"  # known to the driver only when this output reaches it
    _PARTS[(call.step_json, part)] = (token, session)
    return PartStats(part, slice=stats, token=token, worker=worker_name()).to_json(), to_ipc(_output(result))


def _output(result: JoinOutput) -> pa.Table:
    """What a part completed: sequence numbers, with the master row (matched) or the reason code."""
    matched = result.master.append_column(SEQ, pa.array(result.matched_ids, pa.int64()))
    unmatched = pa.table({SEQ: pa.array(result.unmatched_ids, pa.int64()), REASON_CODE: pa.array(result.unmatched_reason, pa.int8())})
    return pa.concat_tables([matched, unmatched], promote_options="default")


class PartitionedJoin:
    """Runs one join step's slice over N parts as one Spark job a call; returns what
    :func:`.joinstate.slice_of` returns. ``spark`` None: the tasks' function runs in this
    process, request after request (the code Spark's tasks run, tested without Spark)."""

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
        self.tokens: dict[int, str] = {}  # the state each part's worker named in its last output
        self.owners: dict[int, str] = {}  # the Python worker that holds each part's state
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
        ranges = self.partitioner.key_ranges()
        if replayed is None:
            version = self.partitioner.store.version()  # one version of R for every part of this batch
            # when that version was R's newest; unknown without a change log (as for one part):
            # then the step bounds it by its last refresh, if any
            self.version_read_at = self.clock() if self.partitioner.store.has_change_log() else None
        else:
            version, self.version_read_at = replayed
        call = PartCall(self.step_json, self.memory, ranges, version, horizon, until, drain, f"{self.run_id}:{self.calls}",
                        None if max_pending is None else max_pending // self.parts)
        for part, key_range in enumerate(ranges):
            if key_range is None and (tagged.num_rows and pc.any(pc.equal(tagged[PART], part)).as_py()):
                raise RuntimeError(f"part {part} has no key range of R but was sent tuples")
        wanted = {p for p, key_range in enumerate(ranges) if key_range is not None}
        stats = [PartStats(p) for p in range(self.parts) if p not in wanted]  # (a part with no page of R holds nothing)
        requests, out, rebuilds = self._requests(tagged, carried, wanted), [], 0
        for _ in range(REBUILD_ATTEMPTS):
            for stats_json, table in self._call(call, requests):
                part = PartStats.from_json(stats_json)
                if part.part not in wanted:
                    raise RuntimeError(f"steps ({self.step.algorithm}): part {part.part} was served twice in one call")
                wanted.discard(part.part)
                self.tokens[part.part], self.owners[part.part] = part.token, part.worker
                stats.append(part)
                out.append(from_ipc(table))
            if not wanted:
                break
            rebuilds += len(wanted)  # those workers do not hold the part's state: send each whole
            requests = [{p: self._whole(carried, tagged, p)} for p in sorted(wanted)]
        else:
            raise RuntimeError(f"steps ({self.step.algorithm}): parts {sorted(wanted)} lost their state "
                               f"{REBUILD_ATTEMPTS} times in a row")
        self.calls += 1
        self.rebuild = set()
        result = JoinOutput.concat([outside, *(self._output(t) for t in out)], self.schema)
        summary = PartsStats.merged(sorted(stats, key=lambda s: s.part), self.parts, self.clock() - started,
                                    self.version_read_at, rebuilds)
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

    def _requests(self, tagged: pa.Table, carried: CarriedRows, parts: set[int]) -> list[dict[int, PartInput]]:
        """The call's first requests: one per Python worker (:meth:`_slots`; at least one per worker
        that holds parts' states), each naming every held part with its new tuples (a task serves
        those its worker holds, wherever Spark runs it), and one per part to build, with every
        tuple of the part."""
        kept = {p for p in parts if p not in self.rebuild and p in self.tokens}
        new = tagged.select([SEQ, self.step.column, DUE])
        new_part = tagged[PART].to_numpy()
        seq, part_of = carried.seq_and_part()
        if tagged.num_rows:
            before = seq < tagged[SEQ][0].as_py()  # held after the last call: the carried tuples but the new
            seq, part_of = seq[before], part_of[before]
        served = {p: PartInput(self.tokens[p], held_digest(seq[part_of == p]), to_ipc(new.filter(pa.array(new_part == p))))
                  for p in sorted(kept)}
        tasks = max(len({self.owners[p] for p in kept}), self._slots()) if kept else 0
        return [served] * tasks + [{p: self._whole(carried, tagged, p)} for p in sorted(parts - kept)]

    def _slots(self) -> int:
        """Tasks that reach every Python worker: one per core of the executors (Spark gives a
        task no worker of our choosing; fewer tasks than cores - one part held on a two-core
        cluster - miss the part's worker half the time). Each carries every part's new tuples:
        on a cluster of many cores, placing tasks by executor would be the step beyond."""
        return 1 if self.spark is None else self.spark.sparkContext.defaultParallelism

    def _whole(self, carried: CarriedRows, tagged: pa.Table, part: int) -> PartInput:
        """Every tuple of ``part`` (the new ones among them), to build it afresh."""
        rows = carried.of_part(part)
        return PartInput("", "", to_ipc((rows if rows is not None else tagged.slice(0, 0)).select([SEQ, self.step.column, DUE])))

    def _call(self, call: PartCall, requests: list[dict[int, PartInput]]) -> list[tuple[str, bytes]]:
        """Every request as a Spark task (one job of exactly that many tasks, no shuffle), or in
        this process. The requests travel as one broadcast, read once by each Python worker: the
        held parts' new tuples are the same in every task's request, and as the tasks' own data
        the driver serialised them once a core (1 MB a task at 100k tuples a batch, a warning from
        Spark's scheduler each time), 64 copies a batch on 64 cores."""
        if self.spark is None:
            return list(serve(call, iter(requests)))
        context = self.spark.sparkContext
        sent = context.broadcast(requests)
        try:
            return context.parallelize(range(len(requests)), len(requests)).mapPartitions(
                functools.partial(serve_sent, call, sent)).collect()
        finally:
            sent.destroy(blocking=False)

    def _output(self, table: pa.Table) -> JoinOutput:
        matched = table.filter(pc.is_null(table[REASON_CODE]))
        unmatched = table.filter(pc.is_valid(table[REASON_CODE]))
        return JoinOutput(matched[SEQ].to_numpy(), matched.select(self.schema.names).cast(self.schema),
                          unmatched[SEQ].to_numpy(), unmatched[REASON_CODE].to_numpy().astype(np.int8))
