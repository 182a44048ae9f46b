"""HYBRIDJOIN's plan (:mod:`.plan`): eq. 1's split of M - R's page size, the disk buffer, the loads
under way, H_S - from R's statistics without I/O (HYBRIDJOIN paper sec. 4.2, eq. 1; the -L and
-PQ variants of the pq-frequent-pages paper add their structures beside H_S, ``reserved_bytes``),
and the smallest budget it accepts, in closed form.
"""

from __future__ import annotations

import math

from .base import RIDER_KEYS
from .plan import PageStats, Plan, RStats, smallest_budget
from .stream_table import MAX_CHUNK, StreamTable

PAGE_ROWS_RANGE = (64, 8192)
PAGE_SHARE = 1 / 8  # of M at most for one page's rows (the disk buffer, d) when the page size is measured
RIDER_BUFFER_SHARE = 1 / 64  # of M at most for the rows of one IN query beyond one page's (the disk buffer)
ADMIT_SHARE = 1 / 64  # of h_S: the free slots a backlog's tuples wait for before they are admitted at once
READ_AHEAD_SHARE = 1 / 16  # of M at most for read-ahead (each load's tuples in flight and disk buffer);
#                            a smaller M keeps fewer loads under way, or reads on its own session


def auto_page_rows(query_s: float, row_s: float, kept=(), most: float = PAGE_ROWS_RANGE[1]) -> int:
    """Rows per page from the measured costs: a load of ``4*S/T`` rows spends 80% of its time
    reading rows rather than on the round trip, the flat part of HYBRIDJOIN's Fig. 6 curve.
    Rounded down to a power of two, and to at most ``most`` rows (the rows a share of M holds:
    a slow round trip measured on a loaded machine - S = 10 ms - asked for pages a small M could
    not hold, and the join was refused); the page size in ``kept`` (the page maps kept beside R,
    :mod:`..stores.pagemaps`) nearest to it within a factor of 2 either way is taken instead
    (the smaller of two as near), so that runs measuring different costs read the same kept map
    rather than build their own in O(R): two opens of R = 20M rows on MariaDB measured page
    sizes of 1024 and 512 and built both, 16 s each, when only a smaller kept page was taken."""
    lo, hi = PAGE_ROWS_RANGE
    hi = min(hi, _pow2_at_most(most, lo))
    best = min(hi, _pow2_at_most(4 * query_s / row_s, lo))
    near = [k for k in kept if max(lo, best // 2) <= k <= min(hi, 2 * best)]
    return int(min(near, key=lambda k: (abs(math.log2(k / best)), k)) if near else best)


def _pow2_at_most(rows: float, lo: int) -> int:
    """The largest power of two not above ``rows``, but at least ``lo``."""
    return max(lo, 2 ** math.floor(math.log2(max(rows, 1.0))))


def plan_hybridjoin(cls, stats: RStats, memory: int, settings: dict) -> Plan:
    """Eq. 1, M = disk buffer + page map + H_S (+ the structures beside it): the page size
    (:func:`page_rows_at`), the disk buffer d holding a page or an IN query's riders (at most
    :data:`RIDER_BUFFER_SHARE` of M), the loads under way with their share of M (at most
    :data:`READ_AHEAD_SHARE`, H_S first) and H_S of the rest."""
    pages = stats.page(page_rows_at(stats, memory, settings))
    key_size, n_pages = stats.key_itemsize, pages.n_pages
    buffer_rows, disk_buffer_bytes = disk_buffer(stats, pages, memory)
    tuple_bytes = key_size + 8
    ahead_tuples = disk_buffer_bytes // tuple_bytes  # of one load in flight: a disk buffer's bytes of them
    per_load = disk_buffer_bytes + ahead_tuples * tuple_bytes  # and the rows read for them
    loads = min(settings["read_ahead"], int(memory * READ_AHEAD_SHARE // per_load))
    rest = memory - disk_buffer_bytes - pages.nbytes - cls.reserved_bytes(n_pages)  # H_S and read-ahead
    while loads and StreamTable.capacity_for(rest - loads * per_load, n_pages, key_size) < 1:
        loads -= 1  # H_S first: a budget that holds a tuple without read-ahead is never refused for it
    if not (loads and stats.reads_ahead):
        loads = ahead_tuples = 0
    capacity = StreamTable.capacity_for(rest - loads * per_load, n_pages, key_size)
    if capacity < 1:
        raise cls.budget_error(memory, min_hybridjoin(cls, stats, settings), "one disk page and the page map")
    return Plan(cls.name, memory, capacity + loads * ahead_tuples, {
        "page_rows": pages.page_rows, "buffer_rows": buffer_rows, "disk_buffer_bytes": disk_buffer_bytes,
        "page_map_bytes": pages.nbytes, "pages": n_pages, "loads": loads, "ahead_tuples": ahead_tuples,
        "read_ahead_bytes": loads * per_load, "stream_table_capacity_tuples": capacity,
        # keys one IN query with riders takes at most: RIDER_KEYS, or fewer where the disk buffer holds fewer keys' rows
        "rider_keys": min(RIDER_KEYS, buffer_rows // max(stats.max_rows_per_key, 1)),
        "admit_tuples": max(1, min(int(capacity * ADMIT_SHARE), MAX_CHUNK)),  # :meth:`_admit`
    })


def disk_buffer(stats: RStats, pages: PageStats, memory: int) -> tuple[int, int]:
    """The disk buffer's rows and bytes: a page, or the rows of an IN query's riders (up to
    :data:`~.base.RIDER_KEYS` keys) that :data:`RIDER_BUFFER_SHARE` of M holds."""
    rider_rows = int(memory * RIDER_BUFFER_SHARE / pages.row_bytes)
    buffer_rows = max(pages.max_page_rows, min(RIDER_KEYS * stats.max_rows_per_key, rider_rows))
    return buffer_rows, int(math.ceil(buffer_rows * pages.row_bytes))


def min_hybridjoin(cls, stats: RStats, settings: dict) -> int:
    """Eq. 1 at its smallest: the disk buffer, the page map, the structures beside H_S and H_S
    of one tuple, no read-ahead - at the page size each budget chooses (:func:`page_rows_at`)."""
    def needed(page_rows, memory):
        pages = stats.page(page_rows or settings["page_rows"])
        return (disk_buffer(stats, pages, memory)[1] + pages.nbytes + cls.reserved_bytes(pages.n_pages)
                + StreamTable.budget_for(1, pages.n_pages, stats.key_itemsize))

    chooses = not settings["page_rows"]
    return smallest_budget(needed, (lambda memory: page_rows_at(stats, memory, settings)) if chooses else None)


def page_rows_at(stats: RStats, memory: int, settings: dict) -> int:
    """R's page size (d): the one set, or :func:`auto_page_rows`' choice among the kept maps,
    within :data:`PAGE_SHARE` of M - but not a kept page larger than the measured size whose
    rows do not fit the rider buffer (its disk buffer would cost H_S room)."""
    if settings["page_rows"]:
        return settings["page_rows"]
    query_s, row_s = stats.costs
    most = memory * PAGE_SHARE / stats.row_bytes
    measured = auto_page_rows(query_s, row_s, most=most)
    page_rows = auto_page_rows(query_s, row_s, stats.kept_page_rows, most)
    if page_rows > measured:  # a kept map's (its pages are read only then)
        kept = stats.page(page_rows)
        if kept.max_page_rows > memory * RIDER_BUFFER_SHARE / kept.row_bytes:
            return measured
    return page_rows
