"""SSIJ's plan (:mod:`.plan`): maxScan, SB_thresh, IB_thresh and the size of IB from the budget
(Bornea et al., ICDE 2011, sec. IV-A), computed from R's page map without I/O; what is left of M
is the page cache CR's (sec. IV-C).

A read sequence takes at most :data:`SCAN_SHARE` of the budget, and less if the stream buffers
need it; SB_thresh fills :data:`SB_SHARE` of what the read buffer leaves (Fig. 13), IB_thresh is
a quarter of it and IB holds two of its batches (Table II: IB 250,000, SB 1,000,000 tuples).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .base import RIDER_KEYS
from .plan import Plan, RStats, smallest_budget
from .ssij_pages import max_dist

SB_SHARE = 0.3  # default SB_thresh: stream-buffer tuples filling this share of the usable budget (Fig. 13)
IB_PER_SB = 4  # default IB_thresh = SB_thresh / 4 (Table II: IB 250,000, SB 1,000,000 tuples)
IB_SIZE_PER_THRESH = 2  # default input-buffer size: one batch taken, one arriving
SCAN_SHARE = 0.25  # a read sequence takes at most this share of the budget (caps maxScan)
PAIR_BYTES = 8 + 8  # an II entry: SB position and page
PER_PAGE_BYTES = 1 + 8 + 8 + 8 + 4 + 8 + 4 + 4  # per page of R: CR's cached, utility, demand, last use, bytes, segment; II's count; last phase
PER_REQUESTED_BYTES = 8 + 8 + 1 + 8 + 8  # per page of P_u in a join phase: its page, utility, ToKeep, use, rank
INT64 = np.iinfo(np.int64)


@dataclass(frozen=True)
class SsijStats:
    """What SSIJ's plan reads of R: the key's width, a loaded result's overhead, the page map, K
    and S and T (``r``), the rows of its k largest pages for each k (``largest_rows``: a read's worst case;
    pages of a map brought up to date from the change log are uneven, :mod:`..stores.pagemaps`),
    and the most pages one tuple's key range overlaps (``pages_per_tuple``, 1 for an equi-join)."""

    r: RStats
    largest_rows: np.ndarray
    pages_per_tuple: int

    @classmethod
    def of(cls, store, name: str, settings: dict) -> "SsijStats":
        """From ``store``, for the page size and key range of ``settings`` (refused for a range
        condition on a string key, or an empty range)."""
        low, high = settings["range_lo"], settings["range_hi"]
        if (low, high) != (0, 0):
            if store.key_type.kind != "int":
                raise ConfigError(f"{name}.range_lo: a range condition needs an integer key; {store.key!r} is a string")
            if low > high:
                raise ConfigError(f"{name}.range_hi: {high} must be >= range_lo {low}")
        page_map = store.page_map(settings["page_rows"])
        sizes = page_map.sizes if page_map.sizes is not None else np.full(page_map.n_pages, settings["page_rows"], np.int64)
        r = dataclasses.replace(RStats.of(store, settings["page_rows"], costs=True), max_rows_per_key=store.max_rows_per_key)
        return cls(r, np.cumsum(np.sort(sizes)[::-1]),
                   pages_per_tuple(page_map.bounds, high - low) if (low, high) != (0, 0) else 1)


def pages_per_tuple(bounds: np.ndarray, width: int) -> int:
    """The most pages a key range of ``width`` overlaps (pages starting at ``bounds``)."""
    reach = shift(bounds, width)
    return int((np.searchsorted(bounds, reach, side="right") - np.arange(len(bounds))).max())


def shift(keys: np.ndarray, offset: int) -> np.ndarray:
    """``keys + offset``, saturating at the ends of int64."""
    if offset >= 0:
        return np.where(keys > INT64.max - offset, INT64.max, keys + offset)
    return np.where(keys < INT64.min - offset, INT64.min, keys + offset)


