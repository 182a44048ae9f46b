"""A service-rate model of SSIJ (Bornea et al., ICDE 2011): one cycle of online phases and the
join phase that empties SB (sec. IV-B, Algorithms 1 and 2), priced with the calibrated unit costs.

The paper bounds SSIJ's worst case (sec. V: no cache hit, no shared page, pages maxDist apart)
and gives no model of its rate; this one follows the engine (:mod:`.joins.ssij`) in the steady
state of a Zipf stream over R of n keys, pages of ``page_rows`` keys with stream shares q_j
(:func:`.costmodel.page_probabilities`):

* **the page cache CR** holds C = cache room / page bytes pages (the room CR has while IB and SB
  are at their peak, sec. IV-A). Under the utility policy (sec. IV-C) a page's utility in a join
  phase is the tuples that asked for it in the cycle, N q_j in expectation, so CR settles on the
  C pages of largest q_j; its hit ratio is p_C = sum of their q_j. Under LRU (Figure 11) the
  pages read last win whatever they served: CR holds the last C pages a join phase read, the
  requested ones nearest the end of R (on NoPerm the coldest). A measured hit ratio
  replaces p_C: CR is then the fewest pages of largest q_j that serve it.
* **a cycle** takes N tuples: SB fills with the misses to SB_thresh plus, on average, half an
  online phase's misses (IB_thresh tuples a phase), N = SB_thresh / (1 - p_C) + IB_thresh / 2.
* **the join phase** reads each page j not cached that a tuple asked for (probability
  r_j = 1 - exp(-N q_j)): by an IN query of its d_j distinct waiting keys when that costs less
  than the page in a sequence, in_key d_j < T (the engine's sparse pages, issue 12), else in a
  range sequence of the read plan (sec. IV-D). Under LRU a join phase keeps the last pages it
  reads (:func:`lru_kept`), and a page kept is read whole, with the pages of the gaps
  between kept pages less than maxDist apart (:func:`in_kept_sequence`), however few keys wait
  on them - many pages a phase of the cold tail (``docs/measurements.md``), which the utility
  policy reads by IN. IN queries take up to :data:`.joins.base.RIDER_KEYS` keys, fewer when
  the read buffer (one sequence of maxScan pages) holds fewer rows (``in_query_keys``: 64 keys
  a query at maxScan 1, where RIDER_KEYS made the model's IN queries 64 times too few); a
  sequence starts at each range-read page whose
  neighbour below is not range-read, and again every maxScan pages.
* **the CPU** of a cycle: per tuple the online phase's take, index lookup and probe of CR's
  rows (c_S + c_A + c_cache), per hit its output (c_hit), per online phase c_step; per SB
  tuple its entry in II and output (c_E + c_O), per row read c_H, per query c_step.

mu = N / (c_IO + c_CPU); one cycle is one iteration, and H_S (IB + SB) turns over once in it.
"""

from __future__ import annotations

import math

import numpy as np

from .costmodel import Prediction, page_keys_seen, page_probabilities, split_field
from .errors import ConfigError
from .joins.ssij import POLICIES
from .unitcosts import ComponentCosts



def cached_pages(q: np.ndarray, pages: int, policy: str, n_tuples_hint: float) -> tuple[np.ndarray, float]:
    """``(share of page j cached, p_C)`` for a CR of ``pages`` pages over pages of stream shares
    ``q``: the ``pages`` of largest q_j (utility), or the last ``pages`` pages a join phase
    reads, whatever they served (LRU: the plan reads P_u in position order, and page j is in P_u
    of a cycle of ``n_tuples_hint`` tuples with probability 1 - exp(-N q_j))."""
    share = np.zeros(len(q))
    pages = int(min(max(pages, 0), len(q)))
    if pages == 0:
        return share, 0.0
    if policy == "utility":
        share[np.argsort(-q, kind="stable")[:pages]] = 1.0
    else:  # the plan reads in position order: the last ``pages`` asked for, from the end of R
        share = read_last(-np.expm1(-n_tuples_hint * q), pages)
    return share, float(np.sum(share * q))


def read_last(chances: np.ndarray, pages: int) -> np.ndarray:
    """Per page (position order), the chance it is among the last ``pages`` pages a join phase
    reads when page j is read with ``chances[j]`` (the plan reads in position order)."""
    after = np.cumsum(chances[::-1])[::-1] - chances  # pages read after page j
    return chances * np.clip(pages - after, 0.0, 1.0)


def pages_for_hit_ratio(q: np.ndarray, p_c: float) -> np.ndarray:
    """Share of page j cached when CR holds the fewest pages of largest q_j that serve ``p_c``."""
    order = np.argsort(-q, kind="stable")
    held = int(np.searchsorted(np.cumsum(q[order]), p_c, side="left")) + (p_c > 0)
    share = np.zeros(len(q))
    share[order[:held]] = 1.0
    return share


def lru_kept(asked: np.ndarray, sparse: np.ndarray, pages: int) -> np.ndarray:
    """Per page (position order), the chance a join phase keeps it under LRU (Figure 11): a page
    of P_u is used after every cached page, so ToKeep is the last ``pages`` candidates the plan
    reads. A candidate is asked for (``asked``: r_j) and dense, or ``sparse`` and asked for in
    the phase before too (r_j^2: :mod:`.joins.ssij` keeps a sparse page only when it recurs)."""
    return read_last(asked * np.where(sparse, asked, 1.0), pages)


