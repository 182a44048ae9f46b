"""Streams of foreign keys into R with Zipf-skewed frequencies.

The papers' stream generator (HYBRIDJOIN appendix, CACHEJOIN, SSIJ) draws each tuple's foreign
key from a Zipf distribution over R's keys: P(rank r) proportional to 1/(r+1)^exponent, with
exponent 0 uniform and exponent 1 the "80/20" market of the papers. How ranks map onto R's keys
is the *shape* (SSIJ paper):

- ``noperm``: rank r is the r-th key of R in key order, so the hot keys are clustered at the
  start of R (the best case for page-based algorithms: the hot keys share pages);
- ``random``: rank r is the key at position ``perm[r]`` of a permutation seeded by a fixed
  seed (:data:`RANDOM_SHAPE_SEED`), independent of the stream's seed, so that every stream drawn
  for the same master has the same hot set, spread over all of R.

A fraction ``missing`` of the tuples (chosen at random) carries instead the absent key just
below the position its rank maps to (:func:`~.master.absent_key`): missing keys are as skewed as
present ones and fall between R's keys.

Sampling is vectorised: the CDF is computed once per (n_keys, exponent) and cached, and ranks
are drawn with ``searchsorted`` on uniform randoms.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.checks import check_int, check_number
from ..core.errors import ConfigError
from .master import _check_rows, check_key_type, check_seed, key_array

SHAPES = ("noperm", "random")
RANDOM_SHAPE_SEED = 12345
STREAM_COLUMNS = ("tid", "nk", "qty", "amount")


def _check_exponent(exponent) -> float:
    if isinstance(exponent, bool) or not isinstance(exponent, numbers.Real) or math.isnan(exponent):
        raise ConfigError(f"exponent: {exponent!r} is not a number")
    if exponent < 0:
        raise ConfigError(f"exponent: {exponent} must be >= 0")
    if math.isinf(exponent):
        raise ConfigError(f"exponent: {exponent} must be finite")
    return float(exponent)


@functools.lru_cache(maxsize=8)
def _zipf_cdf(n_keys: int, exponent: float) -> np.ndarray:
    """The normalised cumulative distribution of ranks 0..n_keys-1 (read-only, cached)."""
    weights = np.arange(1, n_keys + 1, dtype=np.float64) ** -exponent
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    cdf.flags.writeable = False
    return cdf


@functools.lru_cache(maxsize=4)
def _random_shape(n_keys: int) -> np.ndarray:
    """The fixed permutation of the ``random`` shape: rank r -> position perm[r] (cached)."""
    perm = np.random.default_rng(RANDOM_SHAPE_SEED).permutation(n_keys).astype(np.int64)
    perm.flags.writeable = False
    return perm


def zipf_ranks(n: int, n_keys: int, exponent: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` 0-based ranks in [0, n_keys), P(rank r) proportional to 1/(r+1)^exponent (int64)."""
    n = check_int(n, "n", minimum=0)
    n_keys = check_int(n_keys, "n_keys", minimum=1)
    exponent = _check_exponent(exponent)
    if exponent == 0.0:
        return rng.integers(0, n_keys, n, dtype=np.int64)
    cdf = _zipf_cdf(n_keys, exponent)
    ranks = np.searchsorted(cdf, rng.random(n), side="right")
    # rounding can leave cdf[-1] a hair below a uniform draw close to 1
    return np.minimum(ranks, n_keys - 1).astype(np.int64, copy=False)


MAX_IN_MEMORY = 200_000_000  # keys of R (their CDF, a permutation) or tuples of one table the generator holds: 1.6 GB a column


def check_in_memory(value: int, what: str, held: str) -> int:
    """``value`` when at most :data:`MAX_IN_MEMORY` (keys or tuples the generator holds at once),
    else one sentence naming ``what``."""
    if value > MAX_IN_MEMORY:
        raise ConfigError(f"{what}: {value} is more than the {MAX_IN_MEMORY:,} {held} the generator holds in memory "
                          f"(8 bytes each); expected at most {MAX_IN_MEMORY}")
    return value


def _check_options(master_rows, exponent, shape, missing, key_type, seed, first_tid) -> dict:
    key_type = check_key_type(key_type)
    if shape not in SHAPES:
        raise ConfigError(f"shape: {shape!r} is not one of {list(SHAPES)}")
    check_number("missing", missing, "in [0, 1]", minimum=0, maximum=1)
    master_rows = _check_rows(master_rows, key_type, "master_rows")
    if master_rows < 1:
        raise ConfigError(f"master_rows: {master_rows} must be >= 1")
    check_in_memory(master_rows, "master_rows", "keys of R")
    return {
        "master_rows": master_rows,
        "exponent": _check_exponent(exponent),
        "shape": shape,
        "missing": float(missing),
        "key_type": key_type,
        "seed": check_seed(seed),
        "first_tid": check_int(first_tid, "first_tid", minimum=0),
    }


