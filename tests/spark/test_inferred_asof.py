"""``on_missing: inferred_member`` with ``as_of`` (issue 55): late-arriving facts on a type-2
dimension, on SQLite and MariaDB, at partitions 1 and 2 (the parts' code in this process,
``BatchProcessor(spec, None, ...)`` as in ``test_parts_exact``).

A natural key the dimension lacks altogether gets one placeholder, valid from the beginning of
time and open-ended, so each of its facts - whatever its event time - carries its surrogate key;
a key the dimension holds whose versions miss the event time is never inferred
(``no_version_valid``, dead letter), nor is a tuple without an event time. A key whose real
versions another writer commits just before the placeholders' transaction gets no placeholder:
each tuple takes the real version valid at its event time. At the end the fact table equals
the database's own as-of join, and the dimension's later load, UPDATEing the placeholders in
place, keeps every fact's key valid.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pyarrow as pa
import pytest

from airflow_provider_semijoin.core.errors import SpecError
from airflow_provider_semijoin.core.stores.inferred import InferredMembers
from airflow_provider_semijoin.spark.runner import BatchProcessor
from airflow_provider_semijoin.spark.sinks import read_parquet_sink
from spark_jobs import Clock, close_parts_held_here, landing_job

START = dt.datetime(2026, 1, 1)
BEGINNING = {"mysql": dt.datetime(1000, 1, 1), "sqlite": "0001-01-01 00:00:00"}  # a DATETIME's earliest


def day(n: int) -> str:
    return (START + dt.timedelta(days=n)).strftime("%Y-%m-%d %H:%M:%S")


def type_2_dimension(backend) -> str:
    """dim_customer: surrogate key sk (auto-increment), natural key nk, versions [valid_from,
    valid_to); keys 1 (two versions, a gap between them), 3 (current since day 0), 5 (from day 100)."""
    table = backend.table_name()
    q = backend.quote(table)
    sk = "sk BIGINT AUTO_INCREMENT PRIMARY KEY" if backend.name == "mysql" else "sk INTEGER PRIMARY KEY"
    backend.execute(f"CREATE TABLE {q} ({sk}, nk BIGINT NOT NULL, name VARCHAR(40) NOT NULL DEFAULT 'n/a', "
                    "valid_from DATETIME NOT NULL, valid_to DATETIME NULL, inferred INTEGER NOT NULL DEFAULT 0)")
    backend.execute(f"CREATE INDEX ix_{table} ON {q} (nk, valid_from)")
    for row in [(100, 1, day(0), day(40)), (101, 1, day(50), None), (102, 3, day(0), None), (103, 5, day(100), None)]:
        insert_version(backend, table, *row)
    return table


def insert_version(backend, table: str, sk: int, nk: int, valid_from: str, valid_to: str | None) -> None:
    p = "%s" if backend.name == "mysql" else "?"
    backend.execute(f"INSERT INTO {backend.quote(table)} (sk, nk, name, valid_from, valid_to) VALUES ({p}, {p}, {p}, "
                    f"{p}, {p})", (sk, nk, f"customer {nk}", valid_from, valid_to))


def batch(clock: Clock, first_tid: int, sales: list[tuple[int, int | None]]) -> pa.Table:
    """Sales ``(nk, day of the event or None)`` from ``first_tid`` on."""
    times = [None if d is None else START + dt.timedelta(days=d, hours=7) for _, d in sales]
    return pa.table({"tid": pa.array(range(first_tid, first_tid + len(sales)), pa.int64()),
                     "nk": pa.array([nk for nk, _ in sales], pa.int64()),
                     "sold_at": pa.array(times, pa.timestamp("us", "UTC")),
                     "sj_arrival": pa.array([clock.now] * len(sales))})


FIRST = [(1, 10), (1, 45), (1, 60), (3, 5), (5, 10), (5, 120),  # known keys: a version, the gap, before the first
         (2, 20), (2, -20_000), (4, 50), (6, None),  # unknown: 2 at any time (even 1971), 4; 6 without a time
         (8, 30), (8, 70), (10, 30)]  # unknown when joined; their real versions land just before the inference
SECOND = [(2, 500), (4, 1), (8, 65), (1, 55), (12, 3)]


def step(backend, table: str, algorithm: str) -> dict:
    return {"column": "nk", "master": {"url": backend.url, "table": table, "key": "nk", "select": ["sk", "name"]},
            "algorithm": algorithm, "memory": "1M", "change_capture": "triggers", "max_queue_time_s": 2.0,
            "params": {"page_rows": 2} if algorithm != "inlj" else {},
            "on_missing": "inferred_member", "inferred_member": {"defaults": {"name": "inferred"}},
            "as_of": {"event_time": "sold_at", "valid_from": "valid_from", "valid_to": "valid_to"}}


@pytest.mark.parametrize("partitions, algorithm", [(1, "hybridjoin"), (2, "hybridjoin"), (2, "cachejoin"), (1, "inlj")])
def test_a_key_the_type_2_dimension_lacks_gets_one_placeholder_valid_at_every_time(tmp_path, backend, monkeypatch,
                                                                                     partitions, algorithm):
    table = type_2_dimension(backend)
    spec = landing_job(tmp_path, "tid BIGINT, nk BIGINT, sold_at TIMESTAMP", [step(backend, table, algorithm)],
                       partitions, work_ahead=False)
    spec.source.id_column = "tid"
    infer_once, late = InferredMembers._infer_once, []

    def another_writer_first(members, values):
        """The real versions of keys 8 and 10 committed by another writer just before the
        placeholders' transaction (the join had found neither): the moment is chosen here, the
        writes are real."""
        if not late:
            late.append(True)
            insert_version(backend, table, 200, 8, day(0), day(60))
            insert_version(backend, table, 201, 8, day(60), None)
            insert_version(backend, table, 202, 10, day(100), None)
        return infer_once(members, values)

    monkeypatch.setattr(InferredMembers, "_infer_once", another_writer_first)
    clock = Clock()
    processor = BatchProcessor(spec, None, False, clock)
    try:
        for batch_id, (first_tid, sales) in enumerate([(0, FIRST), (100, SECOND)]):
            if batch_id == 1:
                processor.request_drain("end_of_input")
            processor.process(batch(clock, first_tid, sales), batch_id)
            clock.now += 1.0
        assert processor.drained == "end_of_input" and processor.steps[0].carried.count == 0
        inserted = processor.steps[0].inferred.inserted
    finally:
        processor.close()
        close_parts_held_here()

    rows = backend.execute(f"SELECT nk, sk, name, valid_from, valid_to, inferred FROM {backend.quote(table)}")
    placeholders = [(nk, name, valid_from, valid_to) for nk, _, name, valid_from, valid_to, flag in rows if flag]
    # one each: not 8 or 10 (real), 5 (known), 6 (no time); valid at every time
    assert sorted(placeholders) == [(nk, "inferred", BEGINNING[backend.name], None) for nk in (2, 4, 12)]
    assert inserted == 3 and Counter(nk for nk, *_ in rows) == {1: 2, 2: 1, 3: 1, 4: 1, 5: 1, 8: 2, 10: 1, 12: 1}
    facts = read_parquet_sink(spec.sinks.matched.path)
    dead = read_parquet_sink(spec.sinks.dead_letter.path)
    got = dict(zip(facts["tid"].to_pylist(), facts["sk"].to_pylist()))
    sales = FIRST + SECOND
    tids = list(range(len(FIRST))) + list(range(100, 100 + len(SECOND)))
    assert got == {tid: sk for tid, sk in databases_join(backend, table, tids, sales).items() if sk is not None}
    assert {tids[sales.index((8, 30))]: 200, tids[sales.index((8, 70))]: 201}.items() <= got.items()  # real versions
    assert sorted(zip((int(i) for i in dead["sj_id"].to_pylist()), dead["reason"].to_pylist())) == [
        (1, "no_version_valid"), (4, "no_version_valid"), (9, "not_in_master"), (12, "no_version_valid")]  # 1 in its gap,
    # 5 and 10 before their first version, 6 without an event time
    # the customer feed lands: the load UPDATEs each placeholder in place, and every fact's key stays valid
    backend.execute(f"UPDATE {backend.quote(table)} SET name = 'loaded', inferred = 0 WHERE inferred = 1")
    assert got == {tid: sk for tid, sk in databases_join(backend, table, tids, sales).items() if sk is not None}


def databases_join(backend, table: str, tids: list[int], sales: list[tuple]) -> dict:
    """tid -> the sk of the database's own as-of join (None: no version valid, or no time)."""
    p = "%s" if backend.name == "mysql" else "?"
    found = {}
    for tid, (nk, d) in zip(tids, sales):
        at = None if d is None else (START + dt.timedelta(days=d, hours=7)).strftime("%Y-%m-%d %H:%M:%S")
        rows = backend.execute(f"SELECT r.sk FROM {backend.quote(table)} r WHERE r.nk = {p} AND {p} >= r.valid_from "
                               f"AND ({p} < r.valid_to OR r.valid_to IS NULL)", (nk, at, at))
        assert len(rows) <= 1
        found[tid] = int(rows[0][0]) if rows else None
    return found


def test_a_default_for_a_version_column_is_refused_before_work_starts(tmp_path, sqlite_backend):
    given = {**step(sqlite_backend, "dim_customer", "hybridjoin"), "inferred_member": {"defaults": {"valid_to": None}}}
    with pytest.raises(SpecError, match=r"inferred_member\.defaults\.valid_to: is a version column of as_of, which "
                                        r"the placeholder sets itself \(valid from the beginning of time, open-ended\)$"):
        landing_job(tmp_path, "tid BIGINT, nk BIGINT, sold_at TIMESTAMP", [given], 1)
