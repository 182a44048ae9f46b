"""Every option of the job spec, declared once on it, is reachable from the join operator and from
a YAML pipeline, with the same defaults (the ``[semijoin]`` options where one exists), and a bad
value fails when the DAG is parsed with one sentence naming the field as the user wrote it.

The walks list every field of :class:`StepSpec` and :class:`JobSpec` themselves (not the
provider's option lists), so a field added to the spec fails here until it is reachable on both paths.
"""

from __future__ import annotations

import dataclasses
import re
import textwrap

import pytest
import yaml
from airflow.sdk import DAG

from airflow_provider_semijoin.core.errors import SpecError
from airflow_provider_semijoin.get_provider_info import CONFIG_OPTIONS
from airflow_provider_semijoin.operators.join import CacheJoinOperator, HybridJoinOperator, SemiStreamJoinOperator
from airflow_provider_semijoin.pipeline.factory import JOIN_TASK, build_dag, dags_from_folder
from airflow_provider_semijoin.pipeline.spec import load_pipeline
from airflow_provider_semijoin.job.spec import JobSpec, StepSpec

SOURCE = {"kind": "generator", "total_rows": 100}
SINKS = {"matched": {"path": "/w/facts"}, "dead_letter": {"path": "/w/dead"}}

# every field of StepSpec: a value other than its default, as the spec holds it; then as the
# operator takes it and as a YAML step says it. Three walks: on_missing 'retry', 'unknown_member' and
# 'inferred_member' (unknown_member, inferred_member and retry_grace_s exclude each other, but the last two).
WALKS = {
    "unknown_member": {
        "on_missing": "unknown_member", "unknown_member": {"product_sk": -7}, "retry_grace_s": None,
        "drop_column": True, "inferred_member": None,
    },
    "retry": {"on_missing": "retry", "unknown_member": None, "retry_grace_s": 45.0, "drop_column": False,
              "inferred_member": None},
    "inferred_member": {
        "on_missing": "inferred_member", "unknown_member": None, "retry_grace_s": 45.0, "drop_column": True,
        "inferred_member": {"flag_column": "is_inferred", "defaults": {"category": "?"}, "sequence": "sk_seq",
                            "surrogate_key": "sk"},
    },
}
STEP = {
    "column": "product_code",
    "master": {"table": "dim_product", "key": "product_code", "select": ["sk", "category"]},
    "algorithm": "cachejoin",
    "params": {"cache_keys": 64, "eviction": "lru"},
    "memory": "3M",
    "rename": {"sk": "product_sk"},
    "max_queue_time_s": 2.5,
    "change_capture": "triggers",
    "master_static": True,
    "refresh": {"every_s": 30.0},
    "as_of": {"event_time": "sold_at", "valid_from": "valid_from", "valid_to": "valid_to"},
    "prune_history": {"every_s": 60.0, "keep_versions": 10},
}
# every field of JobSpec but the source, the steps and the sinks, given alike on both paths
JOB = {"trigger_interval_s": 0.25, "partitions": 2, "arrival_column": "arrived_at", "db_retry_max_s": 33.0,
       "work_ahead": False, "data_path": "executors", "stop": {"max_batches": 3}, "checkpoint": "/w/checkpoint"}
JOB_SHAPED = {"name": "walk__surrogate_keys", "deadline": {"max_latency_s": 4.0, "column": None}}


def field_names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def by_operator(step: dict, operator=SemiStreamJoinOperator, dag_id: str = "walk", **job):
    """The task of a join operator given ``step`` (named as the spec names it) and ``job``."""
    arguments = {"algorithm_params" if k == "params" else k: v for k, v in step.items() if k not in ("master", "column")}
    master = step.get("master", STEP["master"])
    with DAG(dag_id, schedule=None):
        return operator(task_id=JOIN_TASK, column=step.get("column", STEP["column"]), master_conn_id="dims",
                        master_table=master["table"], master_key=master["key"], select=master["select"],
                        source=SOURCE, sinks=SINKS, **arguments, **job)


