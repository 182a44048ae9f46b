"""The source classes: what each kind answers for the runner, and the reader each names."""

import importlib
import json
import re
import uuid

import pytest
import redis

from airflow_provider_semijoin.core.errors import ConfigError, SpecError
from airflow_provider_semijoin.job.sources import SOURCE_CLASSES, FilesSource, GeneratorSource, SparkSource, source_from_dict


@pytest.mark.parametrize("kind", list(SOURCE_CLASSES))
def test_every_kind_names_a_reader_that_exists(kind):
    module, _, name = SOURCE_CLASSES[kind].reader.partition(":")
    assert callable(getattr(importlib.import_module(module), name))
    assert SOURCE_CLASSES[kind].kind == kind


def test_the_generator_s_reader_lives_with_the_generators():
    assert GeneratorSource.reader.startswith("airflow_provider_semijoin.workloads.")


def test_each_kind_answers_for_itself(tmp_path):
    generator, files = GeneratorSource(total_rows=10, extra_keys={"c": {"master_rows": 5}}), FilesSource(path=str(tmp_path), format="csv")
    spark = SparkSource(format="kafka", id_column="k", options={"subscribe": "a,b", "kafka.bootstrap.servers": "h:9092"})
    assert generator.stream_ddl == "tid BIGINT, nk BIGINT, qty BIGINT, amount DOUBLE, c BIGINT, sj_arrival DOUBLE"
    assert (files.stream_ddl, FilesSource(path="/x", format="csv", schema="id INT").stream_ddl) == (None, "id INT, sj_arrival DOUBLE")
    assert (generator.tuple_id_column, files.tuple_id_column, spark.tuple_id_column) == ("tid", None, "k")
    assert (generator.bounded, GeneratorSource().bounded, files.bounded, spark.bounded) == (True, False, False, False)
    assert (files.ends_when_idle, generator.ends_when_idle) == (True, False)
    assert GeneratorSource().endless() == "the generator source is endless; give source.total_rows or another stop"
    assert spark.datasets() == [("kafka://h:9092", "a"), ("kafka://h:9092", "b")] and generator.datasets() == []
    files.check_ready()
    with pytest.raises(ConfigError, match=r"^source\.path: folder '/no/such' does not exist"):
        FilesSource(path="/no/such", format="csv").check_ready()


def test_a_source_s_repr_shows_its_own_fields_and_hides_secrets():
    spark = SparkSource(format="kafka", id_column="k", options={"kafka.sasl.jaas.config": "pw=S3ntinel"})
    assert repr(spark) == "SparkSource(format='kafka', options={'kafka.sasl.jaas.config': '***'}, id_column='k')"


@pytest.mark.parametrize(("event_time", "message"), [
    ("sold_at", "event_time: 'sold_at' is not a mapping with column (and start, late, max_lateness_s)"),
    ({"late": 0.1}, "event_time: {'late': 0.1} is not a mapping with column"),
    ({"column": "sold_at", "lag": 1}, "event_time.lag: not an event time setting (settings: ['column', 'start'"),
    ({"column": "sold at"}, "event_time.column: 'sold at' is not a valid identifier"),
    ({"column": "amount"}, "event_time.column: 'amount' is already a column of the generator; expected a new column name"),
    ({"column": "customer_nk"}, "event_time.column: 'customer_nk' is already a column of the generator"),
    ({"column": "sold_at", "start": "monday"}, "event_time.start: 'monday' is not an ISO time such as '2026-01-01T00:00:00Z'"),
    ({"column": "sold_at", "late": 1.5}, "event_time.late: 1.5 is not a fraction between 0 and 1"),
    ({"column": "sold_at", "max_lateness_s": 0}, "event_time.max_lateness_s: 0 "),
])
def test_a_bad_event_time_of_the_generator_names_its_field(event_time, message):
    with pytest.raises(SpecError, match=re.escape(message)):
        GeneratorSource(extra_keys={"customer_nk": {"master_rows": 5}}, event_time=event_time)


def test_the_generator_s_event_time_starts_in_utc_unless_its_start_names_a_zone():
    plain = GeneratorSource(event_time={"column": "sold_at", "start": "2026-03-01 08:00:00"}).settings()["event_time"]
    zoned = GeneratorSource(event_time={"column": "sold_at", "start": "2026-03-01T08:00:00+02:00"}).settings()["event_time"]
    assert plain == {"column": "sold_at", "start": "2026-03-01T08:00:00+00:00", "late": 0, "max_lateness_s": 10}
    assert zoned["start"] == "2026-03-01T08:00:00+02:00"
    assert "event_time" not in GeneratorSource().settings()


