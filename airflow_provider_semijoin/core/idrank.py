"""Where an id sits in a session's log without a binary search: a rank bit vector over the ids.

A :class:`~.session.JoinSession` keeps the ids of the tuples fed, increasing, in one array (its
log) and marks each tuple that leaves by its position there. Found with ``np.searchsorted`` over
a log of millions of ids, each search misses the cache down the tree, and the searches were a
large share of the thread that works HYBRIDJOIN ahead in the Spark pipeline (py-spy). The ids a
caller feeds are nearly consecutive (stream positions, a Spark step's sequence numbers), so :class:`RankIndex` keeps one bit per id value
from the first id of the log, 64 to a word, and the count of ids before each word (Jacobson's
rank directory, "Space-efficient static trees and graphs", FOCS 1989): an id's position is the
count before its word plus the bits below it in the word, two gathers and a popcount, an
order of magnitude less than a binary search. It is used while it holds at most
:data:`MAX_BYTES_PER_ID` bytes an id of the log (the ids span at most
``MAX_BYTES_PER_ID * 64 / 12`` times their count); sparser ids are searched for. Two bytes, not
one, because CACHEJOIN-L's log holds its cache misses only, and its ids are sparser than a log
of every tuple: at one byte an id it would still search for a good part of them.

A one-off lookup of many ids is another matter: building the index costs more than a table
from id to row (:meth:`..spark.joinstate.CarriedRows._positions`, rebuilt for each batch, not
kept); the index pays where it is kept and asked often. (The figures behind these choices:
``docs/measurements.md``.)
"""

from __future__ import annotations

import numpy as np

WORD_BITS = 64
WORD = np.dtype("<u8")  # bit b of word w is id value lo + 64 w + b (np.packbits' little bit order)
COUNT = np.dtype(np.int32)  # ids before a word: a log of 2**31 ids or more is searched for
WORD_BYTES = WORD.itemsize + COUNT.itemsize
MAX_BYTES_PER_ID = 2.0  # words + counts (12 bytes a word) per id of the log: the ids span at most 2 * 64 / 12 times their count


class RankIndex:
    """The positions of increasing unique int64 ids in the array that holds them (the log)."""

    def __init__(self):
        self._lo = 0  # the id value of bit 0 of word 0
        self._clear()

    def _clear(self) -> None:
        self._words = np.zeros(0, WORD)
        self._before = np.zeros(0, COUNT)  # ids in the words before each word
        self._used = False  # the ids are dense enough (else searched for)

    @property
    def nbytes(self) -> int:
        return self._words.nbytes + self._before.nbytes if self._used else 0

    def update(self, log: np.ndarray, appended: int | None = None) -> None:
        """Index ``log`` (sorted unique ids): all of it (``appended`` None: a log just compacted,
        or one this index did not cover), or only its last ``appended`` ids, fed since (each above
        every id before)."""
        if not len(log):
            self._clear()
            return
        whole = appended is None or not self._used
        if not whole and not appended:
            return
        lo = int(log[0]) if whole else self._lo
        n_words = (int(log[-1]) - lo) // WORD_BITS + 1
        if WORD_BYTES * n_words > MAX_BYTES_PER_ID * len(log) or len(log) >= 2**31:  # too sparse: searched for
            self._clear()
            return
        ids = log if whole else log[len(log) - appended:]
        if whole:
            self._lo = lo
            self._clear()
        offsets = np.asarray(ids, np.int64) - lo
        first = int(offsets[0]) // WORD_BITS
        bits = np.zeros((n_words - first) * WORD_BITS, bool)
        bits[offsets - first * WORD_BITS] = True
        words = np.zeros(n_words, WORD)
        words[:len(self._words)] = self._words
        words[first:] |= np.packbits(bits, bitorder="little").view(WORD)
        indexed = len(log) - len(ids)  # ids before the new ones, all in words up to ``first``
        base = int(self._before[first]) if first < len(self._before) else indexed
        counts = np.bitwise_count(words[first:]).astype(COUNT)
        before = np.empty(n_words, COUNT)
        kept = min(first, len(self._before))
        before[:kept] = self._before[:kept]
        before[kept:first] = indexed  # words between the ids indexed and the new ones: empty
        before[first:] = base + np.cumsum(counts) - counts
        self._words, self._before, self._used = words, before, True

    def positions(self, log: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Where each of ``ids`` is in ``log`` (the array indexed), clipped to it: an id that is
        not there gets some position whose id differs (the caller checks ``log[p] == id``)."""
        if not len(log):
            return np.zeros(len(ids), np.int64)
        if not self._used:
            return np.minimum(np.searchsorted(log, ids), len(log) - 1)
        offsets = np.clip(np.asarray(ids, np.int64) - self._lo, 0, len(self._words) * WORD_BITS - 1)
        word, bit = offsets // WORD_BITS, (offsets % WORD_BITS).astype(WORD)
        below = self._words[word] & ((np.ones(1, WORD) << bit) - np.ones(1, WORD))
        return np.minimum(self._before[word] + np.bitwise_count(below), len(log) - 1)
