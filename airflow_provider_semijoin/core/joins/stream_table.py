"""H_S and Q: the stream tuples an algorithm holds, grouped by the page of R they belong to.

MESHJOIN and HYBRIDJOIN keep stream tuples in a hash table H_S keyed on the join attribute and
their keys in a queue Q in arrival order; HYBRIDJOIN's queue supports random deletion (a
doubly-linked list in the paper, sec. 4.1). Both only ever probe H_S with a whole page (or run
of pages) of R, and a page covers a contiguous key range. So this table files every tuple
under its page (known from the in-memory page map when it enters) and hands out a page's
tuples all at once: after the page is joined every one of them is complete, matched or
``not_in_master``, so a missing key can never stall the queue.

Layout, all numpy (no Python object per tuple):

* an **arena** of tuples (key, row id, alive) in admission order; each admitted chunk is
  stored sorted by page, so a chunk's tuples of one page form a contiguous **group**;
* per page a singly linked list of its groups (``page_head`` / ``page_tail`` / ``group_next``),
  so popping a page walks one entry per admitted chunk that hit the page, not one per tuple;
* per chunk its count of live tuples: Q in arrival order with random deletion, at chunk
  granularity (a chunk is what the paper loads into H in one go, Fig. 5 line 4);
* when the arena is full, live tuples are compacted to its front in one vectorised pass.

Memory is sized from a byte budget (:meth:`capacity_for`) and :meth:`nbytes` reports the
allocated arrays exactly.
"""

from __future__ import annotations

import numpy as np

from ..stores.base import PageMap
from .base import JoinAlgorithm, JoinOutput, StreamChunk, not_in_master, ranges, runs_of

ARENA_FACTOR = 1.5  # arena slots per tuple of capacity: compaction runs after capacity/2 admissions
GROUP_BYTES = 8 + 4 + 4 + 4 + 4  # group_start, group_len, group_next, group_chunk, free-list slot
MAX_CHUNK = 32768  # bounds the scan inside one chunk when a queue position is looked up (~20 us)
CHUNK_BYTES = 8 + 8 + 8  # chunk_start, chunk_alive, chunk_admitted_before
CHUNKS_PER = 16  # chunk slots: one per 16 tuples of capacity (plus MIN_CHUNKS); when they run
MIN_CHUNKS = 4  # out, empty chunks are dropped and, if need be, neighbouring chunks merged


