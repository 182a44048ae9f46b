"""A MariaDB system-versioned dimension whose versions real statements made at controlled system
times (``SET @@timestamp``), a stream over it, and the database's own as-of join over its
system periods: shared by the core and the Spark tests of issue 55's ``system_time``."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import numpy as np
import pyarrow as pa

START = dt.datetime(2026, 1, 1)


def epoch(day: float) -> float:
    return (START + dt.timedelta(days=day)).replace(tzinfo=dt.timezone.utc).timestamp()


def at(backend, day: float, sql: str, params=()) -> None:
    """``sql`` committed at system time ``day`` (days after START, UTC)."""
    backend.execute(f"SET @@timestamp = {epoch(day)}")
    try:
        backend.execute(sql, params)
    finally:
        backend.execute("SET @@timestamp = DEFAULT")


def versioned_dimension(backend, rng, keys: int = 30) -> str:
    """Keys 0, 2, .. (odd keys never in R): inserted at some day, updated 0-3 times, some deleted,
    some of those inserted again after a gap; every statement at its own system time."""
    table = backend.table_name()
    backend.execute(f"CREATE TABLE `{table}` (id INT PRIMARY KEY, nk BIGINT NOT NULL, sk BIGINT NOT NULL, "
                    "KEY (nk)) WITH SYSTEM VERSIONING")
    events, sk = [], 1
    for nk in range(0, 2 * keys, 2):
        day = float(rng.integers(0, 30)) + rng.random()
        events.append((day, "INSERT INTO `%s` (id, nk, sk) VALUES (%d, %d, %d)" % (table, nk, nk, sk)))
        for _ in range(int(rng.integers(0, 4))):
            day, sk = day + float(rng.integers(1, 20)) + rng.random(), sk + 1
            events.append((day, "UPDATE `%s` SET sk = %d WHERE id = %d" % (table, sk, nk)))
        if rng.random() < 0.3:
            day += float(rng.integers(1, 20))
            events.append((day, "DELETE FROM `%s` WHERE id = %d" % (table, nk)))
            if rng.random() < 0.5:  # back after a gap, a new surrogate key
                day, sk = day + float(rng.integers(5, 15)), sk + 1
                events.append((day, "INSERT INTO `%s` (id, nk, sk) VALUES (%d, %d, %d)" % (table, nk, nk, sk)))
        sk += 1
    for day, sql in sorted(events):
        at(backend, day, sql)
    return table


def stream(rng, n: int = 400, keys: int = 30) -> pa.Table:
    """Tuples of keys in and out of R, event times in no order over days -5..120 (before any
    version, between, after the last), a few null."""
    seconds = rng.integers(-5 * 86400, 120 * 86400, n)
    times = [START + dt.timedelta(seconds=int(s), microseconds=int(rng.integers(0, 10**6))) for s in seconds]
    for i in rng.choice(n, 5, replace=False):
        times[i] = None
    return pa.table({"tid": pa.array(np.arange(n), pa.int64()), "nk": pa.array(rng.integers(0, 2 * keys + 4, n), pa.int64()),
                     "sold_at": pa.array(times, pa.timestamp("us", "UTC"))})


def databases_join(backend, table: str, tuples: pa.Table) -> dict:
    """tid -> sk of the database's own as-of join over the system periods (UTC session)."""
    s = backend.table_name()
    backend.execute(f"CREATE TABLE `{s}` (tid BIGINT, nk BIGINT, sold_at DATETIME(6) NULL)")
    cursor = backend.connection.cursor()
    cursor.executemany(f"INSERT INTO `{s}` VALUES (%s, %s, %s)", [
        (r["tid"], r["nk"], r["sold_at"] and r["sold_at"].strftime("%Y-%m-%d %H:%M:%S.%f")) for r in tuples.to_pylist()])
    cursor.close()
    backend.execute("SET time_zone = '+00:00'")  # sold_at is UTC; ROW_START/ROW_END compare in the session's zone
    try:
        rows = backend.execute(f"SELECT s.tid, r.sk FROM `{s}` s JOIN `{table}` FOR SYSTEM_TIME ALL r ON s.nk = r.nk "
                               "AND s.sold_at >= r.ROW_START AND s.sold_at < r.ROW_END")
    finally:
        backend.execute("SET time_zone = DEFAULT")
    pairs = Counter(int(t) for t, _ in rows)
    assert max(pairs.values(), default=1) == 1  # system periods of a key never overlap
    return {int(t): int(sk) for t, sk in rows}


def expected(backend, table: str, tuples: pa.Table) -> dict:
    """The database's answer, and for every other tuple its reason: a null event time, no
    version valid then (a key R ever held), or not in R at all."""
    joined = databases_join(backend, table, tuples)
    ever = {int(r[0]) for r in backend.execute(f"SELECT DISTINCT nk FROM `{table}` FOR SYSTEM_TIME ALL")}
    answer = {}
    for r in tuples.to_pylist():
        if r["nk"] not in ever:
            answer[r["tid"]] = "not_in_master"
        elif r["sold_at"] is None:
            answer[r["tid"]] = "null_event_time"
        else:
            answer[r["tid"]] = joined.get(r["tid"], "no_version_valid")
    return answer
