"""A small type-2 dimension and streams for the as-of tests (issue 55): R with several versions
per key, gaps between them, last versions open or closed, odd keys not in R; streams whose event
times are in no order, some null; the database's own as-of join as the oracle."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

START = dt.datetime(2026, 1, 1)
UNKNOWN = -1  # the surrogate key of a tuple no version matched, in the oracle
BEFORE_1970 = (9_999, 80, 9_999, "1969-12-31 23:59:59", "1970-01-01 00:00:01")  # a version of a key versions() lacks


def day(n: int) -> str:
    return (START + dt.timedelta(days=n)).strftime("%Y-%m-%d %H:%M:%S")


def versions(rng) -> list[tuple]:
    """(id, nk, sk, valid_from, valid_to) rows: keys 0..39 (even keys only: odd keys are not in R),
    1-4 versions each over days 0..150, a gap after some versions, the last one open or closed."""
    rows, sk = [], 1000
    for nk in range(0, 80, 2):
        start = int(rng.integers(0, 40))
        for v in range(int(rng.integers(1, 5))):
            end = start + int(rng.integers(5, 40))
            last = v == 3 or rng.random() < 0.3
            open_end = last and rng.random() < 0.6
            rows.append((len(rows) + 1, nk, sk, day(start), None if open_end else day(end)))
            sk += 1
            if last:
                break
            start = end + (int(rng.integers(1, 10)) if rng.random() < 0.4 else 0)  # a gap, or none
    return rows


def write_dimension(backend, rows) -> str:
    table = backend.table_name()
    q = backend.quote
    backend.execute(f"CREATE TABLE {q(table)} (id INTEGER PRIMARY KEY, nk BIGINT NOT NULL, sk BIGINT NOT NULL, "
                    "valid_from DATETIME NOT NULL, valid_to DATETIME NULL)")
    backend.execute(f"CREATE INDEX ix_{table}_nk_from ON {q(table)} (nk, valid_from)")
    mark = "%s" if backend.name == "mysql" else "?"
    cursor = backend.connection.cursor()
    cursor.executemany(f"INSERT INTO {q(table)} (id, nk, sk, valid_from, valid_to) VALUES ({', '.join([mark] * 5)})", rows)
    cursor.close()
    return table


def stream_file(rng, first_tid: int, n: int, days: tuple[int, int], nulls: int = 0) -> pa.Table:
    """Tuples of keys in and out of R, event times in no order within ``days``, ``nulls`` of them null."""
    seconds = rng.integers(days[0] * 86400, days[1] * 86400, n)
    times = [START + dt.timedelta(seconds=int(s)) for s in seconds]
    for i in rng.choice(n, nulls, replace=False) if nulls else []:
        times[i] = None
    return pa.table({"tid": pa.array(np.arange(first_tid, first_tid + n), pa.int64()),
                     "nk": pa.array(rng.integers(0, 84, n), pa.int64()),
                     "sold_at": pa.array(times, pa.timestamp("us", "UTC"))})


def near_bounds(rows: list[tuple], nanoseconds: tuple[int, ...] = (1, 500, 999)) -> pa.Table:
    """Tuples of R's keys (``rows``: :func:`versions`) whose event times, in nanoseconds, are
    ``nanoseconds`` before and after each bound of each version: a time is valid from its
    microsecond's floor on, so a round to the nearest microsecond moves the half of them nearer
    the next one."""
    bounds = pa.array([b for r in rows for b in r[3:] if b is not None]).cast(pa.timestamp("ns")).cast(pa.int64())
    keys = [r[1] for r in rows for b in r[3:] if b is not None]
    shifts = [sign * n for n in nanoseconds for sign in (-1, 1)]
    times = np.add.outer(bounds.to_numpy(), np.array(shifts, np.int64)).ravel()
    return pa.table({"tid": pa.array(np.arange(len(times)), pa.int64()),
                     "nk": pa.array(np.repeat(keys, len(shifts)), pa.int64()),
                     "sold_at": pa.array(times, pa.int64()).cast(pa.timestamp("ns"))})


def databases_join(backend, table: str, tuples: pa.Table) -> Counter:
    """The database's own as-of join of ``tuples`` with R, as a multiset of (tid, sk or UNKNOWN).
    Each event time goes in as ISO text with every digit of its unit: SQLite compares the text,
    so its answer holds to the nanosecond."""
    q = backend.quote
    stream = backend.table_name()
    backend.execute(f"CREATE TABLE {q(stream)} (tid BIGINT, nk BIGINT, sold_at DATETIME NULL)")
    mark = "%s" if backend.name == "mysql" else "?"
    cursor = backend.connection.cursor()
    times = pc.strftime(tuples["sold_at"], "%Y-%m-%d %H:%M:%S").to_pylist()
    cursor.executemany(f"INSERT INTO {q(stream)} VALUES ({mark}, {mark}, {mark})",
                       list(zip(tuples["tid"].to_pylist(), tuples["nk"].to_pylist(), times)))
    cursor.close()
    rows = backend.execute(
        f"SELECT s.tid, r.sk FROM {q(stream)} s LEFT JOIN {q(table)} r ON s.nk = r.nk AND s.sold_at >= r.valid_from "
        "AND (s.sold_at < r.valid_to OR r.valid_to IS NULL)")
    return Counter((int(tid), UNKNOWN if sk is None else int(sk)) for tid, sk in rows)