def _stream(n, rng, *, master_rows, exponent, shape, missing, key_type, first_tid, **_) -> pa.Table:
    ranks = zipf_ranks(n, master_rows, exponent, rng)
    positions = ranks if shape == "noperm" else _random_shape(master_rows)[ranks]
    return stream_table(positions, rng, missing=missing, key_type=key_type, first_tid=first_tid)


def stream_table(positions: np.ndarray, rng: np.random.Generator, *, missing: float, key_type: str,
                 first_tid: int) -> pa.Table:
    """The stream tuples whose keys are R's keys at ``positions`` (a fraction ``missing`` of
    them replaced by the absent key just below), with the columns of :func:`zipf_stream`."""
    n = len(positions)
    is_missing = rng.random(n) < missing
    present = key_array(positions, key_type)
    if is_missing.any():
        absent = key_array(positions, key_type, absent=True)
        keys = pc.if_else(pa.array(is_missing), absent, present)
    else:
        keys = present
    qty = rng.integers(1, 11, n, dtype=np.int64)
    amount = np.round(qty * rng.uniform(0.5, 200.0, n), 2)
    return pa.table(
        {
            "tid": pa.array(np.arange(first_tid, first_tid + n, dtype=np.int64)),
            "nk": keys,
            "qty": pa.array(qty),
            "amount": pa.array(amount, pa.float64()),
        }
    )


def _rng(seed: int, chunk: int) -> np.random.Generator:
    return np.random.default_rng([seed, chunk])


def zipf_stream(
    n_tuples: int,
    master_rows: int,
    *,
    exponent: float = 1.0,
    shape: str = "noperm",
    missing: float = 0.0,
    key_type: str = "int",
    seed: int = 0,
    first_tid: int = 0,
) -> pa.Table:
    """``n_tuples`` stream tuples joining R of ``master_rows`` rows (see the module docstring).

    Columns: ``tid`` (int64, first_tid..first_tid+n-1, stable across replays), ``nk`` (the
    foreign key: int64, or string for ``key_type="str"``), ``qty`` (int64 1..10), ``amount``
    (float64). The same arguments give the same table; it equals the first chunk of
    :func:`zipf_stream_chunks` with ``chunk_rows=n_tuples``.
    """
    options = _check_options(master_rows, exponent, shape, missing, key_type, seed, first_tid)
    n_tuples = check_in_memory(check_int(n_tuples, "n_tuples", minimum=0), "n_tuples", "tuples of one table")
    return _stream(n_tuples, _rng(options["seed"], 0), **options)


# the stream options and their defaults, as zipf_stream declares them
STREAM_OPTIONS = {
    name: p.default
    for name, p in inspect.signature(zipf_stream).parameters.items()
    if p.kind is inspect.Parameter.KEYWORD_ONLY
}


def _merged_options(master_rows: int, options: dict) -> dict:
    unknown = sorted(set(options) - set(STREAM_OPTIONS))
    if unknown:
        raise ConfigError(f"option: {unknown[0]!r} is not one of {list(STREAM_OPTIONS)}")
    return _check_options(master_rows, **{**STREAM_OPTIONS, **options})


def zipf_stream_chunks(chunk_rows: int, master_rows: int, **options) -> Iterator[pa.Table]:
    """An endless iterator of consecutive :func:`zipf_stream` chunks of ``chunk_rows`` tuples.

    ``options`` are :func:`zipf_stream`'s (exponent, shape, missing, key_type, seed, first_tid),
    with its defaults. Tids continue from chunk to chunk; chunk i is drawn from a generator
    seeded by (seed, i), so the stream is reproducible however far it is read. Arguments are
    checked at the call, not at the first chunk.
    """
    options = _merged_options(master_rows, options)
    chunk_rows = check_in_memory(check_int(chunk_rows, "chunk_rows", minimum=1), "chunk_rows", "tuples of one table")

    def chunks() -> Iterator[pa.Table]:
        index = 0
        while True:
            yield _block(index, chunk_rows, options)
            index += 1

    return chunks()


def _block(index: int, block_rows: int, options: dict) -> pa.Table:
    tid = options["first_tid"] + index * block_rows
    return _stream(block_rows, _rng(options["seed"], index), **{**options, "first_tid": tid})


def zipf_rows(start: int, end: int, master_rows: int, *, block_rows: int = 4096, **options) -> pa.Table:
    """Tuples ``start`` .. ``end - 1`` of the endless stream ``zipf_stream_chunks(block_rows, ...)``.

    Any range can be drawn on its own and always gives the same tuples (a Spark source replaying
    a micro-batch after a crash reads exactly what it read before).
    """
    options = _merged_options(master_rows, options)
    start, end = check_int(start, "start", minimum=0), check_int(end, "end", minimum=0)
    block_rows = check_int(block_rows, "block_rows", minimum=1)
    if end <= start:
        return _stream(0, _rng(options["seed"], 0), **options)
    first, last = start // block_rows, (end - 1) // block_rows
    blocks = pa.concat_tables(_block(i, block_rows, options) for i in range(first, last + 1))
    return blocks.slice(start - first * block_rows, end - start)
