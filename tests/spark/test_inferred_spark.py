"""``on_missing: inferred_member`` through Spark at partitions 1 and 2, on SQLite and MariaDB,
with R's writes captured (triggers): facts whose product the dimension lacks get a placeholder
row each - exactly one per key, through a SIGKILL between the placeholders' commit and the
batch's commit and the replay - and carry its surrogate key; the dimension's later load UPDATEs
the placeholders in place and a join after it finds the same keys, now real, inserting nothing.
With a grace period the real row is awaited first; a null key is never inferred. At partitions 2
also with the parts in this process, through a crash and replay of the draining batch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
import kill_driver
from spark_jobs import Clock, close_parts_held_here, driver_summary, generator_job

from airflow_provider_semijoin.core.stores.inferred import InferredMembers
from airflow_provider_semijoin.job.spec import JobSpec
from airflow_provider_semijoin.spark.runner import BatchProcessor, run_job
from airflow_provider_semijoin.spark.sinks import read_parquet_batch, read_parquet_sink
from airflow_provider_semijoin.workloads.stream import generator_rows
from airflow_provider_semijoin.workloads.zipf import zipf_rows

MASTER_ROWS = 400  # R holds the odd keys 1 .. 799; the stream's missing keys are even


def make_dimension(backend) -> str:
    """dim_product: surrogate key sk (auto-increment), natural key nk (unique), name, the flag."""
    table = backend.table_name()
    q = backend.quote(table)
    if backend.name == "mysql":
        backend.execute(f"CREATE TABLE {q} (sk BIGINT AUTO_INCREMENT PRIMARY KEY, nk BIGINT NOT NULL, "
                        "name VARCHAR(40) NOT NULL, inferred TINYINT NOT NULL DEFAULT 0, UNIQUE KEY (nk)) ENGINE=InnoDB")
    else:
        backend.execute(f"CREATE TABLE {q} (sk INTEGER PRIMARY KEY, nk BIGINT NOT NULL, name TEXT NOT NULL, "
                        "inferred INTEGER NOT NULL DEFAULT 0)")
        backend.execute(f"CREATE UNIQUE INDEX ux_{table} ON {q} (nk)")
    p = "%s" if backend.name == "mysql" else "?"
    cursor = backend.connection.cursor()
    cursor.executemany(f"INSERT INTO {q} (sk, nk, name) VALUES ({p}, {p}, {p})",
                       [(10_000 + i, 2 * i + 1, f"product {2 * i + 1}") for i in range(MASTER_ROWS)])
    cursor.close()
    if backend.name != "mysql":
        backend.connection.commit()
    return table


def inferring_job(tmp_path, backend, table, folder: str, **source) -> JobSpec:
    data = generator_job(tmp_path, backend.url, table, algorithm="hybridjoin", total_rows=2400,
                         master_rows=MASTER_ROWS, missing=0.3, params={"page_rows": 32}).to_dict()
    data["source"].update(rows_per_second=1e6, max_rows_per_batch=300, **source)  # a backlog: 8+ micro-batches
    step = data["steps"][0]
    step["master"]["select"] = ["sk", "name"]
    step.update(on_missing="inferred_member", inferred_member={"defaults": {"name": "unknown"}},
                master_static=False, change_capture="triggers")
    data["sinks"] = {"matched": {"path": str(tmp_path / folder / "matched")},
                     "dead_letter": {"path": str(tmp_path / folder / "dead")}}
    data["checkpoint"] = str(tmp_path / folder / "checkpoint")
    return JobSpec.from_dict(data)


def dimension_rows(backend, table) -> dict:
    """nk -> (sk, name, inferred); one row per natural key (the unique index says so too)."""
    rows = backend.execute(f"SELECT nk, sk, name, inferred FROM {backend.quote(table)}")
    assert max(Counter(r[0] for r in rows).values()) == 1
    return {int(r[0]): (int(r[1]), r[2], int(r[3])) for r in rows}


def assert_facts_carry_their_keys(spec: JobSpec, facts: pa.Table, dimension: dict, inferred: bool = True) -> None:
    """Every generated tuple is one fact (none dead: no null key), with the surrogate key and name
    of its natural key's row; the placeholders (``inferred``: still flagged) are exactly the
    stream's missing keys."""
    source = spec.source
    stream = zipf_rows(0, source.total_rows, source.master_rows, missing=source.missing, seed=source.seed)
    assert sorted(facts["tid"].to_pylist()) == stream["tid"].to_pylist()  # each tuple once
    expected = dict(zip(stream["tid"].to_pylist(), stream["nk"].to_pylist()))
    for tid, nk, sk, name in zip(*(facts[c].to_pylist() for c in ("tid", "nk", "sk", "name"))):
        assert expected[tid] == nk and dimension[nk][:2] == (sk, name), (tid, nk, sk, name)
    missing = {nk for nk in expected.values() if nk % 2 == 0}
    assert missing and {nk for nk, row in dimension.items() if row[2] == 1} == (missing if inferred else set())
    assert missing <= set(dimension)


