"""``semijoin bench --changes`` at a tiny size on MariaDB: the report has a row per rate, the
rates were measured, the changes committed in the window were seen (staleness measured) or
said why not, every output row carried the value of the version its micro-batch read, and
every tuple left exactly once. Speed is never asserted."""

from __future__ import annotations

import json

import numpy as np
import pytest

from airflow_provider_semijoin.bench.change_staleness import History
from airflow_provider_semijoin.bench.changes import ChangesBenchConfig, distinct_first
from airflow_provider_semijoin.bench.spark_paths import SparkBenchConfig
from airflow_provider_semijoin.bench.steady import BenchConfig
from airflow_provider_semijoin.cli import main
from airflow_provider_semijoin.core.errors import ConfigError

ROWS = 3000


@pytest.fixture(scope="module")
def spark():
    from airflow_provider_semijoin.spark.session import get_spark

    session = get_spark("local[2]", app_name="semijoin-tests-changes")
    yield session
    session.stop()


@pytest.fixture
def changes_table(mysql_backend):
    """The bench's table of its own (``bench_r<rows>_changes``), dropped with its side tables after."""
    table = f"bench_r{ROWS}_changes"
    mysql_backend.tables.append(table)
    return table


@pytest.mark.mysql
@pytest.mark.slow
def test_tiny_change_bench_sees_the_changes_exactly_once(spark, mysql_url, changes_table, tmp_path, capsys):
    out = tmp_path / "changes.json"
    args = ["bench", "--changes", "--master", mysql_url, "--rows", str(ROWS), "--memory", "256KB",
            "--algorithms", "hybridjoin", "--change-rates", "0,200", "--warmup", "0.5", "--window", "2",
            "--spark-batch-rows", "1500", "--out", str(out)]
    assert main(args) == 0
    report = json.loads(out.read_text())
    assert report["table"] == changes_table and "semijoin:semijoin@" not in report["command"]
    assert [(r["algorithm"], r["rate"]) for r in report["rows"]] == [("hybridjoin", 0), ("hybridjoin", 200)]
    quiet, changed = report["rows"]
    for r in report["rows"]:
        assert r["tuples_per_s"] > 0 and r["exactly_once"]["ok"] and r["exactly_once"]["tuples"] > 0, r
        assert r["versions"]["ok"] and r["versions"]["wrong"] == 0, r["versions"]
    assert quiet["ratio_to_no_changes"] == 1.0 and quiet["changes"]["committed"] == 0
    assert quiet["changes"]["staleness_ms"]["p50"] is None
    assert changed["ratio_to_no_changes"] == round(changed["tuples_per_s"] / quiet["tuples_per_s"], 2)
    c = changed["changes"]
    assert changed["written_rows_per_s"] > 0 and c["committed"] >= c["committed_in_window"] > 0
    assert c["uncaptured"] == 0  # every commit became a version of R
    assert c["seen"] + c["unprobed"] + c["older_reads"] == c["committed_in_window"]
    assert c["seen"] > 0 and 0 <= c["staleness_ms"]["p50"] <= c["staleness_ms"]["p99"]
    assert 0 <= c["visibility_ms"]["p50"] <= c["visibility_ms"]["p99"]
    # the README's promise: seen from the next micro-batch that starts after the commit, or the one after
    assert c["visible_batches_late_max"] <= 1 and c["read_versions_monotone"]
    assert changed["versions"]["rows_checked"] > 0  # the hot keys were changed: their rows were checked
    printed = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(printed) if line.startswith("algorithm "))
    assert [line.split()[:2] for line in printed[header + 1 : header + 3]] == [["hybridjoin", "0"], ["hybridjoin", "200"]]
    assert all(line.split()[-2:] == ["yes", "yes"] for line in printed[header + 1 : header + 3])


def test_history_gives_each_key_its_value_at_a_version():
    # key 7: 1.0 before version 11, -1.0 from 11, -2.0 from 12 (now); key 9: 5.0 before 12, -3.0 now
    before = np.array([[11, 7, 1.0], [12, 7, -1.0], [12, 9, 5.0]])
    composite = (before[:, 1].astype(np.int64) << 32) | before[:, 0].astype(np.int64)
    history = History(10, composite, before[:, 2], np.array([7, 9]), np.array([-2.0, -3.0]))
    keys, versions = np.array([7, 7, 7, 9, 9]), np.array([10, 11, 12, 11, 12])
    assert history.value_at(keys, versions).tolist() == [1.0, -1.0, -2.0, 5.0, -3.0]
    assert history.last_version(keys, versions).tolist() == [10, 11, 12, 10, 12]
    assert history.versions_of(np.array([7, 7, 9, 9]), np.array([-1.0, 1.0, -3.0, 4.0])).tolist() == [11, 10, 12, -1]


def test_a_transaction_changes_distinct_keys_in_draw_order():
    keys, rest = distinct_first(np.array([3, 3, 1, 3, 2, 5, 1]), 3)
    assert keys == [3, 1, 2] and rest.tolist() == [5, 1]


def test_config_errors_name_the_field(capsys):
    spark = SparkBenchConfig(BenchConfig(master="sqlite:///x.db", shapes=["noperm"]))
    with pytest.raises(ConfigError, match=r"rates\[1\]: -5"):
        ChangesBenchConfig(spark, rates=[0, -5])
    with pytest.raises(ConfigError, match="txn_rows: 0"):
        ChangesBenchConfig(spark, txn_rows=0)
    assert main(["bench", "--changes", "--master", "sqlite:///x.db", "--change-rates", "0,x"]) == 2
    assert capsys.readouterr().err.strip() == "semijoin: error: --change-rates: 'x' is not a number"
