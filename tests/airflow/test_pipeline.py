"""Declarative surrogate-key pipelines: spec validation (exact messages), the DAG factory, and a
two-step pipeline run through dag.test() on local Spark against SQLite dimensions."""

from __future__ import annotations

import json
import re
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_semijoin.core.errors import SpecError
from airflow_provider_semijoin.core.joins.registry import ALGORITHMS, AUTO_CANDIDATES
from airflow_provider_semijoin.core.stores import DatabaseURL, write_table
from airflow_provider_semijoin.pipeline import Dimension, PipelineSpec, SurrogateKeyStep, load_pipeline
from airflow_provider_semijoin.pipeline.factory import dags_from_folder
from airflow_provider_semijoin.job.assemble import Connections
from airflow_provider_semijoin.spark.sinks import read_parquet_sink
from metadata import xcom

VALID = """\
dag_id: sales_keys
source: {kind: files, path: /landing/sales, format: parquet}
steps:
  - column: product_code
    dimension: {conn_id: dims, table: dim_product, natural_key: product_code, surrogate_key: product_sk}
    algorithm: hybridjoin
    params: {page_rows: 50}
    memory: 1M
  - column: customer_code
    dimension: {conn_id: dims, table: dim_customer, natural_key: customer_code, surrogate_key: customer_sk}
    on_missing: dead_letter
sinks:
  matched: {path: /warehouse/fact_sales}
deadline: {max_latency_s: 30}
deadline_monitor: {threshold: 0.05}
install_updates: {min_pending: 10}
"""


