"""What the join algorithms ask of R, declared: the store protocol.

:class:`PagedRelation` is what sizing, paging and probing need (HYBRIDJOIN Fig. 5, MESHJOIN's
cyclic scan, SSIJ's read plan and the front-stage's lookups); both stores of this package offer
it - the SQL stores (:class:`.base.MasterStore`) and the in-memory R calibration times the CPU
costs over (:class:`.memory.MemoryStore`). :class:`JoinStore` adds what a join over a live table
needs besides: index-range loads and IN lookups, the change log and snapshots (SSIJ sec. IV-E).
Only the SQL stores are one.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

import numpy as np
import pyarrow as pa

from ..keys import KeyType
from .base import IOCounters, MasterPage
from .pagemaps import PageMap


@runtime_checkable
class PagedRelation(Protocol):
    """R as pages of consecutive keys, with its calibrated costs S and T (and the IN-lookup costs)."""

    key_type: KeyType
    schema: pa.Schema
    counters: IOCounters
    key_unique: bool

    @property
    def max_rows_per_key(self) -> int: ...

    @property
    def n_rows(self) -> int: ...

    def page_map(self, page_rows: int = ...) -> PageMap: ...

    def load_pages(self, page_map: PageMap, first: int, count: int = 1) -> MasterPage: ...

    def lookup(self, key) -> MasterPage: ...

    def calibrate(self, rows: int = ..., repeat: int = ...) -> tuple[float, float]: ...

    def calibrate_in(self, keys: int = ..., repeat: int = ...) -> tuple[float, float]: ...

    def assume_costs(self, costs: tuple[float, float] | None = ...,
                     in_costs: tuple[float, float] | None = ...) -> "PagedRelation": ...

    def kept_page_rows(self) -> list[int]: ...

    def row_bytes(self, page_map: PageMap) -> float: ...

    def result_bytes(self, page_map: PageMap, rows: int) -> int: ...

    def close(self) -> None: ...


@runtime_checkable
class JoinStore(PagedRelation, Protocol):
    """A live master table: index-range loads, IN lookups, versions of R and snapshots."""

    def load_range(self, start_key, limit: int) -> MasterPage: ...

    def lookup_many(self, keys: np.ndarray) -> MasterPage: ...

    def has_change_log(self) -> bool: ...

    def version(self) -> int: ...

    def snapshot(self) -> AbstractContextManager[np.ndarray]: ...

    def reading_at(self, version: int) -> AbstractContextManager: ...
