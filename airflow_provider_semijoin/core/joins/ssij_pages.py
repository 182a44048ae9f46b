"""SSIJ's pages (Bornea et al., ICDE 2011): the optimal read plan of a join phase (sec. IV-D),
the join-phase cost model deadlines are checked with (sec. IV-F) and the page cache CR with
its utility counters (sec. IV-A, IV-C). :mod:`.ssij` runs the phases over them."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..stores.base import MasterPage

TICK_SCALE = 2.0**-40  # the time of last use breaks ties between equal utilities
DEMAND_WEIGHT = 0.25  # a cycle's count in a page's demand (the paper's utility is the last cycle's alone: 1)


# -- the optimal read plan (sec. IV-D) ------------------------------------------------------------
def max_dist(query_s: float, page_s: float) -> float:
    """maxDist = 1 + S/T (sec. IV-D): pages this far apart or more are read by two queries, since
    a scan across the gap never costs less."""
    return 1.0 + query_s / page_s


def read_plan(pages: np.ndarray, max_scan: int, query_s: float, page_s: float) -> list[tuple[int, int]]:
    """The cheapest way to read ``pages`` (sorted, distinct positions) in sequences ``(first, count)``
    of at most ``max_scan`` pages that start and end on requested pages (sec. IV-D).

    OPT[j] = min over k >= j with x_k - x_j < max_scan of S + T*(x_k - x_j + 1) + OPT[k+1]:
    the minimum over k of T*x_k + OPT[k+1] is a sliding window (k's bound falls with j), kept in
    a monotone deque, so the program runs in O(|P_u|) after the split into clusters at gaps of
    maxDist = 1 + S/T pages or more (a scan across such a gap never beats two queries).
    """
    x = np.asarray(pages, dtype=np.int64)
    if len(x) == 0:
        return []
    gaps = np.diff(x)
    cut = np.flatnonzero((gaps >= max_dist(query_s, page_s)) | (gaps >= max_scan)) + 1
    plan: list[tuple[int, int]] = []
    for cluster in np.split(x, cut):
        if len(cluster) == 1:
            plan.append((int(cluster[0]), 1))
        else:
            plan += _cluster_plan(cluster.tolist(), max_scan, query_s, page_s)
    return plan


def _cluster_plan(x: list[int], max_scan: int, query_s: float, page_s: float) -> list[tuple[int, int]]:
    m = len(x)
    opt = [0.0] * (m + 1)
    choice = [0] * m
    window: deque[tuple[float, int]] = deque()  # (T*x_k + OPT[k+1], k), increasing values from the left
    last = m - 1  # the largest k a scan starting at x_j may end on
    for j in range(m - 1, -1, -1):
        value = page_s * x[j] + opt[j + 1]
        while window and window[0][0] >= value:
            window.popleft()
        window.appendleft((value, j))
        while x[last] - x[j] >= max_scan:
            last -= 1
        while window[-1][1] > last:
            window.pop()
        best, k = window[-1]
        opt[j] = query_s + page_s * (1 - x[j]) + best
        choice[j] = k
    plan, j = [], 0
    while j < m:
        k = choice[j]
        plan.append((x[j], x[k] - x[j] + 1))
        j = k + 1
    return plan


# -- the join-phase cost model of sec. IV-F ------------------------------------------------------
class JoinPhaseEstimate:
    """Seconds a join phase reading ``pages`` pages takes: one random I/O per page until phases
    of a similar size (the same power of two of pages) were seen, then their worst time per page."""

    def __init__(self, random_read_s: float):
        self.random_read_s = random_read_s
        self.worst_per_page: dict[int, float] = {}

    def seconds(self, pages: int) -> float:
        if pages <= 0:
            return 0.0
        return pages * self.worst_per_page.get(int(pages).bit_length(), self.random_read_s)

    def observe(self, pages: int, seconds: float) -> None:
        bucket = int(pages).bit_length()
        self.worst_per_page[bucket] = max(self.worst_per_page.get(bucket, 0.0), seconds / pages)


# -- the page cache CR (sec. IV-A, IV-C) -----------------------------------------------------------
@dataclass
class _Segment:
    """Rows of cached pages in key order: ``keys``, ``rows`` and the page of each row."""

    id: int
    keys: np.ndarray
    rows: pa.Table
    row_page: np.ndarray
    nbytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.nbytes = int(self.keys.nbytes + self.rows.nbytes + self.row_page.nbytes)  # Table.nbytes is slow


class PageCache:
    """CR: whole pages of R with a utility counter each and a demand (the counters averaged over
    cycles, :meth:`settle`), or the time of last use for LRU.

    The rows live in a *slab* (one Arrow chunk in key order, probed with ``searchsorted``) and in
    segments staged during a join phase (the kept pages of each read sequence), merged into the
    slab before the next probe (:meth:`compact`). An evicted page leaves its rows in its segment
    - they are never probed, since only cached pages are - and :attr:`nbytes` counts them until
    the memory is needed: :meth:`collect` then drops them segment by segment, copying only the
    live rows of a segment that holds evicted ones (merging the whole cache there, as before,
    copied every cached row each time a join phase's keep ran short: 13 times a phase, 0.35 s,
    under LRU at R = 2M rows, whose ToRemove is all of CR).
    """

    def __init__(self, n_pages: int, key_dtype: np.dtype, schema: pa.Schema, policy: str):
        self.policy = policy
        self.cached = np.zeros(n_pages, dtype=bool)
        self.utility = np.zeros(n_pages, dtype=np.int64)  # hits of each cached page since the join phase began
        self.demand = np.zeros(n_pages, dtype=np.float64)  # the running demand of each page (:meth:`settle`)
        self.last_used = np.zeros(n_pages, dtype=np.int64)
        self.page_bytes = np.zeros(n_pages, dtype=np.int32)
        self.home = np.full(n_pages, -1, dtype=np.int64)  # the segment holding the live copy
        self.tick = 0
        self.pages = 0
        self.live_bytes = 0
        self.evictions = 0
        self.compactions = 0
        self._key_dtype = key_dtype
        self._schema = schema
        self._segments: list[_Segment] = []
        self._next_id = 0
        self.nbytes = 0  # bytes of the segments (the rows of evicted pages included until compact())

    @property
    def slab(self) -> _Segment:
        """The merged rows of every cached page (:meth:`compact` first if pages were staged)."""
        if len(self._segments) != 1:
            self.compact()
        return self._segments[0]

    def priority(self, pages: np.ndarray) -> np.ndarray:
        """Which pages to keep first: higher is better (demand with this cycle's hits so far,
        ties: used more recently)."""
        if self.policy == "lru":
            return self.last_used[pages].astype(np.float64)
        return self.demand[pages] + DEMAND_WEIGHT * self.utility[pages] + self.last_used[pages] * TICK_SCALE

    def settle(self, requested: np.ndarray, entries: np.ndarray) -> np.ndarray:
        """At the start of a join phase, fold the cycle's utility of each page - a cached page's
        hits, a requested page's entries in II (sec. IV-C) - into its demand, an exponentially
        weighted average over cycles (DEMAND_WEIGHT), and return the demand of ``requested``.
        One cycle's count is noisy: on a uniform stream (R = 2M rows, N about 350k tuples a
        cycle: Poisson(11) a page) the paper's ranking swapped 640 pages a phase on noise alone,
        each kept page a range read of its own and a cut in the IN queries around it (SSIJ at
        0.5 of its prediction there); under Zipf the hot pages' demand stays on top."""
        counts = self.utility.astype(np.float64)
        counts[requested] += entries
        self.demand *= 1.0 - DEMAND_WEIGHT
        self.demand += DEMAND_WEIGHT * counts
        self.utility[:] = 0
        return self.demand[requested]

    def touch(self, pages: np.ndarray) -> None:
        """Cached ``pages`` joined one stream tuple each (Alg. 1 line 5)."""
        self.tick += 1
        self.utility += np.bincount(pages, minlength=len(self.utility))
        self.last_used[pages] = self.tick

    def stage(self, loaded: MasterPage, row_page: np.ndarray, keep: np.ndarray, recency: np.ndarray) -> None:
        """Cache the pages ``keep`` (sorted) of a loaded sequence whose rows lie on ``row_page``,
        with their time of use ``recency`` (their demand counts the running join phase's entries)."""
        if len(keep) == 0:
            return
        rows = np.flatnonzero(np.isin(row_page, keep, assume_unique=False))
        segment = _Segment(self._next_id, loaded.keys[rows], loaded.rows.take(rows).combine_chunks(),
                           row_page[rows].astype(np.int32))
        self._next_id += 1
        self._segments.append(segment)
        self.nbytes += segment.nbytes
        counts = np.bincount(segment.row_page - keep[0], minlength=int(keep[-1] - keep[0] + 1))[keep - keep[0]]
        sizes = np.floor(segment.nbytes * counts / max(len(rows), 1)).astype(np.int64)
        self.cached[keep] = True
        self.home[keep] = segment.id
        self.page_bytes[keep] = sizes
        self.last_used[keep] = recency
        self.pages += len(keep)
        self.live_bytes += int(sizes.sum())

    def evict(self, pages: np.ndarray) -> None:
        if len(pages) == 0:
            return
        self.cached[pages] = False
        self.home[pages] = -1
        self.live_bytes -= int(self.page_bytes[pages].sum())
        self.page_bytes[pages] = 0
        self.utility[pages] = 0
        self.pages -= len(pages)
        self.evictions += len(pages)

    def victims(self, need: int, below: float = math.inf) -> np.ndarray:
        """The cached pages of lowest priority (under ``below``) whose bytes add up to ``need``
        (all of them if they do not)."""
        candidates = np.flatnonzero(self.cached)
        prio = self.priority(candidates)
        candidates, prio = candidates[prio < below], prio[prio < below]
        order = np.argsort(prio, kind="stable")
        freed = np.cumsum(self.page_bytes[candidates[order]])
        return candidates[order[: int(np.searchsorted(freed, need, side="left")) + 1]]

    def collect(self) -> None:
        """Drop the rows of evicted pages: a segment of live pages only stays as it is, one of
        evicted pages only goes, the others keep their live rows (still in key order)."""
        parts = []
        for segment in self._segments:
            live = np.flatnonzero(self.home[segment.row_page] == segment.id)
            if len(live) == len(segment.row_page):
                parts.append(segment)
            elif len(live):
                parts.append(_Segment(segment.id, segment.keys[live], segment.rows.take(live), segment.row_page[live]))
        self._segments = parts
        self.nbytes = sum(p.nbytes for p in parts)
        self.live_bytes = self.nbytes

    def compact(self) -> None:
        """Merge every segment's live rows into one slab in key order (evicted rows are dropped)."""
        self.collect()
        parts = self._segments
        if not parts:
            slab = _Segment(self._next_id, np.zeros(0, self._key_dtype), self._schema.empty_table(), np.zeros(0, np.int32))
        elif len(parts) == 1:
            slab = _Segment(self._next_id, parts[0].keys, parts[0].rows.combine_chunks(), parts[0].row_page)
        else:
            keys = np.concatenate([p.keys for p in parts])
            order = np.argsort(keys, kind="stable")
            rows = pa.concat_tables([p.rows for p in parts]).combine_chunks().take(order)
            slab = _Segment(self._next_id, keys[order], rows, np.concatenate([p.row_page for p in parts])[order])
        self._next_id += 1
        self.home[self.cached] = slab.id
        self._segments = [slab]
        self.nbytes = slab.nbytes
        self.compactions += 1
        # the bytes of each page, measured on the slab now (the shares kept before were estimates)
        rows = np.bincount(slab.row_page, minlength=len(self.cached))
        self.page_bytes[:] = np.floor(rows * (slab.nbytes / max(len(slab.row_page), 1))).astype(np.int64)
        self.live_bytes = slab.nbytes

    def garbage(self) -> int:
        """Bytes of evicted pages still held by their segments (0 right after :meth:`compact`)."""
        return self.nbytes - self.live_bytes
