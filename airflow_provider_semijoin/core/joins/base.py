"""The engine contract every join algorithm follows (DESIGN.md, "The engine contract").

* A :class:`StreamBuffer` holds arrived stream tuples in arrival order as columns: each tuple's
  row id and normalised join key (:mod:`..keys`). It records when tuples were taken, so the
  runner can measure waiting time (arrival -> join) and processing time (join -> output).
* A :class:`JoinAlgorithm` owns its structures (H_S, queue, disk buffer, ...), sized from a
  memory budget in bytes. One :meth:`~JoinAlgorithm.step` performs one iteration of the
  paper's outer loop: take what the buffer offers, at most one disk load, probe; it returns a
  :class:`JoinOutput`. Once the buffer is closed, steps go on until ``pending`` is 0.
* Output is columnar: (stream row id, master row) pairs for matches, (stream row id, reason)
  for unmatched tuples. Every tuple taken from the buffer leaves exactly once.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field, fields
from typing import Any, Callable, ClassVar

import numpy as np
import pyarrow as pa

from ..errors import BudgetError, ConfigError, shown
from ..keys import KeyType, sorted_distinct
from ..reasons import Unmatched
from ..stores.base import MasterPage
from ..stores.protocol import JoinStore
from .plan import Plan, Planner, RStats

Clock = Callable[[], float]
RIDER_KEYS = 4096  # keys of one IN query that serves several sparse pages at once (the end of a stream: HYBRIDJOIN's
#                   riders, SSIJ's last join phase). Draining 75k Zipf tuples (32k keys scattered over R = 2M rows,
#                   MariaDB) took 90 queries with riders capped at one range load's cost, 36 at 1024 keys, 17 at
#                   4096 and 12 at 8192: 0.79, 0.70, 0.65 and 0.68 s (the round trips, not the keys)


@dataclass
class StreamChunk:
    """Stream tuples as columns: ``row_ids`` (int64), ``keys`` (R's key dtype) and ``deadlines``
    (float64 absolute deadlines in the buffer's clock units, NaN where a tuple has none)."""

    row_ids: np.ndarray
    keys: np.ndarray
    deadlines: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.deadlines is None:
            self.deadlines = np.full(len(self.row_ids), np.nan)

    def __len__(self) -> int:
        return len(self.row_ids)

    def select(self, which: np.ndarray) -> "StreamChunk":
        """The tuples at ``which`` (a boolean mask, positions or a slice), deadlines carried along."""
        return StreamChunk(self.row_ids[which], self.keys[which], self.deadlines[which])

    @classmethod
    def concat(cls, parts: list["StreamChunk"]) -> "StreamChunk":
        if len(parts) == 1:
            return parts[0]
        return cls(
            np.concatenate([p.row_ids for p in parts]),
            np.concatenate([p.keys for p in parts]),
            np.concatenate([p.deadlines for p in parts]),
        )


def earliest_of(deadlines: np.ndarray) -> float:
    """The earliest of ``deadlines`` ignoring NaN (no deadline); inf when there is none."""
    if len(deadlines) == 0:
        return math.inf
    earliest = float(np.fmin.reduce(deadlines))
    return math.inf if math.isnan(earliest) else earliest


class StreamBuffer:
    """The stream buffer of the papers: arrived tuples waiting, in arrival order.

    ``append`` adds tuples, each with an optional absolute deadline; ``close`` says no more will
    come. ``closed`` is also set for a while by a caller that forces the tuples inside on (the
    algorithms' end-of-stream mode); ``final`` says more: no tuple follows those inside before
    every one has left (the end of the stream, or a drain), so nothing kept for later tuples -
    a page cache - will be used. ``take(n)`` hands out up to ``n`` tuples in arrival order, ``take_by_deadline(n)`` the
    ``n`` with the earliest deadlines (SSIJ sec. IV-F: "the stream tuples that are processed
    during the online phase are selected from the IB in increasing order of their deadline
    value"); both log ``(row_ids, clock())`` in ``taken`` for the runner.
    :attr:`earliest_deadline` is "the closest deadline for the tuples in the IB" (sec. IV-F).
    """

    def __init__(self, key_type: KeyType, clock: Clock = time.perf_counter):
        self.key_type = key_type
        self.clock = clock
        self._chunks: deque[StreamChunk] = deque()
        self._available = 0
        self._earliest: float | None = math.inf  # None: to be recomputed
        self.closed = False
        self.final = False
        self.taken: list[tuple[np.ndarray, float]] = []

    @property
    def available(self) -> int:
        return self._available

    @property
    def exhausted(self) -> bool:
        return self.closed and self._available == 0

    @property
    def earliest_deadline(self) -> float:
        """The earliest deadline among the waiting tuples (inf when none has one)."""
        if self._earliest is None:
            self._earliest = min((earliest_of(c.deadlines) for c in self._chunks), default=math.inf)
        return self._earliest

    def append(self, row_ids: np.ndarray, keys: np.ndarray, deadlines: np.ndarray | None = None) -> None:
        """Add tuples in arrival order; ``deadlines`` (float64, clock units, NaN = none) is optional."""
        if self.closed:
            raise RuntimeError("append to a closed stream buffer")
        if deadlines is not None and len(deadlines) != len(row_ids):
            raise ValueError(f"deadlines: {len(deadlines)} values for {len(row_ids)} tuples")
        if len(row_ids):
            chunk = StreamChunk(
                np.asarray(row_ids, np.int64),
                keys.astype(self.key_type.dtype, copy=False),
                None if deadlines is None else np.asarray(deadlines, np.float64),
            )
            self._chunks.append(chunk)
            self._available += len(chunk)
            if self._earliest is not None and deadlines is not None:
                self._earliest = min(self._earliest, earliest_of(chunk.deadlines))

    def close(self) -> None:
        self.closed = self.final = True

    def take(self, n: int) -> StreamChunk:
        """Up to ``n`` tuples in arrival order."""
        parts: list[StreamChunk] = []
        want = min(int(n), self._available)
        while want > 0:
            head = self._chunks[0]
            if len(head) <= want:
                parts.append(self._chunks.popleft())
                want -= len(head)
            else:
                parts.append(head.select(slice(None, want)))
                self._chunks[0] = head.select(slice(want, None))
                want = 0
        if not parts:
            return StreamChunk(np.zeros(0, np.int64), np.zeros(0, self.key_type.dtype))
        return self._hand_out(StreamChunk.concat(parts))

    def peek_keys(self, n: int) -> np.ndarray:
        """The keys of the tuples ``take(n)`` would hand out, left in the buffer."""
        want = min(int(n), self._available)
        parts = []
        for chunk in self._chunks:
            if want <= 0:
                break
            parts.append(chunk.keys[:want])
            want -= len(parts[-1])
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.zeros(0, self.key_type.dtype)

    def take_by_deadline(self, n: int) -> StreamChunk:
        """Up to ``n`` tuples, earliest deadline first; ties and tuples without a deadline
        (which come after every deadline) in arrival order. The rest keep arrival order."""
        want = min(int(n), self._available)
        if want == 0 or self.earliest_deadline == math.inf:
            return self.take(want)
        waiting = StreamChunk.concat(list(self._chunks))
        order = np.argsort(np.where(np.isnan(waiting.deadlines), math.inf, waiting.deadlines), kind="stable")
        self._chunks.clear()
        if want < len(waiting):
            self._chunks.append(waiting.select(np.sort(order[want:])))
        return self._hand_out(waiting.select(order[:want]))

    def _hand_out(self, chunk: StreamChunk) -> StreamChunk:
        self._available -= len(chunk)
        self._earliest = None
        self.taken.append((chunk.row_ids, self.clock()))
        return chunk


_EMPTY_TABLES: dict[pa.Schema, pa.Table] = {}


def _empty_table(schema: pa.Schema) -> pa.Table:
    if schema not in _EMPTY_TABLES:
        _EMPTY_TABLES[schema] = schema.empty_table()
    return _EMPTY_TABLES[schema]


@dataclass
class JoinOutput:
    """What one step completed. ``master`` rows align with ``matched_ids``.

    ``matched_keys`` (when not None) holds the join key of each matched pair: the front-stage
    counts from it how often each master tuple matched (its frequency recorder).
    """

    matched_ids: np.ndarray
    master: pa.Table
    unmatched_ids: np.ndarray
    unmatched_reason: np.ndarray  # int8 Unmatched codes
    matched_keys: np.ndarray | None = None

    @classmethod
    def empty(cls, schema: pa.Schema) -> "JoinOutput":
        return cls(np.zeros(0, np.int64), _empty_table(schema), np.zeros(0, np.int64), np.zeros(0, np.int8))

    def __len__(self) -> int:
        return len(self.matched_ids) + len(self.unmatched_ids)

    @property
    def nbytes(self) -> int:
        """Bytes the output holds: the ids, the reasons and the master rows."""
        arrays = (self.matched_ids, self.unmatched_ids, self.unmatched_reason, self.matched_keys)
        return self.master.nbytes + sum(a.nbytes for a in arrays if a is not None)

    @property
    def completed(self) -> int:
        """Stream tuples this output completes (a tuple with K master rows counts once)."""
        return len(sorted_distinct(self.matched_ids)) + len(self.unmatched_ids)

    @classmethod
    def concat(cls, outputs: list["JoinOutput"], schema: pa.Schema) -> "JoinOutput":
        outputs = [o for o in outputs if len(o)]
        if not outputs:
            return cls.empty(schema)
        if len(outputs) == 1:
            return outputs[0]
        with_matches = [o for o in outputs if len(o.matched_ids)]
        keyed = bool(with_matches) and all(o.matched_keys is not None for o in with_matches)
        return cls(
            np.concatenate([o.matched_ids for o in outputs]),
            pa.concat_tables([o.master for o in outputs]),
            np.concatenate([o.unmatched_ids for o in outputs]),
            np.concatenate([o.unmatched_reason for o in outputs]),
            np.concatenate([o.matched_keys for o in with_matches]) if keyed else None,
        )


def starts_of(counts: np.ndarray) -> np.ndarray:
    """Where each of consecutive runs of ``counts`` items starts: 0, c0, c0+c1, ..."""
    return np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)


def runs_of(in_order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(first, lengths)``: where each run of equal values of the sorted ``in_order`` starts,
    and how long it is (``np.unique``'s ``return_index`` and ``return_counts`` without its sort)."""
    first = np.flatnonzero(np.concatenate(([True], in_order[1:] != in_order[:-1])))
    return first, np.diff(np.append(first, len(in_order)))


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``concat(arange(s, s + c) for s, c in zip(starts, counts))`` without a Python loop."""
    counts = np.asarray(counts, dtype=np.int64)
    return np.repeat(np.asarray(starts, dtype=np.int64) - starts_of(counts), counts) + np.arange(int(counts.sum()))


def probe(page: MasterPage, keys: np.ndarray, unique: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Join stream ``keys`` with a page of R (keys sorted), all in numpy.

    Returns ``(probe_idx, master_idx, missing_idx)``: one pair per (stream tuple, master row)
    match - a key with K rows in R yields K pairs - and the stream positions with no row.
    ``unique`` says R's key is unique (a primary key), which allows a faster path.
    """
    left = np.searchsorted(page.keys, keys, side="left")
    if unique:  # at most one row per key: no second search, no expansion
        found = left < len(page.keys)
        found[found] = page.keys[left[found]] == keys[found]
        return np.flatnonzero(found), left[found], np.flatnonzero(~found)
    right = np.searchsorted(page.keys, keys, side="right")
    counts = right - left
    missing_idx = np.flatnonzero(counts == 0)
    probe_idx = np.repeat(np.arange(len(keys)), counts)
    return probe_idx, ranges(left, counts), missing_idx


def join_page(page: MasterPage, row_ids: np.ndarray, keys: np.ndarray, unique: bool = False) -> JoinOutput:
    """Probe a page with stream tuples known to belong to its key range; all of them complete."""
    probe_idx, master_idx, missing_idx = probe(page, keys, unique)
    return JoinOutput(
        row_ids[probe_idx],
        page.rows.take(master_idx),
        row_ids[missing_idx],
        np.full(len(missing_idx), Unmatched.NOT_IN_MASTER, np.int8),
        keys[probe_idx],
    )


def not_in_master(row_ids: np.ndarray, schema: pa.Schema) -> JoinOutput:
    """Tuples known to be absent from R without I/O (key outside R's key range)."""
    out = JoinOutput.empty(schema)
    out.unmatched_ids = row_ids
    out.unmatched_reason = np.full(len(row_ids), Unmatched.NOT_IN_MASTER, np.int8)
    return out


@dataclass(frozen=True)
class ReadCosts:
    """What a read of R costs a page-based join, from its store's calibration
    (:meth:`~..stores.base.MasterStore.calibrate`, :meth:`~..stores.base.MasterStore.calibrate_in`):
    S, a range query (``query_s``), and T, each unit more that it reads (``unit_s``: a row for
    HYBRIDJOIN, a page for SSIJ - the S and T of SSIJ's sec. IV-D); an IN query (``in_query_s``)
    and each key in it (``in_key_s``). A page due is read by whichever costs less (issue 12)."""

    query_s: float
    unit_s: float
    in_query_s: float
    in_key_s: float

    @classmethod
    def of(cls, store, unit_rows: float = 1.0) -> "ReadCosts":
        """The costs ``store`` measured, T being ``unit_rows`` rows."""
        query_s, row_s = store.calibrate()
        return cls(query_s, row_s * unit_rows, *store.calibrate_in())

    def range_s(self, units):
        """S + T * units: one range read of ``units`` units."""
        return self.query_s + self.unit_s * units

    def in_s(self, keys):
        """One IN query of ``keys`` keys."""
        return self.in_query_s + self.in_key_s * keys


MAX_PARAM = 2**53  # larger parameters overflow SQL integers and float arithmetic: a typo, or hostile


@dataclass(frozen=True)
class Param:
    """A tunable parameter of an algorithm: its type, default and meaning."""

    type: type
    default: Any
    doc: str
    minimum: float | None = None
    choices: tuple | None = None  # the values it takes, where they are few (a policy's name)

    def coerce(self, algorithm: str, name: str, value: Any) -> Any:
        try:
            coerced = self.type(value)
        except (TypeError, ValueError, OverflowError):  # int(inf), float(10**400)
            raise ConfigError(
                f"{algorithm}.{name}: {shown(value)} is not a valid {self.type.__name__} ({self.doc})"
            ) from None
        if self.type in (int, float) and not -MAX_PARAM <= coerced <= MAX_PARAM:  # NaN fails this too
            raise ConfigError(f"{algorithm}.{name}: {shown(coerced)} is not a number between {-MAX_PARAM} and {MAX_PARAM} ({self.doc})")
        if self.minimum is not None and coerced < self.minimum:
            raise ConfigError(f"{algorithm}.{name}: {shown(coerced)} must be >= {self.minimum} ({self.doc})")
        if self.choices is not None and coerced not in self.choices:
            raise ConfigError(f"{algorithm}.{name}: {shown(coerced)} is not one of {list(self.choices)} ({self.doc})")
        return coerced


def when_counted() -> Any:
    """A counter of an algorithm family that its stats report only once it has counted (a load
    of a kind that may never happen: HYBRIDJOIN's IN queries, ...)."""
    return field(default=0, metadata={"when_counted": True})


@dataclass
class Counters:
    """What every algorithm counts. An algorithm family's own counters are the fields of a
    subclass (its ``counters_type``); :meth:`own` reports them in the algorithm's stats."""

    tuples_in: int = 0
    matched_pairs: int = 0
    unmatched: int = 0
    loads: int = 0
    structure_bytes_peak: int = 0

    def own(self) -> dict:
        """The family's counters by name, as its stats report them (a :func:`when_counted` one from its first count)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in _COMMON and (getattr(self, f.name) or not f.metadata.get("when_counted"))}


_COMMON = frozenset(f.name for f in fields(Counters))


@dataclass
class CacheProbes(Counters):
    """Stream tuples probed against a cache of R's tuples (an LRU in front of IN lists)."""

    cache_hits: int = 0
    cache_probes: int = 0

    @property
    def hit_ratio(self) -> float | None:
        """Cache hits per probed stream tuple."""
        return round(self.cache_hits / self.cache_probes, 4) if self.cache_probes else None


class JoinAlgorithm:
    """Base class: stores the arguments as given, keeps counters, checks the memory budget.

    Subclasses set ``name``, ``paper`` (citation with section), ``params`` (and ``auto_candidate``),
    and implement
    :meth:`_step`, :attr:`pending` and :meth:`structure_bytes`.
    """

    name: ClassVar[str]
    paper: ClassVar[str]
    counters_type: ClassVar[type[Counters]] = Counters  # its family's counters
    params: ClassVar[dict[str, Param]] = {}
    auto_candidate: ClassVar[bool] = False  # among those ``algorithm: auto`` chooses from (its cost model predicts it)
    cost_model: ClassVar[str | None] = None  # the family of :func:`...costmodel.model` that predicts it (None: none)

    def __init__(self, store: JoinStore, memory: int, *, clock: Clock = time.perf_counter, plan: Plan | None = None,
                 **params):
        self.store = store
        self.memory = int(memory)
        self.clock = clock
        self.settings = self.settings_of(params)
        self.counters = self.counters_type()
        self.schema = store.schema
        self._arguments = dict(params)
        # built once from its plan (:mod:`.plan`): given (a caller chose among plans), or made here
        self.plan_used = plan if plan is not None else Planner(type(self), store, params).plan(self.memory)

    @classmethod
    def settings_of(cls, params: dict) -> dict:
        """Every parameter's value: ``params`` checked and coerced, the defaults for the rest."""
        unknown = sorted(set(params) - set(cls.params))
        if unknown:
            raise ConfigError(
                f"{cls.name}.{unknown[0]}: not a parameter of {cls.name} "
                f"(parameters: {sorted(cls.params)})"
            )
        return {name: spec.coerce(cls.name, name, params[name]) if name in params else spec.default
                for name, spec in cls.params.items()}

    # -- the plan (:mod:`.plan`): R's statistics read once, then the split of M without I/O ------
    @classmethod
    def statistics(cls, store: JoinStore, settings: dict) -> RStats:
        """What :meth:`plan` needs of R, read from ``store`` (the one I/O of sizing)."""
        return RStats.of(store, per_key=True)

    @classmethod
    def plan(cls, stats: RStats, memory: int, settings: dict) -> Plan:
        """The split of ``memory`` bytes between the structures, from ``stats`` alone (no I/O);
        raises :class:`..errors.BudgetError` when the smallest structures do not fit."""
        raise NotImplementedError

    @classmethod
    def pinned(cls, stats: RStats, memory: int, settings: dict) -> dict:
        """``settings`` with what the budget ``memory`` chooses fixed, for a front stage whose
        search for this algorithm's smallest budget must not choose again at each budget it
        tries (HYBRIDJOIN's page size); by default nothing is chosen so."""
        return settings

    @classmethod
    def min_memory(cls, stats: RStats, settings: dict) -> int:
        """The smallest budget :meth:`plan` accepts (``plan(min_memory - 1)`` raises the
        :class:`..errors.BudgetError`), in closed form from the plan's structure sizes (no I/O,
        no search over plans: :func:`.plan.smallest_budget`)."""
        raise NotImplementedError

    def restart(self) -> None:
        """Forget every tuple held and everything cached of R: the same algorithm anew, on the
        same store, its counters carrying on. :func:`..runner.run_join` does it when a lost
        session ended R's snapshot mid-run and R moved meanwhile (:class:`..stores.SnapshotLost`)."""
        counters = self.counters
        type(self).__init__(self, self.store, self.memory, clock=self.clock, **self._arguments)  # planned anew: R moved
        self.counters = counters

    # -- contract ---------------------------------------------------------------------------
    def step(self, buffer: StreamBuffer) -> JoinOutput:
        """One iteration of the paper's outer loop."""
        out = self._step(buffer)
        self.counters.matched_pairs += len(out.matched_ids)
        self.counters.unmatched += len(out.unmatched_ids)
        self.counters.structure_bytes_peak = max(self.counters.structure_bytes_peak, self.structure_bytes())
        return out

    def _step(self, buffer: StreamBuffer) -> JoinOutput:
        raise NotImplementedError

    @property
    def pending(self) -> int:
        """Stream tuples taken from the buffer that have not left yet."""
        raise NotImplementedError

    @property
    def in_flight(self) -> int:
        """Of the pending tuples, those whose page load is under way (HYBRIDJOIN's read-ahead):
        a step that only hands their load to the reader completes nothing yet, and still moves
        the join on (the next step joins them)."""
        return 0

    @property
    def demand(self) -> int:
        """Stream tuples the next step would take if they were there (w of the papers)."""
        raise NotImplementedError

    @property
    def capacity_tuples(self) -> int:
        """The most stream tuples it holds at once (H_S / Q, IB + SB, a batch): ``pending``
        never exceeds it. A caller that keeps each waiting tuple's full row (a Spark step's
        carried rows, :mod:`...spark.joinstate`) sizes its share of the budget by it."""
        raise NotImplementedError

    @property
    def cycle_ended(self) -> bool:
        """Whether the last step ended a cycle: a point of the state the join comes back to in
        its steady state, where a measurement window may open and close without cutting a burst
        of completions in two. Every step of an algorithm whose tuples leave step by step (an
        iteration of HYBRIDJOIN, ...); MESHJOIN ends one with a scan of all of R (or an empty
        H_S), SSIJ with SB empty again (the join phase that flushes it, or, all of R cached, an
        online phase). One that never ends kept a bench's warm-up and window running to their caps."""
        return True

    def turnovers(self) -> float:
        """How often the tuples held have been replaced since the start: the stream tuples taken
        beyond the first :attr:`capacity_tuples`, over it (a benchmark's warm-up waits for a few)."""
        capacity = max(self.capacity_tuples, 1)
        return max(self.counters.tuples_in - capacity, 0) / capacity

    @property
    def capacity_with_waiting(self) -> int:
        """The most tuples it holds plus those a front stage keeps waiting for it, which are at
        most its :attr:`demand` (CACHEJOIN Algorithm 1 lines 2-11): a front stage's
        :attr:`capacity_tuples` (the joins a front stage wraps define it)."""
        raise NotImplementedError

    def structure_bytes(self) -> int:
        """Bytes the algorithm's structures hold now (allocated capacity, not just the used part)."""
        raise NotImplementedError

    @property
    def one_row_per_match(self) -> bool:
        """A matched stream tuple joins exactly one row of R (an equality join on a unique key):
        its one pair completes it."""
        return bool(self.store.key_unique)

    @property
    def between_joins(self) -> bool:
        """No tuple has left with only part of its matches (the next step starts no one's join).
        The default: a tuple meets all rows of its key in one step (pages hold whole keys)."""
        return True

    def memory_split(self) -> dict:
        """How the budget was divided between the structures, in bytes: the plan's
        (:meth:`planned_split`), with what the structures hold now where an algorithm reports it."""
        return self.planned_split(self.plan_used)

    @classmethod
    def planned_split(cls, plan: Plan) -> dict:
        """The memory split (:meth:`memory_split`) the algorithm built from ``plan`` reports, from
        the plan alone: what the cost models read (:func:`...prediction.predict` of a plan:
        ``auto`` prices candidates without building them)."""
        return {}

    def invalidate(self, keys: np.ndarray) -> int:
        """Drop what is cached of R for ``keys`` (changed by an installed update, SSIJ sec.
        IV-E); returns how many cached entries were dropped. Called between joins, inside the
        snapshot of the next one (:func:`..runner.one_version_of_r`), before any probe. The
        default: nothing of R is cached across steps."""
        return 0

    def stats(self) -> dict:
        c = self.counters
        return {
            "algorithm": self.name,
            "memory_budget_bytes": self.memory,
            "structure_bytes_peak": c.structure_bytes_peak,
            "loads": c.loads,
            "memory_split": self.memory_split(),
            "settings": dict(self.settings),
            **c.own(),
        }

    def _join(self, page: MasterPage, row_ids: np.ndarray, keys: np.ndarray) -> JoinOutput:
        """Join tuples of one key range with the rows of R loaded for it (all of them complete)."""
        return join_page(page, row_ids, keys, self.store.key_unique)

    def _take(self, buffer: StreamBuffer, n: int) -> StreamChunk:
        chunk = buffer.take(n)
        self.counters.tuples_in += len(chunk)
        return chunk

    def _budget_error(self, needed: int, what: str) -> BudgetError:
        return self.budget_error(self.memory, needed, what)

    @classmethod
    def budget_error(cls, memory: int, needed: int, what: str) -> BudgetError:
        """``memory`` is too small: ``what`` alone needs ``needed`` bytes."""
        return BudgetError(
            f"memory: {memory} bytes is too small for {cls.name}: {what} alone needs "
            f"{needed} bytes (give --memory at least {needed * 2} bytes)"
        )
