"""SSIJ: M. A. Bornea, A. Deligiannakis, Y. Kotidis, V. Vassalos, "Semi-Streamed Index Join for
Near-Real Time Execution of ETL Transformations" (ICDE 2011), section IV.

Three phases (sec. IV-B, Algorithms 1 and 2):

* **pending**: arrived tuples wait in the input buffer IB until IB_thresh of them are there (or
  a deadline, or the end of the stream, says not to wait);
* **online** (Alg. 1): the batch is sorted by key and looked up in the index (the page map,
  pinned in memory like the B+tree's inner nodes, sec. III) in one vectorised pass; tuples whose
  pages are all in the page cache CR are joined at once (and raise the utility counters of those
  pages); the others go to the stream buffer SB, and each page they still need is recorded in
  the inverted index II;
* **join** (Alg. 2): when SB_thresh tuples wait in SB (or a deadline forces it), the pages P_u
  of II are read with the optimal read plan (sec. IV-D) and joined with SB through II; SB is
  flushed and the utility counters are cleared.

Here one :meth:`step` is the pending/online decision (plus the first read of a join phase it
starts) or one sequence of the running join phase, so arrivals between steps land in IB while
a join phase runs, as in the paper. The read plan, the join-phase estimate and CR are in
:mod:`.ssij_pages`, the access path per page in :mod:`.ssij_access`, IB, SB, II and a join
phase's state in :mod:`.ssij_state`; this module runs the phases over them.

The page cache CR (sec. IV-A, IV-C) keeps whole pages with a utility counter each. At the start
of a join phase the utility of every page is known without I/O (cached pages: their counters;
pages of P_u: their number of entries in II), so ToKeep (pages of P_u that stay cached) and
ToRemove (cached pages they replace) are decided once, from one sort, not from a list kept
sorted on every hit. Beyond the paper, pages are ranked by their *demand*, the utility averaged
over cycles (:meth:`.ssij_pages.PageCache.settle`: the last cycle weighs a quarter), not by the
last cycle's count alone, whose noise swapped hundreds of equally useful pages a phase on a
uniform stream. ``cache_policy=lru`` replaces the demand by the time of last use (the
paper's Figure 11 comparison): pages read in a join phase are then the most recent of all.

Memory (sec. IV-A) is accounted in bytes: the page map, the per-page arrays, a buffer for one
read sequence of maxScan pages, IB, SB, II and CR. IB, SB and II take what they hold; CR takes
what is left and gives it back: an arriving tuple or a growing SB evicts the cached pages of
lowest utility (the current ToRemove first), so the stream never overflows while a cached page
can be evicted. The budget is checked at the start to hold the index, the read buffer, a full IB
(``ib_size`` tuples) and a full SB with an empty CR, so the stream never overflows at all;
arrivals beyond ``ib_size`` wait in the engine's stream buffer, outside the join.

The read plan (sec. IV-D) is the paper's dynamic program over the pages of P_u sorted by
position, OPT[j] = min over scans of length i <= maxScan ending on a page of P_u of
S + T*i + OPT[next], with S and T (per page) from the store's measured costs; each planned
sequence is one index range query. Pages further apart than maxDist = 1 + S/T are never worth
one scan, so P_u splits into independent clusters there.

The access path per page (issue 12, beyond the paper, :mod:`.ssij_access`): a page of P_u
whose distinct waiting keys cost less by an IN query than the page costs to read is *sparse*:
it is left out of ToKeep unless it was in P_u of the join phase before too (a hot key alone on
its page recurs in every phase); sequences are cut around pages of ToKeep, and runs of
sequences with none that are cheaper by IN are read by one IN query each. A page of P_u
displaces a cached page only with ``KEEP_MARGIN`` times its demand: where many pages serve
about as much (the random shape), the paper's ranking changed a few hundred cached pages a phase
for no gain in hits, and each read a page whole. The last join phase (the stream has ended and
every tuple is in SB) keeps no page at all: no later tuple would probe it. A short stream spread
over every page thus costs a few queries instead of a read of all of R.

Deadlines (sec. IV-F): IB hands tuples to the online phase in deadline order; a join phase is
forced when the closest deadline in SB (or in IB) would otherwise pass, estimated by a cost
model that starts at one random I/O per page and learns the worst observed time per page of
past join phases of a similar size (log2 buckets of |P_u|). A tuple is due when a tenth of its
time from arrival to deadline is left (the paper: "close to the maximum latency").

Updates (sec. IV-E): a *cycle* - the online phases until SB is empty again (a join phase flushed
it, or, all of R cached, no tuple entered it) - reads one snapshot of R
(:meth:`.stores.base.MasterStore.snapshot`, when R has a change log); on entry the cached pages
of the keys changed since the last cycle are dropped before any probe, so a tuple joins its
cached and its read pages with one version of R. Between cycles no tuple is half joined.
:meth:`SemiStreamedIndexJoin.install_updates` is the paper's "Installing Updates": force the
join phase, install the batch while the stream waits in IB, resume.

1:K joins: a page holds whole keys, so a tuple meets all K rows of its key on one page. Range
conditions (``range_lo``, ``range_hi``: R.key between key+range_lo and key+range_hi, integer
keys): a tuple needs every page its key range overlaps; it is joined with the cached ones in
the online phase (its matches leave at once) and with the others in the join phase, and leaves
``not_in_master`` once all its pages are joined without a match.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pyarrow as pa

from ..errors import ConfigError
from ..keys import sorted_distinct
from ..stores.base import MasterPage, PageMap
from ..stores.changes import Installed, install_changes
from .ssij_access import distinct_keys, in_spans, sparse, split_at_keep
from .ssij_pages import TICK_SCALE, JoinPhaseEstimate, PageCache, read_plan
from .ssij_plan import PAIR_BYTES, PER_REQUESTED_BYTES, SsijStats, min_ssij, plan_ssij, shift
from .ssij_state import JoinPhase, SSIJCounters, StreamBufferState, Tuples
from .plan import Plan
from .base import JoinAlgorithm, JoinOutput, Param, ReadCosts, StreamBuffer, join_page, not_in_master, probe, ranges

POLICIES = ("utility", "lru")
DEADLINE_SAFETY = 2.0  # the join-phase estimate is doubled when deadlines decide (sec. IV-F)
DEADLINE_SLACK = 0.1  # a tuple is due when a tenth of its time from arrival to deadline is left
GAP_DECAY = 0.9  # the time between steps a deadline check allows for: a slowly decaying maximum
KEEP_MARGIN = 2.0  # a page of P_u displaces a cached page only with KEEP_MARGIN times its demand (see _to_keep)


class SemiStreamedIndexJoin(JoinAlgorithm):
    name = "ssij"
    counters_type = SSIJCounters
    cost_model = "ssij"  # :func:`..ssijmodel.ssij_model` (the paper bounds only the worst case, sec. V)
    paper = "SSIJ (Bornea, Deligiannakis, Kotidis, Vassalos, ICDE 2011), sec. IV, Alg. 1-2"
    params = {
        "page_rows": Param(int, 64, "rows of R per page (a block; Table II: 64 tuples per block)", 1),
        "ib_thresh": Param(int, 0, "IB_thresh: stream tuples per online phase; 0 = SB_thresh / 4", 0),
        "sb_thresh": Param(int, 0, "SB_thresh: tuples in SB that start a join phase; 0 = 30% of the budget", 0),
        "ib_size": Param(int, 0, "input buffer IB: most arrived tuples it holds; 0 = 2 * IB_thresh", 0),
        "max_scan": Param(int, 200, "maxScan: most pages one read sequence (one range query) covers", 1),
        "cache_policy": Param(str, "utility", "which pages CR keeps: utility (ToKeep/ToRemove, sec. IV-C) or lru",
                              choices=POLICIES),
        "range_lo": Param(int, 0, "range join: R.key >= stream key + range_lo (integer keys; 0, 0 = equality)"),
        "range_hi": Param(int, 0, "range join: R.key <= stream key + range_hi"),
    }

    def __init__(self, store, memory, **kwargs):
        super().__init__(store, memory, **kwargs)
        s, sizes = self.settings, self.plan_used.sizes
        self.range = (s["range_lo"], s["range_hi"])
        self.page_map: PageMap = store.page_map(s["page_rows"])
        n_pages = self.page_map.n_pages
        self.rows_per_page = sizes["rows_per_page"]
        self.read_costs = ReadCosts.of(store, self.rows_per_page)  # S and T of sec. IV-D, T reading one more page
        self.max_dist = sizes["max_dist"]
        for name in ("page_bytes", "pages_per_tuple", "ib_tuple_bytes", "sb_tuple_bytes", "fixed_bytes", "max_scan",
                     "scan_bytes", "sb_thresh", "ib_thresh", "ib_size"):
            setattr(self, name, sizes[name])
        self.cache = PageCache(n_pages, store.key_type.dtype, self.schema, s["cache_policy"])
        self.estimate = JoinPhaseEstimate(self.read_costs.range_s(1))
        self._ib = Tuples(np.zeros(0, np.int64), np.zeros(0, store.key_type.dtype), np.zeros(0), np.zeros(0))
        self._sb = StreamBufferState()
        self._ii_count = np.zeros(n_pages, dtype=np.int32)
        self._asked_in_phase = np.full(n_pages, -2, dtype=np.int32)  # the last join phase each page was in P_u of
        self._requested = 0  # pages with an II entry: |P_u| of the next join phase
        self._phase: JoinPhase | None = None
        self._cycle_ended = False  # the last step ended a cycle (:attr:`cycle_ended`)
        self._online_s = 0.0  # duration of the last online phase
        self._gap_s = 0.0  # time between the last two steps: how late a deadline check may come
        self._last_step: float | None = None
        # deadlines are in the units of the stream buffer's clock (the runner's): time is read from
        # it from the first step on
        self._time = self.clock
        self._cycle: contextlib.ExitStack | None = None  # the snapshot of R of the current cycle
        self._cycle_owns = False  # the cycle's snapshot is not part of an outer one (run_join's)

    # -- the plan (:mod:`.ssij_plan`) ------------------------------------------------------------
    @classmethod
    def statistics(cls, store, settings: dict) -> SsijStats:
        return SsijStats.of(store, cls.name, settings)

    @classmethod
    def plan(cls, stats: SsijStats, memory: int, settings: dict) -> Plan:
        """maxScan, SB_thresh, IB_thresh and the size of IB from the budget (sec. IV-A, :func:`.ssij_plan.plan_ssij`)."""
        return plan_ssij(cls, stats, memory, settings)

    @classmethod
    def min_memory(cls, stats: SsijStats, settings: dict) -> int:
        """The page map, one read sequence and IB and SB at their smallest (:func:`.ssij_plan.min_ssij`)."""
        return min_ssij(stats, settings)

    def _page_last_key(self, pages: np.ndarray) -> np.ndarray:
        """The largest key each page may hold (read live: inserts widen the page map, sec. IV-E)."""
        pm = self.page_map
        following = np.minimum(pages + 1, pm.n_pages - 1)
        return np.where(pages + 1 < pm.n_pages, pm.bounds[following] - 1, np.int64(pm.max_key))

    # -- the contract -----------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        return len(self._ib) + self._sb.size + (self._phase.open if self._phase else 0)

    @property
    def demand(self) -> int:
        return self.ib_size - len(self._ib)

    @property
    def capacity_tuples(self) -> int:
        """IB (``ib_size``) and SB, which reaches SB_thresh + IB_thresh - 1 tuples (sec. IV-A)."""
        return self.ib_size + self.sb_thresh + self.ib_thresh

    @property
    def one_row_per_match(self) -> bool:
        return self.range == (0, 0) and bool(self.store.key_unique)

    @property
    def between_joins(self) -> bool:
        """A range join's tuple leaves its cached pages' matches in the online phase and the
        others in the join phase: it is half joined until the join phase that empties SB."""
        return self.range == (0, 0) or (self._phase is None and self._sb.size == 0)

    def _stream_bytes(self) -> int:
        ib = len(self._ib) * self.ib_tuple_bytes
        sb = self._sb.size * (self.sb_tuple_bytes - self.pages_per_tuple * PAIR_BYTES) + self._sb.pairs * PAIR_BYTES
        phase = self._phase
        if phase is not None:
            sb += len(phase.sb) * (self.sb_tuple_bytes - self.pages_per_tuple * PAIR_BYTES) + len(phase.pair_sb) * PAIR_BYTES
            sb += len(phase.requested) * PER_REQUESTED_BYTES
        return ib + sb

    def structure_bytes(self) -> int:
        return self.fixed_bytes + self.scan_bytes + self._stream_bytes() + self.cache.nbytes

    def memory_split(self) -> dict:
        """The plan's split, with the page map (brought up to date by R's changes) and CR as they are now."""
        return {"page_map_bytes": self.page_map.nbytes, "page_arrays_bytes": self.fixed_bytes - self.page_map.nbytes,
                **self.planned_split(self.plan_used), "cache_bytes_now": self.cache.nbytes,
                "cache_pages_now": self.cache.pages, "pages": self.page_map.n_pages}

    @classmethod
    def planned_split(cls, plan: Plan) -> dict:
        sizes = plan.sizes
        return {
            "read_buffer_bytes": sizes["scan_bytes"],
            "stream_buffers_peak_bytes": sizes["stream_peak_bytes"],
            "cache_room_bytes": plan.memory - sizes["fixed_bytes"] - sizes["scan_bytes"] - sizes["stream_peak_bytes"],
            "page_rows": sizes["page_rows"],
            **{name: sizes[name] for name in ("page_bytes", "ib_thresh", "sb_thresh", "ib_size", "max_scan")},
            "max_dist": round(sizes["max_dist"], 2),
            "in_query_keys": sizes["in_query_keys"],
        }

    def stats(self) -> dict:
        out = super().stats()
        out["cache_hit_ratio"] = self.counters.hit_ratio
        out["cache_evictions"] = self.cache.evictions
        out["cache_compactions"] = self.cache.compactions
        return out

    # -- one step -------------------------------------------------------------------------------
    @property
    def cycle_ended(self) -> bool:
        """The last step moved the join (an online phase, a join phase's sequence) and left no
        tuple half joined: SB empty, no join phase under way (a window over whole cycles counts
        each burst of a join phase once). Mostly the join phase that flushes SB (Alg. 2 lines
        17-18); but an online phase too goes back to the pending phase (Alg. 1 line 24), and with
        all of R in CR it discards every tuple (lines 9-11): SB stays empty, no join phase ever
        comes (a bench waited for one to its caps), each online phase is a whole cycle."""
        return self._cycle_ended

    def _step(self, buffer: StreamBuffer) -> JoinOutput:
        self._time = buffer.clock
        now = self._time()
        if self._last_step is not None and self.pending:  # (an idle pause between streams does not count)
            self._gap_s = max(now - self._last_step, GAP_DECAY * self._gap_s)
        self._last_step = now
        self._accept(buffer)
        if self._phase is not None:
            out = self._join_next()
            self._cycle_ended = self._end_cycle()
            return out
        ib, end = self._ib, buffer.exhausted
        urgent = int((ib.due <= self._horizon(min(len(ib), self.ib_thresh))).sum()) if len(ib) else 0
        outputs = []
        if len(ib) >= self.ib_thresh or urgent or (end and len(ib)):
            self._begin_cycle()
            outputs.append(self._online(max(min(self.ib_thresh, len(ib)), urgent)))
        sb = self._sb
        due = sb.min_due <= self._horizon(0)
        if sb.size and (sb.size >= self.sb_thresh or due or (end and not len(self._ib))):
            if due and sb.size < self.sb_thresh:
                self.counters.forced_join_phases += 1
            self._start_join_phase(last=end and buffer.final and not len(self._ib))
            outputs.append(self._join_next())
        self._cycle_ended = self._end_cycle() and bool(outputs)  # (a step that waited in the pending phase ends none)
        return JoinOutput.concat(outputs, self.schema)

    def _horizon(self, new_pages: int) -> float:
        """Sec. IV-F: a deadline before this time is due - a join phase must start now to meet
        it. The join phase is priced by the cost model for the pages of II plus ``new_pages``
        (doubled: the model is a worst case of past phases, not a bound of the next one), plus
        an online phase and the time until the next step, when the check comes again. A tuple
        is due a tenth of its time from arrival to deadline before the deadline (the paper
        triggers the join phase when its estimate comes "close to the maximum latency")."""
        pages = self._requested + new_pages
        return self._time() + self._gap_s + self._online_s + DEADLINE_SAFETY * self.estimate.seconds(pages)

    # -- versions of R (sec. IV-E) --------------------------------------------------------------------
    def _begin_cycle(self) -> None:
        """A cycle (online phases up to the join phase that empties SB) reads one snapshot of R;
        on entry, cached pages of the keys changed since the last one are dropped before any
        probe. Inside a snapshot someone else holds (``run_join``'s), it is part of that one."""
        if self._cycle is None and self.store.has_change_log():
            self._cycle_owns = not self.store.in_snapshot
            self._cycle = contextlib.ExitStack()
            changed = self._cycle.enter_context(self.store.snapshot())
            self.counters.invalidated_pages += self.invalidate(changed)

    def _end_cycle(self) -> bool:
        """Whether no tuple is half joined (SB empty, no join phase): then the cycle's snapshot closes."""
        if self._phase is not None or self._sb.size:
            return False
        if self._cycle is not None:
            self._cycle.close()
            self._cycle = None
        return True

    def invalidate(self, keys: np.ndarray) -> int:
        """Drop the cached pages holding ``keys`` (changed in R); returns how many were cached."""
        pages = np.unique(self.page_map.page_of(np.asarray(keys, self.store.key_type.dtype)))
        stale = pages[(pages >= 0) & self.cache.cached[np.maximum(pages, 0)]]
        self.cache.evict(stale)
        return len(stale)

    def install_updates(self, changes: pa.Table | None = None, max_rows: int | None = None) -> tuple[JoinOutput, Installed]:
        """Sec. IV-E, "Installing Updates": install a batch of changes to R while the join runs.

        The join phase is forced first, so no tuple has joined part of its pages with R before
        the batch and would join the rest after it; the tuples waiting in IB stay there while the
        batch installs (``changes``, or the pending changes: see
        :func:`..stores.changes.install_changes`, one transaction on the store's connection);
        the next cycle's snapshot drops the cached pages of the changed keys. Returns what the
        forced join phase completed (hand it on like a step's output) and the installed batch.
        Call it between steps, not inside ``run_join`` (which reads one version of R for its
        whole run).
        """
        if self.store.in_snapshot and not (self._cycle is not None and self._cycle_owns):
            raise ConfigError("install_updates: R is read inside a snapshot this join did not open "
                              "(run_join holds one per run); install between runs")
        outputs = []
        if self._phase is None and self._sb.size:
            self.counters.forced_join_phases += 1
            self._start_join_phase()
        while self._phase is not None:
            outputs.append(self._join_next())
        self._end_cycle()
        installed = install_changes(self.store.connection, self.store.table, self.store.key, changes, max_rows)
        self.counters.updates_installed += 1
        return JoinOutput.concat(outputs, self.schema), installed

    # -- memory -----------------------------------------------------------------------------------
    def _free(self) -> int:
        return self.memory - self.structure_bytes()

    def _make_room(self, need: int, below: float = math.inf) -> int:
        """Evict cached pages (lowest priority first, only those under ``below``) until ``need``
        bytes are free; returns the bytes free then (less than ``need`` only with ``below``: the
        budget holds the stream buffers at their peak with an empty CR)."""
        while (free := self._free()) < need:
            if self.cache.garbage() > 0:  # the rows of evicted pages are still held: drop them first
                self.cache.collect()
                continue
            victims = self.cache.victims(need - free, below=below)
            if len(victims) == 0:
                break
            self.cache.evict(victims)
        return free

    def _accept(self, buffer: StreamBuffer) -> None:
        """Move arrived tuples into IB up to its size; an arriving tuple evicts the cached page of
        lowest utility when the memory is short (sec. IV-A, IV-C)."""
        n = min(buffer.available, self.ib_size - len(self._ib))
        if n <= 0:
            return
        self._make_room(n * self.ib_tuple_bytes)
        chunk = buffer.take_by_deadline(n)  # the closest deadlines first (sec. IV-F)
        self.counters.tuples_in += len(chunk)
        deadlines = np.where(np.isnan(chunk.deadlines), np.inf, chunk.deadlines)
        now = self._time()
        ahead = np.isfinite(deadlines) & (deadlines > now)  # (no deadline, or past it: due at the deadline)
        due = deadlines.copy()
        due[ahead] -= DEADLINE_SLACK * (deadlines[ahead] - now)
        self._ib = Tuples.concat([self._ib, Tuples(chunk.row_ids, chunk.keys, deadlines, due)])

    # -- the online phase (Alg. 1) ------------------------------------------------------------------
    def _take_ib(self, n: int) -> Tuples:
        """The ``n`` tuples of IB with the closest deadlines (arrival order among equals, sec. IV-F)."""
        ib = self._ib
        if n >= len(ib):
            self._ib = ib.take(slice(0, 0))
            return ib
        if np.isfinite(ib.deadlines).any():
            chosen = np.zeros(len(ib), dtype=bool)
            chosen[np.argsort(ib.deadlines, kind="stable")[:n]] = True
            self._ib = ib.take(~chosen)
            return ib.take(chosen)
        self._ib = ib.take(slice(n, None))
        return ib.take(slice(0, n))

    def _key_ranges(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(lo, hi)``: the key range each tuple joins (its key for an equi-join), saturating."""
        if self.range == (0, 0):
            return keys, keys
        lo, hi = self.range
        return shift(keys, lo), shift(keys, hi)

    def _page_spans(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """First page and number of pages of each key range (0 pages: outside R's key range)."""
        pm = self.page_map
        if self.range == (0, 0):
            first = pm.page_of(lo)
            return first, (first >= 0).astype(np.int64)
        smallest, largest = pm.bounds[0], np.int64(pm.max_key)
        inside = (hi >= smallest) & (lo <= largest) & (smallest <= largest)  # (an empty R covers no key)
        first = pm.page_of(np.maximum(lo, smallest))
        last = pm.page_of(np.minimum(hi, largest))
        return first, np.where(inside, last - first + 1, 0)

    def _match(self, keys: np.ndarray, rows: pa.Table, lo: np.ndarray, hi: np.ndarray,
               pages: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(pair positions, row positions)``: each pair (a tuple's range, one of its pages) with
        every row of that page in the range. ``keys`` sorted; only rows of ``pages`` are matched."""
        if self.range == (0, 0):
            probe_idx, master_idx, _ = probe(MasterPage(keys, rows), lo, self.store.key_unique)
            return probe_idx, master_idx
        lo = np.maximum(lo, self.page_map.bounds[pages])
        hi = np.minimum(hi, self._page_last_key(pages))
        left = np.searchsorted(keys, lo, side="left")
        counts = np.maximum(np.searchsorted(keys, hi, side="right") - left, 0)
        return np.repeat(np.arange(len(lo)), counts), ranges(left, counts)

    def _online(self, n: int) -> JoinOutput:
        started = self._time()
        counters = self.counters
        counters.online_phases += 1
        batch = self._take_ib(n)
        batch = batch.take(np.argsort(batch.keys, kind="stable"))  # line 1: sort by the index's order
        lo, hi = self._key_ranges(batch.keys)
        first, spans = self._page_spans(lo, hi)  # line 2: one batched index scan
        pair_t = np.repeat(np.arange(len(batch)), spans)
        pair_p = ranges(first, spans) if self.range != (0, 0) else first[spans > 0]
        cached = self.cache.cached[pair_p]
        outputs = [not_in_master(batch.row_ids[spans == 0], self.schema)]
        matched = np.zeros(len(batch), dtype=bool)
        if cached.any():  # lines 3-6: join the cached pages now, raise their utility
            ct, cp = pair_t[cached], pair_p[cached]
            slab = self.cache.slab
            pair_idx, row_idx = self._match(slab.keys, slab.rows, lo[ct], hi[ct], cp)
            self.cache.touch(cp)
            hit_t = ct[pair_idx]
            matched[hit_t] = True
            outputs.append(JoinOutput(batch.row_ids[hit_t], slab.rows.take(row_idx), np.zeros(0, np.int64),
                                      np.zeros(0, np.int8), batch.keys[hit_t]))
        missing = np.bincount(pair_t[~cached], minlength=len(batch))
        waits = missing > 0
        done = (spans > 0) & ~waits  # lines 9-11: every page was cached
        counters.cache_probes += int((spans > 0).sum())
        counters.cache_hits += int(done.sum())
        lost = done & ~matched
        outputs.append(not_in_master(batch.row_ids[lost], self.schema))
        if waits.any():  # lines 13-19: SB and II, evicting cached pages if memory is short
            self._to_stream_buffer(batch, waits, matched, missing, pair_t[~cached], pair_p[~cached])
        self._online_s = self._time() - started
        return JoinOutput.concat(outputs, self.schema)

    def _to_stream_buffer(self, batch: Tuples, waits: np.ndarray, matched: np.ndarray, missing: np.ndarray,
                          pair_t: np.ndarray, pair_p: np.ndarray) -> None:
        sb = self._sb
        position = np.cumsum(waits) - 1 + sb.size  # where each waiting tuple goes in SB
        entering = batch.take(waits)
        self._make_room(len(entering) * (self.sb_tuple_bytes - self.pages_per_tuple * PAIR_BYTES) + len(pair_p) * PAIR_BYTES)
        sb.tuples.append(entering)
        sb.matched.append(matched[waits])
        sb.remaining.append(missing[waits].astype(np.int32))
        sb.pair_sb.append(position[pair_t])
        sb.pair_page.append(pair_p)
        sb.size += len(entering)
        sb.pairs += len(pair_p)
        sb.min_due = min(sb.min_due, float(entering.due.min()))
        pages, counts = np.unique(pair_p, return_counts=True)
        self._requested += int((self._ii_count[pages] == 0).sum())
        self._ii_count[pages] += counts

    # -- the join phase (Alg. 2) --------------------------------------------------------------------
    def _start_join_phase(self, last: bool = False) -> None:
        """Lines 1-3 of Alg. 2: II page by page, P_u, the read plan and ToKeep, from the pages of
        P_u worth a range read (:func:`.ssij_access.sparse`); then sequences are cut
        around pages of ToKeep and runs with none that are cheaper by IN become IN queries
        (:mod:`.ssij_access`). ``last``: the stream has
        ended and every tuple is in SB, so no later tuple would probe a cached page: ToKeep is
        empty."""
        sb = self._sb
        order = np.argsort(np.concatenate(sb.pair_page), kind="stable")  # II, page by page
        pair_page = np.concatenate(sb.pair_page)[order]
        pair_sb = np.concatenate(sb.pair_sb)[order]
        tuples = Tuples.concat(sb.tuples)
        matched, remaining = np.concatenate(sb.matched), np.concatenate(sb.remaining)
        self._sb = StreamBufferState()
        requested = np.flatnonzero(self._ii_count)  # P_u in position order (line 2)
        utility = self._ii_count[requested].astype(np.int64)
        self._ii_count[requested] = 0
        self._requested = 0
        plan = read_plan(requested, self.max_scan, self.read_costs.query_s, self.read_costs.unit_s)  # line 3
        self.counters.join_phases += 1
        recency = self.cache.tick + 1 + np.arange(len(requested))  # the plan reads in position order
        demand = self.cache.settle(requested, utility)
        priority = recency.astype(np.float64) if self.cache.policy == "lru" else demand + recency * TICK_SCALE
        phase = self._phase = JoinPhase(tuples, matched, remaining, pair_sb, pair_page, plan, requested,
                                         np.zeros(len(requested), bool), recency, priority, self._time(), len(tuples))
        equi = self.range == (0, 0)
        phase_no = self.counters.join_phases
        again = self._asked_in_phase[requested] == phase_no - 1  # in P_u of the phase before too: it recurs
        self._asked_in_phase[requested] = phase_no
        distinct = distinct_keys(requested, pair_page, tuples.keys[pair_sb]) if equi else None
        if not last:
            dense = again | ~sparse(self.read_costs, distinct) if equi else np.ones(len(requested), bool)
            phase.keep[np.flatnonzero(dense)[self._to_keep(requested[dense], priority[dense])]] = True  # line 1
        if equi:
            plan = split_at_keep(self.read_costs, plan, distinct, phase.keep, requested)
            phase.plan, phase.by_in = in_spans(self.read_costs, plan, distinct, phase.keep, requested, self._in_keys())
        self.cache.tick += len(requested) + 1
        self._make_room(0)  # the phase's arrays are the stream's: cached pages leave for them (no ToRemove in the last)

    def _in_keys(self) -> int:
        """The most keys one IN query of the plan asks for (its ``in_query_keys``)."""
        return self.plan_used.sizes["in_query_keys"]

    def _to_keep(self, requested: np.ndarray, priority: np.ndarray) -> np.ndarray:
        """Sec. IV-C: rank the cached pages and the pages of P_u by demand; the best that fit the
        memory left by the index, IB, SB and II make up the cache after the phase. Returns
        ToKeep (positions in P_u); ToRemove (the cached pages that lost) is evicted now - it would
        have to go before the phase ends, and no cached page is probed during the phase."""
        cached = np.flatnonzero(self.cache.cached)
        pages = np.concatenate([cached, requested])
        challenge = priority / KEEP_MARGIN if self.cache.policy == "utility" else priority
        prio = np.concatenate([self.cache.priority(cached), challenge])
        was_cached = np.arange(len(pages)) < len(cached)
        size = np.concatenate([self.cache.page_bytes[cached], np.full(len(requested), self.page_bytes)])
        order = np.lexsort((~was_cached, -prio))  # best first; on ties a cached page stays
        room = self.memory - self.fixed_bytes - self.scan_bytes - self._stream_bytes() - self.ib_thresh * self.ib_tuple_bytes
        best = order[: int(np.searchsorted(np.cumsum(size[order]), room, side="right"))]
        top = np.zeros(len(pages), dtype=bool)
        top[best] = True
        self.cache.evict(pages[was_cached & ~top])
        return np.flatnonzero(top[len(cached):])

    def _join_next(self) -> JoinOutput:
        """Lines 4-16: read the next sequence of the plan, join it with SB through II, keep the
        pages of ToKeep; after the last one, flush SB and clear the utility counters (17-18)."""
        phase = self._phase
        first, count = phase.plan[phase.next]
        phase.next += 1
        a, b = np.searchsorted(phase.pair_page, [first, first + count])
        pair_sb, pair_page = phase.pair_sb[a:b], phase.pair_page[a:b]
        loaded = self._read(phase, first, count, pair_sb)
        counters = self.counters
        counters.loads += 1
        counters.sequences += 1
        counters.pages_requested += int(np.diff(np.searchsorted(phase.requested, [first, first + count]))[0])
        if self.range == (0, 0):  # one page per tuple: each completes here
            out = join_page(loaded, phase.sb.row_ids[pair_sb], phase.sb.keys[pair_sb], self.store.key_unique)
            phase.open -= len(pair_sb)
        else:
            out = self._join_ranges(phase, loaded, pair_sb, pair_page)
        self._keep(phase, loaded, first, count)
        if phase.next == len(phase.plan):
            self.estimate.observe(len(phase.requested), self._time() - phase.started)
            self._phase = None
        return out

    def _read(self, phase: JoinPhase, first: int, count: int, pair_sb: np.ndarray) -> MasterPage:
        """Line 5: read the sequence by one range query; or, for a span of the plan that
        :func:`.ssij_access.in_spans` gave to IN, only the distinct keys waiting on it by one IN query
        (issue 12: sparse pages, e.g. of a short stream, need not be read whole)."""
        if phase.next - 1 in phase.by_in:
            lo, hi = np.searchsorted(phase.requested, [first, first + count])
            self.counters.in_loads += 1
            self.counters.pages_by_in += int(hi - lo)  # the requested ones of a span
            return self.store.lookup_many(sorted_distinct(phase.sb.keys[pair_sb]))
        self.counters.pages_read += count
        return self.store.load_pages(self.page_map, first, count)

    def _join_ranges(self, phase: JoinPhase, loaded: MasterPage, pair_sb: np.ndarray, pair_page: np.ndarray) -> JoinOutput:
        lo, hi = self._key_ranges(phase.sb.keys[pair_sb])
        pair_idx, row_idx = self._match(loaded.keys, loaded.rows, lo, hi, pair_page)
        hit = pair_sb[pair_idx]
        phase.matched[hit] = True
        touched, times = np.unique(pair_sb, return_counts=True)
        phase.remaining[touched] -= times.astype(np.int32)
        complete = touched[phase.remaining[touched] == 0]
        phase.open -= len(complete)
        lost = complete[~phase.matched[complete]]
        out = not_in_master(phase.sb.row_ids[lost], self.schema)
        out.matched_ids = phase.sb.row_ids[hit]
        out.master = loaded.rows.take(row_idx)
        out.matched_keys = phase.sb.keys[hit]
        return out

    def _keep(self, phase: JoinPhase, loaded: MasterPage, first: int, count: int) -> None:
        """Lines 11-13: pages of ToKeep stay cached, the others (and unrequested pages the scan
        read on the way) are dropped. A keep that no longer fits (IB grew) evicts only pages of
        lower utility; otherwise it is given up (ToKeep shrinks, sec. IV-C)."""
        lo, hi = np.searchsorted(phase.requested, [first, first + count])
        at = lo + np.flatnonzero(phase.keep[lo:hi])  # positions in P_u of the sequence's ToKeep pages
        if len(at) == 0 or len(loaded) == 0:
            return
        row_page = np.searchsorted(self.page_map.bounds, loaded.keys, side="right") - 1
        at = at[np.argsort(-phase.priority[at], kind="stable")]
        pages = phase.requested[at]
        row_bytes = loaded.nbytes / len(loaded) + 4  # + the page of each cached row
        sizes = np.ceil(np.bincount(row_page - first, minlength=count)[pages - first] * row_bytes)
        need = np.cumsum(sizes)
        free = self._make_room(int(need[-1]), below=float(phase.priority[at].min()))
        kept = np.sort(at[: int(np.searchsorted(need, free, side="right"))])
        self.cache.stage(loaded, row_page, phase.requested[kept], phase.recency[kept])
        self._make_room(0)  # the estimate of their bytes was short: the lowest priority leave

