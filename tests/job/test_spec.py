"""JobSpec validation: every malformed spec fails with the field's path and what was expected."""

import copy
import json
import os
import re

import pytest

from airflow_provider_semijoin.core.errors import SpecError
from airflow_provider_semijoin.job.sources import FilesSource, GeneratorSource, RedisStreamSource, SparkSource
from airflow_provider_semijoin.job.spec import JobSpec, MasterSpec, StepSpec, TargetSpec

BASE = {
    "source": {"kind": "generator", "total_rows": 100, "master_rows": 50},
    "steps": [{"column": "nk", "master": {"url": "mysql://u:secret@127.0.0.1/db", "table": "m", "key": "k"}}],
    "sinks": {"matched": {"path": "/tmp/out"}, "dead_letter": {"kind": "table", "url": "sqlite:///dl.db", "table": "dl"}},
    "checkpoint": "/tmp/ckpt",
}


def spec_with(change):
    data = copy.deepcopy(BASE)
    change(data)
    return data


def test_a_valid_spec_round_trips_and_describe_hides_the_password():
    spec = JobSpec.from_dict(BASE)
    assert JobSpec.from_dict(spec.to_dict()) == spec
    described = json.dumps(spec.describe())
    assert "secret" not in described and "u:***@127.0.0.1" in described
    assert "secret" in json.dumps(spec.to_dict())  # the driver needs it


MALFORMED = [
    (lambda d: d["steps"][0].update(algorithm="meshjion"), r"^steps\[0\]\.algorithm: 'meshjion' is not one of \['cachejoin'"),
    (lambda d: d["steps"][0]["master"].update(table="a b"), r"^steps\[0\]\.master\.table: 'a b' is not a valid identifier"),
    (lambda d: d["steps"][0].update(params={"foo": 1}), r"^steps\[0\]\.params\.foo: not a parameter of hybridjoin \(parameters: \['page_rows', 'read_ahead', 'rider_repeats'\]\)"),
    (lambda d: d["steps"][0].update(params={"page_rows": "x"}), r"^steps\[0\]\.params\.page_rows: 'x' is not a valid int"),
    (lambda d: d["steps"][0].update(memory="lots"), r"^steps\[0\]\.memory: 'lots' is not a size"),
    (lambda d: d.update(partitions=0), r"^partitions: 0 is not a positive integer$"),
    (lambda d: d["sinks"].update(matched={"kind": "table", "url": "pg://x", "table": "t"}), r"^sinks\.matched\.url: scheme 'pg' is not one of \['sqlite', 'mysql'\]"),
    (lambda d: d.update(source={"kind": "files"}), r"^source\.path: None is not a folder"),
    (lambda d: d.update(source={"kind": "files", "path": "/in"}), r"^source\.format: missing; expected one of \['parquet', 'csv', 'json'\]"),
    (lambda d: d["source"].update(kind="files", path="/in", format="csv"), r"^source\.total_rows: given for a files source; expected it only with kind 'generator' or 'redis_stream'$"),
    (lambda d: d.update(source={"kind": "generator", "path": "/in"}), r"^source\.path: given for a generator source; expected it only with kind 'files'$"),
    (lambda d: d.update(source={"kind": "generator", "options": {"a": 1}}), r"^source\.options: given for a generator source; expected it only with kind 'files' or 'spark'$"),
    (lambda d: d.update(source={"kind": "river"}), r"^source\.kind: 'river' is not one of \['files', 'generator', 'spark', 'redis_stream'\]$"),
    (lambda d: d["source"].update(bursty="yes"), r"^source\.bursty: 'yes' is not true or false$"),
    (lambda d: d.update(bogus=1), r"^bogus: not a field of JobSpec"),
    (lambda d: d["steps"][0]["master"].update(url="mysql://u:secret@h/"), r"^steps\[0\]\.master\.url: 'mysql://u:\*\*\*@h/' names no database"),
    (lambda d: d["steps"][0].update(on_missing="unknown_member"), r"^steps\[0\]\.unknown_member: None is not a mapping"),
    (lambda d: d["steps"][0].update(on_missing="retry"), r"^steps\[0\]\.retry_grace_s: missing; expected the seconds a tuple waits for a late master row \(on_missing 'retry'\)$"),
    (lambda d: d["steps"][0].update(on_missing="retry", retry_grace_s=0), r"^steps\[0\]\.retry_grace_s: 0 is not a positive number$"),
    (lambda d: d["steps"][0].update(retry_grace_s=5), r"^steps\[0\]\.retry_grace_s: given, but on_missing is 'dead_letter'"),
    (lambda d: d.update(steps=[]), r"^steps: missing; expected a list of at least one join step$"),
    (lambda d: d.pop("checkpoint"), r"^checkpoint: missing$"),
    (lambda d: d.update(source={"kind": "spark", "format": "kafka"}), r"^source\.id_column: missing"),
    (lambda d: (d["source"].pop("total_rows"), d.update(stop={"end_of_input": True})), r"^stop\.end_of_input: the generator source is endless"),
    (lambda d: d.update(deadline={}), r"^deadline\.max_latency_s, column: give exactly one of them$"),
    (lambda d: d["source"].update(missing=1.5), r"^source\.missing: 1\.5 is not a fraction between 0 and 1$"),
    (lambda d: d["steps"].append(copy.deepcopy(d["steps"][0])) or d["steps"][0]["master"].update(select=["a"]) or d["steps"][1]["master"].update(select=["a"]), r"^steps\[1\]\.rename: output column 'a' is already added by an earlier step$"),
]


