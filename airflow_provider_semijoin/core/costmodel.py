"""Cost models of the papers, used to split a memory budget between structures.

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

import numpy as np

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