def start_driver(spec_file, *kill) -> subprocess.Popen:
    program = [kill_driver.PATH, *kill] if kill else ["-m", "airflow_provider_semijoin.spark.driver"]
    return subprocess.Popen([sys.executable, *program, "--spec", str(spec_file), "--master", "local[2]"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
                            env={**os.environ, "PYSPARK_PYTHON": sys.executable})


def finished(driver: subprocess.Popen, timeout: float) -> str:
    try:
        out, _ = driver.communicate(timeout=timeout)
    finally:  # the driver's JVM is in its process group: never leave it behind
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    return out


@pytest.mark.timeout(900)
@pytest.mark.parametrize("partitions", [pytest.param(1, marks=pytest.mark.acceptance), 2])  # (first tier: 2 parts)
def test_a_sigkill_after_the_placeholders_commit_replays_to_the_same_keys_on_sqlite(tmp_path, sqlite_backend, partitions):
    table = make_dimension(sqlite_backend)
    spec = inferring_job(tmp_path, sqlite_backend, table, "run")
    spec.partitions = partitions
    spec_file = tmp_path / "job.json"
    spec_file.write_text(json.dumps(spec.to_dict()))
    killed_at = 2
    first = start_driver(spec_file, f"sinks:{killed_at}")  # the sinks written, the state and Spark's commit not
    finished(first, 600)
    assert first.returncode == -signal.SIGKILL
    inferred_before = {nk: row[0] for nk, row in dimension_rows(sqlite_backend, table).items() if row[2] == 1}
    batch_folder = Path(spec.sinks.matched.path) / f"batch={killed_at}"
    first_attempt = read_parquet_batch(batch_folder)
    assert inferred_before and first_attempt.num_rows  # placeholders committed, the batch's facts written once
    stream = zipf_rows(0, spec.source.total_rows, spec.source.master_rows, missing=spec.source.missing,
                       seed=spec.source.seed)
    first_seen: dict = {}
    for tid, nk in zip(stream["tid"].to_pylist(), stream["nk"].to_pylist()):
        first_seen.setdefault(nk, tid)
    in_batch = set(first_attempt["tid"].to_pylist())
    assert any(first_seen[nk] in in_batch for nk in inferred_before)  # the killed batch inserted some itself

    out = finished(start_driver(spec_file), 600)
    assert driver_summary(out)["stopped_by"] == "end_of_input", out[-2000:]
    dimension = dimension_rows(sqlite_backend, table)
    assert all(dimension[nk][0] == sk for nk, sk in inferred_before.items())  # no second placeholder, same key
    replayed = read_parquet_batch(batch_folder)
    first_keys = dict(zip(first_attempt["tid"].to_pylist(), first_attempt["sk"].to_pylist()))
    replayed_keys = dict(zip(replayed["tid"].to_pylist(), replayed["sk"].to_pylist()))
    both = first_keys.keys() & replayed_keys.keys()
    assert both and all(first_keys[tid] == replayed_keys[tid] for tid in both)  # written by both: the same keys
    # (which tuples complete in a batch is not the same in a replay, at 1 part as at 2: a slice steps
    # for a time while tuples wait, and the first attempt's rows include what its work-ahead completed;
    # a clean-clone run once had 36 more in the replay at 1 part. Each tuple lands once, below.)
    facts = read_parquet_sink(spec.sinks.matched.path)
    assert read_parquet_sink(spec.sinks.dead_letter.path).num_rows == 0
    assert_facts_carry_their_keys(spec, facts, dimension)  # each tuple once
    # the product feed lands: the load UPDATEs each placeholder in place, and every fact's key stays valid
    sqlite_backend.execute(f"UPDATE {sqlite_backend.quote(table)} SET name = 'product ' || nk, inferred = 0 "
                           "WHERE inferred = 1")
    loaded = dimension_rows(sqlite_backend, table)
    assert {nk: row[0] for nk, row in loaded.items()} == {nk: row[0] for nk, row in dimension.items()}
    by_sk = {row[0]: (nk, row[2]) for nk, row in loaded.items()}
    assert all(by_sk[sk] == (nk, 0) for sk, nk in zip(facts["sk"].to_pylist(), facts["nk"].to_pylist()))


@pytest.mark.mysql
@pytest.mark.timeout(600)
@pytest.mark.parametrize("partitions", [1, 2])
def test_the_real_load_updates_the_placeholders_and_a_later_join_finds_the_same_keys_on_mariadb(
        spark, tmp_path, mysql_backend, monkeypatch, partitions):
    """Also: a key is inferred once - the running join (at partitions 2: each part in its Spark
    task) sees each placeholder through change capture, so no later tuple of its key leaves
    unmatched to be inferred again (the real transactions, watched: each call's keys asked and
    placeholders inserted)."""
    table = make_dimension(mysql_backend)
    spec = inferring_job(tmp_path, mysql_backend, table, "before")
    spec.partitions = partitions
    calls = []
    infer_once = InferredMembers._infer_once

    def watched(members, values):
        rows, inserted = infer_once(members, values)
        calls.append((len(values), inserted))
        return rows, inserted

    monkeypatch.setattr(InferredMembers, "_infer_once", watched)
    assert run_job(spec, spark=spark)["stopped_by"] == "end_of_input"
    assert len(calls) > 3 and all(asked == inserted for asked, inserted in calls), calls
    inferring_calls = len(calls)
    dimension = dimension_rows(mysql_backend, table)
    facts = read_parquet_sink(spec.sinks.matched.path)
    assert read_parquet_sink(spec.sinks.dead_letter.path).num_rows == 0
    assert_facts_carry_their_keys(spec, facts, dimension)
    assert {row[1] for row in dimension.values() if row[2] == 1} == {"unknown"}

    # the product feed lands: the load UPDATEs each placeholder in place (the key stays)
    mysql_backend.execute(f"UPDATE {mysql_backend.quote(table)} SET name = CONCAT('product ', nk), inferred = 0 "
                          "WHERE inferred = 1")
    loaded = dimension_rows(mysql_backend, table)
    assert all(loaded[nk][0] == dimension[nk][0] and loaded[nk][2] == 0 for nk in dimension)
    again = inferring_job(tmp_path, mysql_backend, table, "after")  # the same stream again, a new query
    again.partitions = partitions
    assert run_job(again, spark=spark)["stopped_by"] == "end_of_input"
    later = read_parquet_sink(again.sinks.matched.path)
    assert dimension_rows(mysql_backend, table) == loaded  # nothing inferred: every key is real now
    assert len(calls) == inferring_calls  # and no tuple of the second query left unmatched
    assert_facts_carry_their_keys(again, later, loaded, inferred=False)
    by_tid = dict(zip(facts["tid"].to_pylist(), facts["sk"].to_pylist()))
    assert all(by_tid[tid] == sk for tid, sk in zip(later["tid"].to_pylist(), later["sk"].to_pylist()))




def test_with_a_grace_period_the_real_row_is_awaited_then_a_placeholder_inferred_and_null_keys_die(
        tmp_path, sqlite_backend):
    """``inferred_member`` with ``retry_grace_s`` (driven through the ``foreachBatch`` body, no
    Spark): a missing key is held first, not inferred; one whose real row lands within the grace
    joins it; past the grace the rest get a placeholder each; a null key goes to the dead letter."""
    table = make_dimension(sqlite_backend)
    spec = inferring_job(tmp_path, sqlite_backend, table, "grace")
    spec.steps[0].retry_grace_s = 5.0
    spec.stop.end_of_input = False
    clock = Clock()
    rows = generator_rows(spec.source.settings(), 0, 120)
    keys = rows["nk"].to_pylist()
    nulls = [i for i in range(0, 120, 17)]
    rows = rows.set_column(rows.column_names.index("nk"), "nk",
                           pa.array([None if i in nulls else k for i, k in enumerate(keys)], pa.int64()))
    rows = rows.append_column("sj_arrival", pa.array([clock.now] * rows.num_rows))
    processor = BatchProcessor(spec, None, False, clock)
    try:
        processor.process(rows, 0)
        assert processor.steps[0].held is not None and processor.steps[0].held.num_rows
        assert len(dimension_rows(sqlite_backend, table)) == MASTER_ROWS  # nothing inferred within the grace
        missing = sorted({k for i, k in enumerate(keys) if i not in nulls and k % 2 == 0})
        late = missing[0]
        sqlite_backend.execute(f"INSERT INTO {sqlite_backend.quote(table)} (sk, nk, name) VALUES (1, ?, 'arrived')",
                               (late,))
        clock.now += 1.0
        processor.process(rows.slice(0, 0), 1)
        clock.now += 10.0  # past the grace
        processor.request_drain("end_of_input")
        processor.process(rows.slice(0, 0), 2)
        assert processor.steps[0].held is None
    finally:
        processor.close()
    dimension = dimension_rows(sqlite_backend, table)
    assert {nk for nk, row in dimension.items() if row[2] == 1} == set(missing) - {late}
    facts = read_parquet_sink(spec.sinks.matched.path)
    dead = read_parquet_sink(spec.sinks.dead_letter.path)
    assert sorted(int(i) for i in dead["sj_id"].to_pylist()) == nulls and set(dead["reason"].to_pylist()) == {"null_key"}
    assert sorted(facts["tid"].to_pylist()) == [i for i in range(120) if i not in nulls]
    for nk, sk, name in zip(*(facts[c].to_pylist() for c in ("nk", "sk", "name"))):
        assert dimension[nk][:2] == (sk, name)
    assert {name for nk, name in zip(facts["nk"].to_pylist(), facts["name"].to_pylist()) if nk == late} == {"arrived"}


def test_at_partitions_2_one_placeholder_per_key_through_a_crash_and_replay(tmp_path, backend, monkeypatch):
    """``partitions: 2`` with the parts' code in this process (``BatchProcessor(spec, None, ...)``,
    as ``test_parts_exact``): the parts return the tuples whose key R lacks, the driver infers
    them. The last batch drains the join; once its placeholders and sinks are written the
    driver's memory and the parts' sessions are lost (a crash before Spark's commit) and it is
    replayed, reading R as its first attempt did (before its placeholders): it asks for the same
    keys, inserts none, and its facts carry the keys of the first attempt; every fact carries its
    key's row, one placeholder per key; the later real load keeps the facts' keys valid."""
    table = make_dimension(backend)
    spec = inferring_job(tmp_path, backend, table, "parts")
    spec.partitions, spec.work_ahead = 2, False
    clock = Clock()
    batches = [generator_rows(spec.source.settings(), first, first + 300) for first in range(0, 2400, 300)]
    last = len(batches) - 1
    last_folder = Path(spec.sinks.matched.path) / f"batch={last}"

    def process(processor: BatchProcessor, batch_id: int) -> None:
        if batch_id == last:
            processor.request_drain("end_of_input")
        rows = batches[batch_id]
        processor.process(rows.append_column("sj_arrival", pa.array([clock.now] * rows.num_rows)), batch_id)
        clock.now += 1.0

    processor = BatchProcessor(spec, None, False, clock)
    try:
        assert processor.steps[0].partitioned is not None
        for batch_id in range(last):
            process(processor, batch_id)
        inferred_earlier = {nk for nk, row in dimension_rows(backend, table).items() if row[2] == 1}
        process(processor, last)
        assert processor.drained == "end_of_input"
        inferred_before = {nk: row[0] for nk, row in dimension_rows(backend, table).items() if row[2] == 1}
        first_attempt = read_parquet_batch(last_folder)
    finally:
        processor.close()  # the crash: the driver's memory lost ...
        close_parts_held_here()  # ... and the parts' sessions with its workers
    inferred_by_the_crashed = set(inferred_before) - inferred_earlier
    assert inferred_earlier and inferred_by_the_crashed  # placeholders committed by the batch then lost
    asked, rows_of = set(), InferredMembers.rows_of

    def watched(members, keys):
        asked.update(keys.to_pylist())
        return rows_of(members, keys)

    monkeypatch.setattr(InferredMembers, "rows_of", watched)
    processor = BatchProcessor(spec, None, False, clock)
    try:
        process(processor, last)  # again: Spark had not committed it
        assert processor.drained == "end_of_input" and processor.steps[0].inferred.inserted == 0
    finally:
        processor.close()
        close_parts_held_here()
    assert inferred_by_the_crashed <= asked  # read back, not inserted again
    dimension = dimension_rows(backend, table)
    assert {nk: row[0] for nk, row in dimension.items() if row[2] == 1} == inferred_before  # one placeholder each
    replayed = read_parquet_batch(last_folder)
    assert sorted(zip(replayed["tid"].to_pylist(), replayed["sk"].to_pylist())) == sorted(
        zip(first_attempt["tid"].to_pylist(), first_attempt["sk"].to_pylist()))
    facts = read_parquet_sink(spec.sinks.matched.path)
    assert read_parquet_sink(spec.sinks.dead_letter.path).num_rows == 0
    assert_facts_carry_their_keys(spec, facts, dimension)  # each tuple once, with its key's placeholder or row
    # the product feed lands: the load UPDATEs each placeholder in place, and every fact's key stays valid
    backend.execute(f"UPDATE {backend.quote(table)} SET name = 'loaded', inferred = 0 WHERE inferred = 1")
    loaded = dimension_rows(backend, table)
    assert {nk: row[0] for nk, row in loaded.items()} == {nk: row[0] for nk, row in dimension.items()}
    by_sk = {row[0]: (nk, row[2]) for nk, row in loaded.items()}
    assert all(by_sk[sk] == (nk, 0) for sk, nk in zip(facts["sk"].to_pylist(), facts["nk"].to_pylist()))


@pytest.mark.mysql
def test_a_user_who_may_read_but_not_insert_into_the_dimension_is_refused_at_start_on_mariadb(
        tmp_path, mysql_backend, mysql_url):
    """A real user with SELECT on R but not INSERT (made as root over the socket, dropped at the
    end): the job refuses to start, in one sentence, and writes nothing."""
    import MySQLdb

    from airflow_provider_semijoin.core.errors import ConfigError
    from airflow_provider_semijoin.core.stores.sql import DatabaseURL

    table = make_dimension(mysql_backend)
    url = DatabaseURL.parse(mysql_url)
    reader = f"mysql://sj_readonly:pw@{url.host}:{url.port}/{url.database}"
    spec = inferring_job(tmp_path, mysql_backend, table, "readonly")
    spec.steps[0].master.url, spec.steps[0].master_static, spec.steps[0].change_capture = reader, True, None
    root = MySQLdb.connect(unix_socket="/run/mysqld/mysqld.sock", user="root", autocommit=True)
    cursor = root.cursor()
    cursor.execute("CREATE OR REPLACE USER 'sj_readonly'@'127.0.0.1' IDENTIFIED BY 'pw'")
    try:
        cursor.execute(f"GRANT SELECT ON `{url.database}`.`{table}` TO 'sj_readonly'@'127.0.0.1'")
        with pytest.raises(ConfigError, match=rf"^steps\[0\]\.inferred_member: cannot insert placeholders into "
                                              rf"'{table}' \(INSERT command denied to user 'sj_readonly'@"
                                              rf"'127\.0\.0\.1' for table .*{table}.*\); expected a user who may "
                                              r"write the table$"):
            BatchProcessor(spec, None, False, Clock())
    finally:
        cursor.execute("DROP USER IF EXISTS 'sj_readonly'@'127.0.0.1'")
        root.close()
    assert len(dimension_rows(mysql_backend, table)) == MASTER_ROWS  # nothing written