def by_yaml(tmp_path, step: dict, dag_id: str = "walk", **job):
    """The join task of a YAML pipeline whose one step is ``step`` (in the warehouse's words)."""
    pipeline = {"dag_id": dag_id, "source": SOURCE, "sinks": SINKS, "steps": [step], **job}
    path = tmp_path / f"{dag_id}.yaml"
    path.write_text(yaml.safe_dump(pipeline))
    return build_dag(load_pipeline(path)).get_task(JOIN_TASK)


def parsed(task) -> JobSpec:
    return JobSpec.from_dict(task.job_dict(resolve=False))


@pytest.mark.parametrize("walk", list(WALKS))
def test_every_step_and_job_field_reaches_the_same_spec_through_the_operator_and_the_yaml(tmp_path, walk):
    step = {**STEP, **WALKS[walk]}
    assert set(step) == field_names(StepSpec)  # every field of the step, none forgotten
    defaults = StepSpec(column="x", master={"url": "sqlite:///m.db", "table": "t", "key": "k"})
    walked = [name for name in step if name not in ("column", "master") and step[name] is not None]
    assert all(step[name] != getattr(defaults, name) for name in walked if name != "drop_column" or walk != "retry")
    assert set(JOB) | set(JOB_SHAPED) | {"source", "steps", "sinks"} == field_names(JobSpec)
    job_arguments = {**JOB, "deadline_max_latency_s": JOB_SHAPED["deadline"]["max_latency_s"]}
    operator = by_operator(step, **job_arguments)

    yaml_step = {  # the warehouse's words for master, unknown_member, drop_column and as_of
        "column": step["column"],
        "dimension": {"conn_id": "dims", "table": "dim_product", "natural_key": "product_code", "surrogate_key": "sk",
                      "columns": ["category"], "scd": 2, "valid_from": "valid_from", "valid_to": "valid_to"},
        **{k: v for k, v in step.items() if k not in ("column", "master", "unknown_member", "drop_column", "as_of")},
        "keep_natural_key": not step["drop_column"],
        "event_time": "sold_at",
    }
    if walk == "unknown_member":
        yaml_step["unknown_member"] = -7
    else:
        yaml_step.pop("unknown_member", None)
    pipeline = by_yaml(tmp_path, yaml_step, **JOB, deadline={"max_latency_s": 4.0})

    from_operator, from_yaml = parsed(operator), parsed(pipeline)
    assert from_operator.to_dict() == from_yaml.to_dict()
    (spec_step,) = from_operator.steps
    for name, value in step.items():
        expected = {**value, "url": spec_step.master.url} if name == "master" else value
        got = getattr(spec_step, name)  # (a dataclass compared with the one its given fields make, defaults for the rest)
        assert got == (type(got)(**expected) if dataclasses.is_dataclass(got) else expected), name
    for name, value in {**JOB, **JOB_SHAPED}.items():
        got = getattr(from_operator, name)
        assert (dataclasses.asdict(got) if dataclasses.is_dataclass(got) else got) == (
            {**dataclasses.asdict(from_operator.stop), **value} if name == "stop" else value), name


def test_defaults_are_the_same_on_both_paths_and_memory_is_the_configured_one(tmp_path, monkeypatch):
    """Left out, an option has the spec's default on both paths, and memory and db_retry_max_s the
    configured [semijoin] options (a pipeline's memory was a hard-coded 50M)."""
    monkeypatch.setenv("AIRFLOW__SEMIJOIN__MEMORY", "7M")
    monkeypatch.setenv("AIRFLOW__SEMIJOIN__DB_RETRY_MAX_S", "44")
    warehouse = {"on_missing": "unknown_member", "unknown_member": {"sk": -1}, "drop_column": True}  # a YAML step's
    operator = by_operator({"master": {**STEP["master"], "select": ["sk"]}, **warehouse}, HybridJoinOperator)
    pipeline = by_yaml(tmp_path, {"column": STEP["column"], "dimension": {
        "conn_id": "dims", "table": "dim_product", "natural_key": "product_code", "surrogate_key": "sk"}})
    from_operator, from_yaml = parsed(operator), parsed(pipeline)
    assert from_operator.to_dict() == from_yaml.to_dict()
    (step,) = from_yaml.steps
    assert (step.memory, from_yaml.db_retry_max_s) == ("7M", 44.0)
    spec_defaults = StepSpec(column="x", master={"url": "sqlite:///m.db", "table": "t", "key": "k"})
    for name in ("algorithm", "params", "retry_grace_s", "rename", "max_queue_time_s"):
        assert getattr(step, name) == getattr(spec_defaults, name), name
    job_defaults = {f.name: f.default for f in dataclasses.fields(JobSpec)}
    for name in ("trigger_interval_s", "partitions", "arrival_column", "work_ahead", "data_path"):
        assert getattr(from_yaml, name) == job_defaults[name], name
    # a spec file has the options' defaults: those of [semijoin] memory and db_retry_max_s
    assert spec_defaults.memory == CONFIG_OPTIONS["memory"][1]
    assert job_defaults["db_retry_max_s"] == float(CONFIG_OPTIONS["db_retry_max_s"][1])


