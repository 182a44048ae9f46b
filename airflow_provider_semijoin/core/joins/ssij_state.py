"""SSIJ's tuples and phase state (sec. IV-B): IB and SB as columns (:class:`Tuples`), SB with its
inverted index II (:class:`StreamBufferState`), a running join phase (:class:`JoinPhase`) and the
counters of its phases (:class:`SSIJCounters`). :mod:`.ssij` runs the algorithm over them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .base import CacheProbes, when_counted


# -- the stream tuples: IB, SB, II ----------------------------------------------------------------
@dataclass
class Tuples:
    """Stream tuples as columns (IB in arrival order; SB in the order they entered it)."""

    row_ids: np.ndarray
    keys: np.ndarray
    deadlines: np.ndarray  # inf: none
    due: np.ndarray  # when a join phase must start for the tuple to meet its deadline (sec. IV-F)

    def __len__(self) -> int:
        return len(self.row_ids)

    def take(self, idx) -> "Tuples":
        return Tuples(self.row_ids[idx], self.keys[idx], self.deadlines[idx], self.due[idx])

    @classmethod
    def concat(cls, parts: list["Tuples"]) -> "Tuples":
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("row_ids", "keys", "deadlines", "due")))


@dataclass
class StreamBufferState:
    """SB with its inverted index II: per tuple whether it matched yet and how many of its pages
    are still to be joined; per II entry (``pair_sb``, ``pair_page``) a page it waits for."""

    tuples: list[Tuples] = field(default_factory=list)
    matched: list[np.ndarray] = field(default_factory=list)
    remaining: list[np.ndarray] = field(default_factory=list)
    pair_sb: list[np.ndarray] = field(default_factory=list)
    pair_page: list[np.ndarray] = field(default_factory=list)
    size: int = 0
    pairs: int = 0
    min_due: float = math.inf


@dataclass
class JoinPhase:
    """A running join phase: SB and II (sorted by page) as arrays, the plan and where it is."""

    sb: Tuples
    matched: np.ndarray
    remaining: np.ndarray
    pair_sb: np.ndarray
    pair_page: np.ndarray
    plan: list[tuple[int, int]]
    requested: np.ndarray  # P_u: the pages to read, in position order
    keep: np.ndarray  # per page of P_u: in ToKeep
    recency: np.ndarray  # per page of P_u: its time of use once read (LRU)
    priority: np.ndarray  # per page of P_u: what ranks it (its demand, or its recency for LRU)
    started: float
    open: int
    next: int = 0
    by_in: set[int] = field(default_factory=set)  # entries of the plan read by one IN query (:func:`.ssij_access.in_spans`)


@dataclass
class SSIJCounters(CacheProbes):
    """SSIJ's phases (sec. IV): online phases, join phases (forced ones: a deadline or an update
    could not wait), the sequences a join phase read, the pages it asked for and those read by
    range (``pages_by_in``: by an IN query, ``in_loads`` of them), updates installed and the
    cached pages they invalidated. ``cache_hits``: probed stream tuples whose pages were all in CR."""

    online_phases: int = 0
    join_phases: int = 0
    forced_join_phases: int = 0
    sequences: int = 0
    pages_requested: int = 0
    pages_read: int = 0
    updates_installed: int = 0
    invalidated_pages: int = 0
    in_loads: int = when_counted()
    pages_by_in: int = when_counted()