@pytest.mark.parametrize("change, message", MALFORMED, ids=[m[1][:40] for m in MALFORMED])
def test_malformed_spec_names_the_field(change, message):
    with pytest.raises(SpecError, match=message):
        JobSpec.from_dict(spec_with(change))


def test_python_construction_validates_too():
    master = MasterSpec(url="sqlite:///m.db", table="m", key="k")
    with pytest.raises(SpecError, match=re.escape("algorithm: 'hybrid' is not one of")):
        StepSpec(column="nk", master=master, algorithm="hybrid")


# the flat form every spec file so far holds: every kind's fields, another kind's at its default
FLAT = {"kind": "generator", "path": None, "format": None, "schema": None, "options": {}, "id_column": None,
        "max_files_per_trigger": None, "rows_per_second": 1000.0, "total_rows": None, "master_rows": 100000,
        "key_type": "int", "exponent": 1.0, "shape": "noperm", "missing": 0.0, "bursty": False, "seed": 0,
        "max_rows_per_batch": None, "extra_keys": {}, "event_time": None, "url": None, "stream": None, "start": "earliest"}
FLAT_SOURCES = [
    ({"kind": "files", "path": "/in", "format": "csv", "schema": "id BIGINT, nk STRING", "max_files_per_trigger": 2}, FilesSource),
    ({"kind": "generator", "total_rows": 100, "master_rows": 50, "bursty": True, "extra_keys": {"c": {"master_rows": 9}}}, GeneratorSource),
    ({"kind": "spark", "format": "kafka", "options": {"subscribe": "t"}, "id_column": "k"}, SparkSource),
    ({"kind": "redis_stream", "schema": "id BIGINT", "max_rows_per_batch": 100000, "url": "redis://h:6379/0",
      "stream": "sales"}, RedisStreamSource),
]


@pytest.mark.parametrize("given, cls", FLAT_SOURCES, ids=[c.__name__ for _, c in FLAT_SOURCES])
def test_a_source_of_each_kind_reads_and_writes_the_flat_form_of_earlier_spec_files(given, cls):
    data = {**BASE, "source": {**FLAT, **given}}
    spec = JobSpec.from_dict(json.loads(json.dumps(data)))
    assert type(spec.source) is cls and spec.source.kind == given["kind"]
    assert json.dumps(spec.to_dict()["source"]) == json.dumps({**FLAT, **given})  # the same keys, in the same order
    assert JobSpec.from_dict(spec.to_dict()) == spec
    short = JobSpec.from_dict({**BASE, "source": given})  # only its own fields: the same source
    assert short.source == spec.source


