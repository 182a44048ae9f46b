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

ARENA_FACTOR = 1.5  # arena slots per tuple of capacity: compaction runs after capacity/2 admissions
GROUP_BYTES = 8 + 4 + 4 + 4 + 4  # group_start, group_len, group_next, group_chunk, free-list slot
CHUNK_BYTES = 8 + 8 + 8  # chunk_start, chunk_alive, chunk_admitted_before


def _grow(a: np.ndarray, need: int) -> np.ndarray:
    if need <= len(a):
        return a
    out = np.zeros(max(need, 2 * len(a), 16), dtype=a.dtype)
    out[: len(a)] = a
    return out


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
        self._chunk_start = np.zeros(64, dtype=np.int64)
        self._chunk_alive = np.zeros(64, dtype=np.int64)
        self._chunk_admitted_before = np.zeros(64, dtype=np.int64)
        self.admitted = 0  # tuples admitted so far (the counter ptc of HYBRIDJOIN-PQ)
        self._n_chunks = 0
        self._chunk_head = 0

    @staticmethod
    def bytes_per_tuple(key_itemsize: int) -> float:
        return ARENA_FACTOR * (key_itemsize + 8 + 1) + GROUP_BYTES + CHUNK_BYTES / 16

    @classmethod
    def capacity_for(cls, budget: int, n_pages: int, key_itemsize: int) -> int:
        """The most tuples a table of ``budget`` bytes holds over ``n_pages`` pages."""
        per_page = 8 + 4 + 4
        return max(0, int((budget - n_pages * per_page) / cls.bytes_per_tuple(key_itemsize)))

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
        """Add tuples (all with a valid page) as one chunk of Q."""
        n = len(row_ids)
        if n == 0:
            return
        if n > self.free:
            raise ValueError(f"admit {n} tuples into a stream table with {self.free} free slots")
        if self._tail + n > len(self._key):
            self._compact()
        order = np.argsort(pages, kind="stable")
        sorted_pages = pages[order]
        first = np.flatnonzero(np.concatenate(([True], sorted_pages[1:] != sorted_pages[:-1])))
        group_pages = sorted_pages[first]
        group_lens = np.diff(np.append(first, n))
        lo = self._tail
        self._key[lo : lo + n] = keys[order]
        self._row[lo : lo + n] = row_ids[order]
        self._alive[lo : lo + n] = True
        self._tail += n
        # chunk
        chunk = self._n_chunks
        self._chunk_start = _grow(self._chunk_start, chunk + 1)
        self._chunk_alive = _grow(self._chunk_alive, chunk + 1)
        self._chunk_admitted_before = _grow(self._chunk_admitted_before, chunk + 1)
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
        if not groups:
            return np.zeros(0, np.int64), self._key[:0].copy()
        groups = np.array(groups, dtype=np.int32)
        starts = self._group_start[groups]
        lens = self._group_len[groups].astype(np.int64)
        total = int(lens.sum())
        offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(lens)[:-1])), lens)
        idx = offsets + np.arange(total)
        row_ids, keys = self._row[idx], self._key[idx]
        self._alive[idx] = False
        np.subtract.at(self._chunk_alive, self._group_chunk[groups], lens)
        self._free_groups[self._n_free_groups : self._n_free_groups + len(groups)] = groups
        self._n_free_groups += len(groups)
        self._page_head[page] = self._page_tail[page] = -1
        self.page_count[page] = 0
        self.size -= total
        return row_ids, keys

    # -- queue positions -------------------------------------------------------------------
    def _advance_head(self) -> None:
        while self._chunk_head < self._n_chunks and self._chunk_alive[self._chunk_head] == 0:
            self._chunk_head += 1

    def oldest_age(self) -> int:
        """Tuples admitted since the oldest live tuple was (0 when empty)."""
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
        in_use = np.ones(self.capacity, dtype=bool)
        in_use[self._free_groups[: self._n_free_groups]] = False
        used = np.flatnonzero(in_use)
        self._group_start[used] = new_pos[self._group_start[used]]
        # drop empty chunks, renumber the live ones
        chunks = np.arange(self._n_chunks)
        live_chunks = chunks[self._chunk_alive[: self._n_chunks] > 0]
        renumber = np.full(self._n_chunks, -1, dtype=np.int64)
        renumber[live_chunks] = np.arange(len(live_chunks))
        self._group_chunk[used] = renumber[self._group_chunk[used]]
        starts = self._chunk_start[live_chunks]
        # a live chunk's first live tuple moved to the number of live tuples before it
        self._chunk_start[: len(live_chunks)] = np.searchsorted(keep, starts, side="left")
        self._chunk_alive[: len(live_chunks)] = self._chunk_alive[live_chunks]
        self._chunk_admitted_before[: len(live_chunks)] = self._chunk_admitted_before[live_chunks]
        self._n_chunks = len(live_chunks)
        self._chunk_head = 0