def plan_ssij(cls, stats: SsijStats, memory: int, s: dict) -> Plan:
    """The split of ``memory`` bytes for the SSIJ class ``cls`` (sec. IV-A); a budget too small
    for the page map, one read sequence, IB and SB is a :class:`..errors.BudgetError`."""
    sizes = _sizes(stats, memory, s)
    needed = sizes.pop("needed")
    sizes.pop("smallest")
    if needed > memory:
        what = (f"the page map, one read sequence of {sizes['max_scan']} pages, IB of {sizes['ib_size']} and SB of "
                f"{sizes['sb_thresh'] + sizes['ib_thresh']} tuples")
        raise cls.budget_error(memory, needed, what)
    return Plan(cls.name, memory, sizes["ib_size"] + sizes["sb_thresh"] + sizes["ib_thresh"], sizes)


def min_ssij(stats: SsijStats, s: dict) -> int:
    """The smallest budget :func:`plan_ssij` accepts: the page map and page arrays, a read
    sequence of one page (maxScan comes down to 1 before a budget is refused) and IB and SB
    at the thresholds the budget sets (1 and 1 unless given: :func:`.plan.smallest_budget`)."""
    return smallest_budget(lambda _, memory: _sizes(stats, memory, s)["smallest"])


def _sizes(stats: SsijStats, memory: int, s: dict) -> dict:
    """The plan's sizes at ``memory`` bytes, with the bytes they need (``needed``) and those they
    would need with a read sequence of one page (``smallest``)."""
    pages = stats.r.page(s["page_rows"])
    n_pages = max(pages.n_pages, 1)
    rows_per_page = max(pages.n_rows / n_pages, 1.0)
    page_bytes = math.ceil(rows_per_page * (pages.row_bytes + 4))  # + the row's page
    key_size = stats.r.key_itemsize
    ib_tuple_bytes = 8 + key_size + 8 + 8
    sb_tuple_bytes = 8 + key_size + 8 + 8 + 1 + 4 + stats.pages_per_tuple * PAIR_BYTES
    fixed_bytes = pages.nbytes + pages.n_pages * PER_PAGE_BYTES + int(stats.largest_rows.nbytes)

    def read_rows(scan: int) -> int:
        return int(stats.largest_rows[min(scan, len(stats.largest_rows)) - 1])

    def scan_bytes_of(scan: int) -> int:
        return stats.r.result_bytes(read_rows(scan), pages.row_bytes)

    room = memory - fixed_bytes
    max_scan = int(min(s["max_scan"], n_pages, max(1, SCAN_SHARE * room // page_bytes)))
    usable = room - scan_bytes_of(max_scan)
    sb = s["sb_thresh"] or max(1, int(SB_SHARE * usable // sb_tuple_bytes))
    ib = s["ib_thresh"] or max(1, sb // IB_PER_SB)
    ib_size = max(s["ib_size"] or IB_SIZE_PER_THRESH * ib, ib)
    requested = min((sb + ib) * stats.pages_per_tuple, pages.n_pages)  # SB reaches SB_thresh + IB_thresh - 1 tuples
    peak = ib_size * ib_tuple_bytes + (sb + ib) * sb_tuple_bytes + requested * PER_REQUESTED_BYTES  # with a join phase's arrays
    while max_scan > 1 and fixed_bytes + scan_bytes_of(max_scan) + peak > memory:
        max_scan -= 1
    return {
        "page_rows": pages.page_rows, "rows_per_page": rows_per_page, "page_bytes": page_bytes,
        "pages_per_tuple": stats.pages_per_tuple,
        "ib_tuple_bytes": ib_tuple_bytes, "sb_tuple_bytes": sb_tuple_bytes, "fixed_bytes": fixed_bytes,
        "max_scan": max_scan, "read_rows": read_rows(max_scan), "scan_bytes": scan_bytes_of(max_scan), "sb_thresh": sb,
        "ib_thresh": ib, "ib_size": ib_size, "stream_peak_bytes": peak,
        "max_dist": max_dist(stats.r.costs[0], stats.r.costs[1] * rows_per_page),  # sec. IV-D, T: one more page
        # the most keys one IN query asks for: up to RIDER_KEYS, whose rows fit the read buffer (maxScan's pages)
        "in_query_keys": max(1, min(RIDER_KEYS, read_rows(max_scan) // max(stats.r.max_rows_per_key, 1))),
        "needed": fixed_bytes + scan_bytes_of(max_scan) + peak, "smallest": fixed_bytes + scan_bytes_of(1) + peak,
    }
