"""MESHJOIN: N. Polyzotis, S. Skiadopoulos, P. Vassiliadis, A. Simitsis, N. Frantzell,
"Meshing streaming updates with persistent data in an active data warehouse" (TKDE 2008), as
summarised in the HYBRIDJOIN paper sec. 3.1 and the SSJ paper sec. 2.

R is read cyclically in k = ceil(pages / b) partitions of b pages, one per iteration (one index
range query each). Every iteration admits a chunk of w new stream tuples into H_S / Q, so a
chunk stays k iterations and meets every partition exactly once before it expires (sec. 3.1:
"the total number of partitions in the stream queue must be equal to the total number of
partitions on the disk"); H_S thus holds w*k tuples.

Exactness: a tuple is filed under its page of R, and when the partition holding that page is
scanned the tuple meets every row of R that can match it (pages hold whole key ranges), so it
completes right then - every duplicate of a key in the stream matches, a key with K rows in R
yields K pairs, an absent key leaves as ``not_in_master``. Its slot is reused only by the
admission of later chunks, which stays at w per iteration: the memory and I/O pattern are the
paper's. A partition none of whose pages has a waiting tuple is skipped without I/O (this only
happens while the queue is not full, e.g. when the stream ends and the last chunks drain).

The split of the budget M between the disk buffer (b pages) and H_S (w*k tuples) maximises the
service rate of the MESHJOIN cost model, mu = w / (S + T * b * page_rows + c_tuple * w), using
the store's measured S and T.
"""

from __future__ import annotations

import math

import numpy as np

from ..stores.base import DEFAULT_PAGE_ROWS
from .base import JoinOutput, Param, StreamBuffer
from .plan import Plan, RStats
from .stream_table import PagedJoin, StreamTable

TUPLE_COST_S = 1e-6  # per stream tuple (admit, probe, output) in this engine, order of magnitude


