"""The temporal-locality stream of the SSIJ paper (sec. VI-A, "Temporal Locality").

"The join values of the stream tuples within a time period fall mostly within a subset of the
relation domain": the stream is split into intervals of ``interval_tuples`` tuples; interval i
draws its keys with Zipf skew ``exponent`` from the i-th slice of R's keys, a slice holding a
``fraction`` of them (the paper: 20 intervals, each a Zipf(1) over 5% of the domain, "so each
stream interval requires localized reads on disk limited to a number of blocks equal to 5% of
the relation"). Within a slice the hot keys come first (the noperm shape); the slices follow
each other through R and start over after the last one.

Columns, seeds and chunking as in :mod:`.zipf`: the same arguments give the same tuples, and
chunk i of :func:`temporal_stream_chunks` is drawn from a generator seeded by (seed, i).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from ..core.checks import check_int, check_number
from .zipf import _check_options, _rng, stream_table, zipf_ranks


def _check_fraction(fraction) -> float:
    return float(check_number("fraction", fraction, "a share of R's keys in (0, 1]", above=0, maximum=1))


def _slices(master_rows: int, fraction: float) -> tuple[int, int]:
    """``(keys per slice, number of slices)``."""
    width = max(1, math.ceil(fraction * master_rows))
    return width, math.ceil(master_rows / width)


def _temporal(n: int, rng: np.random.Generator, first: int, *, master_rows: int, interval_tuples: int, fraction: float,
              exponent: float, missing: float, key_type: str, first_tid: int) -> pa.Table:
    """Tuples ``first .. first+n-1`` of the stream (their interval follows from their position)."""
    width, slices = _slices(master_rows, fraction)
    interval = (first + np.arange(n, dtype=np.int64)) // interval_tuples
    positions = (interval % slices) * width + zipf_ranks(n, width, exponent, rng)
    positions = np.minimum(positions, master_rows - 1)  # the last slice may be short
    return stream_table(positions, rng, missing=missing, key_type=key_type, first_tid=first_tid + first)


def _options(master_rows, interval_tuples, fraction, exponent, missing, key_type, seed, first_tid) -> dict:
    checked = _check_options(master_rows, exponent, "noperm", missing, key_type, seed, first_tid)
    checked.pop("shape")
    return {
        **checked,
        "interval_tuples": check_int(interval_tuples, "interval_tuples", minimum=1),
        "fraction": _check_fraction(fraction),
    }


def temporal_stream(
    n_tuples: int,
    master_rows: int,
    *,
    interval_tuples: int = 1_000_000,
    fraction: float = 0.05,
    exponent: float = 1.0,
    missing: float = 0.0,
    key_type: str = "int",
    seed: int = 0,
    first_tid: int = 0,
) -> pa.Table:
    """``n_tuples`` tuples of the temporal-locality stream over R of ``master_rows`` rows (see
    the module docstring); equal to the first chunk of :func:`temporal_stream_chunks`."""
    options = _options(master_rows, interval_tuples, fraction, exponent, missing, key_type, seed, first_tid)
    seed = options.pop("seed")
    return _temporal(check_int(n_tuples, "n_tuples", minimum=0), _rng(seed, 0), 0, **options)


def temporal_stream_chunks(chunk_rows: int, master_rows: int, *, interval_tuples: int = 1_000_000,
                           fraction: float = 0.05, exponent: float = 1.0, missing: float = 0.0,
                           key_type: str = "int", seed: int = 0, first_tid: int = 0) -> Iterator[pa.Table]:
    """An endless iterator of consecutive chunks of ``chunk_rows`` tuples of the stream."""
    options = _options(master_rows, interval_tuples, fraction, exponent, missing, key_type, seed, first_tid)
    chunk_rows = check_int(chunk_rows, "chunk_rows", minimum=1)
    seed = options.pop("seed")

    def chunks() -> Iterator[pa.Table]:
        index = 0
        while True:
            yield _temporal(chunk_rows, _rng(seed, index), index * chunk_rows, **options)
            index += 1

    return chunks()