def in_kept_sequence(kept: np.ndarray, max_dist: float) -> np.ndarray:
    """Per page, the chance a range read spans it because of kept pages: it is kept, or it lies
    between two kept pages less than maxDist apart (a scan across their gap costs less than two
    queries, and :func:`.joins.ssij_access.split_at_keep` cuts a sequence only around kept pages
    few and far between). Kept pages fall independently with the density of the maxDist pages
    around page j; a page not kept lies a + b < maxDist pages from the two around it."""
    span = max(int(math.ceil(max_dist)), 2)
    k = np.clip(np.convolve(kept, np.ones(span) / span, mode="same"), 0.0, 1.0)
    gaps = np.arange(2, span)  # a + b
    between = np.sum((gaps - 1)[:, None] * k ** 2 * (1.0 - k) ** (gaps - 2)[:, None], axis=0)
    return np.clip(kept + (1.0 - kept) * between, 0.0, 1.0)


def _sequences(range_read: np.ndarray, max_scan: int) -> float:
    """Expected range queries of the read plan over pages read by range with probabilities
    ``range_read`` (position order): one where the page below is not read by range, and one
    more every ``max_scan`` pages of a run."""
    below = np.concatenate([[0.0], range_read[:-1]])
    return float(np.sum(range_read * (1.0 - below)) + range_read.sum() / max(max_scan, 1))


def ssij_model(split: dict, settings: dict, costs: ComponentCosts, n_keys: int, exponent: float, shape: str,
               shape_seed: int, p_n: float | None) -> Prediction:
    """The prediction for SSIJ with the memory ``split`` it chose (:meth:`.joins.ssij.SemiStreamedIndexJoin.memory_split`)
    and its ``settings`` (``cache_policy``); ``p_n`` replaces the model's hit ratio of CR."""
    c = costs
    page_rows = int(split_field(split, "page_rows", "ssij"))
    sb, ib = float(split_field(split, "sb_thresh", "ssij")), float(split_field(split, "ib_thresh", "ssij"))
    max_scan = int(split_field(split, "max_scan", "ssij"))
    max_dist = float(split_field(split, "max_dist", "ssij"))
    in_query_keys = int(split_field(split, "in_query_keys", "ssij"))  # the read buffer's rows, at most RIDER_KEYS (the engine's _in_keys)
    room_pages = int(split_field(split, "cache_room_bytes", "ssij") // max(int(split_field(split, "page_bytes", "ssij")), 1))
    policy = settings.get("cache_policy", "utility")
    if policy not in POLICIES:
        raise ConfigError(f"cache_policy: {policy!r} is not one of {list(POLICIES)}")
    q = page_probabilities(n_keys, exponent, page_rows, shape, shape_seed=shape_seed)
    if p_n is None:
        share, p_c = cached_pages(q, room_pages, "utility", 0.0)
        if policy == "lru":  # the cycle's length with the pages LRU would keep, found from it once
            share, p_c = cached_pages(q, room_pages, policy, sb / max(1.0 - p_c, 1e-12) + ib / 2)
    else:
        share, p_c = pages_for_hit_ratio(q, p_n), float(p_n)
    tuples = sb / max(1.0 - p_c, 1e-12) + ib / 2  # N: the tuples of one cycle
    missed = 1.0 - share
    asked = missed * -np.expm1(-tuples * q)  # r_j
    distinct = missed * page_keys_seen(n_keys, exponent, page_rows, shape, tuples, shape_seed=shape_seed)  # d_j
    page_s = c.row_s * page_rows
    by_in = c.in_key_s * distinct < page_s
    whole = in_kept_sequence(lru_kept(asked, by_in, room_pages), max_dist) if policy == "lru" else np.zeros(len(q))
    in_share = np.where(by_in, 1.0 - whole, 0.0)  # of page j's reads, those by IN
    in_keys = float(np.sum(distinct * in_share))
    in_read = asked * in_share
    range_read = whole + (1.0 - whole) * np.where(by_in, 0.0, asked)  # pages a range sequence spans
    range_queries = _sequences(range_read, max_scan)
    in_queries = in_keys / in_query_keys + range_queries if in_keys else 0.0  # a range sequence ends an IN run
    leaves = float(np.sum(c.leaves_read(distinct, page_rows) * in_share))
    io = (in_queries * c.in_query_s + in_keys * c.in_key_s + leaves * c.in_leaf_s
          + range_queries * c.query_s + float(range_read.sum()) * page_s)
    rows = in_keys + float(range_read.sum()) * page_rows
    c_cache, c_hit = c.cache_costs(int(share.sum()) * page_rows)
    waiting = tuples * (1.0 - p_c)
    cpu = (tuples * (c.c_S + c.c_A + c_cache) + tuples * p_c * c_hit + (tuples / max(ib, 1.0)) * c.c_step
           + waiting * (c.c_E + c.c_O) + rows * c.c_H + (in_queries + range_queries) * c.c_step)
    loop = io + cpu
    detail = {"N": tuples, "cached_pages": float(share.sum()), "pages_asked": float(asked.sum()),
              "pages_by_in": float(in_read.sum()), "pages_by_range": float(range_read.sum()),
              "in_queries": in_queries, "range_queries": range_queries, "rows_read": rows, "cpu_s": cpu,
              "turnover_iterations": 1.0}
    return Prediction("ssij", tuples / loop if loop > 0 else 0.0, tuples, loop, io, p_c,
                      "SSIJ: N / (join phase + online phases), CR of the pages of largest q_j", detail, "cycle")