REDIS = {"kind": "redis_stream", "url": "redis://127.0.0.1:6379/0", "stream": "sales", "schema": "tid BIGINT, nk STRING"}


@pytest.mark.parametrize(("change", "message"), [
    ({"url": None}, "url: None is not a Redis URL such as redis://127.0.0.1:6379/0"),
    ({"url": "mysql://u:S3cret@h/db"}, "url: 'mysql://u:***@h/db' is not a Redis URL such as redis://127.0.0.1:6379/0"),
    ({"url": "redis://h:port/0"}, "url: 'redis://h:port/0' is not a Redis URL"),
    ({"url": "redis://h:6379/zero"}, "url: 'redis://h:6379/zero' is not a Redis URL"),
    ({"stream": ""}, "stream: '' is not the name of a Redis stream (its key)"),
    ({"stream": 7}, "stream: 7 is not the name of a Redis stream (its key)"),
    ({"schema": None}, "schema: None is not the entries' fields as Spark DDL such as 'tid BIGINT, nk STRING'"),
    ({"schema": "tid BIGINT, nk ARRAY<INT>"}, "schema: 'nk ARRAY<INT>' is not a field and its type; expected a name and one of ['STRING', 'BIGINT', 'INT', 'DOUBLE', 'BOOLEAN', 'TIMESTAMP']"),
    ({"schema": "tid"}, "schema: 'tid' is not a field and its type"),
    ({"schema": "tid BIGINT, tid STRING"}, "schema.tid: a column of that name is already in the stream; expected another name"),
    ({"schema": "sj_id STRING"}, "schema.sj_id: a column of that name is already in the stream"),
    ({"schema": "1st STRING"}, "schema.'1st': '1st' is not a valid identifier"),
    ({"id_column": "order_id"}, "id_column: 'order_id' is not a field of the schema (fields: ['tid', 'nk'])"),
    ({"start": "$"}, "start: '$' is not one of ['earliest', 'latest']"),
    ({"max_rows_per_batch": 0}, "max_rows_per_batch: 0 "),
    ({"total_rows": -5}, "total_rows: -5 "),
    ({"bursty": True}, "bursty: given for a redis_stream source; expected it only with kind 'generator'"),
])
def test_a_bad_redis_source_is_refused_in_one_sentence_naming_its_field(change, message):
    with pytest.raises(SpecError, match="^" + re.escape(message)) as caught:
        source_from_dict({**REDIS, **change})
    assert "\n" not in str(caught.value) and "S3cret" not in str(caught.value)


def test_a_redis_source_answers_for_itself(monkeypatch):
    monkeypatch.setattr("airflow_provider_semijoin.job.sources.REDIS_READY_S", 0.5)
    source = source_from_dict({**REDIS, "url": "redis://:S3cret@h:6380/2", "schema": "tid long, at TIMESTAMP, ok boolean"})
    assert source.fields == [("tid", "BIGINT"), ("at", "TIMESTAMP"), ("ok", "BOOLEAN")]
    assert source.stream_ddl == "tid BIGINT, at TIMESTAMP, ok BOOLEAN, sj_arrival DOUBLE"
    assert (source.tuple_id_column, source.max_rows_per_batch, source.start, source.bounded) == ("sj_id", 100_000, "earliest", False)
    assert source.endless() == "a Redis stream never ends; give source.total_rows or another stop"
    assert source.datasets() == [("redis://h:6380", "2/sales")]
    assert "S3cret" not in repr(source) and "S3cret" not in json.dumps(source.describe())
    assert source.to_dict()["url"] == "redis://:S3cret@h:6380/2"  # the runner's spec keeps it
    with pytest.raises(ConfigError, match=r"^source\.url: the Redis server at redis://:\*\*\*@127\.0\.0\.1:1/0 did not answer for 0.5 s"):
        source_from_dict({**REDIS, "url": "redis://:S3cret@127.0.0.1:1/0"}).check_ready()
    key, client = f"sj-test-{uuid.uuid4().hex[:12]}", redis.Redis()
    client.set(key, "x")
    try:
        with pytest.raises(ConfigError, match=rf"^source\.stream: key '{key}' is not a stream"):
            source_from_dict({**REDIS, "stream": key}).check_ready()
    finally:
        client.delete(key)
