"""Drive a join algorithm over a bounded stream and materialise its output.

:func:`run_join` is the engine's whole life cycle for one stream (a file, a Spark micro-batch):
normalise the stream's keys (tuples whose key cannot be in R leave at once with a reason),
feed the rest to a :class:`~.session.JoinSession` (its stream buffer and the algorithm), drain it, and build the matched table (stream columns + selected master columns, one row per
matching master row) and the unmatched table (stream columns + ``reason``). The exactly-once
check is part of every run: each stream tuple must leave exactly once, matched or unmatched.

Deadlines (SSIJ sec. IV-F): each tuple may carry an arrival time and an absolute deadline in
the clock's units; the run reports the latency from arrival to completion and counts the tuples
completed after their deadline (unmatched ones too: leaving late is late).
"""

from __future__ import annotations

import contextlib
import math
import numbers
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .asof import AsOf, check_lookup, pick_versions
from .errors import ConfigError
from .joins.base import Clock, JoinAlgorithm, JoinOutput
from .keys import normalize, sorted_distinct
from .metrics import latency_ms
from .reasons import labels
from .session import JoinSession, materialise
from .stores.versioned import SnapshotLost

SNAPSHOT_ATTEMPTS = 50  # runs of one stream a lost session may end (each time R moved meanwhile)


@dataclass
class JoinRun:
    """What a run produced; ``completed_at`` holds when each stream row left (clock units)."""

    matched: pa.Table
    unmatched: pa.Table
    stats: dict
    completed_at: np.ndarray


def per_row_times(name: str, values, n: int) -> np.ndarray:
    """``values`` (a sequence, numpy or Arrow array of numbers) as one float64 per stream row."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        values = values.to_numpy(zero_copy_only=False)
    try:
        times = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: expected one number per stream row (a time in clock units)") from None
    if times.shape != (n,):
        raise ConfigError(f"{name}: {times.size} values for {n} stream rows; expected one per row")
    return times


def check_exactly_once(n: int, matched_ids: np.ndarray, unmatched_ids: np.ndarray) -> dict:
    """Every row id 0..n-1 left exactly once: matched (with any number of master rows) xor unmatched."""
    seen = np.zeros(n, dtype=np.int64)
    seen[sorted_distinct(matched_ids)] += 1  # each index once
    np.add.at(seen, unmatched_ids, 1)
    repeated = len(unmatched_ids) - len(sorted_distinct(unmatched_ids))
    return {
        "ok": bool((seen == 1).all()) and not repeated,
        "lost": int((seen == 0).sum()),
        "duplicated": int((seen > 1).sum() + repeated),
    }


@contextlib.contextmanager
def one_version_of_r(algorithm: JoinAlgorithm):
    """Everything the algorithm reads of R inside sees one version of it (SSIJ sec. IV-E).

    When R has a change log: enter the store's snapshot and drop what the algorithm cached of
    the keys changed since its last one, before any probe; yields how many cached entries were
    dropped. Without a change log nobody installs versions: plain reads, nothing to drop.
    """
    store = algorithm.store
    if not store.has_change_log():
        yield 0
        return
    with store.snapshot() as changed:
        yield algorithm.invalidate(changed) if len(changed) else 0


def feed_keys(algorithm: JoinAlgorithm, keys: pa.ChunkedArray, row_ids: np.ndarray, due: np.ndarray | None, clock,
              session: JoinSession | None = None) -> tuple[JoinOutput, JoinSession]:
    """Normalise ``keys`` (one per row id); tuples whose key cannot be in R leave at once (the
    returned output), the rest are fed to ``session`` (a new one when None) with their ``due``."""
    normalized = normalize(keys, algorithm.store.key_type)
    valid = normalized.valid
    invalid = JoinOutput(np.zeros(0, np.int64), algorithm.schema.empty_table(), row_ids[~valid], normalized.reason[~valid])
    session = session if session is not None else JoinSession(algorithm, clock)
    session.feed(row_ids[valid], normalized.keys[valid], None if due is None else due[valid])
    return invalid, session


def _run_inputs(algorithm: JoinAlgorithm, stream: pa.Table, stream_key: str, arrival, deadline,
                max_latency_s: float | None, as_of: AsOf | None) -> tuple[np.ndarray | None, np.ndarray | None]:
    """:func:`run_join`'s arguments checked before any work: the stream key is a column, no master
    column clashes with a stream column, the per-row times are finite, an as-of lookup's columns
    are there; ``(arrived, deadlines)`` per row, None where not given (``max_latency_s`` is
    applied once the run starts)."""
    if stream_key not in stream.column_names:
        raise ConfigError(
            f"stream-key: column {stream_key!r} is not in the stream (columns: {stream.column_names})"
        )
    if as_of is not None:
        store = algorithm.store
        check_lookup(as_of, {c.name: c.arrow_type for c in store.columns}, store.table, stream.schema)
        unread = [c for c in as_of.version_columns if c not in store.select]
        if unread:
            raise ConfigError(f"as_of: the store of {store.table!r} does not read {unread[0]!r}; "
                              "expected its select to hold the version columns")
    clash = sorted(set(algorithm.schema.names) & set(stream.column_names))
    if clash:
        raise ConfigError(
            f"select: master column {clash[0]!r} is also a stream column; select other columns or rename it"
        )
    n = stream.num_rows
    arrived = None if arrival is None else per_row_times("arrival", arrival, n)
    if arrived is not None and not np.isfinite(arrived).all():
        raise ConfigError(f"arrival: row {int(np.flatnonzero(~np.isfinite(arrived))[0])} is not a finite time")
    if deadline is not None and max_latency_s is not None:
        raise ConfigError("deadline: give per-row deadlines or max_latency_s, not both")
    if max_latency_s is not None and not (
        isinstance(max_latency_s, numbers.Real) and not isinstance(max_latency_s, bool) and 0 <= max_latency_s < math.inf
    ):
        raise ConfigError(f"max_latency_s: {max_latency_s!r} must be a number >= 0 (seconds in clock units)")
    deadlines = None if deadline is None else per_row_times("deadline", deadline, n)
    return arrived, deadlines


def _run_stats(algorithm: JoinAlgorithm, result: JoinOutput, n: int, wall: float, io: dict, processing: dict,
               latency: dict, completed: np.ndarray, deadlines: np.ndarray | None) -> dict:
    """:func:`run_join`'s statistics of the output: tuples matched and unmatched (by reason), the
    rate by wall clock, the store's I/O (``io``), latencies, deadline misses, exactly once."""
    reasons, counts = np.unique(labels(result.unmatched_reason), return_counts=True)
    late = 0 if deadlines is None else int(np.count_nonzero(completed > deadlines))
    return {
        "algorithm": algorithm.name,
        "tuples_in": n,
        "tuples_matched": int(len(sorted_distinct(result.matched_ids))),
        "tuples_unmatched": int(len(result.unmatched_ids)),
        "output_rows": int(len(result.matched_ids)),
        "unmatched_by_reason": {str(r): int(c) for r, c in zip(reasons, counts)},
        "service_rate_tps": round(n / wall, 1) if wall > 0 else None,
        "wall_s": round(wall, 6),
        **io,
        "processing_ms_p50": processing["p50"],
        "processing_ms_p99": processing["p99"],
        "latency_ms_p50": latency["p50"],
        "latency_ms_p99": latency["p99"],
        "deadline_misses": late,
        "tuples_with_deadline": 0 if deadlines is None else int(np.count_nonzero(~np.isnan(deadlines))),
        "exactly_once": check_exactly_once(n, result.matched_ids, result.unmatched_ids),
    }


