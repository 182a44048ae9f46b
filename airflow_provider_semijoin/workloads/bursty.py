"""Bursty, self-similar arrival times: the stream generator of the HYBRIDJOIN paper's appendix.

The paper (Fig. 9) superposes N virtual sources (10 in the paper) with bandwidths 2^1..2^N
tuples per time step ``one_step``. Each source switches on or off after a random interval of
``U * one_step * bandwidth`` (U uniform in [0, 1), the paper's ``getNextRandom()``), so the wide
sources switch rarely and the narrow ones often; at every step the stream emits as many tuples
as the sum of the bandwidths of the sources that are on. Bursts at every time scale from one
step to ~2^N steps are what makes the flow self-similar (Fig. 11).

Departures from the pseudo-code, on purpose:

- The pseudo-code has one shared ``on`` flag, so a source's switch would turn on or off
  depending on the previous switch of *another* source. Each source has its own on/off state
  here: that is the evident intent, an on/off superposition of self-similar traffic.
- The pseudo-code starts with every source off and polls one source per step. Here each
  source starts in a random state with a random time to its first switch (a stationary start),
  and the sources' schedules are drawn ahead as renewal processes, a block of steps at a time,
  vectorised over steps; a source that would switch twice within one step is sampled at the
  step, like the paper's poll.
- The tuples of one step arrive at uniform random moments within the step instead of all at its
  start (a Poisson-like flow within a step, modulated by the on/off schedule between steps),
  and leading steps without tuples are skipped, so arrivals start near 0.

The schedule (tuples per step) depends on ``seed`` and ``sources`` only, so two calls with the
same seed share their schedule however many tuples they ask for. The wide sources switch every
~2^(N-1) steps and a step carries ~2^N tuples, so with the default 10 sources the burst
structure shows at all scales only in streams of a million tuples or more; shorter streams see
the narrower sources' bursts (use fewer ``sources`` for short streams). With ``mean_rate`` the times are rescaled so
that ``n / last_time == mean_rate``; ``one_step`` then only cancels out (it sets the time unit of
the unscaled schedule, used when ``mean_rate`` is None: ``sum(bandwidths) / 2`` tuples per
``one_step`` seconds on average).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..core.checks import check_int
from ..core.errors import ConfigError
from .master import check_seed

MAX_SOURCES = 40
_BLOCK_STEPS = 4096


def _check_positive(value, what: str, *, optional: bool = False):
    if value is None and optional:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigError(f"{what}: {value!r} must be a number > 0" + (" or None" if optional else ""))
    return float(value)


def _source_toggles(rng, next_toggle: float, bandwidth: int, end: float) -> tuple[np.ndarray, float]:
    """The switch times of one source in [next_toggle, end) and its first switch at or after end."""
    if next_toggle >= end:
        return np.empty(0), next_toggle
    parts = [np.array([next_toggle])]
    t = next_toggle
    while True:
        # enough intervals (mean bandwidth/2 steps) to pass ``end`` with high probability
        m = int((end - t) / (0.5 * bandwidth) * 1.3) + 8
        times = t + np.cumsum(rng.random(m) * bandwidth)
        inside = int(np.searchsorted(times, end, side="left"))
        parts.append(times[:inside])
        if inside < m:
            return np.concatenate(parts), float(times[inside])
        t = float(times[-1])


def _step_counts(n: int, sources: int, rng: np.random.Generator) -> np.ndarray:
    """Tuples per step (int64) of the superposed on/off schedule, until at least ``n``."""
    bandwidths = 2 ** np.arange(1, sources + 1, dtype=np.int64)
    state = rng.random(sources) < 0.5
    next_toggle = rng.random(sources) * bandwidths
    blocks = []
    total = 0
    start = 0
    while total < n or not blocks:
        end = start + _BLOCK_STEPS
        # the paper polls after each Wait(oneStep): step k is observed at time k + 1
        observed = np.arange(start + 1, end + 1, dtype=np.float64)
        counts = np.zeros(_BLOCK_STEPS, dtype=np.int64)
        for i in range(sources):
            toggles, next_toggle[i] = _source_toggles(rng, next_toggle[i], int(bandwidths[i]), end + 1)
            switched = np.searchsorted(toggles, observed, side="left")
            on = (switched % 2 == 1) ^ state[i]
            counts += on * bandwidths[i]
            state[i] = (len(toggles) % 2 == 1) ^ state[i]
        blocks.append(counts)
        total += int(counts.sum())
        start = end
    return np.concatenate(blocks)


def bursty_arrivals(
    n: int,
    *,
    mean_rate: float | None,
    sources: int = 10,
    one_step: float = 0.01,
    seed: int = 0,
) -> np.ndarray:
    """``n`` non-decreasing arrival times in seconds (float64), starting near 0.

    ``mean_rate`` (tuples per second): the times are rescaled so that ``n / times[-1]`` equals
    it; None keeps the paper's unscaled timing (bandwidths in tuples per ``one_step`` seconds).
    See the module docstring for the model.
    """
    n = check_int(n, "n", minimum=0)
    mean_rate = _check_positive(mean_rate, "mean_rate", optional=True)
    sources = check_int(sources, "sources", minimum=1, maximum=MAX_SOURCES)
    one_step = _check_positive(one_step, "one_step")
    schedule_rng, placement_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(check_seed(seed)).spawn(2)
    )
    if n == 0:
        return np.empty(0, dtype=np.float64)

    counts = _step_counts(n, sources, schedule_rng)
    counts = counts[np.flatnonzero(counts)[0]:]  # skip leading silent steps
    cum = np.cumsum(counts)
    last = int(np.searchsorted(cum, n, side="left"))
    taken = counts[: last + 1].copy()
    taken[-1] -= int(cum[last]) - n  # the last step is used in part
    step = np.repeat(np.arange(last + 1, dtype=np.int64), taken)
    # each step's tuples arrive at uniform random moments within the step; steps are in order,
    # so one sort orders the tuples within their steps
    times = np.sort(step + placement_rng.random(n)) * one_step
    if mean_rate is not None:
        times *= (n / mean_rate) / times[-1]
    return times
