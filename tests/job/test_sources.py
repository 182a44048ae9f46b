"""The source classes: what each kind answers for the runner, and the reader each names."""

import importlib

import pytest

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.job.sources import SOURCE_CLASSES, FilesSource, GeneratorSource, SparkSource


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
