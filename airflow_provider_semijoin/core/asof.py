"""As-of lookups on a type-2 dimension: each stream tuple keeps the one version of its key
that was valid at the tuple's event time.

A type-2 (slowly changing) dimension keeps every version of a natural key as its own row,
valid over the half-open interval ``[valid_from, valid_to)``; ``valid_to`` is NULL (or a far
future) for the current version. Every algorithm of the registry already returns all K rows of
a key (a 1:K equality join: a page holds a key's rows, a cache front-stage caches them,
HYBRIDJOIN sec. 4.1, CMESHJOIN sec. 3); :func:`pick_versions` then keeps, per tuple, the row
with ``valid_from <= t < valid_to`` - the database's own
``JOIN ... ON s.nk = r.nk AND s.t >= r.valid_from AND (s.t < r.valid_to OR r.valid_to IS NULL)`` -
columnar, on the matched pairs of a slice, before the step's on-missing routing. So every
algorithm supports it, and the exactly-once accounting of the engine contract is unchanged: a
tuple whose key has rows but none valid then leaves unmatched as ``no_version_valid``, one with
a null event time as ``null_event_time``.

Overlapping versions (a table error: two rows of a key valid at one instant) still give one row
per tuple, chosen deterministically whatever order an algorithm produced the pairs in: the
latest ``valid_from`` wins, then the latest ``valid_to`` (NULL latest), then the smallest
values of the other selected columns in their order. A row with a NULL ``valid_from`` is never
valid (as in the SQL above).

A MariaDB system-versioned R is the same lookup over its system periods ``[ROW_START,
ROW_END)``: its store reads every version with them under the names of :class:`AsOf`'s version
columns (:mod:`.stores.system_time`).

Instants are compared in one type: where any of the three columns is a date, timestamp or
text (SQLite keeps DATETIME as ISO text), all become int64 microseconds since the epoch - a
number then counts epoch seconds, a timestamp without a zone is UTC, an event time in nanoseconds
is floored to its microsecond (exact against bounds in microseconds, :mod:`.micros`); where all
are numbers they are compared as numbers (epoch seconds or any unit, the same on both sides).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import ConfigError
from .joins.base import JoinOutput, runs_of
from .keys import sorted_distinct
from .micros import epoch_micros
from .reasons import Unmatched

MICROS = 1_000_000
DENSE_SPAN = 4  # tuple ids spanning at most this many values a pair are flagged, not sorted


@dataclass(frozen=True)
class AsOf:
    """The columns of an as-of lookup: the stream's ``event_time`` and R's ``valid_from`` and
    ``valid_to`` (half-open ``[valid_from, valid_to)``, NULL ``valid_to``: still valid)."""

    event_time: str
    valid_from: str
    valid_to: str

    @property
    def version_columns(self) -> tuple[str, str]:
        return self.valid_from, self.valid_to


def is_timed(data_type: pa.DataType) -> bool:
    """A type whose values are instants to be read as such (not numbers)."""
    return (pa.types.is_timestamp(data_type) or pa.types.is_date(data_type) or pa.types.is_string(data_type)
            or pa.types.is_large_string(data_type))


def comparable(data_type: pa.DataType) -> bool:
    """A column type an as-of lookup can compare: an instant or a number."""
    return is_timed(data_type) or pa.types.is_integer(data_type) or pa.types.is_floating(data_type)


def instants(values: pa.Array | pa.ChunkedArray, timed: bool, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(values, null mask)`` of ``values`` as numpy: int64 microseconds since the epoch when
    ``timed`` (numbers count seconds), else float64 numbers; ``name`` is the column, for the
    one sentence that says a value is not an instant."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    nulls = values.is_null().to_numpy(zero_copy_only=False)
    data_type = values.type
    if not comparable(data_type):
        raise ConfigError(f"as_of: column {name!r} is {data_type}; expected a timestamp, date or number")
    if not timed:
        return values.cast(pa.float64()).fill_null(0).to_numpy(zero_copy_only=False), nulls
    if pa.types.is_integer(data_type) or pa.types.is_floating(data_type):
        seconds = values.cast(pa.float64()).fill_null(0).to_numpy(zero_copy_only=False)
        return np.round(seconds * MICROS).astype(np.int64), nulls
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        values = _parsed(values, name)
    return epoch_micros(values).fill_null(0).to_numpy(zero_copy_only=False), nulls


def _parsed(values: pa.Array, name: str) -> pa.Array:
    """ISO text as timestamps: in microseconds, or where a value has 7-9 fractional digits (a
    ``datetime2(7)`` export) in nanoseconds, which :func:`.micros.epoch_micros` floors."""
    for unit in ("us", "ns"):
        try:
            return values.cast(pa.timestamp(unit))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    raise ConfigError(f"as_of: column {name!r} holds a value that is not a date or time "
                      "(expected ISO text such as '2026-01-31 12:00:00')")


def pick_versions(out: JoinOutput, event_time: pa.Array | pa.ChunkedArray, as_of: AsOf) -> JoinOutput:
    """``out`` with, per matched tuple, only the version valid at its event time.

    ``event_time`` holds the event time of each matched pair's tuple (aligned with
    ``out.matched_ids``); ``out.master`` holds R's ``valid_from`` and ``valid_to``. A tuple with
    no valid version, or a null event time, leaves unmatched with its reason instead."""
    if not len(out.matched_ids):
        return out
    master = out.master
    start, end = master[as_of.valid_from], master[as_of.valid_to]
    timed = any(is_timed(c.type) for c in (event_time, start, end))
    t, t_null = instants(event_time, timed, as_of.event_time)
    vf, vf_null = instants(start, timed, as_of.valid_from)
    vt, vt_null = instants(end, timed, as_of.valid_to)
    valid = ~t_null & ~vf_null & (vf <= t) & (vt_null | (t < vt))
    ids = out.matched_ids
    span = dense_span(ids)
    chosen = _latest(out, np.flatnonzero(valid), vf, vt, vt_null, as_of, span)
    kept_ids = ids[chosen]
    left, null_time = tuples_left(ids, kept_ids, ids[t_null], span)
    reasons = np.where(null_time, Unmatched.NULL_EVENT_TIME, Unmatched.NO_VERSION_VALID).astype(np.int8)
    return JoinOutput(
        kept_ids, master.take(pa.array(chosen, pa.int64())),
        np.concatenate([out.unmatched_ids, left]), np.concatenate([out.unmatched_reason, reasons]),
        out.matched_keys[chosen] if out.matched_keys is not None else None,
    )


def dense_span(ids: np.ndarray) -> tuple[int, int] | None:
    """``(smallest, span)`` of the tuple ids of a slice's pairs when they span at most
    :data:`DENSE_SPAN` values a pair (a slice's ids are mostly consecutive): one flag a value
    then finds each tuple's pairs without a sort; None otherwise (or no ids)."""
    if not len(ids):
        return None
    lo = int(ids.min())
    span = int(ids.max()) - lo + 1
    return (lo, span) if span <= DENSE_SPAN * len(ids) else None


def tuples_left(ids: np.ndarray, kept_ids: np.ndarray, untimed_ids: np.ndarray,
                span: tuple[int, int] | None) -> tuple[np.ndarray, np.ndarray]:
    """``(the tuples of ``ids`` (pairs' tuple ids) none of whose pairs was kept, in id order;
    whether each had a null event time)``: a tuple with a null event time (``untimed_ids``) is
    never kept. By flags over the ids' ``span`` (:func:`dense_span`), or by a sort."""
    if span is None:
        tuples = sorted_distinct(ids)
        left = tuples[~np.isin(tuples, kept_ids, assume_unique=True)]
        return left, np.isin(left, untimed_ids)
    lo, size = span
    state = np.zeros(size, np.int8)  # 1: a tuple left without a version, 2: one with a null event time
    state[ids - lo] = 1
    state[kept_ids - lo] = 0
    state[untimed_ids - lo] = 2
    at = np.flatnonzero(state)
    return at + lo, state[at] == 2


def _latest(out: JoinOutput, valid: np.ndarray, vf: np.ndarray, vt: np.ndarray, vt_open: np.ndarray,
            as_of: AsOf, span: tuple[int, int] | None) -> np.ndarray:
    """Of the ``valid`` pairs (positions, ascending), the one per tuple that wins: the latest
    valid_from, then the latest valid_to (an open one latest), then the smallest other master
    columns. A sound type-2 table has one valid version a tuple: then ``valid`` itself, found
    without the sort (:func:`one_each`)."""
    if not len(valid) or one_each(out.matched_ids[valid], span):
        return valid
    return latest_sorted(out, valid, vf, vt, vt_open, as_of)


def one_each(ids: np.ndarray, span: tuple[int, int] | None) -> bool:
    """Whether no tuple id occurs twice in ``ids`` (by a count over ``span`` of ids, or a sort)."""
    if span is not None:
        return int(np.bincount(ids - span[0], minlength=1).max()) <= 1
    ordered = np.sort(ids)
    return not bool(np.any(ordered[1:] == ordered[:-1]))


def latest_sorted(out: JoinOutput, valid: np.ndarray, vf: np.ndarray, vt: np.ndarray, vt_open: np.ndarray,
                  as_of: AsOf) -> np.ndarray:
    """:func:`_latest` by one sort of the valid pairs on (tuple, valid_from desc, valid_to desc,
    the other columns): any number of valid versions a tuple."""
    top = np.iinfo(np.int64).max if vt.dtype.kind == "i" else np.inf
    others = [n for n in out.master.column_names if n not in as_of.version_columns]
    order = pa.table({"id": out.matched_ids[valid], "vf": vf[valid], "vt": np.where(vt_open[valid], top, vt[valid]),
                      **{f"c{i}": out.master[n].take(pa.array(valid)) for i, n in enumerate(others)}})
    keys = [("id", "ascending"), ("vf", "descending"), ("vt", "descending")] + [
        (f"c{i}", "ascending") for i in range(len(others)) if _sortable(order[f"c{i}"].type)]
    ranked = pc.sort_indices(order, sort_keys=keys).to_numpy()
    first, _ = runs_of(out.matched_ids[valid][ranked])
    return np.sort(valid[ranked[first]])


def _sortable(data_type: pa.DataType) -> bool:
    return not (pa.types.is_nested(data_type) or pa.types.is_null(data_type))


def check_version_columns(types: dict[str, pa.DataType], table: str, as_of: AsOf) -> None:
    """R (``types``: its columns' Arrow types) has both version columns, of a type an as-of
    lookup compares; one sentence naming the field otherwise. The index the lookup needs is the
    natural key's (every store requires one whose first column is the key): a key's versions
    are read together, so an index on ``(natural_key, valid_from)`` serves as its prefix does."""
    for name, column in (("valid_from", as_of.valid_from), ("valid_to", as_of.valid_to)):
        if column not in types:
            raise ConfigError(f"as_of.{name}: column {column!r} is not in table {table!r} (columns: {sorted(types)}); "
                              "expected the column that " + ("starts" if name == "valid_from" else "ends") + " a version")
        if not comparable(types[column]):
            raise ConfigError(f"as_of.{name}: column {column!r} of {table!r} is {types[column]}; "
                              "expected a DATETIME/TIMESTAMP/DATE or an epoch number")


def check_lookup(as_of: AsOf, types: dict[str, pa.DataType], table: str, stream: set[str] | pa.Schema | None) -> None:
    """Before any work: R (``types``) has the version columns (:func:`check_version_columns`)
    and the stream (its column names, or its schema: then the type is checked too; None: not
    known yet) the event time; one sentence otherwise."""
    check_version_columns(types, table, as_of)
    check_event_time(as_of, stream)


def check_event_time(as_of: AsOf, stream: set[str] | pa.Schema | None) -> None:
    """The stream (as :func:`check_lookup` takes it) has the lookup's event time, of a type it
    can be compared in; one sentence otherwise."""
    if stream is None:
        return
    names = set(stream.names) if isinstance(stream, pa.Schema) else stream
    if as_of.event_time not in names:
        raise ConfigError(f"as_of.event_time: {as_of.event_time!r} is not a column of the stream (columns: {sorted(names)})")
    if isinstance(stream, pa.Schema) and not comparable(stream.field(as_of.event_time).type):
        raise ConfigError(f"as_of.event_time: column {as_of.event_time!r} of the stream is "
                          f"{stream.field(as_of.event_time).type}; expected a timestamp, date or number")
