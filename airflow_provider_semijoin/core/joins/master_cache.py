"""H_R: a tuple-level cache of master rows, with its frequency recorder.

The cache of SSJ / CMESHJOIN / CACHEJOIN (CMESHJOIN paper sec. 3.1: "the frequency recorder
records the access frequency of each tuple stored in H_R"). Columnar: the cached keys are found
through a :class:`SlotIndex` (sorted numpy runs probed with ``searchsorted``); a key's K master
rows sit contiguously in an Arrow row log, which is compacted when it is full of overwritten
rows; slots are numpy arrays with a free-slot stack. Memory is sized in bytes
(:meth:`MasterCache.bytes_per_key`) and :attr:`MasterCache.nbytes` reports what it holds.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .base import ranges, starts_of

POLICIES = ("lfu", "random", "lru")
MERGE_FRACTION = 0.1  # staged rows are merged into the one-chunk log once they are 10% of it
MIN_MERGE_ROWS = 1024
LOG_FACTOR = 1.25  # row-log slots per cached row: compaction when a fifth of the log is garbage
VICTIM_POOL_SHARE = 8  # LFU/LRU victims are drawn from the least frequent 1/8 of H_R, rebuilt when used up
HASH_BATCH_SHARE = 1  # a probe of at least h_R keys hashes H_R's keys instead of binary search (measured crossover: h_R / 2 to h_R)
REBUILD_SHARE = 0.125  # SlotIndex merges its runs once keys admitted and dropped since are h_R / 8
ENTRY_BYTES = 8 + 4 + 8 + 8  # row-log start, row count, frequency, free stack (+ the slot's key, + the index's entries)


class SlotIndex:
    """H_R's index from a cached key to its slot, changed in O(1) amortised per key.

    One sorted array of keys and slots, probed with ``searchsorted`` (or hashed, for a batch of
    integer keys at least as large as it), where a dropped key's entry is marked dead (slot -1)
    and not removed, and a small sorted array of the keys added since. The two merge into one,
    without the dead entries, once the keys added and dropped since the last merge are
    :data:`REBUILD_SHARE` of the capacity: a merge is O(h_R) every h_R / 8 changes. An
    ``np.insert`` / ``np.delete`` into one sorted array at every admission had been O(h_R) each
    time: 0.17 ms of an admission's 0.43 at h_R = 60k, growing with h_R (``MasterCache.admit``).
    """

    def __init__(self, capacity: int, key_dtype: np.dtype):
        self._keys = np.zeros(0, dtype=key_dtype)
        self._slots = np.zeros(0, dtype=np.int64)
        self._new_keys = np.zeros(0, dtype=key_dtype)
        self._new_slots = np.zeros(0, dtype=np.int64)
        self._dead = 0
        self._changes_per_merge = max(1, math.ceil(capacity * REBUILD_SHARE))

    @staticmethod
    def bytes_at(capacity: int, key_itemsize: int) -> int:
        """What the index holds at most for ``capacity`` keys: live, dead and new entries."""
        return (capacity + max(1, math.ceil(capacity * REBUILD_SHARE))) * (key_itemsize + 8)

    def find(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(hit, slots)``: which ``keys`` are in the index, and their slots (``slots[hit]``)."""
        hit, slots = np.zeros(len(keys), bool), np.full(len(keys), -1, np.int64)
        if len(self._keys):
            if len(keys) * HASH_BATCH_SHARE >= len(self._keys) and self._keys.dtype.kind in "iu":
                pos = pc.index_in(keys, value_set=pa.array(self._keys)).fill_null(-1).to_numpy()
                hit = pos >= 0
            else:
                pos, hit = _located(self._keys, keys)
            slots = self._slots[pos]
            hit &= slots >= 0
        if len(self._new_keys) and not hit.all():
            rest = np.flatnonzero(~hit)
            pos, found = _located(self._new_keys, keys[rest])
            hit[rest[found]] = True
            slots[rest[found]] = self._new_slots[pos[found]]
        return hit, slots

    def add(self, keys: np.ndarray, slots: np.ndarray) -> None:
        """Index ``keys`` (sorted, none of them in the index) at ``slots``."""
        at = np.searchsorted(self._new_keys, keys)
        self._new_keys = np.insert(self._new_keys, at, keys)
        self._new_slots = np.insert(self._new_slots, at, slots)
        self._merge_when_due()

    def remove(self, keys: np.ndarray, slots: np.ndarray) -> None:
        """Take ``keys`` (distinct, each in the index at its ``slots``) out of the index."""
        in_old = np.zeros(len(keys), bool)
        if len(self._keys):
            pos, in_old = _located(self._keys, keys)
            in_old &= self._slots[pos] == slots
            self._slots[pos[in_old]] = -1
            self._dead += int(in_old.sum())
        if not in_old.all():
            self._new_keys, self._new_slots = self._without(keys[~in_old])
        self._merge_when_due()

    def _without(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        at = np.searchsorted(self._new_keys, keys)
        return np.delete(self._new_keys, at), np.delete(self._new_slots, at)

    def slots_in_key_order(self) -> np.ndarray:
        """The slots of every key in the index, in key order (merges the runs first)."""
        self._merge()
        return self._slots

    def keys(self) -> np.ndarray:
        """Every key in the index, sorted (merges the runs first)."""
        self._merge()
        return self._keys

    def _merge_when_due(self) -> None:
        if self._dead + len(self._new_keys) >= self._changes_per_merge:
            self._merge()

    def _merge(self) -> None:
        if not self._dead and not len(self._new_keys):
            return
        live = self._slots >= 0
        old_keys, old_slots = self._keys[live], self._slots[live]
        at = np.searchsorted(old_keys, self._new_keys) + np.arange(len(self._new_keys))
        old_at = np.ones(len(old_keys) + len(at), bool)
        old_at[at] = False
        self._keys = np.empty(len(old_at), old_keys.dtype)
        self._slots = np.empty(len(old_at), np.int64)
        self._keys[at], self._slots[at] = self._new_keys, self._new_slots
        self._keys[old_at], self._slots[old_at] = old_keys, old_slots
        self._new_keys, self._new_slots = self._new_keys[:0], self._new_slots[:0]
        self._dead = 0


def _located(sorted_keys: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(pos, found)``: where each of ``keys`` is or would be in the non-empty ``sorted_keys``
    (clipped to its last position), and whether it is there."""
    pos = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return pos, sorted_keys[pos] == keys


class MasterCache:
    """H_R with its frequency recorder: up to ``capacity`` keys of R and all their rows.

    ``policy`` decides which entries a full cache overwrites: ``lfu`` (the least frequent:
    SSJ / CMESHJOIN's frequency recorder), ``random`` (CACHEJOIN) or ``lru`` (the least
    recently used: what the IN-list baseline's cache does; ``frequency`` then holds the time
    of last use).
    """

    def __init__(self, capacity: int, rows_per_key: int, key_dtype: np.dtype, schema: pa.Schema,
                 policy: str = "lfu", seed: int = 0):
        if policy not in POLICIES:
            raise ValueError(f"policy: {policy!r} is not one of {list(POLICIES)}")
        self.capacity = int(capacity)
        self.policy = policy
        self._tick = 0.0
        self._rows_cap = int(math.ceil(self.capacity * rows_per_key * LOG_FACTOR))
        self.size = 0
        self._index = SlotIndex(self.capacity, key_dtype)
        self._slot_key = np.zeros(self.capacity, dtype=key_dtype)
        self._slot_start = np.zeros(self.capacity, dtype=np.int64)
        self._slot_count = np.zeros(self.capacity, dtype=np.int32)
        self.frequency = np.zeros(self.capacity, dtype=np.float64)
        self._free = np.arange(self.capacity - 1, -1, -1, dtype=np.int64)  # a stack of free slots
        self._n_free = self.capacity
        self._log = schema.empty_table()  # one chunk: take() on many chunks concatenates them first
        self._staged = schema.empty_table()  # rows admitted since the last merge into the log
        self._log_bytes = 0  # read when the log changes (Table.nbytes walks every buffer)
        self._live_rows = 0
        self._rng = np.random.default_rng(seed)
        self._pool = np.zeros(0, dtype=np.int64)  # slots of candidate victims (:meth:`_victims`)
        self.evictions = 0

    @staticmethod
    def bytes_per_key(key_itemsize: int, rows_per_key: int, row_bytes: float) -> float:
        index = (1 + REBUILD_SHARE) * (key_itemsize + 8)  # :meth:`SlotIndex.bytes_at`, per key
        return key_itemsize + ENTRY_BYTES + index + rows_per_key * row_bytes * LOG_FACTOR

    @property
    def nbytes(self) -> int:
        arrays = (self._slot_key, self._slot_start, self._slot_count, self.frequency, self._free)
        index = SlotIndex.bytes_at(self.capacity, self._slot_key.itemsize)  # reserved at capacity
        return int(sum(a.nbytes for a in arrays) + index + self._log_bytes + self._staged.nbytes)

    def cached_keys(self) -> np.ndarray:
        """Every key in H_R, sorted."""
        return self._index.keys()

    def probe(self, keys: np.ndarray, found: tuple[np.ndarray, np.ndarray] | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(hit, probe_idx, log_rows)``: which keys are cached, and one (stream position,
        row-log position) pair per cached row of each hit: the pairs of rows in the log first,
        then those of rows staged since its last merge, each part in stream order (so
        :meth:`rows` takes each part once). Hits count in the recorder. ``found`` is
        :meth:`find` of these ``keys`` when the caller has it already."""
        if self.size == 0 or len(keys) == 0:
            return np.zeros(len(keys), bool), np.zeros(0, np.int64), np.zeros(0, np.int64)
        hit, slots = found if found is not None else self.find(keys)
        slots = slots[hit]
        if self.policy == "lru":
            self._tick += 1.0
            self.frequency[slots] = self._tick
        else:
            np.add.at(self.frequency, slots, 1.0)
        counts = self._slot_count[slots]
        probe_idx, log_rows = np.repeat(np.flatnonzero(hit), counts), ranges(self._slot_start[slots], counts)
        staged = log_rows >= len(self._log)
        if staged.any() and not staged.all():
            order = np.concatenate((np.flatnonzero(~staged), np.flatnonzero(staged)))
            probe_idx, log_rows = probe_idx[order], log_rows[order]
        return hit, probe_idx, log_rows

    def contains(self, keys: np.ndarray) -> np.ndarray:
        """Which ``keys`` are cached (no effect on the frequency recorder)."""
        return self.find(keys)[0]

    def find(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(hit, slots)``: which ``keys`` are cached, and in which slots (``slots[hit]``).

        ``searchsorted`` costs O(log h_R) scattered reads per key: 147 ms for 800k keys against
        200k cached ones, half the cache-hit path (``semijoin bench --micro``). A batch of
        integer keys at least as large as H_R is hashed instead: Arrow's ``index_in`` builds a
        hash table of the cached keys (O(h_R), about 9 ms at 200k) and looks the batch up in
        O(1) each (34 ms for the same 800k keys); below that size the build costs more than
        it saves."""
        return self._index.find(keys)

    def rows(self, log_rows: np.ndarray) -> pa.Table:
        """The cached rows at ``log_rows``, positions in the log followed by the staged rows, the
        log's first (as :meth:`probe` gives them): one take of each part, where rows in any
        order took a third, wide one to put them back in order (400k rows of the bench's R,
        300k in the log and 20k staged: 45-49 ms against 98-111 ms)."""
        in_log = int(np.count_nonzero(log_rows < len(self._log)))
        if in_log == len(log_rows):
            return self._log.take(log_rows)
        if in_log and log_rows[:in_log].max() >= len(self._log):
            raise ValueError("log_rows: the rows in the log must come first, as probe() gives them")
        return pa.concat_tables([self._log.take(log_rows[:in_log]), self._staged.take(log_rows[in_log:] - len(self._log))])

    def admit(self, keys: np.ndarray, frequency: np.ndarray, rows: pa.Table, counts: np.ndarray) -> None:
        """Switch ``keys`` (sorted, not cached yet) into H_R; their rows are ``rows``, ``counts``
        rows per key in key order. A full cache overwrites entries as its policy says."""
        if self.policy == "lru":
            self._tick += 1.0
            frequency = np.full(len(keys), self._tick)  # just used: the most recent of all
        if self.policy in ("lfu", "lru") and len(keys) > self._n_free:
            chosen = self._contest(frequency)
        elif len(keys) > self.capacity:  # random overwrite: the most frequent candidates replace all
            chosen = np.sort(np.argsort(-frequency, kind="stable")[: self.capacity])
        else:
            chosen = np.arange(len(keys))
        if len(chosen) < len(keys):
            rows = rows.take(ranges(starts_of(counts)[chosen], counts[chosen]))
            keys, frequency, counts = keys[chosen], frequency[chosen], counts[chosen]
        overflow = len(keys) - self._n_free
        if overflow > 0:
            self._evict(self._random_entries(overflow))
        self._n_free -= len(keys)
        slots = self._free[self._n_free : self._n_free + len(keys)].copy()
        if len(self._log) + len(self._staged) + len(rows) > self._rows_cap:
            self._compact_log()
        self._slot_key[slots] = keys
        self._slot_start[slots] = len(self._log) + len(self._staged) + starts_of(counts)
        self._slot_count[slots] = counts
        self.frequency[slots] = frequency
        self._stage(rows)
        self._live_rows += len(rows)
        self._index.add(keys, slots)
        self.size += len(keys)

    def _stage(self, rows: pa.Table) -> None:
        """Add ``rows`` to the staged rows, and merge those into the log once they are
        :data:`MERGE_FRACTION` of it."""
        self._staged = pa.concat_tables([self._staged, rows]).combine_chunks()
        if len(self._staged) > max(MIN_MERGE_ROWS, MERGE_FRACTION * len(self._log)):
            self._log = pa.concat_tables([self._log, self._staged]).combine_chunks()
            self._staged = self._staged.schema.empty_table()
            self._log_bytes = self._log.nbytes

    def _random_entries(self, n: int) -> np.ndarray:
        """Slots of ``n`` entries drawn uniformly (CACHEJOIN's random overwrite): ``n`` plus the
        free slots are drawn from all slots, in random order, and the first ``n`` in use kept."""
        drawn = self._rng.choice(self.capacity, size=min(self.capacity, n + self._n_free), replace=False)
        return drawn[self._slot_count[drawn] > 0][:n]

    def _contest(self, frequency: np.ndarray) -> np.ndarray:
        """LFU / LRU overwrite: candidates and entries compete on frequency (time of last use),
        the h_R highest of both stay. The most frequent candidates take the free slots; the
        others, most frequent first, meet the least frequent entries, least first, and the
        i-th enters if it beats the i-th (a prefix wins). Returns the candidates that enter,
        sorted, with their victims evicted. The victims come from :meth:`_victims`."""
        order = np.argsort(-frequency, kind="stable")
        contenders = order[self._n_free :]
        victims = self._victims(min(len(contenders), self.size))
        wins = int(np.sum(frequency[contenders[: len(victims)]] > self.frequency[victims]))
        if wins:
            self._evict(victims[:wins])
        self._pool = np.concatenate((victims[wins:], self._pool))  # the entries that held stay candidates
        return np.sort(order[: len(order) - len(contenders) + wins])

    def _victims(self, n: int) -> np.ndarray:
        """Slots of the ``n`` least frequent entries, least first. They come from a pool of the
        least frequent eighth of H_R, chosen by one ``argpartition`` over H_R and rebuilt once
        it runs short, so an admission costs O(h_R / 8) and not O(h_R) (the frequencies of the
        pool's entries are read when they compete, so one that got hot since loses no slot)."""
        pool = self._pool[self._slot_count[self._pool] > 0]  # a slot dropped since has left it
        if len(pool) < n:
            used = self._index.slots_in_key_order()
            size = min(len(used), max(n, self.capacity // VICTIM_POOL_SHARE))
            pool = used[np.argpartition(self.frequency[used], size - 1)[:size]] if size < len(used) else used
        least = np.argpartition(self.frequency[pool], n - 1)[:n] if 0 < n < len(pool) else np.arange(min(n, len(pool)))
        victims = pool[least[np.argsort(self.frequency[pool[least]], kind="stable")]]
        self._pool = np.delete(pool, least)
        return victims

    def invalidate(self, keys: np.ndarray) -> int:
        """Drop the entries of ``keys`` (changed in R, SSIJ sec. IV-E): a key's rows must be
        loaded again from the version of R the next join reads. Returns the entries dropped;
        they do not count as evictions (the adaptive threshold reacts to evictions only)."""
        if self.size == 0 or len(keys) == 0:
            return 0
        hit, slots = self.find(np.asarray(keys, self._slot_key.dtype))
        dropped = np.unique(slots[hit])
        self._drop(dropped)
        return len(dropped)

    def _evict(self, victims: np.ndarray) -> None:
        """Overwrite the entries in slots ``victims`` (H_R is full)."""
        self._drop(victims)
        self.evictions += len(victims)

    def _drop(self, victims: np.ndarray) -> None:
        """Drop the entries in slots ``victims`` (distinct)."""
        n = len(victims)
        self._live_rows -= int(self._slot_count[victims].sum())
        self._index.remove(self._slot_key[victims], victims)
        self._slot_count[victims] = 0
        self.frequency[victims] = 0
        self._free[self._n_free : self._n_free + n] = victims
        self._n_free += n
        self.size -= n

    def _compact_log(self) -> None:
        used = self._index.slots_in_key_order()
        counts = self._slot_count[used]
        everything = pa.concat_tables([self._log, self._staged])
        self._log = everything.take(ranges(self._slot_start[used], counts)).combine_chunks()
        self._staged = self._staged.schema.empty_table()
        self._log_bytes = self._log.nbytes
        self._slot_start[used] = starts_of(counts)
        self._live_rows = len(self._log)

    def decay(self) -> None:
        """Halve every frequency (LFU ageing; times of last use are left alone)."""
        if self.policy != "lru":
            self.frequency *= 0.5
