"""One class per kind of sink (:mod:`...spark.sinks`): the runner asks the class of a target's
kind how to open it and what it checks before the query starts; each writes its batches
idempotently (a batch written again replaces the first attempt)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.stores.sql import DatabaseURL
from airflow_provider_semijoin.job.spec import SINK_KINDS, TargetSpec
from airflow_provider_semijoin.spark.sinks import (SINK_CLASSES, ParquetSink, TableSink, open_sink, read_parquet_sink,
                                                   sink_class)


def targets(tmp_path) -> dict[str, TargetSpec]:
    return {"parquet": TargetSpec(kind="parquet", path=str(tmp_path / "out")),
            "table": TargetSpec(kind="table", url=f"sqlite:///{tmp_path / 'sink.db'}", table="facts")}


def written(kind: str, target: TargetSpec) -> list[int]:
    if kind == "parquet":
        return sorted(read_parquet_sink(target.path)["v"].to_pylist())
    connection = DatabaseURL.parse(target.url).connect()
    try:
        cursor = connection.cursor()
        cursor.execute("SELECT v FROM facts ORDER BY v")
        return [row[0] for row in cursor.fetchall()]
    finally:
        connection.close()


def test_every_kind_of_sink_has_its_class_and_opens_as_it():
    assert set(SINK_CLASSES) == set(SINK_KINDS)
    assert (SINK_CLASSES["parquet"], SINK_CLASSES["table"]) == (ParquetSink, TableSink)


@pytest.mark.parametrize("kind", SINK_KINDS)
def test_each_sink_replaces_a_batch_written_again_and_keeps_the_others(tmp_path, kind):
    target = targets(tmp_path)[kind]
    sink = open_sink(target)
    assert type(sink) is sink_class(target) and sink.kind == kind
    try:
        sink.write(0, pa.table({"sj_id": ["a", "b"], "v": [1, 2]}))
        sink.write(1, pa.table({"sj_id": ["c"], "v": [3]}))
        sink.write(0, pa.table({"sj_id": ["a"], "v": [10]}))  # a replay of batch 0
    finally:
        sink.close()
    assert written(kind, target) == [3, 10]


def test_the_table_sink_checks_its_database_and_the_column_names_it_quotes(tmp_path):
    table = targets(tmp_path)["table"]
    TableSink.check_ready(table, "sinks.matched")
    TableSink.check_columns(["sj_id", "amount"], "sinks.matched")
    with pytest.raises(ConfigError, match=r"^sinks\.matched: stream column .*amount; DROP TABLE r.* is not a valid identifier"):
        TableSink.check_columns(["sj_id", "amount; DROP TABLE r"], "sinks.matched")
    missing = TargetSpec(kind="table", url=f"sqlite:///{tmp_path / 'no' / 'such.db'}", table="facts")
    with pytest.raises(ConfigError, match=r"^sinks\.dead_letter: "):
        TableSink.check_ready(missing, "sinks.dead_letter")
    ParquetSink.check_columns(["amount; DROP TABLE r"], "sinks.matched")  # a Parquet column may be named anything
