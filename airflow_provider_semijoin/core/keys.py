"""Join keys as fixed-width numpy arrays.

Keys of R are integers (``int64``) or strings. Strings are held as UTF-8 bytes in a fixed-width
``S<n>`` array whose width is the longest key of R: byte order of UTF-8 equals code-point order,
which is the order of SQLite's BINARY collation and of MySQL's ``*_bin`` collations, so numpy's
``searchsorted`` and the database's ``ORDER BY`` agree, and the arrays have exact byte sizes for
the memory budget. A key column in another collation (MySQL's ``utf8mb4_general_ci``, ...) has
keys that are the collation's sort keys instead (:mod:`.stores.collation`): ``KeyType.collation``
turns stream keys into them. Stream keys are normalised once, when they enter: a key that cannot be a key
of R leaves at once with a reason (:mod:`.reasons`), so no algorithm ever sees it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .reasons import Unmatched

_INT64_MIN, _INT64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


@dataclass(frozen=True)
class KeyType:
    """The type of R's join key: ``int`` or ``str`` (with ``width``, its longest key in bytes).

    ``collation``, when set, says the keys are not UTF-8 text but the sort keys of a database
    collation (``width`` is then their longest one): it has ``keys(weights)`` (sort keys as the
    database returns them -> a key array) and ``stream_keys(texts, reason)`` (stream strings ->
    a key array, marking those that cannot be in R in ``reason``).
    """

    kind: str
    width: int = 0
    collation: object = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in ("int", "str"):
            raise ValueError(f"key kind: {self.kind!r} is not one of ['int', 'str']")
        if self.kind == "str" and self.width < 1:
            raise ValueError(f"key width: {self.width} must be at least 1 for string keys")

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.int64) if self.kind == "int" else np.dtype(f"S{self.width}")

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def from_db(self, values) -> np.ndarray:
        """Keys as the database driver returns them (int, str or bytes; a raw fetch's text also
        as a binary Arrow array) -> a key array."""
        if self.kind == "int":
            if not isinstance(values, pa.Array) and values and isinstance(values[0], (bytes, bytearray)):
                values = pa.array(values, pa.binary())
            if isinstance(values, pa.Array):  # a raw fetch: cast the text
                return values.cast(pa.string()).cast(pa.int64()).to_numpy()
            return np.fromiter(values, dtype=np.int64, count=len(values))
        if isinstance(values, pa.Array):
            values = values.to_pylist()
        if self.collation is not None:
            return self.collation.keys(values)
        return np.array(
            [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in values],
            dtype=self.dtype,
        )

    def to_db(self, keys: np.ndarray) -> list:
        """A key array -> Python values to bind as SQL parameters."""
        if self.kind == "int":
            return keys.tolist()
        return [k.decode("utf-8") for k in keys.tolist()]


DENSE_SPAN = 16  # distinct integer keys are marked in a flag array while their values span at most this many a key


def sorted_distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of integer or byte-string values of which most are distinct (row ids,
    the keys of an IN query), by a sort and a mask of the changes. numpy 2.4 finds distinct values
    through a hash table first, which costs more than sorting once they are many. Where few are
    distinct (the pages of many keys) the hash table is the faster and ``np.unique`` stays (the
    timings: ``docs/measurements.md``). A float array keeps ``np.unique`` too (its NaNs are one
    value)."""
    if values.dtype.kind not in "iuS":
        return np.unique(values)
    ordered = np.sort(values, axis=None)
    if len(ordered) < 2:
        return ordered
    changes = np.empty(len(ordered), bool)
    changes[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=changes[1:])
    return ordered[changes]


def distinct_keys(keys: np.ndarray) -> np.ndarray:
    """The distinct keys, sorted, as ``np.unique`` gives them. Integer keys whose values span at
    most :data:`DENSE_SPAN` times their count - the tuples waiting on a page of R, or on the
    pages of one IN query - are marked in an array of flags over that span (at most 16 bytes a
    key, for the call) instead of sorted: one pass over the keys and one over the span, no sort
    (``np.unique`` was a visible share of HYBRIDJOIN's work-ahead thread in the pipeline:
    ``docs/measurements.md``). Others are sorted (:func:`sorted_distinct`)."""
    if keys.dtype.kind != "i" or not len(keys):
        return sorted_distinct(keys)
    lo, hi = int(keys.min()), int(keys.max())
    if hi - lo >= DENSE_SPAN * len(keys):
        return sorted_distinct(keys)
    seen = np.zeros(hi - lo + 1, bool)
    seen[keys - lo] = True
    return (np.flatnonzero(seen) + lo).astype(keys.dtype)


@dataclass
class NormalizedKeys:
    """Stream keys after normalisation.

    ``keys`` has R's key dtype; where ``reason`` is not 0 the tuple cannot join and ``keys``
    holds a placeholder.
    """

    keys: np.ndarray
    reason: np.ndarray  # int8: 0 = may join, else an Unmatched code

    @property
    def valid(self) -> np.ndarray:
        return self.reason == 0


