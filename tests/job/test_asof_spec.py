"""The as-of lookup of a type-2 dimension, declared once: the job spec's ``as_of`` (one sentence
naming the field when wrong), the YAML pipeline's warehouse words (``scd: 2``, ``valid_from``,
``valid_to`` on the dimension, ``event_time`` on the step) giving the same spec, and the columns
the step's store reads."""

import copy
import re

import pytest
import yaml

from airflow_provider_semijoin.core.errors import SpecError
from airflow_provider_semijoin.job.spec import AsOfSpec, JobSpec, StepSpec
from airflow_provider_semijoin.pipeline.spec import load_pipeline

AS_OF = {"event_time": "sold_at", "valid_from": "valid_from", "valid_to": "valid_to"}
BASE = {
    "source": {"kind": "generator", "total_rows": 100, "master_rows": 50},
    "steps": [{"column": "nk", "master": {"url": "sqlite:///m.db", "table": "m", "key": "nk", "select": ["sk"]},
               "as_of": AS_OF}],
    "sinks": {"matched": {"path": "/tmp/out"}, "dead_letter": {"path": "/tmp/dead"}},
    "checkpoint": "/tmp/ckpt",
}


def with_as_of(as_of=None, **step) -> dict:
    data = copy.deepcopy(BASE)
    data["steps"][0].update(step)
    if as_of is not None:
        data["steps"][0]["as_of"] = as_of
    return data


def test_as_of_round_trips_and_the_store_reads_the_version_columns():
    spec = JobSpec.from_dict(BASE)
    (step,) = spec.steps
    assert step.as_of == AsOfSpec(**AS_OF)
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert StepSpec(**spec.to_dict()["steps"][0]).as_of == step.as_of  # as a part rebuilds it from JSON
    assert step.master_select == ["sk", "valid_from", "valid_to"]
    assert step.master.select == ["sk"]  # the output's columns: the version columns are not added


@pytest.mark.parametrize("as_of, step, message", [
    ({"event_time": "sold_at", "valid_from": "vf"}, {}, "steps[0].as_of.valid_to: missing"),
    ({**AS_OF, "valid_until": "x"}, {}, "steps[0].as_of.valid_until: not a field of AsOfSpec"),
    ({**AS_OF, "valid_to": "valid_from"}, {}, "steps[0].as_of.valid_to: 'valid_from' is valid_from too"),
    ({**AS_OF, "event_time": "sold at"}, {}, "steps[0].as_of.event_time: 'sold at' is not a valid identifier"),
    ({**AS_OF, "event_time": "nk"}, {}, "steps[0].as_of.event_time: 'nk' is the join column"),
    ({**AS_OF, "valid_from": "nk"}, {}, "steps[0].as_of.valid_from: 'nk' is the master key"),
    ("sold_at", {}, "steps[0].as_of: 'sold_at' is not a mapping of event_time, valid_from and valid_to"),
    (None, {"algorithm": "ssij", "params": {"range_lo": -2, "range_hi": 2}},
     "steps[0].as_of: given with a range join (params.range_lo/range_hi) of ssij"),
])
def test_a_bad_as_of_is_one_sentence_naming_the_field(as_of, step, message):
    with pytest.raises(SpecError, match=rf"^{re.escape(message)}[^\n]*$"):
        JobSpec.from_dict(with_as_of(as_of, **step))


SCD_STEP = {"column": "customer_id", "event_time": "sold_at",
            "dimension": {"table": "dim_customer", "natural_key": "customer_id", "surrogate_key": "customer_sk",
                          "scd": 2, "valid_from": "valid_from", "valid_to": "valid_to"}}


def pipeline(tmp_path, step: dict):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"dag_id": "p", "source": {"kind": "generator", "total_rows": 10}, "steps": [step]}))
    return path


def test_the_yaml_words_give_the_spec_s_as_of(tmp_path):
    spec = load_pipeline(pipeline(tmp_path, SCD_STEP))
    (step,) = JobSpec.from_dict(spec.job_dict()).steps
    assert step.as_of == AsOfSpec(**AS_OF)
    assert step.master.select == ["customer_sk"] and step.master_select == ["customer_sk", "valid_from", "valid_to"]
    plain = {**SCD_STEP, "dimension": {k: v for k, v in SCD_STEP["dimension"].items()
                                       if k not in ("scd", "valid_from", "valid_to")}}
    plain.pop("event_time")
    (step,) = JobSpec.from_dict(load_pipeline(pipeline(tmp_path, plain)).job_dict()).steps
    assert step.as_of is None


def without(mapping: dict, name: str) -> dict:
    return {k: v for k, v in mapping.items() if k != name}


