"""Bad configuration fails before the query starts; malformed landing rows go to the dead letter."""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from spark_jobs import SELECT, generator_job, write_master

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.stores import DatabaseURL, write_table
from airflow_provider_semijoin.core.stores.capture import capture_enabled
from airflow_provider_semijoin.spark.runner import run_job
from airflow_provider_semijoin.spark.sinks import read_parquet_sink
from airflow_provider_semijoin.job.spec import JobSpec


def no_query_started(spark):
    return spark.streams.active == []


def test_missing_table_fails_before_the_query(spark, tmp_path, sqlite_backend):
    write_master(sqlite_backend, 10)
    spec = generator_job(tmp_path, sqlite_backend.url, "no_such_table")
    with pytest.raises(ConfigError, match=r"^steps\[0\]\.master: .*no_such_table"):
        run_job(spec, spark=spark)
    assert no_query_started(spark) and not (tmp_path / "checkpoint").exists()


def test_a_master_whose_changes_are_not_captured_fails_before_the_query(spark, tmp_path, sqlite_backend):
    """No silent staleness: R's writes not captured and master_static not said, the job does
    not start; change_capture: triggers captures them at start, master_static accepts R as it is."""
    store = write_master(sqlite_backend, 10)
    data = generator_job(tmp_path, sqlite_backend.url, store.table, total_rows=20).to_dict()
    del data["steps"][0]["master_static"]
    with pytest.raises(ConfigError, match=(
            rf"^steps\[0\]\.master: changes other writers make to '{store.table}' would not be seen by this running "
            rf"join; capture them \(`semijoin changes enable --master URL --table {store.table} --key nk`, or "
            r"change_capture: triggers or binlog on the step\), set refresh: \{every_s: N\} to read it anew every N s, "
            r"or set master_static: true if nothing but this provider's installs changes it$")):
        run_job(JobSpec.from_dict(data), spark=spark)
    assert no_query_started(spark) and not (tmp_path / "checkpoint").exists()
    assert not capture_enabled(store)
    data["steps"][0]["change_capture"] = "triggers"
    assert run_job(JobSpec.from_dict(data), spark=spark)["input_rows"] == 20
    assert capture_enabled(store)


@pytest.mark.parametrize("algorithm, partitions", [("cachejoin", 1), ("cachejoin", 2), ("hybridjoin", 2)])
def test_refresh_reads_r_anew_so_a_change_nobody_captures_is_seen_within_its_period(spark, tmp_path, sqlite_backend,
                                                                                      algorithm, partitions):
    """refresh: {every_s}, where R's changes are not captured: a plain UPDATE of every name is
    seen by every micro-batch whose cached rows are all younger than it (its record's
    master_staleness_s: the time since the last refresh), and by the last batches; with parts,
    each part's store (its page maps, its caches) is read anew too."""
    store = write_master(sqlite_backend, 50)
    data = generator_job(tmp_path, sqlite_backend.url, store.table, algorithm=algorithm, total_rows=4000,
                         master_rows=50, missing=0.0).to_dict()
    del data["steps"][0]["master_static"]
    data["steps"][0]["refresh"] = {"every_s": 0.5}
    data["source"]["rows_per_second"] = 800.0
    data["partitions"] = partitions
    records, committed = [], []

    def on_progress(record):
        records.append(record)
        if len(records) == 3:  # the cache holds every key by now
            connection = DatabaseURL.parse(sqlite_backend.url).connect()
            connection.execute(f'UPDATE "{store.table}" SET name = name || \' (renamed)\'')
            connection.execute(f'DELETE FROM "{store.table}" WHERE nk = 1')  # the hottest key
            connection.commit()
            connection.close()
            committed.append(time.time())

    spec = JobSpec.from_dict(data)
    run_job(spec, spark=spark, on_progress=on_progress)
    assert not capture_enabled(store) and committed
    seen_after = []
    for record in records:
        read_at = record["time"] - record["master_staleness_s"][0] - 0.001  # the record rounds it to ms
        table = pq.read_table(f"{spec.sinks.matched.path}/batch={record['batch_id']}/part-0.parquet")
        renamed = [n.endswith(" (renamed)") for n in table["name"].to_pylist()]
        if read_at > committed[0]:
            assert all(renamed) and 1 not in table["nk"].to_pylist(), record["batch_id"]
            seen_after.append(record["batch_id"])
        elif record["batch_id"] < 3:
            assert not any(renamed), record["batch_id"]
    assert seen_after and seen_after[-1] == records[-1]["batch_id"]