def inferring(**options):
    return lambda d: d["steps"][0].update(on_missing="inferred_member", **options)


INFERRED_MALFORMED = [  # on_missing: inferred_member and its options (job/inferred.py)
    (inferring(inferred_member={"flag": "x"}), r"^steps\[0\]\.inferred_member\.flag: not an option of inferred_member "
                                               r"\(options: \['flag_column', 'defaults', 'sequence', 'surrogate_key'\]\)$"),
    (inferring(inferred_member=["inferred"]), r"^steps\[0\]\.inferred_member: \['inferred'\] is not a mapping of "),
    (inferring(inferred_member={"flag_column": "is inferred"}),
     r"^steps\[0\]\.inferred_member\.flag_column: 'is inferred' is not a valid identifier"),
    (inferring(inferred_member={"flag_column": "k"}),
     r"^steps\[0\]\.inferred_member\.flag_column: 'k' is master\.key; expected a column of its own$"),
    (inferring(inferred_member={"defaults": {"name": ["a"]}}),
     r"^steps\[0\]\.inferred_member\.defaults\.name: \['a'\] is not a single value \(a string, number, true/false or null\)$"),
    (inferring(inferred_member={"defaults": {"inferred": 0}}),
     r"^steps\[0\]\.inferred_member\.defaults\.inferred: is the flag_column, which the placeholder sets itself$"),
    (inferring(inferred_member={"defaults": {"k": 0}}),
     r"^steps\[0\]\.inferred_member\.defaults\.k: is the master\.key, which the placeholder sets itself$"),
    (inferring(inferred_member={"sequence": "s"}),
     r"^steps\[0\]\.inferred_member\.sequence, surrogate_key: give both \(a MariaDB sequence and the column it fills\) "
     r"or neither \(the table's auto-increment\)$"),
    (inferring(retry_grace_s=-1), r"^steps\[0\]\.retry_grace_s: -1 is not a positive number$"),
    (lambda d: d["steps"][0].update(inferred_member={}),
     r"^steps\[0\]\.inferred_member: given, but on_missing is 'dead_letter' \(it needs 'inferred_member'\)$"),
    (lambda d: d["steps"][0].update(on_missing="unknown_member", unknown_member={"sk": -1}, retry_grace_s=5),
     r"^steps\[0\]\.retry_grace_s: given, but on_missing is 'unknown_member' \(it needs 'retry' or 'inferred_member'\)$"),
]


@pytest.mark.parametrize("change, message", INFERRED_MALFORMED, ids=[m[1][10:60] for m in INFERRED_MALFORMED])
def test_malformed_inferred_member_options_name_the_field(change, message):
    with pytest.raises(SpecError, match=message):
        JobSpec.from_dict(spec_with(change))


def test_inferred_member_options_are_kept_whole_and_retry_first_when_a_grace_period_is_given():
    spec = JobSpec.from_dict(spec_with(inferring()))
    (step,) = spec.steps
    assert step.inferred_member == {"flag_column": "inferred", "defaults": {}, "sequence": None, "surrogate_key": None}
    assert not step.retries and JobSpec.from_dict(spec.to_dict()) == spec
    graced = JobSpec.from_dict(spec_with(inferring(retry_grace_s=30, inferred_member={"defaults": {"name": "?"}})))
    assert graced.steps[0].retries and graced.steps[0].inferred_member["defaults"] == {"name": "?"}


def test_each_sink_names_its_own_lineage_dataset(tmp_path):
    """A sink target is the dataset its kind says (the lineage's outputs): the Parquet folder, or the table."""
    parquet = TargetSpec(kind="parquet", path=str(tmp_path / "out")).dataset()
    table = TargetSpec(kind="table", url=f"sqlite:///{tmp_path / 'sink.db'}", table="facts").dataset()
    assert parquet == ("file", os.path.abspath(tmp_path / "out"))
    assert table[1] == f"{os.path.abspath(tmp_path / 'sink.db')}.facts" and table[0].startswith("sqlite://")
