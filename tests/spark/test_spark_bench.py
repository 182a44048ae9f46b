"""``semijoin bench --spark`` at a tiny size on SQLite: the table has every path of every
algorithm, and every path let every tuple it took leave exactly once. Speed is never asserted."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_semijoin.bench.steady import BenchConfig
from airflow_provider_semijoin.cli import main
from airflow_provider_semijoin.core.joins.registry import CACHE_ALGORITHMS
from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.bench.cpu import CLASSES, cpu_bound
from airflow_provider_semijoin.bench.spark_paths import (
    CORE_BATCHES, CORE_CONTINUOUS, NO_JOIN, PIPELINE, PIPELINE_RESTING, STREAM_STATIC, SparkBenchConfig,
)
from airflow_provider_semijoin.bench.spark_pipeline import FALLING_BEHIND_LOGGER, moderate_rate, quiet_falling_behind
from airflow_provider_semijoin.bench.spark_window import BatchWindow, TupleLedger, check_sinks
from airflow_provider_semijoin.spark.sinks import ParquetSink, read_parquet_batch, read_parquet_sink


@pytest.mark.slow
@pytest.mark.acceptance  # a bench run of every path, whose batches and CPU figures follow the machine's load
def test_tiny_spark_bench_reports_every_path_exactly_once(spark, tmp_path, capsys):
    out = tmp_path / "bench.json"
    args = ["bench", "--spark", "--master", f"sqlite:///{tmp_path / 'b.db'}", "--rows", "3000", "--memory", "256KB",
            "--warmup", "0.4", "--window", "0.8", "--spark-batch-rows", "1500", "--spark-max-queue-time", "0.3",
            "--out", str(out)]
    assert main(args) == 0
    (shape,) = json.loads(out.read_text())["shapes"]
    picked = max(shape["cache_pick"], key=lambda r: r["service_rate_tps"])["algorithm"]
    assert [r["algorithm"] for r in shape["cache_pick"]] == list(CACHE_ALGORITHMS)
    rows = {(r["algorithm"], r["path"]): r for r in shape["rows"]}
    paths = (PIPELINE, PIPELINE_RESTING, CORE_BATCHES, CORE_CONTINUOUS)
    assert list(rows) == [(a, p) for a in ("hybridjoin", picked) for p in paths] + [
        (STREAM_STATIC, "spark stream-static, R via store scan"), (NO_JOIN, "spark collect + sinks, no join")]
    for r in shape["rows"]:
        assert r["tuples_per_s"] > 0 and r["exactly_once"]["ok"] and r["exactly_once"]["tuples"] > 0, r
        if r["path"] not in (CORE_BATCHES, PIPELINE_RESTING) and r["algorithm"] != NO_JOIN:  # its latency run: at the offered rate, exactly once too
            assert r["latency_ms_p99"] > 0 and r["latency"]["exactly_once"]["ok"]
            assert r["latency"]["offered_tps"] == shape["latency_rate"] and isinstance(r["latency_kept_up"], bool)
        if r["path"] == PIPELINE:  # the throughput run lets tuples wait (a backlog), the latency run 0.3 s at most
            assert (r["max_queue_time_s"], r["latency"]["max_queue_time_s"]) == (None, 0.3)
    for name in ("hybridjoin", picked):
        spark_row, batches = rows[(name, PIPELINE)], rows[(name, CORE_BATCHES)]
        assert spark_row["exactly_once"]["tuples"] == sum(spark_row["batch_rows"])  # each micro-batch, whole
        # an empty warm-up batch, the first tuple when the generator's clock starts, then full batches
        assert spark_row["batch_rows"][:2] == [0, 1] and set(spark_row["batch_rows"][2:-1]) <= {1500}
        assert spark_row["window_batches"] >= 1
        assert batches["exactly_once"]["tuples"] == spark_row["exactly_once"]["tuples"]  # the same tuples again
        for path in (CORE_BATCHES, CORE_CONTINUOUS):
            core = rows[(name, path)]
            assert core["overhead_ratio"] == round(core["tuples_per_s"] / spark_row["tuples_per_s"], 2)
        resting = rows[(name, PIPELINE_RESTING)]
        assert resting["overhead_ratio"] == round(spark_row["tuples_per_s"] / resting["tuples_per_s"], 2)
        assert resting["batch_split_s"]["engine_ahead"] == 0.0 and "latency" not in resting
        for row in (spark_row, resting):  # the CPU over the window: the driver and Spark's JVM did work, within the cores
            cpu = row["cpu"]
            assert 0 < row["batch_split_s"]["driver_cpu_cores"] == cpu["cores"]["driver"]
            assert cpu["cores"]["spark_jvm"] > 0 and cpu["cores"]["all"] <= os.cpu_count()
            assert cpu["us_per_tuple"]["all"] == pytest.approx(sum(cpu["us_per_tuple"][k] for k in CLASSES), abs=0.01)
        core_cpu = rows[(name, CORE_CONTINUOUS)]["cpu"]  # the engine alone: the driver only (SQLite is in it)
        assert core_cpu["us_per_tuple"]["driver"] > 0 and core_cpu["us_per_tuple"]["spark_jvm"] == 0
        bound = spark_row["cpu_bound"]  # the CPU a tuple of Spark's path and of the engine, on every core
        assert bound["tuples_per_s"] == cpu_bound(bound["spark_path_us"] + bound["engine_us"])
        assert bound["engine_us"] == core_cpu["us_per_tuple"]["all"]
        static, no_join = rows[(STREAM_STATIC, "spark stream-static, R via store scan")], rows[(NO_JOIN, "spark collect + sinks, no join")]
        assert spark_row["vs_stream_static"] == round(spark_row["tuples_per_s"] / static["tuples_per_s"], 2)
        assert spark_row["vs_no_join"] == round(spark_row["tuples_per_s"] / no_join["tuples_per_s"], 2)
    assert no_join["exactly_once"]["tuples"] == sum(no_join["batch_rows"]) and "latency" not in no_join
    printed = capsys.readouterr().out.splitlines()
    header = printed.index(next(line for line in printed if line.startswith("algorithm ")))
    assert printed[header].split() == ["algorithm", "path", "tuples/s", "p99", "ms", "overhead", "exactly", "once"]
    table = printed[header + 1 : header + 1 + len(rows)]
    assert [line.split()[0] for line in table] == [a for a, _ in rows]
    assert all(line.endswith(" yes") for line in table)
    for name in ("hybridjoin", picked):  # the two ratios, printed under the table
        assert any(line.startswith(f"{name} pipeline: {rows[(name, PIPELINE)]['vs_stream_static']:.2f}x Spark's "
                                   f"stream-static join, {rows[(name, PIPELINE)]['vs_no_join']:.2f}x") for line in printed)
        cpu = rows[(name, PIPELINE)]["cpu"]
        assert f"{name} {PIPELINE}: CPU a tuple {cpu['us_per_tuple']['all']:.2f} us = driver " in "\n".join(printed)
        assert any(line.startswith(f"{name}: Spark's path alone costs ") for line in printed)
    assert printed[-2].startswith("command (") and "semijoin bench --spark --master sqlite:///" in printed[-2]
    assert "--spark-batch-rows 1500" in printed[-2] and "--memory 256KiB" in printed[-2]
    assert "--spark-trigger 0.5 --spark-max-queue-time 0.3" in printed[-2]


def test_the_bench_quiets_sparks_falling_behind_warning_and_sets_it_back(spark):
    log4j = spark.sparkContext._jvm.org.apache.logging.log4j
    logger = log4j.LogManager.getLogger(FALLING_BEHIND_LOGGER)
    # WARN, as get_spark leaves a session it makes: a session another test of this process made
    # first (tests share the active one) may say INFO, so the level is set rather than assumed
    log4j.core.config.Configurator.setLevel(FALLING_BEHIND_LOGGER, log4j.Level.WARN)
    restore = quiet_falling_behind(spark)
    assert str(logger.getLevel()) == "ERROR" and not logger.isWarnEnabled()
    restore()
    assert str(logger.getLevel()) == "WARN" and logger.isWarnEnabled()


def test_sink_check_finds_a_lost_and_a_duplicated_tuple(tmp_path):
    window = BatchWindow(0, 1)
    for batch_id, n in enumerate([3, 2]):
        window({"batch_id": batch_id, "time": float(batch_id), "input_rows": n})
    matched, dead = ParquetSink(str(tmp_path / "matched")), ParquetSink(str(tmp_path / "dead"))

    def ids(*values):
        return pa.table({"sj_id": pa.array([str(v) for v in values])})

    matched.write(0, ids(0, 2))
    dead.write(0, ids(1))
    matched.write(1, ids(3))
    dead.write(1, ids(4))
    assert check_sinks(tmp_path, window) == {"ok": True, "lost": 0, "duplicated": 0, "tuples": 5}
    dead.write(1, ids(3))  # tuple 4 lost, tuple 3 twice
    assert check_sinks(tmp_path, window) == {"ok": False, "lost": 1, "duplicated": 1, "tuples": 5}


def test_a_parquet_sink_writes_ids_and_numbers_plain_and_master_strings_with_a_dictionary(tmp_path):
    """The matched sink dictionary-encodes only string columns other than ``sj_id`` (a category
    repeats; ids and numbers are nearly all distinct, a dictionary there costs time for nothing)."""
    import pyarrow.parquet as pq

    rows = pa.table({"sj_id": pa.array([str(i) for i in range(1000)]), "qty": pa.array(np.arange(1000)),
                     "category": pa.array(["a", "b"] * 500)})
    ParquetSink(str(tmp_path)).write(7, rows)
    meta = pq.ParquetFile(tmp_path / "batch=7" / "part-0.parquet").metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    assert [name for name, used in encodings.items() if "RLE_DICTIONARY" in used] == ["category"]
    assert pq.read_table(tmp_path / "batch=7" / "part-0.parquet").equals(rows)


def test_a_parquet_sink_writes_a_large_batch_as_parts_in_parallel_and_reads_it_back_in_order(tmp_path):
    """A batch of more than ``part_rows`` rows goes to one file per ``part_rows`` rows, written on
    as many threads, in one folder renamed into place; read back, the parts come in their order
    (part-10 after part-9), and a replayed batch replaces every part the first attempt wrote."""
    import pyarrow.parquet as pq

    rows = pa.table({"sj_id": pa.array([str(i) for i in range(25)]), "qty": pa.array(np.arange(25))})
    sink = ParquetSink(str(tmp_path), part_rows=2)
    sink.write(3, rows)
    parts = sorted((tmp_path / "batch=3").iterdir(), key=lambda p: int(p.stem.split("-")[1]))
    assert [p.name for p in parts] == [f"part-{i}.parquet" for i in range(13)]
    assert [pq.read_metadata(p).num_rows for p in parts] == [2] * 12 + [1]
    assert read_parquet_batch(tmp_path / "batch=3").equals(rows)
    sink.write(3, rows.slice(0, 3))  # batch 3 replayed with fewer rows
    assert sorted(p.name for p in (tmp_path / "batch=3").iterdir()) == ["part-0.parquet", "part-1.parquet"]
    sink.write(4, rows.slice(0, 0))
    assert read_parquet_sink(str(tmp_path)).equals(rows.slice(0, 3))


def test_tuple_ledger_counts_every_exit():
    ledger = TupleLedger()
    ledger.record(np.array([0, 2, 1]))
    assert ledger.check(3)["ok"] and not ledger.check(4)["ok"]
    ledger.record(np.array([250_000]))  # beyond what was fed, and beyond the first allocation
    assert ledger.check(3) == {"ok": False, "lost": 0, "duplicated": 1, "tuples": 3}


def test_window_opens_after_the_warm_up_and_closes_after_the_window():
    # driver pid 1, Spark's JVM pid 2 and a Python worker that starts late (pid 3): CPU seconds at each record
    snapshots = iter([{1: ("driver", d), 2: ("spark_jvm", j), **({3: ("spark_python", p)} if p is not None else {})}
                      for d, j, p in [(1.0, 5.0, None), (2.0, 6.0, None), (3.0, 7.0, None), (5.0, 7.5, 0.4),
                                      (6.1, 8.0, 0.9), (9.0, 9.0, 1.0)]])
    window = BatchWindow(warmup_s=2.0, window_s=3.0, cpu=lambda: next(snapshots))
    for batch_id, (end, n) in enumerate([(10.0, 5), (11.0, 7), (12.5, 9), (14.0, 4), (15.6, 6), (16.0, 8)]):
        window({"batch_id": batch_id, "time": end, "input_rows": n + 2, "matched": n - 1, "unmatched": 1})
    assert window.opened == 2 and window.closed == 4 and window.stop.is_set()
    assert [r["batch_id"] for r in window.batches()] == [3, 4]
    assert window.rate() == round(10 / 3.1, 1)  # the tuples that left, not those that came in (some wait inside)
    cpu = window.cpu_use()  # CPU seconds per second from opening to closing; per tuple that left (10 of them)
    assert cpu["cores"] == {"driver": round(3.1 / 3.1, 2), "spark_jvm": round(1.0 / 3.1, 2), "spark_python": round(0.9 / 3.1, 2),
                            "database": 0.0, "all": round(5.0 / 3.1, 2)}
    assert cpu["us_per_tuple"] == {"driver": 310_000.0, "spark_jvm": 100_000.0, "spark_python": 90_000.0, "database": 0.0,
                                   "all": 500_000.0}


def test_moderate_rate_is_half_the_slowest_rounded_down():
    assert moderate_rate([89_117.3, None, 94_444.0]) == 44_000.0
    assert moderate_rate([7.0]) == 3.0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"algorithms": ["hybridjoin", "hybrid"]}, r"^algorithms\[1\]: 'hybrid' is not one of \["),
        ({"algorithms": ["hybridjoin@ra0"]}, r"^algorithms\[0\]: 'hybridjoin@ra0' is a variant, which the steady-state "
                                             r"and cold benches measure, not this one; expected one of \["),
        ({"batch_rows": 0}, r"^batch_rows: 0 is not a positive number of tuples per micro-batch$"),
        ({"latency_rate": -5.0}, r"^latency_rate: -5.0 is not a positive number of tuples per second$"),
        ({"trigger_s": 0}, r"^trigger_s: 0 is not a positive number of seconds$"),
        ({"latency_max_queue_s": -1.0}, r"^latency_max_queue_s: -1.0 is not a positive number of seconds$"),
        ({"shapes": ["noperm", "temporal"]},
         r"^shapes\[1\]: 'temporal' is not a stream shape of the Spark generator source \(one of \['noperm', 'random'\]\)$"),
    ],
)
def test_spark_bench_config_errors_name_the_field(kwargs, message):
    shapes = kwargs.pop("shapes", ["noperm"])
    with pytest.raises(ConfigError, match=message):
        SparkBenchConfig(BenchConfig(master="sqlite:///x.db", shapes=shapes), **kwargs)