def write(tmp_path, text: str, name: str = "pipeline.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_yaml_and_dataclasses_give_the_same_spec(tmp_path):
    from_yaml = load_pipeline(write(tmp_path, VALID))
    in_python = PipelineSpec(
        dag_id="sales_keys",
        source={"kind": "files", "path": "/landing/sales", "format": "parquet"},
        steps=[
            SurrogateKeyStep("product_code", Dimension("dim_product", "product_code", "product_sk", "dims"),
                             algorithm="hybridjoin", params={"page_rows": 50}, memory="1M"),
            SurrogateKeyStep("customer_code", Dimension("dim_customer", "customer_code", "customer_sk", "dims"),
                             on_missing="dead_letter"),
        ],
        sinks={"matched": {"path": "/warehouse/fact_sales"}},
        deadline={"max_latency_s": 30},
        deadline_monitor={"threshold": 0.05},
        install_updates={"min_pending": 10},
    )
    assert from_yaml == in_python
    job = from_yaml.job_dict(Connections(url=lambda conn_id: f"sqlite:////dims/{conn_id}.db"), lambda step, url, memory: "cachejoin")
    first, second = job["steps"]
    assert first["master"] == {"url": "sqlite:////dims/dims.db", "table": "dim_product", "key": "product_code",
                               "select": ["product_sk"]}
    assert (first["algorithm"], first["unknown_member"], first["drop_column"]) == ("hybridjoin", {"product_sk": -1}, True)
    assert (second["algorithm"], second["on_missing"], second["unknown_member"]) == ("cachejoin", "dead_letter", None)


BASE = {
    "dag_id": "p",
    "source": {"kind": "generator", "total_rows": 10},
    "steps": [{"column": "nk", "dimension": {"table": "dim", "natural_key": "nk", "surrogate_key": "sk"}}],
}
IDENTIFIER = "(expected letters, digits and _, starting with a letter or _, at most 64 characters)"
MALFORMED = [
    ({"steps": None}, "steps: None is not a list of steps; expected at least one surrogate-key step"),
    ({"sink": {}}, "sink: not a field of PipelineSpec; expected one of ['dag_id', 'source', 'steps', 'sinks', "
                   "'schedule', 'start_date', 'description', 'tags', 'stop', 'deadline', 'checkpoint', 'spark_conn_id', "
                   "'deadline_monitor', 'install_updates', 'watch_changes', 'trigger_interval_s', 'partitions', 'arrival_column', "
                   "'db_retry_max_s', 'work_ahead', 'data_path']"),
    ({"dag_id": "sales keys"}, "dag_id: 'sales keys' is not a DAG id; expected letters, digits, '_', '.' or '-'"),
    ({"steps": [{"column": "nk"}]}, "steps[0].dimension: missing"),
    ({"steps": [{"column": "nk", "dimension": {"table": "dim product", "natural_key": "nk", "surrogate_key": "sk"}}]},
     f"steps[0].dimension.table: 'dim product' is not a valid identifier {IDENTIFIER}"),
    ({"steps": [{"column": "nk", "dimension": {"table": "d", "natural_key": "nk", "surrogate_key": "nk"}}]},
     "steps[0].dimension.surrogate_key: 'nk' is the natural key; expected the dimension's surrogate key column"),
    ({"steps": [{**BASE["steps"][0], "on_missing": "drop"}]},
     "steps[0].on_missing: 'drop' is not one of ['dead_letter', 'unknown_member', 'retry', 'inferred_member']"),
    ({"steps": [{**BASE["steps"][0], "on_missing": "retry"}]},
     "steps[0].retry_grace_s: missing; expected the seconds a tuple waits for a late master row (on_missing 'retry')"),
    ({"steps": [{**BASE["steps"][0], "params": {"page_rows": 10}}]},
     "steps[0].params: given with algorithm 'auto'; expected no parameters (name an algorithm to set them)"),
    ({"steps": [{**BASE["steps"][0], "algorithm": "hybrid"}]},
     f"steps[0].algorithm: 'hybrid' is not one of {sorted(ALGORITHMS)}"),
    ({"steps": [{**BASE["steps"][0], "algorithm": "hybridjoin", "params": {"pages": 1}}]},
     "steps[0].params.pages: not a parameter of hybridjoin (parameters: ['page_rows', 'read_ahead', 'rider_repeats'])"),
    ({"steps": [{**BASE["steps"][0], "memory": "lots"}]},
     "steps[0].memory: 'lots' is not a size (expected e.g. 50MB, 512KB, 1GB or a number of bytes, up to 1024TB)"),
    ({"source": {"kind": "files", "path": "/in"}}, "source.format: missing; expected one of ['parquet', 'csv', 'json']"),
    ({"sinks": {"matched": {"conn_id": "dwh"}}}, f"sinks.matched.table: None is not a valid identifier {IDENTIFIER}"),
    ({"deadline_monitor": {"threshold": 0.1}},
     "deadline_monitor: given, but the tuples have no deadline; expected a deadline (max_latency_s or column)"),
    ({"deadline": {"max_latency_s": 5}, "deadline_monitor": {"threshold": 2}},
     "deadline_monitor.threshold: 2 is not a ratio in [0, 1)"),
    ({"install_updates": {"min_pending": 0}}, "install_updates.min_pending: 0 is not a positive integer"),
    ({"watch_changes": {"poke_interval": 0}}, "watch_changes.poke_interval: 0 is not a positive number"),
    ({"watch_changes": {}, "install_updates": {}},
     "watch_changes: given with install_updates; expected one of them (both name their sensors changes_<table>)"),
    ({"steps": [{**BASE["steps"][0], "change_capture": "wal"}]},
     "steps[0].change_capture: 'wal' is not one of ['triggers', 'binlog']"),
    ({"steps": [{**BASE["steps"][0], "master_static": "yes"}]}, "steps[0].master_static: 'yes' is not true or false"),
    ({"steps": [{**BASE["steps"][0], "refresh": {"every": 5}}]}, "steps[0].refresh: {'every': 5} is not a mapping {every_s: seconds}"),
    ({"steps": [{**BASE["steps"][0], "refresh": {"every_s": 0}}]}, "steps[0].refresh.every_s: 0 is not a positive number"),
    ({"start_date": "someday"}, "start_date: 'someday' is not a date; expected e.g. 2024-01-01"),
]


@pytest.mark.parametrize("change, message", MALFORMED, ids=[m[1].split(":")[0] for m in MALFORMED])
def test_malformed_spec_names_file_field_and_expectation(tmp_path, change, message):
    import yaml

    path = write(tmp_path, yaml.safe_dump({**BASE, **change}), "bad.yaml")
    with pytest.raises(SpecError, match=f"^{re.escape(f'{path}: {message}')}$"):
        load_pipeline(path)


def test_yaml_that_is_no_mapping_or_no_yaml(tmp_path):
    path = write(tmp_path, "- just\n- a list\n", "list.yaml")
    with pytest.raises(SpecError, match=f"^{re.escape(f'{path}: PipelineSpec: ')}\\['just', 'a list'\\] is not a mapping; "
                                        "expected the fields of PipelineSpec$"):
        load_pipeline(path)
    path = write(tmp_path, "dag_id: p\nsteps: [\n  {column: x\n", "broken.yaml")
    with pytest.raises(SpecError, match=f"^{re.escape(f'{path}: not valid YAML at line ')}\\d+ \\("):
        load_pipeline(path)


def test_factory_builds_a_dag_per_file_and_names_every_invalid_one(tmp_path):
    write(tmp_path, VALID, "sales.yaml")
    write(tmp_path, VALID.replace("dag_id: sales_keys", "dag_id: other").replace("on_missing: dead_letter", "on_missing: skip"), "other.yml")
    write(tmp_path, VALID, "copy.yaml")  # the same dag_id again
    namespace = {}
    with pytest.raises(SpecError) as caught:
        dags_from_folder(tmp_path, namespace)
    assert str(caught.value).splitlines() == [
        f"{tmp_path / 'other.yml'}: steps[1].on_missing: 'skip' is not one of ['dead_letter', 'unknown_member', 'retry', 'inferred_member']",
        f"{tmp_path / 'sales.yaml'}: dag_id: 'sales_keys' is already the DAG of copy.yaml; expected a DAG id of its own",
    ]
    dag = namespace["sales_keys"]
    assert sorted(dag.task_ids) == ["changes_dim_customer", "changes_dim_product", "deadline_monitor",
                                    "install_dim_customer", "install_dim_product", "surrogate_keys"]
    assert dag.get_task("changes_dim_product").downstream_task_ids == {"install_dim_product"}
    assert dag.get_task("surrogate_keys").upstream_task_ids == set()  # the updates run alongside the join


def test_watch_changes_gives_each_dimension_a_sensor_of_its_versions(tmp_path):
    write(tmp_path, VALID.replace("install_updates: {min_pending: 10}", "watch_changes: {poke_interval: 2}"), "sales.yaml")
    namespace = {}
    dags_from_folder(tmp_path, namespace)
    dag = namespace["sales_keys"]
    assert sorted(dag.task_ids) == ["changes_dim_customer", "changes_dim_product", "deadline_monitor", "surrogate_keys"]
    sensor = dag.get_task("changes_dim_product")
    assert (sensor.watch, sensor.deferrable, sensor.poke_interval, sensor.downstream_task_ids) == ("versions", True, 2, set())


def test_dagbag_reports_an_invalid_pipeline_as_an_import_error(tmp_path):
    from airflow.dag_processing.dagbag import DagBag

    (tmp_path / "pipelines").mkdir()
    write(tmp_path / "pipelines", VALID.replace("memory: 1M", "memory: plenty"), "sales.yaml")
    (tmp_path / "load_pipelines.py").write_text(
        "from pathlib import Path\n"
        "from airflow_provider_semijoin.pipeline.factory import dags_from_folder  # airflow dag\n"
        "dags_from_folder(Path(__file__).parent / 'pipelines', globals())\n"
    )
    bag = DagBag(dag_folder=str(tmp_path))
    (error,) = bag.import_errors.values()
    assert f"{tmp_path / 'pipelines' / 'sales.yaml'}: steps[0].memory: 'plenty' is not a size" in error


@pytest.fixture
def dimensions(tmp_path, connections):
    """dim_product (int keys 1..40, sk 1001..) and dim_customer (string keys c01..c20) in SQLite."""
    url = f"sqlite:///{tmp_path / 'dims.db'}"
    db = DatabaseURL.parse(url).connect()
    write_table(db, "dim_product", pa.table({"product_code": list(range(1, 41)), "product_sk": list(range(1001, 1041)),
                                              "category": [f"cat{i % 3}" for i in range(1, 41)]}), primary_key="product_code")
    write_table(db, "dim_customer", pa.table({"customer_code": [f"c{i:02d}" for i in range(1, 21)],
                                               "customer_sk": list(range(501, 521))}), primary_key="customer_code")
    db.close()
    connections("dims", url)
    return url


def test_two_step_pipeline_runs_in_one_query(dimensions, tmp_path, make_dag, spark):
    """Product keys (some missing: unknown member -1) then customer keys (missing: dead letter),
    one with algorithm auto, through dag.test(); the facts equal the composed hash joins."""
    landing = tmp_path / "landing"
    landing.mkdir()
    sales = pa.table({
        "sale_id": list(range(300)),
        "product_code": [(i * 7) % 45 + 1 for i in range(300)],  # 41..45 are not in dim_product
        "customer_code": [f"c{(i * 3) % 23 + 1:02d}" for i in range(300)],  # c21..c23 are not in dim_customer
        "amount": [float(i) for i in range(300)],
    })
    pq.write_table(sales.slice(0, 150), landing / "part-0.parquet")
    pq.write_table(sales.slice(150), landing / "part-1.parquet")
    pipeline = {
        "dag_id": f"pipeline_{tmp_path.name}",
        "source": {"kind": "files", "path": str(landing), "format": "parquet", "max_files_per_trigger": 1},
        "steps": [
            {"column": "product_code", "dimension": {"conn_id": "dims", "table": "dim_product", "natural_key": "product_code",
                                                     "surrogate_key": "product_sk", "columns": ["category"]},
             "algorithm": "auto", "memory": "512K", "change_capture": "triggers"},
            {"column": "customer_code", "dimension": {"conn_id": "dims", "table": "dim_customer",
                                                      "natural_key": "customer_code", "surrogate_key": "customer_sk"},
             "algorithm": "cachejoin", "memory": "512K", "on_missing": "dead_letter", "master_static": True},
        ],
        "sinks": {"matched": {"path": str(tmp_path / "facts")}, "dead_letter": {"path": str(tmp_path / "dead")}},
        "stop": {"end_of_input": True},
        "checkpoint": str(tmp_path / "cp"),
        "trigger_interval_s": 0.3,
    }
    dag = make_dag(pipeline["dag_id"], {"surrogate_keys": (
        "airflow_provider_semijoin.pipeline.operator:SemiJoinPipelineOperator", {"pipeline": pipeline})})
    run = dag.test()
    assert str(run.state) == "success"
    facts = read_parquet_sink(str(tmp_path / "facts"))
    dead = read_parquet_sink(str(tmp_path / "dead"))
    product = {k: 1000 + k for k in range(1, 41)}
    customer = {f"c{i:02d}": 500 + i for i in range(1, 21)}
    expected_facts, expected_dead = {}, {}
    for sale, p, c in zip(sales["sale_id"].to_pylist(), sales["product_code"].to_pylist(), sales["customer_code"].to_pylist()):
        if c in customer:
            expected_facts[sale] = (product.get(p, -1), customer[c])
        else:
            expected_dead[sale] = (1, "not_in_master")
    got_facts = dict(zip(facts["sale_id"].to_pylist(), zip(facts["product_sk"].to_pylist(), facts["customer_sk"].to_pylist())))
    assert got_facts == expected_facts and facts.num_rows == len(expected_facts)
    assert "product_code" not in facts.column_names and "customer_code" not in facts.column_names  # replaced
    got_dead = {json.loads(r)["sale_id"]: (s, reason) for r, s, reason in
                zip(dead["row"].to_pylist(), dead["step"].to_pylist(), dead["reason"].to_pylist())}
    assert got_dead == expected_dead
    info = xcom(pipeline["dag_id"], "surrogate_keys", "semijoin_info")
    choice = info["auto_choices"]["product_code"]
    assert choice["algorithm"] in AUTO_CANDIDATES
    rates = choice["predicted_tps"]
    best = "unbounded" if "unbounded" in rates.values() else max(rates.values())
    assert rates[choice["algorithm"]] == best
    assert info["algorithm"] == f"{choice['algorithm']}+cachejoin"


def test_an_operator_and_the_same_yaml_step_assemble_equal_specs(connections, tmp_path, monkeypatch):
    """One place assembles a job spec: a join operator and a YAML pipeline step of the same join give
    equal specs at run time, the connection's ``page_rows`` included (a pipeline used to ignore it)."""
    from airflow.sdk import DAG

    from airflow_provider_semijoin.operators.join import HybridJoinOperator
    from airflow_provider_semijoin.pipeline.factory import JOIN_TASK, build_dag

    monkeypatch.setenv("AIRFLOW__SEMIJOIN__WORK_FOLDER", str(tmp_path / "work"))
    connections("dims", {"conn_type": "semijoin_master",
                         "extra": {"dialect": "sqlite", "path": str(tmp_path / "m.db"), "page_rows": 77}})
    (tmp_path / "same.yaml").write_text(
        "dag_id: same\n"
        "source: {kind: generator, total_rows: 100}\n"
        "steps:\n"
        "  - column: nk\n"
        "    dimension: {conn_id: dims, table: dim, natural_key: nk, surrogate_key: sk}\n"
        "    algorithm: hybridjoin\n"
        "    memory: 1M\n"
        "    on_missing: dead_letter\n"
        f"sinks: {{matched: {{path: {tmp_path / 'facts'}}}}}\n"
        "stop: {max_batches: 3}\n"
    )
    by_pipeline = build_dag(load_pipeline(tmp_path / "same.yaml")).get_task(JOIN_TASK)
    with DAG("same", schedule=None):
        by_operator = HybridJoinOperator(
            task_id=JOIN_TASK, column="nk", master_conn_id="dims", master_table="dim", master_key="nk", select=["sk"],
            memory="1M", on_missing="dead_letter", drop_column=True, source={"kind": "generator", "total_rows": 100},
            sinks={"matched": {"path": str(tmp_path / "facts")}}, stop={"max_batches": 3},
        )
    from_operator, from_pipeline = by_operator.build_job().to_dict(), by_pipeline.build_job().to_dict()
    assert from_operator == from_pipeline
    assert from_pipeline["steps"][0]["params"] == {"page_rows": 77}
    assert from_pipeline["sinks"]["dead_letter"]["path"] == str(tmp_path / "work" / "output" / "same" / JOIN_TASK / "dead_letter")


def test_an_inferred_member_step_takes_the_dimensions_surrogate_key_for_its_sequence(tmp_path):
    step = {**BASE["steps"][0], "on_missing": "inferred_member", "retry_grace_s": 30,
            "inferred_member": {"defaults": {"name": "unknown"}, "sequence": "sk_seq"}}
    import yaml

    pipeline = load_pipeline(write(tmp_path, yaml.safe_dump({**BASE, "steps": [step]})))
    (spec_step,) = pipeline.job_dict()["steps"]
    assert (spec_step["on_missing"], spec_step["unknown_member"], spec_step["retry_grace_s"]) == ("inferred_member", None, 30)
    assert spec_step["inferred_member"] == {"defaults": {"name": "unknown"}, "sequence": "sk_seq", "surrogate_key": "sk"}
    bad = {**step, "inferred_member": {"flag_column": "in ferred"}}
    path = write(tmp_path, yaml.safe_dump({**BASE, "steps": [bad]}), "bad.yaml")
    with pytest.raises(SpecError, match=rf"^{re.escape(str(path))}: steps\[0\]\.inferred_member\.flag_column: "
                                        r"'in ferred' is not a valid identifier"):
        load_pipeline(path)