def normalize(values: pa.Array | pa.ChunkedArray, key_type: KeyType) -> NormalizedKeys:
    """Turn a stream's key column into R's key type.

    For an integer R: integers pass; floats pass when integral (else ``bad_key``); strings pass
    when they spell an integer (CSV and JSON streams), else ``bad_key``. For a string R: strings
    pass; any other type is ``bad_key``; a string longer than R's longest key, or holding a NUL
    byte, cannot be in R and leaves as ``not_in_master`` / ``bad_key`` without any I/O. In a
    collation (``key_type.collation``), "longer" means a longer sort key.
    Nulls (and NaN) are ``null_key``.
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], values.type)
    if pa.types.is_dictionary(values.type):  # pandas categoricals, Parquet dictionary columns
        values = values.dictionary_decode()
    if pa.types.is_string_view(values.type) or pa.types.is_large_string(values.type):  # Polars, ...
        values = values.cast(pa.string())
    n = len(values)
    reason = np.zeros(n, dtype=np.int8)
    is_null = values.is_null(nan_is_null=True).to_numpy(zero_copy_only=False)
    reason[is_null] = Unmatched.NULL_KEY
    if key_type.kind == "int":
        keys = _int_keys(values, reason)
    else:
        keys = _str_keys(values, reason, key_type)
    keys[reason != 0] = keys.dtype.type(0) if key_type.kind == "int" else b""
    return NormalizedKeys(keys, reason)


def _int_keys(values: pa.Array, reason: np.ndarray) -> np.ndarray:
    t = values.type
    keys = np.zeros(len(values), dtype=np.int64)
    ok = reason == 0
    if pa.types.is_integer(t):
        if pa.types.is_uint64(t):
            raw = values.fill_null(0).to_numpy()
            too_big = raw > _INT64_MAX
            reason[ok & too_big] = Unmatched.BAD_KEY
            keys[:] = np.where(too_big, 0, raw).astype(np.int64)
        else:
            keys[:] = values.fill_null(0).cast(pa.int64()).to_numpy()
    elif pa.types.is_floating(t):
        raw = values.fill_null(0).to_numpy(zero_copy_only=False).astype(np.float64)
        integral = np.isfinite(raw) & (np.floor(raw) == raw) & (raw >= -(2.0**63)) & (raw < 2.0**63)
        reason[ok & ~integral] = Unmatched.BAD_KEY
        keys[:] = np.where(integral, raw, 0).astype(np.int64)
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        text = pc.replace_substring_regex(pc.utf8_trim_whitespace(values.fill_null("")), r"^\+([0-9])", r"\1")
        spelled = pc.match_substring_regex(text, r"^-?[0-9]{1,19}$").to_numpy(zero_copy_only=False)
        short = pc.match_substring_regex(text, r"^-?[0-9]{1,18}$").to_numpy(zero_copy_only=False)
        fits = np.flatnonzero(ok & short)  # at most 18 digits: always an int64
        keys[fits] = pc.cast(text.take(pa.array(fits, pa.int64())), pa.int64()).to_numpy()
        for i in np.flatnonzero(ok & spelled & ~short):  # 19 digits: may overflow int64
            v = int(text[int(i)].as_py())
            if _INT64_MIN <= v <= _INT64_MAX:
                keys[i] = v
            else:
                reason[i] = Unmatched.BAD_KEY
        reason[ok & ~spelled] = Unmatched.BAD_KEY
    else:
        reason[ok] = Unmatched.BAD_KEY
    return keys


def _str_keys(values: pa.Array, reason: np.ndarray, key_type: KeyType) -> np.ndarray:
    t = values.type
    ok = reason == 0
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        reason[ok] = Unmatched.BAD_KEY
        return np.zeros(len(values), dtype=key_type.dtype)
    encoded = values.fill_null("").cast(pa.binary())
    has_nul = pc.match_substring(encoded, "\x00").to_numpy(zero_copy_only=False)
    reason[ok & has_nul] = Unmatched.BAD_KEY
    if key_type.collation is not None:
        return key_type.collation.stream_keys(values.fill_null(""), reason)
    return utf8_keys(encoded, reason, key_type)


def utf8_keys(encoded: pa.Array, reason: np.ndarray, key_type: KeyType) -> np.ndarray:
    """UTF-8 strings (``binary``) -> a key array; one longer than R's longest is ``not_in_master``."""
    length = pc.binary_length(encoded).to_numpy(zero_copy_only=False)
    reason[(reason == 0) & (length > key_type.width)] = Unmatched.NOT_IN_MASTER
    raw = encoded.to_numpy(zero_copy_only=False)
    raw[reason != 0] = b""
    return raw.astype(key_type.dtype)
