"""StreamTable (H_S and Q) against a plain Python model: random admits, pops (one page, several) and key_at calls."""

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from airflow_provider_semijoin.core.joins.stream_table import StreamTable


class StreamTableModel(RuleBasedStateMachine):
    """The model: Q as a list of chunks, each a list of live ``(row id, key, page)`` in arena
    order (a chunk is stored sorted by page, stable). Keys are unique (key = 1000 + row id), so
    ``key_at`` names exactly one tuple."""

    @initialize(capacity=st.integers(1, 60), n_pages=st.integers(1, 9), string_keys=st.booleans())
    def start(self, capacity, n_pages, string_keys):
        self.dtype = np.dtype("S6") if string_keys else np.dtype(np.int64)
        self.table = StreamTable(capacity, n_pages, self.dtype)
        self.capacity, self.n_pages = capacity, n_pages
        self.chunks: list[tuple[int, list]] = []  # (tuples admitted before it, live tuples)
        self.next_row = 0
        self.admitted = 0
        self.nbytes = self.table.nbytes

    def key(self, row: int):
        return str(1000 + row).encode() if self.dtype.kind == "S" else 1000 + row

    @property
    def live(self) -> list[tuple[int, object, int]]:
        return [t for _, chunk in self.chunks for t in chunk]

    @rule(data=st.data())
    def admit(self, data):
        free = self.capacity - len(self.live)
        n = data.draw(st.integers(0, free), label="n")
        pages = data.draw(st.lists(st.integers(0, self.n_pages - 1), min_size=n, max_size=n), label="pages")
        rows = np.arange(self.next_row, self.next_row + n, dtype=np.int64)
        keys = np.array([self.key(r) for r in rows.tolist()], dtype=self.dtype)
        self.table.admit(rows, keys, np.array(pages, dtype=np.int64))
        if n:
            chunk = sorted(zip(rows.tolist(), keys.tolist(), pages), key=lambda t: t[2])
            self.chunks.append((self.admitted, chunk))
        self.next_row += n
        self.admitted += n

    @rule(extra=st.integers(1, 5))
    def admit_beyond_capacity(self, extra):
        n = self.capacity - len(self.live) + extra
        with pytest.raises(ValueError, match=rf"admit {n} tuples into a stream table with {n - extra} free slots"):
            self.table.admit(np.arange(n), np.zeros(n, self.dtype), np.zeros(n, np.int64))

    @rule(data=st.data())
    def pop(self, data):
        page = data.draw(st.integers(0, self.n_pages - 1), label="page")
        rows, keys = self.table.pop_page(page)
        expected = [t for t in self.live if t[2] == page]
        assert sorted(rows.tolist()) == sorted(t[0] for t in expected)
        assert sorted(keys.tolist()) == sorted(t[1] for t in expected)
        assert keys.dtype == self.dtype
        self.chunks = [(before, [t for t in c if t[2] != page]) for before, c in self.chunks]
        self.chunks = [(before, c) for before, c in self.chunks if c]

    @rule(data=st.data())
    def pop_many(self, data):
        pages = data.draw(st.lists(st.integers(0, self.n_pages - 1), unique=True, max_size=self.n_pages), label="pages")
        rows, keys, counts = self.table.pop_pages(np.array(pages, np.int64))
        assert counts.tolist() == [sum(t[2] == page for t in self.live) for page in pages]
        assert keys.dtype == self.dtype and len(rows) == len(keys) == sum(counts)
        at = 0
        for page, count in zip(pages, counts.tolist()):  # each page's tuples together, in the order of pages
            expected = [t for t in self.live if t[2] == page]
            assert sorted(rows[at:at + count].tolist()) == sorted(t[0] for t in expected)
            assert sorted(keys[at:at + count].tolist()) == sorted(t[1] for t in expected)
            at += count
        self.chunks = [(before, [t for t in c if t[2] not in pages]) for before, c in self.chunks]
        self.chunks = [(before, c) for before, c in self.chunks if c]

    @precondition(lambda self: self.live)
    @rule(fraction=st.one_of(st.sampled_from([0.0, 0.3, 1.0]), st.floats(0.0, 1.0)))
    def key_at(self, fraction):
        live = self.live  # oldest first
        target = min(len(live) - 1, int(fraction * len(live)))  # tuples younger than the one named
        assert self.table.key_at(fraction) == live[len(live) - 1 - target][1]

    @invariant()
    def sizes_and_page_counts(self):
        live = self.live
        assert self.table.size == len(live)
        assert self.table.free == self.capacity - len(live)
        assert self.table.admitted == self.admitted
        counts = np.bincount([t[2] for t in live], minlength=self.n_pages)
        assert self.table.page_count.tolist() == counts.tolist()

    @invariant()
    def oldest(self):
        live = self.live
        if not live:
            assert self.table.oldest_key() is None and self.table.oldest_age() == 0
            return
        assert self.table.oldest_key() == live[0][1]  # key_at(1.0): first tuple of the oldest chunk
        # merged chunks carry their oldest member's admission count: an upper bound of the age
        assert self.admitted - self.chunks[0][0] <= self.table.oldest_age() <= self.admitted

    @invariant()
    def nbytes_is_constant(self):
        assert self.table.nbytes == self.nbytes


TestStreamTableModel = StreamTableModel.TestCase
TestStreamTableModel.settings = settings(max_examples=150, stateful_step_count=120, deadline=None)


def test_nbytes_does_not_grow_with_many_small_admissions():
    """A trickling stream admits one tuple per step: Q's bookkeeping must stay within nbytes."""
    table = StreamTable(200, 4, np.dtype(np.int64))
    before = table.nbytes
    for row in range(150):  # 150 one-tuple chunks; the arena (301 slots) never needs compacting
        table.admit(np.array([row]), np.array([row]), np.array([row % 4]))
        table.pop_page(row % 4)
    assert table.size == 0
    assert table.nbytes == before


def test_nbytes_is_within_the_budget_it_was_sized_from():
    for budget in (600, 2_000, 10_000, 200_000):
        capacity = StreamTable.capacity_for(budget, 10, 8)
        assert capacity >= 1
        assert StreamTable(capacity, 10, np.dtype(np.int64)).nbytes <= budget, budget
