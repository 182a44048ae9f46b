"""Cost models of the papers: how to split a memory budget, and what service rate to expect.

Two parts. First, the cache-size model the front-stage sizes H_R with (below). Second, a
service-rate model per algorithm family (:func:`model`; an algorithm names its family in its
``cost_model`` and :func:`..prediction.explain` resolves it) from the papers' equations -
MESHJOIN, HYBRIDJOIN eq. 1-4 (with the IN queries and riders of the engine's loads,
:func:`access_paths`), SSJ eq. 1-10, CMESHJOIN eq. 1-7 - priced with unit costs
(:class:`.unitcosts.ComponentCosts`) measured on the running machine (:mod:`.calibration`), for
the memory split an algorithm actually chose. The module sits below the algorithms (the
front-stage sizes H_R with it) and imports none of them.

Cache front-stage (CMESHJOIN paper sec. 3.2, SSJ paper sec. V-A): for a stream whose keys follow
Zipf's law with exponent ``s`` over R_t keys, caching the h_R most frequent master tuples serves
the fraction

    p_N(h_R) = H_s(h_R) / H_s(R_t)                                            (eq. 1)

of the stream from memory, with H_s(k) = sum_{x=1..k} 1/x^s. The disk-probing phase gets the
rest of the memory, and its service rate grows about linearly with that memory (eq. 3), so

    mu(h_R) ~ (M - c_R * h_R) / (1 - p_N(h_R))                                (eq. 4)

with c_R the bytes one cached tuple costs (the tuple, its key, frequency and index entries:
``8 + v_R`` in the paper). :func:`best_cache_size` maximises eq. 4 over h_R, which is what the
derivatives of eq. 5-7 locate analytically.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError
from .joins.stream_table import CHUNKS_PER, MAX_CHUNK, MIN_CHUNKS
from .unitcosts import ComponentCosts

PROBE_LOOK_MARGIN = 1.25  # a front-stage round looks at 1.25x the tuples expected to hold the misses wanted

EXACT_HARMONIC_LIMIT = 5_000_000
EULER_GAMMA = 0.5772156649015329


def harmonic(k: np.ndarray, exponent: float, limit: int) -> np.ndarray:
    """H_s(k) for an array of k <= limit: exact sums up to EXACT_HARMONIC_LIMIT, then the
    Euler-Maclaurin tail (for s = 1 that is ln k + gamma + 1/2k, the SSJ paper's eq. 5)."""
    k = np.asarray(k, dtype=np.int64)
    exact_upto = int(min(limit, EXACT_HARMONIC_LIMIT))
    sums = np.concatenate(([0.0], np.cumsum(1.0 / np.arange(1, exact_upto + 1, dtype=np.float64) ** exponent)))
    out = sums[np.minimum(k, exact_upto)]
    beyond = k > exact_upto
    if beyond.any():
        a, b = float(exact_upto), k[beyond].astype(np.float64)
        if abs(exponent - 1.0) < 1e-12:
            tail = np.log(b / a)
        else:
            tail = (b ** (1 - exponent) - a ** (1 - exponent)) / (1 - exponent)
        out[beyond] += tail + 0.5 * (b ** -exponent - a ** -exponent)
    return out


def hit_ratio(cached: np.ndarray | int, n_keys: int, exponent: float = 1.0) -> np.ndarray:
    """p_N (eq. 1): the share of a Zipf(exponent) stream over ``n_keys`` keys that the
    ``cached`` most frequent keys serve."""
    if n_keys <= 0:
        return np.zeros_like(np.asarray(cached, dtype=np.float64))
    cached = np.minimum(np.asarray(cached, dtype=np.int64), n_keys)
    return harmonic(cached, exponent, n_keys) / harmonic(np.array([n_keys]), exponent, n_keys)[0]


def best_cache_size(memory: int, n_keys: int, bytes_per_cached: float, exponent: float = 1.0,
                    reserve: int = 0) -> int:
    """h_R maximising eq. 4, leaving at least ``reserve`` bytes to the disk-probing phase."""
    most = int(min(n_keys, max(0, (memory - reserve) // bytes_per_cached)))
    if most <= 0:
        return 0
    grid = np.unique(np.concatenate((
        np.arange(0, min(most, 2048) + 1),
        np.geomspace(1, most, 4096).astype(np.int64),
    )))
    p_n = hit_ratio(grid, n_keys, exponent)
    with np.errstate(divide="ignore"):
        mu = (memory - bytes_per_cached * grid) / np.maximum(1.0 - p_n, 1e-12)
    return int(grid[int(np.argmax(mu))])


# =================================================================================================
# Service-rate models. Each prices one iteration of an algorithm's outer loop from the component
# costs measured by :func:`..calibration.calibrate` (c_IO, c_H, c_O, c_E, c_S, c_A, c_F, c_cache
# and the engine's per-call overheads) and divides the tuples it completes by it:
#
#     mu = w / c_loop                        (HYBRIDJOIN eq. 4; MESHJOIN; SSJ eq. 3 with w_N + w_S)
#
# :func:`..prediction.predict` takes the memory split an algorithm chose (``algorithm.memory_split()``), so
# the prediction describes the configuration that runs.
# =================================================================================================

SHAPES = ("noperm", "random")
RANDOM_SHAPE_SEED = 12345  # the Random shape's permutation seed (workloads.zipf.RANDOM_SHAPE_SEED)
_RANK_CACHE: dict[tuple[int, float], np.ndarray] = {}
_PERM_CACHE: dict[tuple[int, int], np.ndarray] = {}


def _check(value, what: str, minimum: float = 0.0, integer: bool = False):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not math.isfinite(value):
        raise ConfigError(f"{what}: {value!r} is not a finite number")
    if integer and value != int(value):
        raise ConfigError(f"{what}: {value!r} is not a whole number")
    if value < minimum:
        raise ConfigError(f"{what}: {value!r} must be >= {minimum:g}")
    return int(value) if integer else float(value)


def rank_probabilities(n_keys: int, exponent: float = 1.0) -> np.ndarray:
    """P(rank r) = (r+1)^-s / H_s(n_keys) for r = 0..n_keys-1: the Zipf law of the papers
    (HYBRIDJOIN sec. 5, SSJ eq. 4's summands), as the stream generator draws it (read-only)."""
    n_keys = _check(n_keys, "n_keys", 1, integer=True)
    exponent = _check(exponent, "exponent")
    key = (n_keys, exponent)
    if key not in _RANK_CACHE:
        if len(_RANK_CACHE) >= 4:
            _RANK_CACHE.pop(next(iter(_RANK_CACHE)))
        p = np.arange(1, n_keys + 1, dtype=np.float64) ** -exponent
        p /= p.sum()
        p.flags.writeable = False
        _RANK_CACHE[key] = p
    return _RANK_CACHE[key]


def rank_positions(n_keys: int, shape: str, shape_seed: int = RANDOM_SHAPE_SEED) -> np.ndarray | None:
    """Where rank r sits in R's key order: itself (``noperm``, returned as None) or a fixed
    random permutation (``random``, seeded like the stream generator's) (SSIJ paper, sec. V)."""
    if shape not in SHAPES:
        raise ConfigError(f"shape: {shape!r} is not one of {list(SHAPES)}")
    if shape == "noperm":
        return None
    key = (int(n_keys), int(shape_seed))
    if key not in _PERM_CACHE:
        if len(_PERM_CACHE) >= 2:
            _PERM_CACHE.pop(next(iter(_PERM_CACHE)))
        _PERM_CACHE[key] = np.random.default_rng(shape_seed).permutation(n_keys)
    return _PERM_CACHE[key]


def _miss_probabilities(n_keys: int, exponent: float, cached: int) -> np.ndarray:
    """P(rank r) among the tuples that miss an H_R of the ``cached`` most frequent keys (zeros
    when H_R holds every key)."""
    p = rank_probabilities(n_keys, exponent)
    if not cached:
        return p
    p = p.copy()
    p[:cached] = 0.0
    total = p.sum()
    return p / total if total > 0 else p


def _by_page(per_rank: np.ndarray, page_rows: int, shape: str, shape_seed: int) -> np.ndarray:
    """Sums of ``per_rank`` over the keys of each page of R (pages of ``page_rows`` consecutive keys)."""
    positions = rank_positions(len(per_rank), shape, shape_seed)
    if positions is None:
        return np.add.reduceat(per_rank, np.arange(0, len(per_rank), page_rows))
    return np.bincount(positions // page_rows, weights=per_rank, minlength=-(-len(per_rank) // page_rows))


def page_probabilities(n_keys: int, exponent: float, page_rows: int, shape: str = "noperm", *,
                       cached: int = 0, shape_seed: int = RANDOM_SHAPE_SEED) -> np.ndarray:
    """q_j: the probability that a stream tuple's key lies on page j of R (pages of ``page_rows``
    consecutive keys), among the tuples that miss an H_R holding the ``cached`` most frequent
    keys (then normalised to sum 1; all zeros when H_R holds every key)."""
    page_rows = _check(page_rows, "page_rows", 1, integer=True)
    cached = _check(cached, "cached", 0, integer=True)
    return _by_page(_miss_probabilities(n_keys, exponent, cached), page_rows, shape, shape_seed)


def page_keys_seen(n_keys: int, exponent: float, page_rows: int, shape: str, tuples: float, *,
                   cached: int = 0, shape_seed: int = RANDOM_SHAPE_SEED) -> np.ndarray:
    """d_j: the distinct keys of page j expected among ``tuples`` stream tuples that miss an H_R
    of the ``cached`` most frequent keys (tuples arriving as a Poisson stream: the sum over the
    page's keys of 1 - exp(-tuples p_k)), aligned with :func:`page_probabilities`."""
    page_rows = _check(page_rows, "page_rows", 1, integer=True)
    seen = -np.expm1(-_check(tuples, "tuples") * _miss_probabilities(n_keys, exponent, _check(cached, "cached", 0, integer=True)))
    return _by_page(seen, page_rows, shape, shape_seed)


def keys_for_hit_ratio(p_n: float, n_keys: int, exponent: float = 1.0) -> int:
    """The fewest most-frequent keys whose share of the stream reaches ``p_n`` (eq. 1 inverted)."""
    cumulative = np.cumsum(rank_probabilities(n_keys, exponent))
    return int(min(np.searchsorted(cumulative, p_n, side="left") + (p_n > 0), n_keys))


# -- HYBRIDJOIN (HYBRIDJOIN paper sec. 4.4, eq. 1-4) -------------------------------------------------
@dataclass(frozen=True)
class QueueState:
    """Steady state of HYBRIDJOIN's H_S/Q under a backlog: ``age`` A (tuples admitted between a
    page's first waiting tuple and its load), ``w`` (tuples per load, eq. 2's w), ``rows`` per
    load, ``groups`` walked per pop, ``chunks`` of Q scanned per lookup; ``io_s`` the mean
    seconds of a load when the loads are not all range loads of ``rows`` rows (None: c_IO(rows),
    eq. 3), and ``pops`` the pages a load pops from H_S (more than one when pages ride along)."""

    age: float
    w: float
    rows: float
    groups: float
    chunks: float
    io_s: float | None = None
    pops: float = 1.0


def hybridjoin_queue(q: np.ndarray, h_s: int, page_rows: int, admit_tuples: float = 0.0) -> QueueState:
    """Tuples per iteration of HYBRIDJOIN from the page probabilities ``q`` and h_S slots.

    The paper fits w = k * h_S * d / R_t (eq. 2, k = 1.36 measured in its setup). Here w is
    derived instead, because k depends on the skew, the page layout and h_S: HYBRIDJOIN loads
    the page of the oldest tuple of Q, so a page is loaded when its first waiting tuple has
    aged by A admissions - the same A for every page (the approximation of Che et al. for TTL
    caches). Page j then waits 1/q_j admissions for its first tuple and A more for its load, and
    is loaded with 1 + A q_j tuples. A is the age at which the pages' mean occupancy fills H_S:

        h_S = sum_j A q_j (1 + A q_j / 2) / (1 + A q_j)

    and every admitted tuple leaves with one load, so w = 1 / sum_j q_j / (1 + A q_j). With
    uniform q over P pages this gives w = 2 h_S / P (k = 2): each page is loaded once per
    cycle, with its count grown linearly from 0; with skew, hot pages gather more per load.
    A pop walks one group per admission chunk that filed a tuple of the page: chunks of w
    tuples, or of ``admit_tuples`` where a backlog waits for that many free slots.
    """
    h_s = _check(h_s, "h_S", 1)
    q = np.asarray(q, dtype=np.float64)
    q = q[q > 0]
    if len(q) == 0:
        return QueueState(0.0, 0.0, 0.0, 0.0, 0.0)

    def occupancy(a):
        return float(np.sum(a * q * (1 + a * q / 2) / (1 + a * q)))

    lo, hi = 0.0, 2.0 * h_s + 1.0  # doubled below until the occupancy passes h_S; then bisection
    while occupancy(hi) < h_s:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if occupancy(mid) < h_s else (lo, mid)
        if hi - lo <= 1e-9 * hi:
            break
    age = (lo + hi) / 2
    rate = q / (1 + age * q)  # loads of page j per admitted tuple
    loads = float(rate.sum())
    w = 1.0 / loads
    weights = rate / loads  # share of the loads that load page j
    rows = float(page_rows)
    # groups: one per admission chunk of the window that holds a tuple of the page
    chunk = min(max(w, float(admit_tuples)), float(MAX_CHUNK))
    window_chunks = age / chunk
    groups = float(np.sum(weights * (1 + window_chunks * -np.expm1(-chunk * q))))
    chunks = min(window_chunks, h_s / CHUNKS_PER + MIN_CHUNKS)
    return QueueState(age, w, rows, groups, chunks)


def page_choice_bound(q: np.ndarray, h_s: int, page_rows: int) -> float:
    """How many times HYBRIDJOIN's tuples a range load (:func:`hybridjoin_queue`, the oldest
    tuple's page first) any choice of the page to load could serve, on page probabilities ``q``
    with h_S slots: the bound on what HYBRIDJOIN-L and -PQ (pq paper) can gain by choosing.

    A page loaded whenever n_j of its tuples wait holds n_j / 2 of them on average, and costs
    q_j / n_j loads per admitted tuple. Minimising sum_j q_j / n_j subject to
    sum_j n_j / 2 = h_S gives n_j ~ sqrt(q_j), and at most w* = 2 h_S / (sum_j sqrt(q_j))^2
    tuples a load. On Zipf keys over pages in key order (R = 2M keys, 1,024-row pages) w* / w
    is 1.02 at skew 0.25, 1.12 at 0.5, 1.52 at 0.75 and 3.7 at 1 (noperm), and at most 1.32 on
    the random shape: below skew 0.75 no choice of page gains much."""
    q = np.asarray(q, dtype=np.float64)
    q = q[q > 0]
    if len(q) == 0:
        return 1.0
    best = 2.0 * h_s / float(np.sum(np.sqrt(q))) ** 2
    return max(1.0, best / hybridjoin_queue(q, h_s, page_rows).w)


def hybridjoin_iteration(state: QueueState, costs: ComponentCosts) -> tuple[float, float]:
    """``(c_loop, c_IO part)`` of one HYBRIDJOIN iteration, eq. 3:

        c_loop = c_IO(d) + d c_H + w (c_O + c_E + c_S + c_A)
                 + w c_compact + c_step + pops c_pop + groups c_group + chunks c_chunk

    the first line the paper's, the second what the engine adds (measured); c_IO(d) is
    ``state.io_s`` where :func:`access_paths` gave the loads the engine makes."""
    c = costs
    io = c.io(state.rows) if state.io_s is None else state.io_s
    loop = (io + state.rows * c.c_H + state.w * (c.c_O + c.c_E + c.c_S + c.c_A + c.c_compact)
            + c.c_step + state.pops * c.c_pop + state.groups * c.c_group + state.chunks * c.c_chunk)
    return loop, io


def access_paths(state: QueueState, q: np.ndarray, seen: np.ndarray, page_rows: int, costs: ComponentCosts,
                 rider_keys: int, rider_repeats: float) -> QueueState:
    """``state`` with the loads HYBRIDJOIN's engine makes (:meth:`.joins.hybridjoin.HybridJoin._request`
    and ``_riders``), where the paper range-loads every page due.

    A page due after A admissions holds n_j = A q_j tuples on d_j = ``seen`` distinct keys. It is
    read by an IN query of its keys when that costs less, S_in + c_in d_j < S + T rows. Pages
    whose tuples barely repeat (n_j / d_j < ``rider_repeats``) and whose keys cost less by IN,
    c_in n_j < S + T rows, ride along in the IN queries, up to ``rider_keys`` tuples a query:
    their share Q_E of the stream needs Q_E / K loads per admitted tuple, K = min(``rider_keys``,
    A Q_E), instead of one load each per cycle. Every other page is loaded alone, 1 / (1 / q_j + A)
    loads per admitted tuple as in :func:`hybridjoin_queue`. The tuples still wait about A
    admissions (an IN query takes the riders nearest its page, the others wait their turn), so
    A stays. Measured (R = 2M rows, MariaDB, Zipf 1, noperm): 6,985 tuples a load against 7,567
    here and 812 in the range-load model; without riders (``rider_repeats=0``) 974 against 806.
    An IN query is priced with the leaves of R's index it reads (:meth:`ComponentCosts.in_cost`):
    a page's d_j keys share its page_rows / leaf_rows leaves, each rider page's keys read
    leaves of their own; the choices are the engine's, which prices keys alone."""
    c = costs
    age = state.age
    waiting = age * q
    live = q > 0
    range_s = c.io(page_rows)
    in_s = c.in_cost(seen, c.leaves_read(seen, page_rows))
    rides = live & (c.in_key_s * waiting < range_s) & (waiting < rider_repeats * np.maximum(seen, 1e-300)) & (rider_keys >= 1)
    alone = live & ~rides
    share = float(q[rides].sum())
    per_query = min(float(rider_keys), max(1.0, age * share)) if share > 0 else 1.0
    loads_alone = q[alone] / (1.0 + age * q[alone])
    loads_riding = share / per_query
    loads = float(loads_alone.sum()) + loads_riding
    if loads <= 0:
        return state
    by_in = c.in_cost(seen[alone], 0.0) < range_s  # the engine's choice: it prices a page's keys as neighbours
    pages_per_query = per_query / max(age * share / max(int(rides.sum()), 1) / 2, 1.0)  # the riders' mean backlog: A q_j / 2
    rider_leaves = pages_per_query * c.leaves_read(per_query / pages_per_query, page_rows)  # each page's keys on its own leaves
    io = (float(np.sum(loads_alone * np.where(by_in, in_s[alone], range_s)))
          + loads_riding * float(c.in_cost(per_query, rider_leaves)))
    rows = float(np.sum(loads_alone * np.where(by_in, seen[alone], page_rows))) + loads_riding * per_query
    pops = (float(loads_alone.sum()) + loads_riding * pages_per_query) / loads
    return dataclasses.replace(state, w=1.0 / loads, rows=rows / loads, io_s=io / loads, pops=pops)


# -- MESHJOIN (Polyzotis et al.; as summarised in HYBRIDJOIN sec. 3.1 and SSJ sec. III) ----------------
def meshjoin_iteration(w: float, partition_pages: int, partitions: int, page_rows: int, n_keys: int,
                       costs: ComponentCosts) -> tuple[float, float]:
    """``(c_loop, c_IO part)`` of one MESHJOIN iteration: read a partition of b pages (the disk
    buffer, R_t / k rows on average), admit w tuples into H_S (which holds w * k), probe them:

        c_loop = c_IO(R_t / k) + (R_t / k) c_H + w (c_S + c_A + c_E + c_O)
                 + w c_compact + c_step_mesh + b (c_pop + groups c_group)

    Each of the b pages popped per iteration walks one group per admission chunk of the last k
    that hit it; that count is taken for a uniform stream, so the model does not depend on the
    skew, as MESHJOIN's cyclic scan does not (the paper's mu = w / c_loop)."""
    c = costs
    rows = n_keys / max(partitions, 1)
    pages = max(-(-n_keys // page_rows), 1)
    per_iteration = max(1.0, math.ceil(w / MAX_CHUNK))
    groups = partitions * per_iteration * -math.expm1(-(w / per_iteration) / pages)
    io = c.io(rows)
    loop = (io + rows * c.c_H + w * (c.c_S + c.c_A + c.c_E + c.c_O + c.c_compact)
            + c.c_step_mesh + partition_pages * (c.c_pop + groups * c.c_group))
    return loop, io


# -- the cache front-stage (SSJ sec. IV-C and V-A, CMESHJOIN sec. 3.2) ----------------------------------
def segment_match_probability(cached: int, n_keys: int, segments: int, exponent: float = 1.0) -> float:
    """p_S-bar (SSJ eq. 8): the mean probability that a stream tuple matches one of the N
    segments of R' = R - H_R, (1 - p_N) / N; eq. 8 is its s = 1 form with H(k) ~ ln k + gamma:
    (ln R_t - ln h_R) / (N (ln R_t + gamma))."""
    segments = _check(segments, "segments", 1, integer=True)
    return float(1.0 - hit_ratio(cached, n_keys, exponent)) / segments


def disk_phase_tuples(h_s: float, p_s: float, p_n: float) -> float:
    """w_S (SSJ eq. 10): stream tuples the disk-probing phase completes per iteration,
    h_S * p_S-bar. H_S holds only the tuples that missed H_R, so p_S-bar (a probability over the
    whole stream, eq. 8) is taken relative to the misses: w_S = h_S * p_S-bar / (1 - p_N) - for
    MESHJOIN's H_S of w * k tuples over k segments that is w."""
    return h_s * p_s / (1.0 - p_n) if p_n < 1 else 0.0


def cache_tuples(w_s: float, p_n: float) -> float:
    """w_N (SSJ eq. 7): tuples H_R serves per iteration. A share p_N (eq. 4) of the S_n tuples
    of n iterations hit H_R, so w_N = p_N (w_N + w_S): w_N = w_S p_N / (1 - p_N)."""
    return w_s * p_n / (1.0 - p_n) if p_n < 1 else math.inf


def probe_rounds(w_s: float, p_n: float) -> float:
    """Stream-probing rounds per iteration (:meth:`.joins.frontstage.FrontStage._probe_round`):
    one round looks at ``PROBE_LOOK_MARGIN`` w_S / (1 - p_N) tuples, which hold w_S misses
    unless their binomial count of misses (mean margin w_S, variance margin w_S p_N) falls
    short, with probability Phi(-z), z = (margin - 1) w_S / sqrt(margin w_S p_N); then a
    second round takes the rest."""
    if p_n <= 0:
        return 1.0
    if p_n >= 1:
        return math.inf
    w = max(w_s, 1.0)
    z = (PROBE_LOOK_MARGIN - 1.0) * w / math.sqrt(PROBE_LOOK_MARGIN * w * p_n)
    return 1.0 + 0.5 * math.erfc(z / math.sqrt(2.0))


def front_stage_costs(w_s: float, p_n: float, costs: ComponentCosts, cached: int = 1) -> tuple[float, float]:
    """``(w_N, seconds)`` the front-stage adds to one iteration of the algorithm it wraps (SSJ
    eq. 2's H_R terms, w_N (c_H + c_O + c_S) for its hits, and the frequency check):

        (w_N + w_S)(c_S + c_cache) + w_N c_hit + w_S c_F + rounds c_round + c_learn

    with c_cache and c_hit for an H_R of ``cached`` keys (:meth:`ComponentCosts.cache_costs`)."""
    c = costs
    c_cache, c_hit = c.cache_costs(cached)
    w_n = cache_tuples(w_s, p_n)
    seconds = ((w_n + w_s) * (c.c_S + c_cache) + w_n * c_hit + w_s * c.c_F
               + probe_rounds(w_s, p_n) * c.c_round + c.c_learn)
    return w_n, seconds


def ssj_service_rate(w_s: float, w_n: float, inner_loop_s: float, front_s: float) -> float:
    """SSJ eq. 3: mu = (w_N + w_S) / c_loop, c_loop (eq. 2) = the disk phase's iteration plus
    the front-stage's work for the w_N + w_S tuples it probed."""
    loop = inner_loop_s + front_s
    return (w_n + w_s) / loop if loop > 0 else 0.0


def cmeshjoin_service_rate(mu_dp: float, p_n: float, front_s_per_tuple: float = 0.0) -> float:
    """CMESHJOIN eq. 4: mu_cm = mu_dp / (1 - p_N(h_R)), the disk phase's rate mu_dp (eq. 3) over
    the share of the stream that reaches it. ``front_s_per_tuple`` (seconds the front-stage
    spends per stream tuple, which eq. 4 neglects) makes it 1 / ((1 - p_N) / mu_dp + that)."""
    if mu_dp <= 0:
        return 0.0
    return 1.0 / ((1.0 - p_n) / mu_dp + front_s_per_tuple)


# -- predictions from an algorithm's memory split ----------------------------------------------------
@dataclass(frozen=True)
class Prediction:
    """What a model predicts for one configuration: ``service_rate_tps`` (mu), the tuples one
    iteration completes (w, or w_N + w_S), its cost ``iteration_s`` (c_loop) and the I/O part
    of it, the hit ratio p_N of H_R (cache algorithms), the equations used and model detail.
    ``iteration`` names what the engine runs once an iteration: a ``"step"`` (one call of
    :meth:`.joins.base.JoinAlgorithm.step`), or a ``"cycle"`` (SSIJ's model prices whole cycles)."""

    algorithm: str
    service_rate_tps: float
    tuples_per_iteration: float
    iteration_s: float
    io_s: float
    hit_ratio: float | None
    model: str
    detail: dict
    iteration: str = "step"

    @property
    def turnover_s(self) -> float:
        """Seconds for H_S to turn over once (the oldest tuple's stay: MESHJOIN's k iterations,
        HYBRIDJOIN's age A / w): a measurement before about two turnovers sees a transient."""
        return self.detail.get("turnover_iterations", 1.0) * self.iteration_s


def split_of(split_or_algorithm) -> tuple[dict, dict]:
    if isinstance(split_or_algorithm, dict):
        return split_or_algorithm, {}
    split = getattr(split_or_algorithm, "memory_split", None)
    if split is None:
        raise ConfigError(f"split: {type(split_or_algorithm).__name__} is neither a memory split (dict) nor a join algorithm")
    return split_or_algorithm.memory_split(), dict(getattr(split_or_algorithm, "settings", {}))


def split_field(split: dict, field: str, algorithm: str):
    """``split[field]``, the memory split of ``algorithm`` a model reads; one sentence naming
    the field when the split lacks it."""
    if field not in split:
        raise ConfigError(f"split.{field}: missing from the memory split of {algorithm} (got {sorted(split)})")
    return split[field]


def inner_split(split: dict) -> dict:
    """A front stage's split of its inner (disk-probing) join: its ``inner.`` fields, unprefixed."""
    return {k[len("inner."):]: v for k, v in split.items() if k.startswith("inner.")}


def _paged(name: str, split: dict, settings: dict, costs, n_keys: int, exponent: float, shape: str, shape_seed: int,
           cached: int) -> tuple[float, float, float, dict, str]:
    """``(w, c_loop, c_IO, detail, model)`` of the disk-probing algorithm ``name`` whose memory
    split is ``split``, fed the tuples that miss an H_R of the ``cached`` most frequent keys.
    HYBRIDJOIN's loads are those of :func:`access_paths` when the split says how many tuples an
    IN query takes (``rider_keys``) and the settings say when a page rides (``rider_repeats``);
    without them, the paper's range load of every page due."""
    page_rows = int(split_field(split, "page_rows", name))
    if name == "meshjoin":
        w = float(split_field(split, "chunk_tuples", name))
        b, k = int(split_field(split, "partition_pages", name)), int(split_field(split, "partitions", name))
        loop, io = meshjoin_iteration(w, b, k, page_rows, n_keys, costs)
        detail = {"w": w, "partition_pages": b, "partitions": k, "rows_per_load": n_keys / k,
                  "turnover_iterations": k}
        return w, loop, io, detail, "MESHJOIN: mu = w / c_loop"
    h_s = int(split_field(split, "stream_table_capacity_tuples", name))
    q = page_probabilities(n_keys, exponent, page_rows, shape, cached=cached, shape_seed=shape_seed)
    state = hybridjoin_queue(q, h_s, page_rows, float(split.get("admit_tuples", 0)))
    if "rider_keys" in split:
        seen = page_keys_seen(n_keys, exponent, page_rows, shape, state.age, cached=cached, shape_seed=shape_seed)
        state = access_paths(state, q, seen, page_rows, costs, int(split["rider_keys"]),
                             float(settings.get("rider_repeats", 0.0)))
    loop, io = hybridjoin_iteration(state, costs)
    detail = {"w": state.w, "age": state.age, "rows_per_load": state.rows, "pages_per_load": state.pops,
              "groups_per_pop": state.groups, "chunks_scanned": state.chunks,
              "k_eq2": state.w * n_keys / (h_s * page_rows), "turnover_iterations": state.age / max(state.w, 1e-12)}
    return state.w, loop, io, detail, "HYBRIDJOIN eq. 2-4 (w from the Zipf page probabilities)"


def _inlist(split: dict, settings: dict, c: ComponentCosts, n_keys: int, exponent: float, shape: str,
            shape_seed: int) -> Prediction:
    """The IN-list baseline: a batch of B tuples, its distinct keys (the expected number among B
    Zipf draws) looked up in IN queries of ``in_list_max`` keys, and the batch joined in memory.
    The queries read the leaves of R's index that hold those keys: a leaf of ``leaf_rows`` rows
    is read when one of its keys is among the B draws (the hot keys of the noperm shape share
    leaves, the random shape scatters them)."""
    batch = float(split_field(split, "batch_rows", "inlist"))
    p = rank_probabilities(n_keys, exponent)
    distinct = float(np.sum(-np.expm1(batch * np.log1p(-np.minimum(p, 1 - 1e-16)))))
    queries = math.ceil(distinct / int(settings.get("in_list_max", 1000)))
    leaf_rows = max(int(round(c.leaf_rows)), 1)
    leaves = float(np.sum(-np.expm1(-batch * page_probabilities(n_keys, exponent, leaf_rows, shape, shape_seed=shape_seed))))
    io = queries * c.in_query_s + distinct * c.in_key_s + leaves * c.in_leaf_s
    loop = io + batch * (c.c_S + c.c_A + c.c_O) + c.c_step_inlj
    detail = {"batch": batch, "distinct_keys": distinct, "queries": queries, "leaves": leaves}
    return Prediction("inlist", batch / loop, batch, loop, io, None, "IN-list: batch / (queries + keys + tuples)", detail)


def _front_stage(algorithm: str, split: dict, settings: dict, c: ComponentCosts, n_keys: int, exponent: float,
                 shape: str, shape_seed: int, p_n: float | None) -> Prediction:
    """SSJ, CMESHJOIN, CACHEJOIN(-L, -PQ): H_R of h_R keys (p_N, eq. 1) in front of the disk
    phase named in ``split["inner"]``, which is fed the tuples H_R misses."""
    cached = int(split_field(split, "cache_keys", algorithm))
    inner_name = "meshjoin" if algorithm in ("ssj", "cmeshjoin") else "hybridjoin"
    inner = inner_split(split)
    # a given p_N: H_R is taken to hold the most frequent keys that serve that share
    held = cached if p_n is None else keys_for_hit_ratio(p_n, n_keys, exponent)
    p_n = float(hit_ratio(cached, n_keys, exponent)) if p_n is None else float(p_n)
    w_s, inner_loop, io, detail, inner_model = _paged(inner_name, inner, settings, c, n_keys, exponent, shape,
                                                      shape_seed, held)
    if inner_name == "meshjoin":  # SSJ eq. 8 and 10: w_S of the disk-probing phase
        k = int(inner["partitions"])
        p_s = segment_match_probability(held, n_keys, k, exponent)
        w_s = disk_phase_tuples(float(split_field(inner, "stream_table_capacity_tuples", algorithm)), p_s, p_n)
        inner_loop, io = meshjoin_iteration(w_s, int(inner["partition_pages"]), k, int(inner["page_rows"]), n_keys, c)
    if not w_s > 0:  # H_R holds every key the stream brings: no tuple reaches the disk phase
        return _front_stage_alone(algorithm, c, cached, detail)
    w_n, front = front_stage_costs(w_s, p_n, c, cached)
    if algorithm == "cmeshjoin":
        mu = cmeshjoin_service_rate(w_s / inner_loop, p_n, front / (w_n + w_s))
        model = "CMESHJOIN eq. 4: mu_dp / (1 - p_N), mu_dp from " + inner_model
    else:
        mu = ssj_service_rate(w_s, w_n, inner_loop, front)
        model = "SSJ eq. 2-3 (w_N eq. 4-7, w_S eq. 8-10)" if algorithm == "ssj" else "front-stage eq. 2-3 over " + inner_model
    detail = {**detail, "w_S": w_s, "w_N": w_n, "p_N": p_n, "probe_rounds": probe_rounds(w_s, p_n), "front_s": front}
    return Prediction(algorithm, mu, w_s + w_n, inner_loop + front, io, p_n, model, detail)


def _front_stage_alone(algorithm: str, c: ComponentCosts, cached: int, detail: dict) -> Prediction:
    """A front stage whose H_R holds every key of R (p_N = 1, w_S = 0): eq. 2-3 (and CMESHJOIN's
    eq. 4 with the front stage's own cost) in the limit w_S -> 0, where each tuple costs what H_R
    spends on a hit, c_S + c_cache + c_hit, and the disk phase idles; the equations themselves
    give 0/0 there."""
    c_cache, c_hit = c.cache_costs(cached)
    per_tuple = c.c_S + c_cache + c_hit
    return Prediction(algorithm, 1.0 / per_tuple, 1.0, per_tuple, 0.0, 1.0,
                      "front stage alone (p_N = 1): mu = 1 / (c_S + c_cache + c_hit)",
                      {**detail, "w_S": 0.0, "w_N": 1.0, "p_N": 1.0, "probe_rounds": 0.0, "front_s": per_tuple})


MODELS = ("inlj", "inlist", "meshjoin", "hybridjoin", "front-stage")  # the families an algorithm's ``cost_model`` names


def check_inputs(n_keys: int, exponent: float, shape: str, p_n: float | None) -> tuple[int, float]:
    """The workload a model is asked about, checked: ``n_keys`` >= 1, a Zipf exponent >= 0, a
    known shape, a hit ratio in [0, 1); returns ``(n_keys, exponent)`` as numbers."""
    n_keys = _check(n_keys, "n_keys", 1, integer=True)
    exponent = _check(exponent, "exponent")
    if shape not in SHAPES:
        raise ConfigError(f"shape: {shape!r} is not one of {list(SHAPES)}")
    if p_n is not None and not 0 <= _check(p_n, "p_n") < 1:
        raise ConfigError(f"p_n: {p_n!r} must be in [0, 1)")
    return n_keys, exponent


def model(family: str, algorithm: str, split: dict, settings: dict, costs: ComponentCosts, n_keys: int,
          exponent: float, shape: str, shape_seed: int, p_n: float | None) -> Prediction:
    """The prediction of the model ``family`` (one of :data:`MODELS`) for ``algorithm`` with the
    memory ``split`` it chose and its ``settings``; :func:`..prediction.explain` resolves the
    family from the algorithm's class and checks the inputs first."""
    c = costs
    if family == "inlj":
        loop = c.lookup_s + c.c_S + c.c_O + c.c_step_inlj
        return Prediction(algorithm, 1.0 / loop, 1.0, loop, c.lookup_s, None, "INLJ: mu = 1 / (c_IO(1) + ...)", {})
    if family == "inlist":
        return _inlist(split, settings, c, n_keys, exponent, shape, shape_seed)
    if family == "front-stage":
        return _front_stage(algorithm, split, settings, c, n_keys, exponent, shape, shape_seed, p_n)
    if family not in ("meshjoin", "hybridjoin"):
        raise ValueError(f"{family!r} is not one of the models {MODELS}")
    w, loop, io, detail, name = _paged(family, split, settings, c, n_keys, exponent, shape, shape_seed, 0)
    return Prediction(algorithm, w / loop if loop > 0 else 0.0, w, loop, io, None, name, detail)
