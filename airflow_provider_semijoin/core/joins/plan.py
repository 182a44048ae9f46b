"""Plans before structures (DESIGN.md): what sizing reads of R, and the split of M it computes.

Every algorithm sizes itself in two parts. :meth:`~.base.JoinAlgorithm.statistics`
reads R's statistics from the store once (:class:`RStats`: the I/O); :meth:`~.base.JoinAlgorithm.plan`
divides a budget M between the algorithm's structures from them alone (:class:`Plan`: no I/O, so a
search over budgets - the share that leaves room for a Spark step's carried rows,
:func:`..session.planned_for_rows` - costs arithmetic, not constructions; the smallest budget
accepted, :meth:`~.base.JoinAlgorithm.min_memory`, is in closed form from the plan's structure
sizes, :func:`smallest_budget`). The algorithm is then built once from its plan. A budget too small for the
smallest structures is a :class:`..errors.BudgetError`.

:class:`Planner` is the one entry for the operator's display, ``auto``'s choice and the Spark runner:
R's statistics for one algorithm and its parameters, plans at any budget, and the build of the
chosen one.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from ..errors import BudgetError


@dataclass(frozen=True)
class PageStats:
    """R's page map at one page size (:mod:`..stores.base`), as sizing reads it: d's rows per page
    (``page_rows``), the pages, the distinct keys and rows, the map's own bytes, the largest page's
    rows and v_R sampled from page 0 (``row_bytes``)."""

    page_rows: int
    n_pages: int
    n_keys: int
    n_rows: int
    nbytes: int
    max_page_rows: int
    row_bytes: float

    @classmethod
    def of(cls, store, page_map) -> "PageStats":
        return cls(page_map.page_rows, page_map.n_pages, page_map.n_keys, page_map.n_rows, page_map.nbytes,
                   page_map.max_page_rows, store.row_bytes(page_map))


class PagesNeeded(Exception):
    """A plan needs R's page map at ``page_rows`` rows per page, which its statistics lack (the
    page size a budget chooses: HYBRIDJOIN's ``page_rows`` 0): :class:`Planner` reads it and plans again."""

    def __init__(self, page_rows: int):
        super().__init__(page_rows)
        self.page_rows = page_rows


@dataclass(frozen=True)
class RStats:
    """What sizing reads of R: the key's width, the per-column overhead of a loaded result, K
    (the most rows of one key), v_R (bytes of one loaded row, sampled with no page map); for a
    page-based join its page maps (``page_maps``, by :meth:`page`), the calibrated S and T
    (``costs``: seconds per range query and per row read, sec. 3.2 of the HYBRIDJOIN paper) and
    those of an IN query (``in_costs``), the page sizes whose maps are kept beside R and
    whether R can be read ahead on other sessions (``reads_ahead``). Each is read only where an
    algorithm's plan needs it (K is a query over all of R on a key that is not unique)."""

    key_itemsize: int
    result_overhead: int
    max_rows_per_key: int | None = None
    row_bytes: float | None = None
    page_maps: tuple[PageStats, ...] = ()
    costs: tuple[float, float] | None = None
    in_costs: tuple[float, float] | None = None
    kept_page_rows: tuple[int, ...] = ()
    reads_ahead: bool = False
    # the smallest budgets planned on these statistics, by algorithm and settings (:meth:`floor`)
    floors: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, store, page_rows: int | None = None, costs: bool = False, per_key: bool = False) -> "RStats":
        """R's statistics from ``store`` (the I/O of sizing): the page map of ``page_rows`` rows
        per page when given, S and T (``costs``), K and v_R with no page map (``per_key``: a join
        that reads no pages, or caches whole keys)."""
        page_map = None if page_rows is None else store.page_map(page_rows)
        return cls(
            store.key_type.itemsize, store.result_bytes(page_map, 0),  # (v_R is sampled for it; 0 rows: the overhead)
            store.max_rows_per_key if per_key else None, store.row_bytes() if per_key else None,
            () if page_map is None else (PageStats.of(store, page_map),),
            store.calibrate() if costs else None,
        )

    def page(self, page_rows: int) -> PageStats:
        """The page map at ``page_rows`` rows per page; :class:`PagesNeeded` when not read yet."""
        for pages in self.page_maps:
            if pages.page_rows == page_rows:
                return pages
        raise PagesNeeded(page_rows)

    def with_pages(self, store, page_rows: int) -> "RStats":
        """These statistics and R's page map at ``page_rows`` (read from ``store``)."""
        return dataclasses.replace(self, page_maps=(*self.page_maps, PageStats.of(store, store.page_map(page_rows))))

    def floor(self, cls, settings: dict) -> int:
        """``cls.min_memory(self, settings)``, planned once per algorithm and settings: a front
        stage's plan asks for its wrapped algorithm's at every budget it plans (MESHJOIN's is
        O(pages)); the page maps read meanwhile change no floor (R is the same)."""
        key = (cls.name, tuple(sorted(settings.items())))
        if key not in self.floors:
            self.floors[key] = cls.min_memory(self, settings)
        return self.floors[key]

    def result_bytes(self, rows: int, row_bytes: float | None = None) -> int:
        """Bytes a loaded result of ``rows`` rows may take (:meth:`..stores.base.MasterStore.result_bytes`)."""
        return int(math.ceil(rows * (self.row_bytes if row_bytes is None else row_bytes))) + self.result_overhead


