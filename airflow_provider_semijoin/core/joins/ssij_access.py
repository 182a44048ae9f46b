"""SSIJ's access path per page (issue 12, beyond the paper): which parts of a join phase's read
plan (:func:`.ssij_pages.read_plan`, sec. IV-D) are read by a range query, as the paper reads
every sequence, and which by an IN query of only the distinct keys waiting on them.

A page of P_u whose distinct waiting keys cost less by IN than the page costs to read in a
sequence is *sparse* (:func:`sparse`): not worth its room in the page cache CR either.
A sequence holding pages of ToKeep, whose other pages are cheaper by IN, is cut around them
(:func:`split_at_keep`); runs of sequences with no page of ToKeep that are each cheaper by IN
become one IN query (:func:`in_spans`). :mod:`.ssij` decides ToKeep and reads the plan.
"""

from __future__ import annotations

import numpy as np

from .base import ReadCosts


def sparse(costs: ReadCosts, distinct: np.ndarray) -> np.ndarray:
    """Per page of P_u: its ``distinct`` waiting keys cost less by IN than the page costs to read
    in a sequence (T, ``costs``' unit being a page). Such a page is read for few keys: ToKeep
    leaves it out."""
    return costs.in_key_s * distinct < costs.unit_s


def distinct_keys(requested: np.ndarray, pair_page: np.ndarray, pair_keys: np.ndarray) -> np.ndarray:
    """Per page of P_u (``requested``, sorted), the distinct keys waiting on it, from the inverted
    index II's entries (``pair_page``, ``pair_keys``). An equi-join: a key lies on one page, so a
    run of pages waits for the sum of its pages' counts."""
    order = np.lexsort((pair_keys, pair_page))
    pages, keys = pair_page[order], pair_keys[order]
    new = np.ones(len(pages), bool)
    new[1:] = (pages[1:] != pages[:-1]) | (keys[1:] != keys[:-1])
    return np.bincount(np.searchsorted(requested, pages[new]), minlength=len(requested))


def split_at_keep(costs: ReadCosts, plan: list[tuple[int, int]], distinct: np.ndarray, keep: np.ndarray,
                  requested: np.ndarray) -> list[tuple[int, int]]:
    """The plan with each sequence that holds pages of ToKeep (``keep``, per page of
    ``requested``) cut around them, when reading those pages on their own (adjacent ones
    together) and the rest by one IN query of their ``distinct`` waiting keys costs less than the
    sequence: a page kept in CR must be read whole, its neighbours need only their waiting keys
    (on the random shape a few hundred pages of ToKeep, spread over R, made every sequence a
    range read - 30k pages a phase). Each piece of the other pages starts and ends on a page of
    P_u; :func:`in_spans` then decides how to read it."""
    out: list[tuple[int, int]] = []
    for first, count in plan:
        lo, hi = np.searchsorted(requested, [first, first + count])
        pages, kept = requested[lo:hi], keep[lo:hi]
        runs = np.split(pages[kept], np.flatnonzero(np.diff(pages[kept]) > 1) + 1) if kept.any() else []
        cut_s = costs.in_s(int(distinct[lo:hi][~kept].sum())) + sum(costs.range_s(len(run)) for run in runs)
        if not runs or cut_s >= costs.range_s(count):
            out.append((first, count))
            continue
        start = first
        for run in [*runs, np.array([first + count])]:  # the end closes the last piece
            between = pages[(pages >= start) & (pages < run[0]) & ~kept]
            if len(between):
                out.append((int(between[0]), int(between[-1] - between[0] + 1)))
            if run[0] < first + count:
                out.append((int(run[0]), len(run)))
            start = int(run[-1]) + 1
    return out


def in_spans(costs: ReadCosts, plan: list[tuple[int, int]], distinct: np.ndarray, keep: np.ndarray,
             requested: np.ndarray, max_keys: int) -> tuple[list[tuple[int, int]], set[int]]:
    """The plan with each run of sequences that hold no page of ToKeep and are each cheaper by an
    IN query of their distinct waiting keys than by their range query merged into one span, read
    by one IN query of at most ``max_keys`` keys (what the read buffer holds rows for): a short
    stream spread over every page then costs a few queries, not one per sequence. A span may
    cover pages nobody requested, whose rows the IN query does not read. Returns the plan and the
    positions in it of the spans read by IN."""
    edges = np.array([[f, f + c] for f, c in plan], np.int64).reshape(-1, 2)  # each sequence's [first, end)
    at = np.searchsorted(requested, edges)  # its pages of P_u: requested[lo:hi]
    keep_before = np.concatenate([[0], np.cumsum(keep)])
    keys_before = np.concatenate([[0], np.cumsum(distinct)])
    merged, by_in, run = [], set(), None  # run: [first page, end page, keys]
    for (first, count), (lo, hi) in zip(plan, at):
        keys = int(keys_before[hi] - keys_before[lo])
        cheaper_by_in = keep_before[hi] == keep_before[lo] and costs.in_s(keys) < costs.range_s(count)
        if cheaper_by_in and run is not None and run[2] + keys <= max_keys:
            run[1], run[2] = first + count, run[2] + keys
            continue
        if run is not None:
            by_in.add(len(merged))
            merged.append((run[0], run[1] - run[0]))
            run = None
        if cheaper_by_in:
            run = [first, first + count, keys]
        else:
            merged.append((first, count))
    if run is not None:
        by_in.add(len(merged))
        merged.append((run[0], run[1] - run[0]))
    return merged, by_in