def test_dag_default_args_reach_a_step_option():
    with DAG("defaults", schedule=None, default_args={"max_queue_time_s": 3.0, "work_ahead": False}):
        task = CacheJoinOperator(task_id="j", column="nk", master_table="d", master_key="nk", source=SOURCE)
    spec = parsed(task)
    assert (spec.steps[0].max_queue_time_s, spec.work_ahead) == (3.0, False)
    with pytest.raises(TypeError, match=r"^Invalid arguments were passed to CacheJoinOperator \(task_id: k\)"):
        CacheJoinOperator(task_id="k", column="nk", master_table="d", master_key="nk", source=SOURCE, max_queue_time=3)


BAD = [  # newly reachable options: (operator argument / YAML field, bad value, where in YAML, message after the field)
    ("max_queue_time_s", -1, "step", "-1 is not a positive number"),
    ("work_ahead", "yes", "pipeline", "'yes' is not true or false"),
    ("db_retry_max_s", 0, "pipeline", "0 is not a positive number"),
    ("arrival_column", "arrived at", "pipeline", "'arrived at' is not a valid identifier"),
]


@pytest.mark.parametrize("name, value, where, message", BAD, ids=[b[0] for b in BAD])
def test_a_bad_value_of_a_new_option_fails_when_the_dag_is_parsed(tmp_path, name, value, where, message):
    with pytest.raises(SpecError, match=rf"^{JOIN_TASK}: {name}: {re.escape(message)}[^\n]*$"):
        by_operator({name: value} if where == "step" else {}, **({name: value} if where == "pipeline" else {}))
    step = {"column": "nk", "dimension": {"table": "dim", "natural_key": "nk", "surrogate_key": "sk"}}
    pipeline = {"dag_id": "bad", "source": SOURCE, "steps": [{**step, name: value} if where == "step" else step]}
    if where == "pipeline":
        pipeline[name] = value
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(pipeline))
    field = f"steps[0].{name}" if where == "step" else name
    with pytest.raises(SpecError, match=rf"^{re.escape(str(tmp_path / 'bad.yaml'))}: {re.escape(field)}: "
                                        rf"{re.escape(message)}[^\n]*$"):
        dags_from_folder(tmp_path)


def test_a_bad_yaml_option_is_an_import_error_of_the_dag_file(tmp_path):
    from airflow.dag_processing.dagbag import DagBag

    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "p.yaml").write_text(textwrap.dedent("""\
        dag_id: p
        source: {kind: generator, total_rows: 10}
        steps:
          - column: nk
            dimension: {table: dim, natural_key: nk, surrogate_key: sk}
            max_queue_time_s: fast
        """))
    (tmp_path / "load.py").write_text(
        "from pathlib import Path\n"
        "from airflow_provider_semijoin.pipeline.factory import dags_from_folder  # airflow dag\n"
        "dags_from_folder(Path(__file__).parent / 'pipelines', globals())\n"
    )
    (error,) = DagBag(dag_folder=str(tmp_path)).import_errors.values()
    assert f"{tmp_path / 'pipelines' / 'p.yaml'}: steps[0].max_queue_time_s: 'fast' is not a positive number" in error