def run_join(
    algorithm: JoinAlgorithm,
    stream: pa.Table,
    stream_key: str,
    *,
    clock: Clock = time.perf_counter,
    arrival=None,
    deadline=None,
    max_latency_s: float | None = None,
    as_of: AsOf | None = None,
) -> JoinRun:
    """Join ``stream`` (an Arrow table) with R through ``algorithm``; the stream is taken whole.

    ``arrival``: when each row arrived (clock units; default: the run's start). ``deadline``:
    each row's absolute deadline (clock units, NaN = none), or ``max_latency_s``: every row's
    deadline is its arrival + max_latency_s (SSIJ sec. IV-F). The stats report
    ``latency_ms_p50``/``latency_ms_p99`` (completion - arrival), ``deadline_misses`` (tuples
    completed after their deadline, unmatched ones included) and ``tuples_with_deadline``.
    ``as_of``: R is a type-2 dimension, each tuple keeps the version valid at its event time
    (:func:`.asof.pick_versions`; one with none leaves unmatched, ``no_version_valid``).
    """
    n = stream.num_rows
    arrived, deadlines = _run_inputs(algorithm, stream, stream_key, arrival, deadline, max_latency_s, as_of)
    store = algorithm.store
    io_before = store.counters.as_dict()
    started = clock()
    if arrived is None:
        arrived = np.full(n, started)
    if max_latency_s is not None:
        deadlines = arrived + max_latency_s
    entered = np.full(n, started)
    completed = np.full(n, started)
    for attempt in range(SNAPSHOT_ATTEMPTS):
        try:
            with one_version_of_r(algorithm) as invalidated:
                invalid, session = feed_keys(algorithm, stream[stream_key], np.arange(n, dtype=np.int64), deadlines, clock)
                session.on_taken = lambda ids, t: entered.__setitem__(ids, t)
                session.on_left = lambda ids, t: completed.__setitem__(ids, t)
                outputs = [invalid, session.drain()]
            break
        except SnapshotLost:  # nothing has left yet: run the whole stream again on the new version
            if attempt == SNAPSHOT_ATTEMPTS - 1:
                raise
            algorithm.restart()
    wall = clock() - started
    result = JoinOutput.concat(outputs, algorithm.schema)
    if as_of is not None:
        result = pick_versions(result, stream[as_of.event_time].take(result.matched_ids), as_of)
    matched, unmatched = materialise(stream, result, algorithm.schema)
    io = {k: round(v - io_before[k], 6) for k, v in store.counters.as_dict().items()}
    stats = {
        **_run_stats(algorithm, result, n, wall, io, latency_ms(completed - entered), latency_ms(completed - arrived),
                     completed, deadlines),
        "master_version": store.seen_version,
        "invalidated": invalidated,
        "snapshot_restarts": attempt,
        **algorithm.stats(),
    }
    return JoinRun(matched, unmatched, stats, completed)