def test_missing_master_column_fails_before_the_query(spark, tmp_path, sqlite_backend):
    store = write_master(sqlite_backend, 10)
    data = generator_job(tmp_path, sqlite_backend.url, store.table).to_dict()
    data["steps"][0]["master"]["select"] = ["name", "colour_of_box"]
    with pytest.raises(ConfigError, match=r"^steps\[0\]\.master: .*colour_of_box"):
        run_job(JobSpec.from_dict(data), spark=spark)


def test_unreachable_database_fails_before_the_query(spark, tmp_path):
    spec = generator_job(tmp_path, "mysql://semijoin:wrong@127.0.0.1:1/nowhere", "product")
    with pytest.raises(ConfigError, match=r"^steps\[0\]\.master: master URL: cannot connect to MySQL at semijoin@127\.0\.0\.1:1/nowhere"):
        run_job(spec, spark=spark)


def test_stream_key_not_in_the_generator_fails(spark, tmp_path, sqlite_backend):
    store = write_master(sqlite_backend, 10)
    data = generator_job(tmp_path, sqlite_backend.url, store.table).to_dict()
    data["steps"][0]["column"] = "product_code"
    with pytest.raises(ConfigError, match=r"^steps\[0\]\.column: 'product_code' is not a column of the stream \(columns: \["):
        run_job(JobSpec.from_dict(data), spark=spark)


def files_job(tmp_path, url, table, landing, **source) -> JobSpec:
    data = generator_job(tmp_path, url, table).to_dict()
    data["source"] = {"kind": "files", "path": str(landing), "format": "csv", **source}
    return JobSpec.from_dict(data)


def test_missing_landing_folder_fails(spark, tmp_path, sqlite_backend):
    store = write_master(sqlite_backend, 10)
    spec = files_job(tmp_path, sqlite_backend.url, store.table, tmp_path / "nowhere")
    with pytest.raises(ConfigError, match=r"^source\.path: folder '.*nowhere' does not exist"):
        run_job(spec, spark=spark)


def test_schema_without_the_stream_key_fails(spark, tmp_path, sqlite_backend):
    store = write_master(sqlite_backend, 10)
    landing = tmp_path / "landing"
    landing.mkdir()
    spec = files_job(tmp_path, sqlite_backend.url, store.table, landing, schema="id BIGINT, product STRING")
    with pytest.raises(ConfigError, match=r"^steps\[0\]\.column: 'nk' is not a column of the stream \(columns: \['id', 'product'\]\)"):
        run_job(spec, spark=spark)


def test_inferred_schema_without_the_stream_key_fails(spark, tmp_path, sqlite_backend):
    store = write_master(sqlite_backend, 10)
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "a.csv").write_text("id,product\n1,3\n")
    spec = files_job(tmp_path, sqlite_backend.url, store.table, landing)
    with pytest.raises(ConfigError, match=r"^steps\[0\]\.column: 'nk' is not a column of the stream \(columns: \['id', 'product'\]\)"):
        run_job(spec, spark=spark)
    assert no_query_started(spark)


def test_empty_landing_folder_without_schema_fails(spark, tmp_path, sqlite_backend):
    store = write_master(sqlite_backend, 10)
    landing = tmp_path / "landing"
    landing.mkdir()
    spec = files_job(tmp_path, sqlite_backend.url, store.table, landing)
    with pytest.raises(ConfigError, match=r"^source\.schema: missing, and the landing folder .* holds no file"):
        run_job(spec, spark=spark)