def best_partition_pages(
    capacity_for, n_pages: int, page_bytes: float, page_rows: int, query_s: float, row_s: float,
    tuple_s: float = TUPLE_COST_S,
) -> tuple[int, int]:
    """``(b, w)`` maximising mu = w / (S + T*b*page_rows + tuple_s*w) under the budget.

    ``capacity_for(bytes)`` says how many stream tuples H_S holds in what the disk buffer of b
    pages leaves of the budget; w = that / k with k = ceil(pages / b) partitions.
    """
    b = np.arange(1, max(n_pages, 1) + 1, dtype=np.int64)
    k = -(-max(n_pages, 1) // b)
    w = capacity_for(np.ceil(b * page_bytes)) // k
    mu = np.where(w >= 1, w / (query_s + row_s * b * page_rows + tuple_s * np.maximum(w, 1)), -1.0)
    best = int(np.argmax(mu))
    return int(b[best]), int(max(w[best], 0))


class MeshJoin(PagedJoin):
    name = "meshjoin"
    cost_model = "meshjoin"
    auto_candidate = True
    paper = "MESHJOIN (Polyzotis et al. 2008); HYBRIDJOIN paper sec. 3.1"
    params = {
        "page_rows": Param(int, DEFAULT_PAGE_ROWS, "rows of R per page", 1),
        "partition_pages": Param(int, 0, "b: pages per disk partition; 0 = from the cost model", 0),
    }

    def __init__(self, store, memory, **kwargs):
        super().__init__(store, memory, **kwargs)
        plan = self.plan_used
        self.page_map = store.page_map(self.settings["page_rows"])
        self.partition_pages = plan.sizes["partition_pages"]
        self.partitions = plan.sizes["partitions"]
        self.chunk_tuples = plan.sizes["chunk_tuples"]
        self._disk_buffer_bytes = plan.sizes["disk_buffer_bytes"]
        self.table = StreamTable(plan.capacity_tuples, self.page_map.n_pages, store.key_type.dtype)
        self._next_partition = 0

    @classmethod
    def statistics(cls, store, settings: dict) -> RStats:
        """R's page map at ``page_rows``, and S and T when the cost model chooses b."""
        return RStats.of(store, settings["page_rows"], costs=not settings["partition_pages"])

    @classmethod
    def plan(cls, stats: RStats, memory: int, settings: dict) -> Plan:
        """b pages per partition (the disk buffer) and w tuples per chunk, H_S holding w * k
        (sec. 3.1): b from the cost model (:func:`best_partition_pages`) unless given."""
        pages = stats.page(settings["page_rows"])
        n_pages = max(pages.n_pages, 1)
        page_bytes = pages.max_page_rows * pages.row_bytes

        def capacity_for(disk_buffer_bytes):
            return StreamTable.capacity_for(memory - pages.nbytes - disk_buffer_bytes, pages.n_pages, stats.key_itemsize)

        if settings["partition_pages"]:
            b = min(settings["partition_pages"], n_pages)
            w = int(capacity_for(math.ceil(b * page_bytes))) // math.ceil(n_pages / b)
        else:
            b, w = best_partition_pages(capacity_for, n_pages, page_bytes, settings["page_rows"], *stats.costs)
        if w < 1:
            raise cls.budget_error(memory, cls.min_memory(stats, settings), "a disk partition and one tuple per partition")
        partitions = math.ceil(n_pages / b)
        return Plan(cls.name, memory, w * partitions, {
            "page_rows": pages.page_rows, "partition_pages": b, "partitions": partitions, "chunk_tuples": w,
            "disk_buffer_bytes": int(math.ceil(b * page_bytes)), "page_map_bytes": pages.nbytes, "pages": pages.n_pages,
            "stream_table_capacity_tuples": w * partitions,
        }, waiting_tuples=w)  # a chunk of w waiting for the next iteration

    @classmethod
    def min_memory(cls, stats: RStats, settings: dict) -> int:
        """The page map, a disk buffer of b pages and H_S of one tuple per partition (w = 1,
        k = ceil(pages / b)): at the b given, or the least over every b the cost model may choose."""
        pages = stats.page(settings["page_rows"])
        n_pages = max(pages.n_pages, 1)
        b = np.array([min(settings["partition_pages"], n_pages)]) if settings["partition_pages"] else np.arange(1, n_pages + 1)
        partitions = -(-n_pages // b)
        disk_buffer = np.ceil(b * (pages.max_page_rows * pages.row_bytes)).astype(np.int64)  # as :meth:`plan` rounds it
        return int((pages.nbytes + disk_buffer + StreamTable.budget_for(partitions, pages.n_pages, stats.key_itemsize)).min())

    def _step(self, buffer: StreamBuffer) -> JoinOutput:
        outputs = []
        if buffer.available >= self.chunk_tuples or buffer.closed:
            outputs.append(self._admit_chunk(self._take(buffer, min(self.chunk_tuples, self.table.free))))
        else:
            return JoinOutput.empty(self.schema)  # sec. 3.1: a disk invocation waits for w tuples
        first = self._next_partition * self.partition_pages
        count = min(self.partition_pages, self.page_map.n_pages - first)
        self._next_partition = (self._next_partition + 1) % self.partitions
        waiting = np.flatnonzero(self.table.page_count[first : first + count]) + first
        if len(waiting):
            loaded = self.store.load_pages(self.page_map, first, count)
            self.counters.loads += 1
            popped = [self.table.pop_page(int(p)) for p in waiting]
            row_ids = np.concatenate([r for r, _ in popped])
            keys = np.concatenate([k for _, k in popped])
            outputs.append(self._join(loaded, row_ids, keys))
        return JoinOutput.concat(outputs, self.schema)

    @property
    def demand(self) -> int:
        return self.chunk_tuples

    @property
    def cycle_ended(self) -> bool:
        """The last step scanned R's last partition: the next scans R from its start. Its tuples
        leave with the partition that holds their key, so one partition's scan completes far
        more than w (on the noperm shape at Zipf 1 the first holds about half the stream) and
        only a scan of all k partitions completes the w*k tuples admitted over it. A window of
        6 s over 1.3 scans (MariaDB, R = 2M rows, 5% of R) counted the first partition twice
        and measured 64k tuples/s where the whole scans say 47k.

        Or H_S is empty: no tuple waits for the rest of a scan. A front stage whose H_R holds
        all of R (SSJ, CMESHJOIN) feeds MESHJOIN no tuple, so its scan stops part way and never
        ends; a bench waited for that end to its caps."""
        return self._next_partition == 0 or self.pending == 0

    @property
    def capacity_with_waiting(self) -> int:
        """H_S and one chunk of w tuples waiting for the next iteration (MESHJOIN sec. 3.1)."""
        return self.table.capacity + self.chunk_tuples

    @classmethod
    def planned_split(cls, plan: Plan) -> dict:
        sizes = plan.sizes
        return {**super().planned_split(plan), "partition_pages": sizes["partition_pages"],
                "partitions": sizes["partitions"], "chunk_tuples": sizes["chunk_tuples"]}
