"""Hostile job and pipeline specs (issue 13): random hostile changes to valid specs end either
in a valid spec (round-tripping through JSON, every identifier valid) or in ONE SpecError
sentence that starts with the field's path. Never another exception."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.core.errors import SpecError
from airflow_provider_semijoin.core.stores.sql import IDENTIFIER
from airflow_provider_semijoin.pipeline.spec import PipelineSpec, from_mapping, load_pipeline
from airflow_provider_semijoin.job.assemble import Connections
from airflow_provider_semijoin.job.spec import JobSpec

from .strategies import HOSTILE, mutations
from .tally import record

FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MAX_MESSAGE = 600  # characters: a hostile 100 kB value must not come back whole in an error

JOB = {
    "name": "fuzz",
    "source": {"kind": "generator", "rows_per_second": 100.0, "master_rows": 1000, "total_rows": 5000,
               "extra_keys": {"customer_nk": {"master_rows": 500, "seed": 2}}},
    "steps": [
        {"column": "nk", "algorithm": "hybridjoin", "memory": "8MB", "params": {"page_rows": 100},
         "master": {"url": "mysql://u:S3ntinel-spec@127.0.0.1:3306/db", "table": "product", "key": "nk",
                    "select": ["sk", "name"]},
         "on_missing": "unknown_member", "unknown_member": {"sk": -1}, "rename": {"sk": "product_sk"}},
        {"column": "customer_nk", "algorithm": "cachejoin", "memory": 4_000_000, "on_missing": "retry",
         "retry_grace_s": 5, "master": {"url": "sqlite:///c.db", "table": "customer", "key": "nk", "select": ["sk2"]}},
    ],
    "sinks": {"matched": {"kind": "table", "url": "sqlite:///w.db", "table": "fact"},
              "dead_letter": {"kind": "parquet", "path": "/tmp/dead"}},
    "checkpoint": "/tmp/ckpt",
    "stop": {"duration_s": 60, "max_batches": 10, "end_of_input": True},
    "deadline": {"max_latency_s": 2.0},
    "trigger_interval_s": 0.5,
    "partitions": 2,
}

PIPELINE = {
    "dag_id": "fuzz_pipeline",
    "source": {"kind": "files", "path": "/landing", "format": "csv", "schema": "tid BIGINT, product_code STRING"},
    "steps": [{"column": "product_code", "memory": "16M", "on_missing": "unknown_member", "unknown_member": -1,
               "dimension": {"conn_id": "warehouse", "table": "dim_product", "natural_key": "product_code",
                             "surrogate_key": "product_sk", "columns": ["name"]}},
              {"column": "customer_code", "algorithm": "ssij", "params": {"max_scan": 10}, "on_missing": "retry",
               "retry_grace_s": 30, "dimension": {"table": "dim_customer", "natural_key": "customer_code",
                                                   "surrogate_key": "customer_sk"}}],
    "sinks": {"matched": {"kind": "table", "conn_id": "warehouse", "table": "fact_sales"},
              "dead_letter": {"path": "/dead"}},
    "tags": ["fuzz"],
    "deadline": {"max_latency_s": 5},
    "deadline_monitor": {"threshold": 0.1},
    "install_updates": {"min_pending": 10},
}


def check_error(surface: str, exc: Exception, top_fields, prefix: str = "") -> None:
    message = str(exc)
    assert isinstance(exc, SpecError), f"{type(exc).__name__}: {message}"
    assert "\n" not in message, message
    assert len(message) <= MAX_MESSAGE, f"{len(message)} characters: {message[:200]}..."
    assert message.startswith(prefix), message
    field = message[len(prefix):].split(".", 1)[0].split("[", 1)[0].split(":", 1)[0].split(",", 1)[0]
    assert field in top_fields, f"{message!r} does not start with a field of the spec"
    record(surface, message[len(prefix):])


def check_identifiers(spec: JobSpec) -> None:
    names = [spec.name, spec.arrival_column, spec.source.id_column, *spec.source.to_dict()["extra_keys"],
             spec.sinks.matched.table, spec.sinks.dead_letter.table]
    for step in spec.steps:
        names += [step.column, step.master.table, step.master.key, *(step.master.select or []), *step.rename.values()]
    for name in names:
        assert name is None or IDENTIFIER.match(name), name


def test_base_specs_are_valid():
    check_identifiers(JobSpec.from_dict(JOB))
    assert from_mapping(PipelineSpec, PIPELINE, "").dag_id == "fuzz_pipeline"


@FAST
@given(mutations(JOB))
def test_hostile_job_spec(mutated):
    data, _ = mutated
    try:
        spec = JobSpec.from_dict(data)
    except Exception as exc:  # noqa: BLE001 - any other exception type is the bug this test looks for
        check_error("job spec (JSON)", exc, set(JOB) | {"JobSpec"})
        return
    record("job spec (JSON)")
    check_identifiers(spec)
    text = json.dumps(spec.to_dict())  # it travels to the driver as JSON
    assert JobSpec.from_dict(json.loads(text)).to_dict() == json.loads(text)
    assert "S3ntinel" not in json.dumps(spec.describe(), default=str)


@FAST
@given(mutations(PIPELINE))
def test_hostile_pipeline_spec(mutated):
    data, _ = mutated
    try:
        spec = from_mapping(PipelineSpec, data, "")
    except Exception as exc:  # noqa: BLE001
        check_error("pipeline spec (mapping)", exc, set(PIPELINE) | set(PipelineSpec.__dataclass_fields__) | {"PipelineSpec"})
        return
    record("pipeline spec (mapping)")
    job = JobSpec.from_dict(spec.job_dict(Connections(url=lambda conn_id: "sqlite:///x.db")))
    check_identifiers(job)


YAML_TEXT = st.sampled_from([
    "", "---", "[]", "- a\n- b", "dag_id: [unclosed", "dag_id: x\n\tsource: {}", "a: &x [*x]", "!!python/object:os.system {}",
    "dag_id: !!binary aGVsbG8=", "dag_id: x\nsource: {}\nsteps: []\n", "\ufeffdag_id: x", "dag_id: 'x'\n" * 3,
    "? [a, b]\n: c", "dag_id: 1e400", "steps: !!set {a, b}",
]) | st.text(max_size=200)


@FAST
@given(st.one_of(mutations(PIPELINE).map(lambda m: yaml.safe_dump(m[0], allow_unicode=True)), YAML_TEXT))
def test_hostile_pipeline_yaml(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("yaml", numbered=True) / "pipe.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        load_pipeline(path)
    except Exception as exc:  # noqa: BLE001
        message = str(exc)
        assert isinstance(exc, SpecError), f"{type(exc).__name__}: {message}"
        assert message.startswith(f"{path}: "), message
        assert "\n" not in message and len(message) <= MAX_MESSAGE + len(str(path)), message[:300]
        record("pipeline spec (YAML file)", message[len(str(path)) + 2:])
        return
    record("pipeline spec (YAML file)")