def test_malformed_csv_rows_go_to_the_dead_letter_and_the_stream_goes_on(spark, tmp_path, sqlite_backend):
    store = write_master(sqlite_backend, 50)  # keys 1, 3, ..., 99
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "day1.csv").write_text("id,nk,qty\n1,3,2\n2,not-a-number,1\n3,4,5\n4,99,x\n5,7,1\n")
    (landing / "day2.csv").write_text("id,nk,qty\n6,1,1\n7,,2\n")
    spec = files_job(tmp_path, sqlite_backend.url, store.table, landing, schema="id BIGINT, nk BIGINT, qty BIGINT")
    summary = run_job(spec, spark=spark)
    assert summary["input_rows"] == 7
    matched = read_parquet_sink(spec.sinks.matched.path)
    dead = read_parquet_sink(spec.sinks.dead_letter.path)
    assert sorted(matched["id"].to_pylist()) == [1, 5, 6]
    assert matched.column_names[:1] == ["sj_id"] and set(SELECT) <= set(matched.column_names)
    reasons = {id_.split("#")[0] + "#" + id_.split("#")[1]: r for id_, r in zip(dead["sj_id"].to_pylist(), dead["reason"].to_pylist())}
    assert sorted(reasons.values()) == ["malformed_row", "malformed_row", "not_in_master", "null_key"]
    assert set(reasons) == {"day1.csv#1", "day1.csv#3", "day1.csv#2", "day2.csv#1"}
    malformed = dead.filter(pa.compute.equal(dead["reason"], "malformed_row"))
    assert all("not-a-number" in r or ",x" in r for r in malformed["row"].to_pylist())


def test_table_sinks_on_sqlite_hold_every_tuple_once(spark, tmp_path, sqlite_backend):
    store = write_master(sqlite_backend, 200)
    data = generator_job(tmp_path, sqlite_backend.url, store.table, total_rows=2000).to_dict()
    sink_url = f"sqlite:///{tmp_path / 'facts.db'}"
    data["sinks"] = {"matched": {"kind": "table", "url": sink_url, "table": "fact_sales"},
                     "dead_letter": {"kind": "table", "url": sink_url, "table": "rejects"}}
    summary = run_job(JobSpec.from_dict(data), spark=spark)
    import sqlite3

    db = sqlite3.connect(tmp_path / "facts.db")
    facts = db.execute("SELECT COUNT(*), COUNT(DISTINCT sj_id) FROM fact_sales").fetchone()
    rejects = db.execute("SELECT COUNT(*), COUNT(DISTINCT sj_id) FROM rejects").fetchone()
    assert facts == (summary["matched"], summary["matched"]) and rejects == (summary["unmatched"],) * 2
    assert facts[0] + rejects[0] == 2000
    assert write_table  # the sink created its tables itself (write_table is for masters)


@pytest.mark.parametrize("due_type, past, future", [("TIMESTAMP", "2000-01-01 00:00:00", "2100-01-01 00:00:00"),
                                                    ("DOUBLE", "946684800.0", "4102444800.0")])
def test_a_deadline_column_counts_the_misses_of_matched_and_dead_letter_tuples(spark, tmp_path, sqlite_backend,
                                                                                due_type, past, future):
    store = write_master(sqlite_backend, 10)  # keys 1, 3, ..., 19
    landing = tmp_path / "landing"
    landing.mkdir()
    rows = [(1, 3, past), (2, 5, future), (3, 4, past), (4, 7, past), (5, 8, future), (6, 9, future), (7, 40, past)]
    (landing / "day1.csv").write_text("id,nk,due_at\n" + "".join(f"{i},{k},{d}\n" for i, k, d in rows))
    data = files_job(tmp_path, sqlite_backend.url, store.table, landing,
                     schema=f"id BIGINT, nk BIGINT, due_at {due_type}").to_dict()
    data["deadline"] = {"column": "due_at"}
    records = []
    summary = run_job(JobSpec.from_dict(data), spark=spark, on_progress=records.append)
    assert summary["input_rows"] == 7
    assert (len(read_parquet_sink(data["sinks"]["matched"]["path"])), len(read_parquet_sink(data["sinks"]["dead_letter"]["path"]))) == (4, 3)
    assert summary["deadline_misses"] == sum(r["deadline_misses"] for r in records) == 4  # ids 1, 3, 4, 7: 2 matched, 2 dead