@dataclass(frozen=True)
class Plan:
    """The split of a budget of ``memory`` bytes (M) the algorithm ``name`` is built from: the
    most stream tuples it holds (``capacity_tuples``), with those a front stage keeps waiting for
    it (``waiting_tuples``: :attr:`~.base.JoinAlgorithm.capacity_with_waiting`), and ``sizes``,
    its structures' sizes (bytes and counts, named as in its :meth:`~.base.JoinAlgorithm.memory_split`)."""

    name: str
    memory: int
    capacity_tuples: int
    sizes: dict = field(default_factory=dict)
    waiting_tuples: int = 0

    @property
    def capacity_with_waiting(self) -> int:
        return self.capacity_tuples + self.waiting_tuples


MOST_BYTES = 1 << 50  # budgets beyond are no budget (a typo); :func:`smallest_budget` gives up there


def smallest_budget(needed, choice=None, start: int = 1) -> int:
    """The smallest budget m >= ``start`` that holds ``needed(choice(m), m)`` bytes: the bytes of
    the smallest structures an algorithm's plan accepts at m, with what m chooses (``choice``: R's
    page size where the budget sizes it, HYBRIDJOIN's ``page_rows`` 0; None: nothing is chosen).

    For one choice ``needed`` never falls as m grows (a share of m - the rider buffer - grows at
    most as fast as m), so what m lacks no budget below m + what it lacks holds: each try jumps
    by it, and the first that holds is the smallest (a closed form, within a few tries where a
    share of m moves with it). A choice changes at few budgets as they grow (powers of two of the
    page size); where a jump crosses one, the budget it changes at is found by halving and tried
    next - only budgets near the answer are asked for their choice (each may read a page map).
    Raises :class:`..errors.BudgetError` past :data:`MOST_BYTES`."""
    choose = choice or (lambda m: None)
    m = max(int(start), 1)
    chosen = choose(m)
    while m <= MOST_BYTES:
        short = int(needed(chosen, m)) - m
        if short <= 0:
            return m
        jump = m + short
        if choice is None or choose(jump) == chosen:
            m = jump
            continue
        lo, hi = m, jump  # choose(lo) == chosen != choose(hi): hi comes down to the first budget of another choice
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if choose(mid) == chosen else (lo, mid)
        m, chosen = hi, choose(hi)
    raise BudgetError(f"memory: no budget up to {MOST_BYTES} bytes holds the smallest structures")


class Planner:
    """One algorithm of the registry on one store with its parameters: R's statistics read once,
    then :meth:`plan` at any budget and :meth:`build`, the algorithm built once from the plan chosen."""

    def __init__(self, cls, store, params: dict | None = None, **kwargs):
        self.cls, self.store, self.params, self.kwargs = cls, store, dict(params or {}), kwargs
        self.settings = cls.settings_of(self.params)
        self.stats = cls.statistics(store, self.settings)
        self._min_memory: int | None = None

    def plan(self, memory: int) -> Plan:
        """The plan at ``memory`` bytes."""
        return self._reading_pages(lambda stats: self.cls.plan(stats, int(memory), self.settings))

    def min_memory(self) -> int:
        """The smallest budget the algorithm accepts (its :meth:`~.base.JoinAlgorithm.min_memory`), planned once."""
        if self._min_memory is None:
            self._min_memory = self._reading_pages(lambda stats: self.cls.min_memory(stats, self.settings))
        return self._min_memory

    def _reading_pages(self, planning):
        """``planning(stats)``, a page map it needs read once into the statistics (:class:`PagesNeeded`)."""
        while True:
            try:
                return planning(self.stats)
            except PagesNeeded as needed:
                self.stats = self.stats.with_pages(self.store, needed.page_rows)

    def build(self, plan: Plan):
        """The algorithm of ``plan``, built once."""
        return self.cls(self.store, plan.memory, plan=plan, **self.params, **self.kwargs)