@pytest.mark.parametrize("step, message", [
    (without(SCD_STEP, "event_time"), "steps[0].event_time: missing; expected the stream column whose time"),
    ({**SCD_STEP, "dimension": without(SCD_STEP["dimension"], "valid_to")}, "steps[0].dimension.valid_to: missing"),
    ({**SCD_STEP, "dimension": {**SCD_STEP["dimension"], "scd": 3}}, "steps[0].dimension.scd: 3 is not 1 or 2"),
    ({**SCD_STEP, "dimension": {**SCD_STEP["dimension"], "scd": 1}}, "steps[0].dimension.valid_from: given, but scd is 1"),
    ({**SCD_STEP, "dimension": without(without(without(SCD_STEP["dimension"], "scd"), "valid_from"), "valid_to")},
     "steps[0].event_time: given, but dimension 'dim_customer' is scd 1"),
    ({**SCD_STEP, "dimension": {**SCD_STEP["dimension"], "valid_from": "customer_sk"}},
     "steps[0].dimension.valid_from: 'customer_sk' is the surrogate key"),
    ({**SCD_STEP, "as_of": AS_OF}, "steps[0].as_of: not a field of SurrogateKeyStep"),
])
def test_a_bad_scd_step_fails_when_the_dag_is_parsed(tmp_path, step, message):
    path = pipeline(tmp_path, step)
    with pytest.raises(SpecError, match=rf"^{re.escape(str(path))}: {re.escape(message)}[^\n]*$"):
        load_pipeline(path)


SYSTEM_TIME = {"event_time": "sold_at", "system_time": True}


def test_system_time_round_trips_and_the_store_reads_the_periods_under_their_names():
    """``as_of: {event_time, system_time: true}``: the store reads R's system periods as the
    version columns (:mod:`airflow_provider_semijoin.core.stores.system_time`), left out of the output."""
    spec = JobSpec.from_dict(with_as_of(SYSTEM_TIME))
    (step,) = spec.steps
    assert step.as_of == AsOfSpec("sold_at", system_time=True)
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert step.master_select == ["sk", "sj_row_start", "sj_row_end"] and step.master.select == ["sk"]
    assert step.as_of.lookup.version_columns == ("sj_row_start", "sj_row_end")


@pytest.mark.parametrize("as_of, step, message", [
    ({**SYSTEM_TIME, "valid_from": "vf"}, {}, "steps[0].as_of.valid_from: given with system_time: true; expected one"),
    ({**SYSTEM_TIME, "system_time": "yes"}, {}, "steps[0].as_of.system_time: 'yes' is not"),
    ({"event_time": "sold_at"}, {}, "steps[0].as_of.valid_from: missing; expected the column that starts a version "
                                    "(or system_time: true)"),
    (SYSTEM_TIME, {"change_capture": "binlog"}, "steps[0].as_of.system_time: given with change_capture: binlog; "
                                                "expected change_capture: triggers"),
    (SYSTEM_TIME, {"on_missing": "inferred_member", "inferred_member": {"flag_column": "inferred"}},
     "steps[0].as_of.system_time: given with on_missing: inferred_member; expected dead_letter, unknown_member or retry"),
])
def test_a_bad_system_time_is_one_sentence_naming_the_field(as_of, step, message):
    with pytest.raises(SpecError, match=rf"^{re.escape(message)}[^\n]*$"):
        JobSpec.from_dict(with_as_of(as_of, **step))


def test_system_time_needs_the_columns_to_add():
    data = with_as_of(SYSTEM_TIME)
    del data["steps"][0]["master"]["select"]
    with pytest.raises(SpecError, match=r"^steps\[0\]\.as_of\.system_time: master\.select is missing; expected the "
                                        r"columns of R to add \(a system-versioned R is read with its periods beside them\)$"):
        JobSpec.from_dict(data)


SYSTEM_STEP = {**SCD_STEP, "dimension": {**without(without(SCD_STEP["dimension"], "valid_from"), "valid_to"),
                                         "system_time": True}}


def test_the_yaml_system_time_gives_the_spec_s_system_time(tmp_path):
    (step,) = JobSpec.from_dict(load_pipeline(pipeline(tmp_path, SYSTEM_STEP)).job_dict()).steps
    assert step.as_of == AsOfSpec("sold_at", system_time=True)
    assert step.master_select == ["customer_sk", "sj_row_start", "sj_row_end"]


@pytest.mark.parametrize("dimension, message", [
    ({"valid_from": "valid_from"}, "steps[0].dimension.valid_from: given with system_time: true; expected one of them"),
    ({"scd": 1}, "steps[0].dimension.system_time: given, but scd is 1; expected scd: 2"),
])
def test_a_bad_yaml_system_time_fails_when_the_dag_is_parsed(tmp_path, dimension, message):
    path = pipeline(tmp_path, {**SYSTEM_STEP, "dimension": {**SYSTEM_STEP["dimension"], **dimension}})
    with pytest.raises(SpecError, match=rf"^{re.escape(str(path))}: {re.escape(message)}[^\n]*$"):
        load_pipeline(path)
