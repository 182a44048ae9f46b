"""``bench.partitions``' 8-64-worker estimate: the model's throughput bounded by what the master
database serves (:func:`.partitions.bound`), and the concurrent page reads that measure it
(:func:`.access.served_page_reads`), on a real SQLite R."""

from __future__ import annotations

import math

import pytest

from airflow_provider_semijoin.bench.access import served_page_reads
from airflow_provider_semijoin.bench.partitions import (WORKERS, bound, ceiling_ratio, estimate, executor_design_bound,
                                                         pipeline_summary, reads_per_tuple)
from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.workloads import generate_master


def test_the_least_bound_binds():
    # 1 query of 1,000 rows per 100 tuples; the server: 500 queries/s, 600,000 rows/s
    assert bound(80_000.0, 0.01, 10.0, 500.0, 600_000.0) == (50_000.0, "DB queries/s")
    assert bound(40_000.0, 0.01, 10.0, 500.0, 600_000.0) == (40_000.0, "model")
    assert bound(80_000.0, 0.01, 10.0, 500.0, 300_000.0) == (30_000.0, "DB rows/s")
    assert bound(80_000.0, 0.0, 0.0, 500.0, 600_000.0) == (80_000.0, "model")  # reads nothing: no DB bound


def test_the_ceiling_is_one_parts_batch_against_the_slowest_part_a_bare_job_and_the_sinks():
    one = {"median_batch_s": 0.18}
    two = {"median_slowest_part_s": 0.11, "median_sink_s": 0.04, "median_batch_s": 0.31}
    assert ceiling_ratio(one, two, floor_s=0.1) == pytest.approx(0.18 / 0.25)
    assert ceiling_ratio(one, two, floor_s=0.0) == pytest.approx(0.18 / 0.15)  # no job: the split would pay


def test_the_executor_designs_bound_is_its_floor_plus_the_slowest_part_against_p1_as_run():
    read_one = {"median_batch_s": 0.3, "tuples_per_s": 300_000.0, "cpu_us_per_tuple": 4.0}
    floor = {"median_batch_s": 0.2, "tuples_per_s": 450_000.0, "cpu_us_per_tuple": 6.0}
    two = {"median_slowest_part_s": 0.1}
    assert executor_design_bound(read_one, floor, two) == {
        "throughput_x_p1": 1.0, "floor_throughput_x_p1": 1.5, "floor_cpu_x_p1": 1.5}
    assert executor_design_bound(read_one, floor, {"median_slowest_part_s": 0.4})["throughput_x_p1"] == 0.5


def _pipeline(parts: int, tuples_per_s: float, cpu_all: float, cpu_db: float, once: bool = True) -> dict:
    return {"partitions": parts, "tuples_per_s": tuples_per_s, "exactly_once": once,
            "cpu_us_per_tuple": {"driver": cpu_all - cpu_db, "database": cpu_db, "all": cpu_all}}


def test_the_streaming_querys_runs_are_compared_by_their_medians_against_one_part():
    runs = [_pipeline(1, 100.0, 10.0, 2.0), _pipeline(2, 70.0, 14.0, 2.0), _pipeline(1, 130.0, 9.0, 1.0),
            _pipeline(2, 60.0, 16.0, 4.0), _pipeline(1, 90.0, 11.0, 3.0), _pipeline(2, 95.0, 12.0, 2.0, once=False)]
    one, two = pipeline_summary(runs)
    assert (one["partitions"], one["runs"], one["tuples_per_s"], one["cpu_us_per_tuple"]) == (1, 3, 100.0, 10.0)
    assert one["cpu_us_per_tuple_without_db"] == 8.0 and one["exactly_once"]
    assert (two["tuples_per_s"], two["cpu_us_per_tuple"], two["cpu_us_per_tuple_without_db"]) == (70.0, 14.0, 12.0)
    assert (two["tuples_per_s_x_p1"], two["cpu_us_per_tuple_x_p1"], two["cpu_us_per_tuple_without_db_x_p1"]) == (0.7, 1.4, 1.5)
    assert not two["exactly_once"]  # one run that was not fails them all


def _part(fed: int, rows: int, queries: int, wall_s: float) -> dict:
    return {"fed": fed, "left": fed, "pending": 0, "wall_s": wall_s, "disk_queries": queries, "disk_rows": rows}


def test_the_estimate_is_the_model_until_the_database_binds():
    """Parts that cost 10 us a tuple and nothing a row, 0.1 s outside them a batch, 1 query of
    1,000 rows every 200 tuples: the model rises with N towards 10 batches a second, the database
    serves 2,000 queries/s = 400,000 tuples/s, so it binds from the N where the model passes that."""
    batch = [_part(60_000, 250_000, 250, 0.6), _part(40_000, 250_000, 250, 0.4)]
    batches = [{"tuples": 100_000, "parts": batch} for _ in range(3)]
    two = {"per_batch": batches, "median_sink_s": 0.04, "median_spark_s": 0.06}
    assert reads_per_tuple(two) == {"queries_per_tuple": 0.005, "rows_per_tuple": 5.0, "rows_per_query": 1000.0}
    ceiling = {"queries_per_s": 2_000.0, "rows_per_s": 2_000_000.0}
    got = estimate(two, 100_000, hot_share=0.01, ceiling=ceiling)
    assert got["a_s_per_tuple"] == pytest.approx(1e-5) and got["b_s_per_row_read"] == pytest.approx(0, abs=1e-12)
    assert got["ceiling"] == ceiling
    for n in (2, *WORKERS):
        part_s = 1e-5 * max(100_000 / n, 1_000)  # never less than the hottest page's 1% share
        model = 100_000 / (0.1 + part_s)
        row = got["workers"][n]
        assert row["part_s"] == pytest.approx(part_s, abs=1e-4)
        assert row["model_tuples_per_s"] == pytest.approx(model, rel=1e-3)
        assert row["tuples_per_s"] == pytest.approx(min(model, 400_000), rel=1e-3)  # 2,000 / 0.005
        assert row["binds"] == ("model" if model < 400_000 else "DB queries/s")
    assert [w["binds"] for w in got["workers"].values()] == ["model", *["DB queries/s"] * len(WORKERS)]
    ceiling = {"queries_per_s": 100.0, "rows_per_s": 100_000.0}  # a slow server binds at every N
    assert {w["binds"] for w in estimate(two, 100_000, 0.01, ceiling)["workers"].values()} == {"DB queries/s"}


def test_served_page_reads_counts_every_connections_queries_and_rows(tmp_path):
    master = f"sqlite:///{tmp_path / 'r.db'}"
    generate_master(master, "r", 3_000, seed=0)
    served = served_page_reads(master, "r", page_rows=500, connections=2, pages_each=20)
    assert served["connections"] == 2 and served["queries"] == 40 and served["rows"] == 40 * 500  # 6 full pages
    assert served["seconds"] > 0 and math.isclose(served["queries_per_s"], 40 / served["seconds"], rel_tol=1e-2)
    assert math.isclose(served["rows_per_s"], 500 * served["queries_per_s"], rel_tol=1e-2)
    with pytest.raises(ConfigError, match=r"^connections: 0 is not a positive whole number"):
        served_page_reads(master, "r", page_rows=500, connections=0)
