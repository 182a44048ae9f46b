"""The oracle: a plain hash join of a stream with all of R, one Python tuple at a time.

It shares no code path with the algorithms (no page map, no numpy key arrays, no probe): it
reads R whole with one query into a dict and looks every stream value up in it, deciding
``null_key`` / ``bad_key`` from the values themselves. Tests and ``semijoin demo`` compare an
algorithm's output with it as multisets of (stream row id, master row) pairs and
(stream row id, reason) pairs. It compares text exactly, as a binary collation does; for a key
in another collation the database's own join is the oracle (``tests/joins/test_collation.py``).
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict

import pyarrow as pa

from .stores.base import MasterStore

_INTEGER = re.compile(r"^\s*[+-]?[0-9]+\s*$")


def _oracle_key(value, kind: str):
    """``(key, reason)`` for one stream value against R's key kind."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None, "null_key"
    if kind == "int":
        if isinstance(value, bool):
            return None, "bad_key"
        if isinstance(value, int):
            key = value
        elif isinstance(value, float) and value.is_integer():
            key = int(value)
        elif isinstance(value, str) and _INTEGER.match(value):
            key = int(value.strip())  # \s also matches \x1c-\x1f, which int() refuses
        else:
            return None, "bad_key"
        return (key, None) if -(2**63) <= key < 2**63 else (None, "bad_key")
    if not isinstance(value, str) or "\x00" in value:
        return None, "bad_key"
    return value, None


def hash_join(store: MasterStore, stream: pa.Table, stream_key: str) -> tuple[Counter, Counter]:
    """``(matched, unmatched)`` as Counters of ``(row id, master row tuple)`` / ``(row id, reason)``."""
    columns = ", ".join([store.dialect.quote(store.key)] + [store.dialect.quote(c) for c in store.select])
    cursor = store.connection.cursor()
    cursor.execute(f"SELECT {columns} FROM {store.dialect.quote(store.table)}")
    table = defaultdict(list)
    for row in cursor.fetchall():
        key = row[0].decode("utf-8") if isinstance(row[0], (bytes, bytearray)) else row[0]
        table[key].append(tuple(row[1:]))
    cursor.close()
    matched, unmatched = Counter(), Counter()
    for row_id, value in enumerate(stream[stream_key].to_pylist()):
        key, reason = _oracle_key(value, store.key_type.kind)
        if reason:
            unmatched[(row_id, reason)] += 1
        elif key in table:
            for master_row in table[key]:
                matched[(row_id, master_row)] += 1
        else:
            unmatched[(row_id, "not_in_master")] += 1
    return matched, unmatched


def engine_pairs(matched: pa.Table, unmatched: pa.Table, select: list[str], row_id: str) -> tuple[Counter, Counter]:
    """An engine run's output tables in the oracle's form (``row_id`` names the stream position column)."""
    master = [matched[c].to_pylist() for c in select]
    pairs = Counter(
        (rid, tuple(col[i] for col in master)) for i, rid in enumerate(matched[row_id].to_pylist())
    )
    reasons = Counter(zip(unmatched[row_id].to_pylist(), unmatched["reason"].to_pylist()))
    return pairs, reasons