class StreamTable:
    """Stream tuples in memory, filed by page; at most ``capacity`` tuples (h_S)."""

    def __init__(self, capacity: int, n_pages: int, key_dtype: np.dtype):
        self.capacity = int(capacity)
        self.size = 0
        arena = int(np.ceil(self.capacity * ARENA_FACTOR)) + 1
        self._key = np.zeros(arena, dtype=key_dtype)
        self._row = np.zeros(arena, dtype=np.int64)
        self._alive = np.zeros(arena, dtype=bool)
        self._tail = 0
        # groups: capacity is an upper bound, a group holds at least one live tuple
        self._group_start = np.zeros(self.capacity, dtype=np.int64)
        self._group_len = np.zeros(self.capacity, dtype=np.int32)
        self._group_next = np.full(self.capacity, -1, dtype=np.int32)
        self._group_chunk = np.zeros(self.capacity, dtype=np.int32)
        self._free_groups = np.arange(self.capacity - 1, -1, -1, dtype=np.int32)
        self._n_free_groups = self.capacity
        # pages
        self.page_count = np.zeros(n_pages, dtype=np.int64)
        self._page_head = np.full(n_pages, -1, dtype=np.int32)
        self._page_tail = np.full(n_pages, -1, dtype=np.int32)
        # chunks (Q at chunk granularity)
        self._max_chunks = self.capacity // CHUNKS_PER + MIN_CHUNKS
        self._chunk_start = np.zeros(self._max_chunks, dtype=np.int64)
        self._chunk_alive = np.zeros(self._max_chunks, dtype=np.int64)
        self._chunk_admitted_before = np.zeros(self._max_chunks, dtype=np.int64)
        self.admitted = 0  # tuples admitted so far (the counter ptc of HYBRIDJOIN-PQ)
        self._n_chunks = 0
        self._chunk_head = 0

    @staticmethod
    def bytes_per_tuple(key_itemsize: int) -> float:
        return ARENA_FACTOR * (key_itemsize + 8 + 1) + GROUP_BYTES + CHUNK_BYTES / CHUNKS_PER

    @staticmethod
    def _fixed_bytes(n_pages: int, key_itemsize: int) -> int:
        """A table's bytes whatever its capacity: per page its count, head and tail; the fewest
        chunk slots; the arena's rounding."""
        return n_pages * (8 + 4 + 4) + MIN_CHUNKS * CHUNK_BYTES + 2 * (key_itemsize + 8 + 1)

    @classmethod
    def capacity_for(cls, budget, n_pages: int, key_itemsize: int):
        """The most tuples a table of ``budget`` bytes (a number or an array) holds over ``n_pages`` pages."""
        fixed = cls._fixed_bytes(n_pages, key_itemsize)
        tuples = np.maximum(0, np.floor((np.asarray(budget) - fixed) / cls.bytes_per_tuple(key_itemsize)))
        return int(tuples) if tuples.ndim == 0 else tuples.astype(np.int64)

    @classmethod
    def budget_for(cls, tuples, n_pages: int, key_itemsize: int):
        """The smallest budget (bytes; a number or an array) of a table that holds ``tuples``
        tuples over ``n_pages`` pages: :meth:`capacity_for` inverted, to the byte."""
        tuples = np.asarray(tuples)
        budget = np.ceil(cls._fixed_bytes(n_pages, key_itemsize) + tuples * cls.bytes_per_tuple(key_itemsize)).astype(np.int64)
        budget = np.where(cls.capacity_for(budget - 1, n_pages, key_itemsize) >= tuples, budget - 1, budget)  # float rounding
        budget = np.where(cls.capacity_for(budget, n_pages, key_itemsize) < tuples, budget + 1, budget)
        return int(budget) if budget.ndim == 0 else budget

    @property
    def free(self) -> int:
        return self.capacity - self.size

    @property
    def nbytes(self) -> int:
        arrays = (
            self._key, self._row, self._alive, self._group_start, self._group_len, self._group_next,
            self._group_chunk, self._free_groups, self.page_count, self._page_head, self._page_tail,
            self._chunk_start, self._chunk_alive, self._chunk_admitted_before,
        )
        return int(sum(a.nbytes for a in arrays))

    # -- admission -------------------------------------------------------------------------
    def admit(self, row_ids: np.ndarray, keys: np.ndarray, pages: np.ndarray) -> None:
        """Add tuples (all with a valid page) to Q, in chunks of at most MAX_CHUNK tuples."""
        if len(row_ids) > self.free:
            raise ValueError(f"admit {len(row_ids)} tuples into a stream table with {self.free} free slots")
        for lo in range(0, len(row_ids), MAX_CHUNK):
            hi = lo + MAX_CHUNK
            self._admit_chunk(row_ids[lo:hi], keys[lo:hi], pages[lo:hi])

    def _admit_chunk(self, row_ids: np.ndarray, keys: np.ndarray, pages: np.ndarray) -> None:
        n = len(row_ids)
        if self._tail + n > len(self._key):
            self._compact()
        order = np.argsort(pages, kind="stable")
        sorted_pages = pages[order]
        first, group_lens = runs_of(sorted_pages)
        group_pages = sorted_pages[first]
        lo = self._tail
        self._key[lo : lo + n] = keys[order]
        self._row[lo : lo + n] = row_ids[order]
        self._alive[lo : lo + n] = True
        self._tail += n
        # chunk
        if self._n_chunks == self._max_chunks:
            self._compact_chunks(merge=True)
        chunk = self._n_chunks
        self._chunk_start[chunk] = lo
        self._chunk_alive[chunk] = n
        self._chunk_admitted_before[chunk] = self.admitted
        self.admitted += n
        self._n_chunks += 1
        # groups, linked at the tail of their page's list
        g = len(group_pages)
        self._n_free_groups -= g
        groups = self._free_groups[self._n_free_groups : self._n_free_groups + g].copy()
        self._group_start[groups] = lo + first
        self._group_len[groups] = group_lens
        self._group_next[groups] = -1
        self._group_chunk[groups] = chunk
        tails = self._page_tail[group_pages]
        linked = tails >= 0
        self._group_next[tails[linked]] = groups[linked]
        self._page_head[group_pages[~linked]] = groups[~linked]
        self._page_tail[group_pages] = groups
        self.page_count[group_pages] += group_lens
        self.size += n

    # -- removal ---------------------------------------------------------------------------
    def pop_page(self, page: int) -> tuple[np.ndarray, np.ndarray]:
        """Remove and return ``(row_ids, keys)`` of every tuple filed under ``page``."""
        groups = []
        g = int(self._page_head[page])
        while g >= 0:  # one entry per chunk that hit the page
            groups.append(g)
            g = int(self._group_next[g])
        row_ids, keys, _ = self._remove(np.array(groups, np.int32), np.zeros(len(groups), np.int64), np.array([page]))
        return row_ids, keys

    def pop_pages(self, pages: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`pop_page` of each of ``pages`` (distinct) at once: ``(row_ids, keys, counts)``,
        the tuples of ``pages[0]`` first, ``counts[i]`` of them from ``pages[i]``. The pages'
        lists are walked side by side, one numpy pass per group depth, not one Python call per
        page: HYBRIDJOIN's riders pop hundreds of pages for one IN query."""
        pages = np.asarray(pages, np.int64)
        groups, owners = [], []
        owner, g = np.arange(len(pages)), self._page_head[pages]
        while len(g):
            live = g >= 0
            owner, g = owner[live], g[live]
            groups.append(g)
            owners.append(owner)
            g = self._group_next[g]
        groups, owner = np.concatenate(groups or [np.zeros(0, np.int32)]), np.concatenate(owners or [np.zeros(0, np.int64)])
        order = np.argsort(owner, kind="stable")  # by page, each page's groups in list order
        return self._remove(groups[order], owner[order], pages)

    def _remove(self, groups: np.ndarray, owner: np.ndarray, pages: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Remove ``groups`` (``owner``: the position in ``pages`` of each one's page) and empty
        ``pages``; their tuples' row ids and keys in the groups' order, and the count per page."""
        lens = self._group_len[groups].astype(np.int64)
        idx = ranges(self._group_start[groups], lens)
        row_ids, keys = self._row[idx], self._key[idx]
        self._alive[idx] = False
        np.subtract.at(self._chunk_alive, self._group_chunk[groups], lens)
        self._free_groups[self._n_free_groups : self._n_free_groups + len(groups)] = groups
        self._n_free_groups += len(groups)
        self._page_head[pages] = self._page_tail[pages] = -1
        self.page_count[pages] = 0
        self.size -= len(idx)
        return row_ids, keys, np.bincount(owner, weights=lens, minlength=len(pages)).astype(np.int64)

    # -- queue positions -------------------------------------------------------------------
    def _advance_head(self) -> None:
        while self._chunk_head < self._n_chunks and self._chunk_alive[self._chunk_head] == 0:
            self._chunk_head += 1

    def oldest_age(self) -> int:
        """Tuples admitted since the oldest live tuple's chunk was (0 when empty).

        After chunks were merged (:meth:`_compact_chunks`) a chunk carries its oldest member's
        admission count, so this is an upper bound of the oldest live tuple's age.
        """
        if self.size == 0:
            return 0
        self._advance_head()
        return int(self.admitted - self._chunk_admitted_before[self._chunk_head])

    def oldest_key(self):
        """The join key of the oldest tuple in Q (None when empty)."""
        return self.key_at(1.0)

    def key_at(self, from_young_end: float):
        """The key of the tuple at ``from_young_end`` of Q's length, counted from its young end.

        1.0 is the oldest tuple (HYBRIDJOIN), 0.3 the early lookup element of HYBRIDJOIN-L.
        """
        if self.size == 0:
            return None
        self._advance_head()
        alive = self._chunk_alive[self._chunk_head : self._n_chunks]
        target = min(self.size - 1, int(from_young_end * self.size))  # live tuples younger than it
        younger = np.cumsum(alive[::-1])  # live tuples in the newest k chunks
        k = int(np.searchsorted(younger, target, side="right"))  # chunks entirely younger
        chunk = self._chunk_head + len(alive) - 1 - k
        younger_than_chunk = int(younger[k - 1]) if k else 0
        lo = int(self._chunk_start[chunk])
        hi = int(self._chunk_start[chunk + 1]) if chunk + 1 < self._n_chunks else self._tail
        live = np.flatnonzero(self._alive[lo:hi])
        # inside the chunk, count from its young end too
        return self._key[lo + live[len(live) - 1 - (target - younger_than_chunk)]]

    # -- arena compaction ------------------------------------------------------------------
    def _compact(self) -> None:
        alive = self._alive[: self._tail]
        new_pos = np.cumsum(alive) - 1
        keep = np.flatnonzero(alive)
        n = len(keep)
        self._key[:n] = self._key[keep]
        self._row[:n] = self._row[keep]
        self._alive[:n] = True
        self._alive[n:] = False
        self._tail = n
        used = self._groups_in_use()
        self._group_start[used] = new_pos[self._group_start[used]]
        # a chunk now starts where its first live tuple went (an empty one where the next did)
        n = self._n_chunks
        self._chunk_start[:n] = np.searchsorted(keep, self._chunk_start[:n], side="left")
        self._compact_chunks()

    def _groups_in_use(self) -> np.ndarray:
        in_use = np.ones(self.capacity, dtype=bool)
        in_use[self._free_groups[: self._n_free_groups]] = False
        return np.flatnonzero(in_use)

    def _compact_chunks(self, merge: bool = False) -> None:
        """Drop empty chunks; with ``merge``, also join neighbours pairwise while over half full.

        Merging only coarsens Q's granularity: arrival order between chunks is kept.
        """
        n = self._n_chunks
        live = np.flatnonzero(self._chunk_alive[:n] > 0)
        target = np.arange(len(live))
        while merge and len(live) and target[-1] + 1 > self._max_chunks // 2:
            target //= 2
        first = np.flatnonzero(np.concatenate(([True], target[1:] != target[:-1]))) if len(live) else target
        renumber = np.full(n, -1, dtype=np.int64)
        renumber[live] = target
        used = self._groups_in_use()
        self._group_chunk[used] = renumber[self._group_chunk[used]]
        m = len(first)
        self._chunk_start[:m] = self._chunk_start[live[first]]
        self._chunk_admitted_before[:m] = self._chunk_admitted_before[live[first]]
        self._chunk_alive[:m] = np.add.reduceat(self._chunk_alive[live], first) if m else 0
        self._n_chunks = m
        self._chunk_head = 0


class PagedJoin(JoinAlgorithm):
    """What MESHJOIN and the HYBRIDJOIN family share: H_S/Q as a :class:`StreamTable` filed by
    the pages of ``page_map``, a disk buffer, and the admission of stream tuples into them.

    Subclasses set ``page_map``, ``table`` and ``_disk_buffer_bytes`` in their constructor.
    """

    page_map: PageMap
    table: StreamTable
    _disk_buffer_bytes: int

    def _admit_chunk(self, chunk: StreamChunk) -> JoinOutput:
        """File ``chunk`` under its pages; keys outside R's key range leave at once, no I/O."""
        pages = self.page_map.page_of(chunk.keys)
        outside = pages < 0
        self.table.admit(chunk.row_ids[~outside], chunk.keys[~outside], pages[~outside])
        return not_in_master(chunk.row_ids[outside], self.schema)

    @property
    def pending(self) -> int:
        return self.table.size

    @property
    def demand(self) -> int:
        return self.table.free

    @property
    def capacity_tuples(self) -> int:
        return self.table.capacity

    @property
    def capacity_with_waiting(self) -> int:
        """The demand is H_S's free slots (HYBRIDJOIN Fig. 5 line 3): what waits for them and
        what H_S holds never exceed its capacity together."""
        return self.table.capacity

    def structure_bytes(self) -> int:
        return self.table.nbytes + self._disk_buffer_bytes + self.page_map.nbytes

    def memory_split(self) -> dict:
        """The plan's split, with the bytes H_S and the page map (brought up to date by R's changes) hold now."""
        return {"stream_table_bytes": self.table.nbytes, **self.planned_split(self.plan_used),
                "page_map_bytes": self.page_map.nbytes, "pages": self.page_map.n_pages}

    @classmethod
    def planned_split(cls, plan) -> dict:
        sizes = plan.sizes
        return {name: sizes[name] for name in
                ("stream_table_capacity_tuples", "disk_buffer_bytes", "page_map_bytes", "page_rows", "pages")}
