"""HYBRIDJOIN and its -L and -PQ variants.

HYBRIDJOIN: M. A. Naeem, G. Dobbie, G. Weber, "HYBRIDJOIN for near-real-time data warehousing",
sec. 4 (data structures 4.1, algorithm Fig. 5, memory eq. 1). Each iteration loads the w
stream tuples that fit the free slots of H_S into H_S and Q, reads the oldest join key of Q,
loads the partition of R holding it through the index, and joins it with *every* tuple in H_S.

Here a partition is a page of the page map (:mod:`..stores.base`): ``page_rows`` consecutive
distinct keys, read with one index range query. Since the page covers a whole key range, every
tuple of H_S in that range completes when the page is joined - matched, or ``not_in_master`` -
so a key absent from R leaves on its first load instead of stalling the queue (the paper does
not say what happens then). A key outside R's key range leaves on entry, without I/O.

The papers assume H_S is full, so that a page load serves many tuples. A short stream (or the
tail of one) leaves few distinct keys waiting on a page; then fetching just those keys with one
``IN (...)`` query costs less than the page (issue 12). For each page due, the access path is
chosen from the calibrated costs: the range load costs ``S + T * rows of the page``, the probe
``S_in + c_in * distinct waiting keys`` (:meth:`..stores.base.MasterStore.calibrate_in`); both
complete the same tuples, so the choice changes the I/O, never the result. The keys of other
sparse pages ride along in the same IN query (nearest pages first, up to :data:`~.base.RIDER_KEYS`
keys whose rows fit the disk buffer): one query and one step serve many pages. Once the stream
has ended and every tuple is in H_S, every sparse page rides: a short stream spread over all
pages costs a few queries instead of one per page. While the stream goes on, a page rides only
if its tuples were fewer than ``rider_repeats`` (default :data:`RIDER_REPEATS`) per distinct
key at its last load: served early, its keys are read about once per tuple either way. A page
whose keys repeat waits for its turn, when one read of a key serves every tuple that gathered
on it (the papers' amortisation, across micro-batches too). Measured in the core engine on a backlog (R = 2M rows,
MariaDB, 50 MiB, Zipf 1): the noperm stream, whose sparse pages hold 1.0-1.2 tuples per key,
went from 259k to 382k tuples/s; the random shape (1.2-3.5 per key, a hot key on most pages)
stayed within the noise (0.93-1.02x in four alternating pairs); every sparse page riding
took it to 0.6x.

Read-ahead (``read_ahead``, on by default; an engineering step the papers leave out): a load
waits mostly for the database, which runs on the other core. So each step chooses and pops its
page as Fig. 5 says (after admitting), hands the load to another session on its own thread
(:class:`..stores.reader.Reader`), and joins the oldest load under way once ``read_ahead`` loads
are under way after it: the join's work and the database's overlap, and every page is still
chosen from H_S as the paper has it at that point. A page's tuples leave ``read_ahead`` steps
later; what a step loads is the same. With ``read_ahead`` = 2 the database serves two loads at
once, on two sessions. Each load's tuples in flight (at most :attr:`_ahead_tuples`, a larger
page is read at once) and its rows have their own share of M (:attr:`_ahead_bytes`, at most
:data:`.hybridjoin_plan.READ_AHEAD_SHARE` of it: fewer loads under way where M holds fewer, or no read-ahead).
With a change log every run reads R in a snapshot on the store's own session, so there is no
read-ahead and its share goes to H_S.

HYBRIDJOIN-L and HYBRIDJOIN-PQ: M. A. Naeem, G. Weber, C. Lutteroth, "A Priority Queue of
Frequent Pages..." (pq-frequent-pages): sec. 3.1 (early lookup element at about 30% of the
queue) and sec. 4 (priority queue of frequent pages, pageThreshold, counter ptc, gliding
average with decay d, removal of pages that stop being frequent).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import BudgetError
from ..keys import distinct_keys
from ..stores.base import MasterPage
from .base import Counters, JoinOutput, Param, ReadCosts, StreamBuffer, when_counted
from .hybridjoin_plan import min_hybridjoin, plan_hybridjoin
from .plan import PageStats, Plan, RStats
from .stream_table import PagedJoin, StreamTable

RIDER_REPEATS = 1.5  # tuples per distinct key at a page's last load below which it rides while the stream goes on
READ_AHEAD_LOADS = 2  # page loads under way at once by default (read_ahead)


@dataclass
class PageRequest:
    """The tuples popped for one load (a page, or an IN query with its riders) and how to read
    their rows of R from a store; ``future`` once a :class:`..stores.reader.Reader` reads it."""

    row_ids: np.ndarray
    keys: np.ndarray
    read: Callable[[object], MasterPage]
    future: Future | None = None


@dataclass
class HybridJoinCounters(Counters):
    """The family's loads of other kinds than the oldest tuple's page: IN queries for sparse
    pages and the pages riding along in them, -L's loads for a starving tuple, -PQ's from its
    queue (each reported from its first)."""

    in_loads: int = when_counted()
    rider_pages: int = when_counted()
    starvation_loads: int = when_counted()
    pq_loads: int = when_counted()


class HybridJoin(PagedJoin):
    """HYBRIDJOIN (Fig. 5): index-based loads driven by the oldest tuple of Q."""

    counters_type = HybridJoinCounters
    name = "hybridjoin"
    cost_model = "hybridjoin"  # -L and -PQ inherit it: they read the same pages in another order
    auto_candidate = True
    paper = "HYBRIDJOIN (Naeem, Dobbie, Weber), sec. 4, Fig. 5, eq. 1"
    params = {
        "page_rows": Param(int, 0, "rows of R per disk partition (d); 0 = 4*S/T from the measured costs, "
                                     "within what an eighth of M holds", 0),
        "read_ahead": Param(int, READ_AHEAD_LOADS, "page loads under way at once, each on a session of its own, "
                            "while the pages before are joined; 0: off", 0),
        "rider_repeats": Param(float, RIDER_REPEATS, "a sparse page rides along in another page's IN query while the "
                               "stream goes on if its last load had fewer tuples per distinct key; 0: only once the stream has ended", 0.0),
    }

    def __init__(self, store, memory, **kwargs):
        super().__init__(store, memory, **kwargs)
        sizes = self.plan_used.sizes
        self._read_costs = ReadCosts.of(store)  # T per row (measured for the plan: the store keeps them)
        self.page_map = store.page_map(sizes["page_rows"])
        self._disk_buffer_bytes = sizes["disk_buffer_bytes"]
        self._under_way: deque[PageRequest] = deque()  # loads handed to the reader, oldest first
        self._repeats = np.ones(self.page_map.n_pages, np.float32)  # tuples per distinct key at each page's last load
        self._loads, self._ahead_tuples, self._ahead_bytes = sizes["loads"], sizes["ahead_tuples"], sizes["read_ahead_bytes"]
        if self._loads:
            store.reader(self._loads)  # a session for each load under way, opened now
        self.table = StreamTable(sizes["stream_table_capacity_tuples"], self.page_map.n_pages, store.key_type.dtype)
        self._admit_tuples = sizes["admit_tuples"]

    # -- the plan: eq. 1's split of M from R's statistics (:mod:`.hybridjoin_plan`) ------------------
    @classmethod
    def statistics(cls, store, settings: dict) -> RStats:
        """S and T of a range and an IN query, K, whether R is read ahead on other sessions (asked
        only where ``read_ahead`` wants it: it opens one), and the page map of ``page_rows`` -
        or, for pages sized from the budget, v_R and the page sizes kept beside R (the map a
        budget chooses is read by :class:`.plan.Planner` when a plan asks for it)."""
        page_rows = settings["page_rows"]
        page_map = store.page_map(page_rows) if page_rows else None
        return RStats(
            store.key_type.itemsize, store.result_bytes(page_map, 0), store.max_rows_per_key,
            None if page_rows else store.row_bytes(), () if page_map is None else (PageStats.of(store, page_map),),
            store.calibrate(), store.calibrate_in(), () if page_rows else tuple(store.kept_page_rows()),
            bool(settings["read_ahead"]) and cls._can_read_ahead(store, 1),
        )

    @classmethod
    def plan(cls, stats: RStats, memory: int, settings: dict) -> Plan:
        """Eq. 1, M = disk buffer + page map + H_S (+ the structures beside it): :func:`.hybridjoin_plan.plan_hybridjoin`."""
        return plan_hybridjoin(cls, stats, memory, settings)

    @classmethod
    def min_memory(cls, stats: RStats, settings: dict) -> int:
        """Eq. 1 at its smallest (:func:`.hybridjoin_plan.min_hybridjoin`)."""
        return min_hybridjoin(cls, stats, settings)

    @classmethod
    def pinned(cls, stats: RStats, memory: int, settings: dict) -> dict:
        """``settings`` with the page size the whole budget ``memory`` takes, where pages are
        sized from the budget (``page_rows`` 0): a front stage's search for the smallest budget
        would otherwise size pages from each budget it tries and read a page map of each size
        (64, 256 and 1,024 rows, 4.2 s at R = 2M rows, and three maps kept beside R) on the
        first join of a table, where the join reads the one map. Too small a budget to plan:
        left to choose."""
        if settings["page_rows"]:
            return settings
        try:
            return {**settings, "page_rows": cls.plan(stats, memory, settings).sizes["page_rows"]}
        except BudgetError:
            return settings

    @classmethod
    def reserved_bytes(cls, n_pages: int) -> int:
        """Bytes of the structures beside H_S over ``n_pages`` pages, taken from the budget before
        H_S is sized: the repeats per page (a variant adds its own)."""
        return n_pages * np.dtype(np.float32).itemsize

    @staticmethod
    def _can_read_ahead(store, loads: int) -> bool:
        """Whether ``store`` reads on ``loads`` other sessions (:meth:`..stores.base.MasterStore.reader`):
        not with a change log, whose every run reads R in a snapshot on the store's own session."""
        return hasattr(store, "reader") and not store.has_change_log() and store.reader(loads) is not None

    # -- one iteration ---------------------------------------------------------------------
    def _step(self, buffer: StreamBuffer) -> JoinOutput:
        outputs = [self._admit(buffer)]
        request = None
        if self.table.size:
            request = self._request(self._choose_page(), final=buffer.exhausted)
            self.counters.loads += 1
            self._submit(request)
        if request is not None and request.future is not None:  # joined once ``read_ahead`` loads are under way after it
            self._under_way.append(request)
            while len(self._under_way) > self._loads:
                outputs.append(self._finish(self._under_way.popleft()))
        else:
            if self._under_way:  # the oldest load under way: joined now
                outputs.append(self._finish(self._under_way.popleft()))
            if request is not None:
                outputs.append(self._finish(request))
        return JoinOutput.concat(outputs, self.schema)

    def _request(self, page: int, final: bool) -> PageRequest:
        """Pop the tuples waiting on ``page`` and say how to read their rows: a range load, or
        an IN query of their distinct keys when that costs less (the page is sparse)."""
        row_ids, keys = self.table.pop_page(page)
        distinct = distinct_keys(keys)
        self._repeats[page] = len(keys) / len(distinct)
        if self._read_costs.in_s(len(distinct)) < self._range_cost(page):
            request = self._probe_in(page, row_ids, keys, distinct, final)
        else:
            page_map = self.page_map
            request = PageRequest(row_ids, keys, lambda store: store.load_pages(page_map, page))
            self._loaded(page, len(row_ids))
        return request

    def _submit(self, request: PageRequest) -> None:
        """Hand ``request`` to the store's reader (its own session and thread) when its tuples fit
        the share of M kept for those in flight (none with read-ahead off) and the store reads
        ahead now (not in a snapshot); otherwise it is read on the store's session when joined,
        in this step."""
        if len(request.row_ids) > self._ahead_tuples:
            return
        reader = self.store.reader(self._loads)
        if reader is not None:
            request.future = reader.submit(request.read)

    def _finish(self, request: PageRequest) -> JoinOutput:
        """Join ``request``'s tuples with their rows (all of them complete)."""
        if request.future is None:
            page = request.read(self.store)
        else:
            page = self.store.read_result(request.future)
            if self.store.in_snapshot:  # read before a snapshot began (a change log made since): read again inside it
                page = request.read(self.store)
        return self._join(page, request.row_ids, request.keys)

    @property
    def pending(self) -> int:
        return self.table.size + self.in_flight

    @property
    def in_flight(self) -> int:
        return sum(len(request.row_ids) for request in self._under_way)

    @property
    def capacity_tuples(self) -> int:
        """H_S and the tuples in flight, which have their own share of M: a popped page's
        slots are filled again by the next step's admission (Fig. 5 line 3), as in the paper."""
        return self.table.capacity + self._loads * self._ahead_tuples

    @property
    def capacity_with_waiting(self) -> int:
        return self.capacity_tuples

    def structure_bytes(self) -> int:
        return super().structure_bytes() + self._ahead_bytes + self._reserved_bytes()

    @classmethod
    def planned_split(cls, plan: Plan) -> dict:
        sizes = plan.sizes
        return {**super().planned_split(plan), "read_ahead_bytes": sizes["read_ahead_bytes"],
                "page_repeats_bytes": HybridJoin.reserved_bytes(sizes["pages"]), "rider_keys": sizes["rider_keys"],
                "admit_tuples": sizes["admit_tuples"]}

    def _range_cost(self, page) -> float:
        """S + T * rows: a range load of ``page`` (pages: their rows each)."""
        rows = self.page_map.page_rows if self.page_map.sizes is None else self.page_map.sizes[page]
        return self._read_costs.range_s(rows)

    def _probe_in(self, page: int, row_ids: np.ndarray, keys: np.ndarray, distinct: np.ndarray,
                  final: bool) -> PageRequest:
        """The tuples waiting on ``page`` by one IN query of their ``distinct`` keys, the page being
        sparse (issue 12), with the tuples of the pages that ride along (:meth:`_riders`; every
        sparse page when ``final``: the stream has ended and every tuple is in H_S, or a front
        stage's disk stage ends with its stream). Each page served records its tuples per
        distinct key, which decides whether it rides while the stream goes on."""
        pages, all_ids, all_keys, counts, wanted = [page], row_ids, keys, [len(row_ids)], distinct
        rider_pages, rider_ids, rider_keys, rider_counts = self._riders(page, len(distinct), final)
        if len(rider_pages):
            pages, counts = [page, *rider_pages.tolist()], [len(row_ids), *rider_counts.tolist()]
            all_ids, all_keys = np.concatenate([row_ids, rider_ids]), np.concatenate([keys, rider_keys])
            wanted = distinct_keys(all_keys)
            rider_distinct = np.bincount(self.page_map.page_of(wanted), minlength=self.page_map.n_pages)[rider_pages]
            self._repeats[rider_pages] = rider_counts / rider_distinct
        self.counters.in_loads += 1
        self.counters.rider_pages += len(pages) - 1
        for served, count in zip(pages, counts):
            self._loaded(served, count, rider=served != page)
        return PageRequest(all_ids, all_keys, lambda store: store.lookup_many(wanted))

    def _riders(self, page: int, keys_taken: int, final: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Pop the sparse pages that ride along with ``page``'s IN query (``keys_taken`` keys so
        far), nearest first while their tuples fit: ``(pages, row_ids, keys, counts)`` as
        :meth:`.stream_table.StreamTable.pop_pages` gives them. Unless ``final``, only pages
        whose last load had fewer than ``rider_repeats`` tuples per distinct key (a page never
        loaded counts as one per key) - up to :data:`~.base.RIDER_KEYS` keys whose rows fit the
        disk buffer (sized for them within :data:`.hybridjoin_plan.RIDER_BUFFER_SHARE` of M)."""
        waiting = np.flatnonzero(self.table.page_count)
        counts = self.table.page_count[waiting]  # tuples: at least the page's distinct keys
        sparse = self._read_costs.in_key_s * counts < self._range_cost(waiting)
        if not final:  # the stream goes on: only pages whose keys did not repeat at their last load
            sparse &= self._repeats[waiting] < self.settings["rider_repeats"]
        waiting, counts = waiting[sparse], counts[sparse]
        order = np.argsort(np.abs(waiting - page), kind="stable")
        room = self._rider_room() - keys_taken
        fitting = int(np.searchsorted(np.cumsum(counts[order]), room, side="right"))  # the nearest pages while they fit
        riders = waiting[order[:fitting]]
        return (riders, *self.table.pop_pages(riders))

    def _rider_room(self) -> int:
        """Keys one IN query with riders takes at most (the plan's ``rider_keys``)."""
        return self.plan_used.sizes["rider_keys"]

    def _admit(self, buffer: StreamBuffer) -> JoinOutput:
        """Fig. 5 lines 3-5: fill the free slots of H_S (w of them) with arrived tuples - but
        a backlog (more tuples arrived than slots are free, the stream going on) waits until
        :data:`.hybridjoin_plan.ADMIT_SHARE` of h_S is free, and fills it at once. A step frees the slots of
        one page's tuples, so on the random shape (tuples of every page in every admission) an
        admission each step filed each page's tuples in groups of 1-2, and a page's load walked
        hundreds of them (issue 12); admitted together, a page gathers them in few groups. H_S
        holds at most that share less meanwhile."""
        free = self.table.free
        if not (free and buffer.available):
            return JoinOutput.empty(self.schema)
        if free < self._admit_tuples and buffer.available >= free and not buffer.exhausted:
            return JoinOutput.empty(self.schema)
        return self._admit_chunk(self._take(buffer, free))

    def _reserved_bytes(self) -> int:
        return self.reserved_bytes(self.page_map.n_pages)

    def _page_of(self, key) -> int:
        return int(self.page_map.page_of(np.asarray([key], dtype=self.store.key_type.dtype))[0])

    def _choose_page(self) -> int:
        """Fig. 5 lines 7-8: the page of the oldest join key in Q."""
        return self._page_of(self.table.oldest_key())

    def _loaded(self, page: int, matched: int, rider: bool = False) -> None:
        """Hook for the variants: ``page`` was loaded and completed ``matched`` tuples (``rider``:
        it rode along in the IN query of another page's load)."""


class HybridJoinL(HybridJoin):
    """HYBRIDJOIN-L: the lookup element sits early in Q (pq paper sec. 3.1).

    The paper puts the optimal lookup element at about 30% of the queue for a skew of 1,
    moving towards the young end as skew grows; ``lookup_position`` is that fraction counted
    from the young end (1.0 = the oldest, plain HYBRIDJOIN). The paper leaves starvation
    open: tuples older than the lookup element are only served when a younger tuple shares
    their page. Here the oldest tuple is used instead whenever it has waited while
    ``starvation_turnovers`` H_S (h_S tuples each) were admitted after it, which bounds every
    tuple's stay like MESHJOIN's cycle does.

    With the default of one H_S the guard decides nearly every load once the queue is in its
    steady state: HYBRIDJOIN's own oldest tuple is about 2 h_S admissions old at its load (at
    skew 0: each page's count grows from 0 over a cycle), so under -L the oldest passes h_S
    before the lookup element gets a turn. Measured on a backlog (SQLite R of 20,000 keys in
    pages of 100, h_S 5,300, range loads only, no riders): every one of 14,575 loads at skew
    0 and of 15,507 at skew 1 was the guard's, so -L loads as HYBRIDJOIN does (and its cost
    model is HYBRIDJOIN's). A looser guard lets the lookup element act; tuples a load against
    HYBRIDJOIN's:

    ==========================  ==========  ==========  ==========  ==========
    starvation_turnovers        1           2           3           5
    noperm, skew 1              1.00        1.22        1.61        1.86
    noperm, skew 0 and 0.5      1.00        0.96-0.99   0.75-0.85   0.68-0.76
    random, skew 0-1            1.00        0.96-1.03   0.75-1.01   0.67-0.88
    ==========================  ==========  ==========  ==========  ==========

    So the lookup element pays only where the hot keys cluster on few pages; elsewhere it
    loads pages that were loaded recently, with fewer tuples. HYBRIDJOIN-PQ, built on -L, does
    best with the default (1.37-1.40x HYBRIDJOIN at noperm skew 1 whatever the guard, and
    0.65-0.96x at skew 0 as the guard loosens).
    """

    name = "hybridjoin-l"
    auto_candidate = False  # the cost model has no model of its own for it (it predicts its base's rate)
    paper = "HYBRIDJOIN-L (pq-frequent-pages paper, sec. 3.1)"
    params = {
        **HybridJoin.params,
        "lookup_position": Param(float, 0.3, "lookup element position in Q, fraction from its young end", 0.0),
        "starvation_turnovers": Param(float, 1.0, "the oldest tuple is served next once this many H_S were admitted "
                                                  "after it (0: always, as HYBRIDJOIN)", 0.0),
    }

    def _choose_page(self) -> int:
        if self.table.oldest_age() >= self.settings["starvation_turnovers"] * self.table.capacity:
            self.counters.starvation_loads += 1
            return self._page_of(self.table.oldest_key())
        return self._page_of(self.table.key_at(min(1.0, self.settings["lookup_position"])))


class HybridJoinPQ(HybridJoinL):
    """HYBRIDJOIN-PQ: a priority queue of frequent pages (pq paper sec. 4).

    A page's stream probability ``frequency`` is observed when it is loaded: matches divided by
    the tuples admitted since its last load (the queue length on its first load), smoothed
    with the gliding average ``frequency = frequency*d + observed*(1-d)``. A page is frequent
    when it collects ``page_threshold`` matches within one turnover of H_S
    (page_threshold / frequency <= h_S); it is then due again when the admission counter ptc
    reaches ``ptc + page_threshold / frequency``. A due page is loaded before the lookup
    element of HYBRIDJOIN-L, on which the paper builds the PQ (sec. 6); with no page due, -L
    chooses. A due page is read only once ``page_threshold`` tuples wait on it, which H_S knows
    (the paper, without a page map in memory, could only expect them): otherwise its frequency
    is corrected by the tuples it gathered, and it is due again when the rest is expected or
    leaves the queue once it is no longer frequent. A frequency that a few lucky loads had
    overestimated made pages due early: at skew 0 PQ loads served ~400 tuples against a
    threshold of ~1,040 (MariaDB, R = 2M rows, 50 MiB), -PQ at 0.5x -L. ``page_threshold`` 0
    means: the running mean of matches per ordinary (lookup-element) load, so a PQ load is
    never less productive than an ordinary one.

    ``threshold_rule=sqrt`` (beyond the paper) gives each page its own threshold,
    kappa sqrt(frequency) with kappa = 2 h_S / sum_j sqrt(frequency_j): loading page j with
    n_j ~ sqrt(q_j) tuples serves the most tuples a load when the pages' waiting tuples fill
    h_S (:func:`..costmodel.page_choice_bound`), where one threshold for all loads the hottest
    pages late and leaves the others little room. Tuples a range load, SQLite R of 20,000 keys
    in pages of 100, h_S 5,300, no riders: at noperm skew 1, 97.9 against the mean rule's 71.5
    and HYBRIDJOIN's 51.0 (the bound: 136); at skew 0-0.5 and on the random shape 1.00-1.09x
    the mean rule. With riders (IN queries of sparse pages) 0.99-1.12x the mean rule, 1.12x at
    skew 1 on both shapes. At the standard size (MariaDB, R = 2M rows, 50 MiB; medians of three
    repeats, the rules alternating) it is 1.25x the mean rule at noperm skew 1 and 1.05x on the
    random shape; at skew 0.75 0.41-1.32x in five runs (median 1.11x; the 0.41x run made a tenth
    of the queries, cause not found) and, behind CACHEJOIN's H_R, where the misses' pages are
    flat, 0.87-1.10x: not the default.
    """

    name = "hybridjoin-pq"
    auto_candidate = False  # the cost model has no model of its own for it (it predicts its base's rate)
    paper = "HYBRIDJOIN-PQ (pq-frequent-pages paper, sec. 4)"
    params = {
        **HybridJoinL.params,
        "page_threshold": Param(float, 0.0, "matches a frequent page waits for; 0 = mean matches per ordinary load", 0.0),
        "decay": Param(float, 0.9, "gliding-average decay d of page frequency (1 = keep the first estimate)", 0.0),
        "threshold_rule": Param(str, "mean", "mean: one threshold for every page, as page_threshold says; sqrt: a "
                                             "page's grows with the root of its frequency", choices=("mean", "sqrt")),
    }

    def __init__(self, store, memory, **kwargs):
        super().__init__(store, memory, **kwargs)
        n_pages = self.page_map.n_pages
        self._frequency = np.zeros(n_pages, dtype=np.float64)
        self._root_sum = 0.0  # sum over pages of sqrt(frequency): the 'sqrt' rule's scale
        self._last_load = np.full(n_pages, -1, dtype=np.int64)  # ptc at the page's last load
        self._due = np.full(n_pages, np.inf)
        self._heap: list[tuple[float, int]] = []
        self._ordinary_loads = 0
        self._ordinary_matches = 0
        self._from_queue = False
        self._queue_size_before = 0

    HEAP_ENTRY_BYTES = 16  # (due, page) as the paper's 16-byte PQ node (Table 1)

    @classmethod
    def _page_queue_bytes(cls, n_pages: int) -> int:
        # frequency, last load and due per page, and a heap of at most 2 entries per page
        return n_pages * (3 * 8 + 2 * cls.HEAP_ENTRY_BYTES)

    @classmethod
    def reserved_bytes(cls, n_pages: int) -> int:
        return super().reserved_bytes(n_pages) + cls._page_queue_bytes(n_pages)

    @classmethod
    def planned_split(cls, plan: Plan) -> dict:
        return {**super().planned_split(plan), "page_queue_bytes": cls._page_queue_bytes(plan.sizes["pages"])}

    @property
    def threshold(self) -> float:
        if self.settings["page_threshold"]:
            return self.settings["page_threshold"]
        return max(2.0, self._ordinary_matches / max(self._ordinary_loads, 1))

    def _choose_page(self) -> int:
        self._queue_size_before = self.table.size
        ptc = self.table.admitted
        while self._heap and self._heap[0][0] <= ptc:
            due, page = heapq.heappop(self._heap)
            if due != self._due[page]:
                continue  # stale entry: the page was rescheduled or removed
            self._due[page] = np.inf
            if self.table.page_count[page] >= self._threshold_of(page):
                self._from_queue = True
                self.counters.pq_loads += 1
                return page
            self._recount(page, ptc)
        self._from_queue = False
        return super()._choose_page()

    def _loaded(self, page: int, matched: int, rider: bool = False) -> None:
        if not self._from_queue and not rider:  # a rider's few tuples are no ordinary load's
            self._ordinary_loads += 1
            self._ordinary_matches += matched
        self._observe(page, matched)

    def _recount(self, page: int, ptc: int) -> None:
        """``page`` is due but fewer than the threshold of tuples wait on it (H_S knows each
        page's count, which the paper's queue could not): no I/O; the count it gathered since its
        last load corrects its frequency (sampled at a time the schedule set, not at a count's
        whim, unlike a rider's load), and it is due again when the rest is expected, or leaves the
        queue once it is no longer frequent."""
        waiting, since = int(self.table.page_count[page]), ptc - self._last_load[page]
        self._glide(page, waiting / max(since, 1))
        self._schedule(page, ptc, since, self._threshold_of(page) - waiting)

    def _schedule(self, page: int, ptc: int, since: int, wanted: float) -> None:
        """Queue ``page`` due when ``wanted`` more tuples are expected on it, if it gathers the
        threshold within one turnover of H_S (``since`` admissions have passed already)."""
        frequency = self._frequency[page]
        wait = wanted / frequency if frequency > 0 else math.inf
        if since + wait <= self.table.capacity:
            self._due[page] = ptc + wait
            heapq.heappush(self._heap, (self._due[page], page))
            if len(self._heap) > 2 * len(self._due):  # drop stale entries: the heap stays in its reserve
                self._heap = [(due, p) for due, p in self._heap if due == self._due[p]]
                heapq.heapify(self._heap)
        else:
            self._due[page] = np.inf

    def _glide(self, page: int, observed: float) -> None:
        """The page's frequency, a gliding average with decay d, moves towards ``observed``."""
        d = self.settings["decay"]
        self._set_frequency(page, self._frequency[page] * d + observed * (1 - d))

    def _set_frequency(self, page: int, frequency: float) -> None:
        self._root_sum += math.sqrt(frequency) - math.sqrt(self._frequency[page])
        self._frequency[page] = frequency

    def _threshold_of(self, page: int) -> float:
        """The tuples ``page`` waits for before a PQ load: :attr:`threshold`, or under the 'sqrt'
        rule (with ``page_threshold`` 0) kappa sqrt(frequency) with kappa = 2 h_S / sum sqrt(f):
        the n_j ~ sqrt(q_j) that serves the most tuples a load when every page's tuples fill
        h_S (:func:`..costmodel.page_choice_bound`), at least 2."""
        if self.settings["page_threshold"] or self.settings["threshold_rule"] == "mean" or self._root_sum <= 0:
            return self.threshold
        kappa = 2.0 * self.table.capacity / self._root_sum
        return max(2.0, kappa * math.sqrt(self._frequency[page]))

    def _observe(self, page: int, matched: int) -> None:
        ptc = self.table.admitted
        first = self._last_load[page] < 0
        window = self._queue_size_before if first else ptc - self._last_load[page]
        observed = matched / max(window, 1)
        if first:
            self._set_frequency(page, observed)
        else:
            self._glide(page, observed)
        self._last_load[page] = ptc
        self._schedule(page, ptc, 0, self._threshold_of(page))
