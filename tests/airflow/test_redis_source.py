"""A Redis stream source on the Airflow paths: ``conn_id`` names an Airflow connection of type
``redis`` (resolved by :class:`...hooks.redis.RedisStreamHook` when the task runs), a URL with a
password is refused in a task's arguments, and a join on a password-protected Redis (a private
server) shows the password in no task log and no XCom."""

from __future__ import annotations

import json
import uuid

import pytest
import redis

from airflow_provider_semijoin.core.errors import ConfigError, SpecError
from airflow_provider_semijoin.hooks.redis import RedisStreamHook
from airflow_provider_semijoin.job.assemble import PARSE_TIME_REDIS_URL, Connections
from airflow_provider_semijoin.operators.join import HybridJoinOperator
from airflow_provider_semijoin.pipeline.spec import Dimension, PipelineSpec, SurrogateKeyStep
from airflow_provider_semijoin.spark.sinks import read_parquet_sink
from airflow_provider_semijoin.workloads.master import generate_master
from airflow_provider_semijoin.workloads.redis_feed import fill
from airflow_provider_semijoin.workloads.stream import generator_rows
from metadata import xcoms
from redis_server import RedisServer  # tests/, on sys.path as tests/conftest.py's folder

HYBRIDJOIN = "airflow_provider_semijoin.operators.join:HybridJoinOperator"
SOURCE = {"kind": "redis_stream", "conn_id": "sales_redis", "stream": "sales", "schema": "tid BIGINT, nk BIGINT"}
PASSWORD = "S3ntinel-p@ss/w:rd"


def test_a_redis_connection_becomes_the_source_url(connections):
    connections("sales_redis", {"conn_type": "redis", "host": "cache.example", "port": 6380, "password": PASSWORD,
                                "extra": {"db": 2}})
    connections("tls_redis", {"conn_type": "redis", "host": "h", "login": "app", "extra": {"ssl": True}})
    connections("a_mysql", "mysql://u:p@h/db")
    connections("bad_db", {"conn_type": "redis", "host": "h", "extra": {"db": "sales"}})
    hook = RedisStreamHook("sales_redis")
    assert hook.get_url() == "redis://:S3ntinel-p%40ss%2Fw%3Ard@cache.example:6380/2"
    assert hook.describe() == "redis://:***@cache.example:6380/2"
    assert RedisStreamHook("tls_redis").get_url() == "rediss://app@h:6379/0"
    for conn_id, message in [("a_mysql", "source.conn_id: connection 'a_mysql' has type 'mysql'; expected 'redis'"),
                             ("bad_db", "source.conn_id: connection 'bad_db' names db 'sales'; expected a number"),
                             ("nowhere", "source.conn_id: connection 'nowhere' is not defined (add it in the Airflow UI")]:
        with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(")):
            RedisStreamHook(conn_id).get_url()


def operator(source: dict, **more):
    return HybridJoinOperator(task_id="join", column="nk", master_table="products", master_key="nk", source=source, **more)


def test_the_source_s_connection_is_resolved_when_the_task_runs_and_a_password_in_its_url_is_refused():
    assert operator(SOURCE).job_dict(resolve=False)["source"] == {**{k: v for k, v in SOURCE.items() if k != "conn_id"},
                                                                  "url": PARSE_TIME_REDIS_URL}
    refused = [
        ({**SOURCE, "conn_id": None, "url": "redis://:secret@h:6379/0"},
         "join: source.url: holds a password, which Airflow would keep and show with the task's arguments; expected "
         "conn_id naming an Airflow connection of type redis"),
        ({**SOURCE, "url": "redis://h:6379/0"}, "join: source.conn_id: given with url; expected one of them"),
        ({**SOURCE, "conn_id": ""}, "join: source.conn_id: '' is not an Airflow connection id"),
        ({**SOURCE, "schema": "tid BIGINT, nk MAP<INT,INT>"}, "join: source.schema: 'nk MAP<INT' is not a field and its type"),
    ]
    for source, message in refused:
        source = {k: v for k, v in source.items() if v is not None}
        with pytest.raises(SpecError, match="^" + message.replace("(", r"\(")):
            operator(source)
    pipeline = PipelineSpec(dag_id="p", source=SOURCE, steps=[SurrogateKeyStep("nk", Dimension("products", "nk", "sk"))])
    assert pipeline.job_dict()["source"]["url"] == PARSE_TIME_REDIS_URL  # a YAML pipeline takes it as the operators do
    resolved = pipeline.job_dict(Connections(url=lambda conn_id: "sqlite:////dims.db", redis_url=lambda conn_id: f"redis://{conn_id}:1/0"))
    assert resolved["source"]["url"] == "redis://sales_redis:1/0"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_join_on_a_password_protected_redis_shows_the_password_nowhere(backend, tmp_path, make_dag, connections,
                                                                           spark, capfd):
    """The operator through dag.test() on local Spark, its source a private Redis server with a
    password behind connection ``sales_redis``: every entry joined once; the password is in no
    task log line and no XCom of the task (what the UI serves)."""
    server = RedisServer(tmp_path, password=PASSWORD)
    try:
        client = redis.Redis(port=server.port, password=PASSWORD)
        settings = {"total_rows": 1000, "master_rows": 2000, "key_type": "int", "exponent": 1.0, "shape": "noperm",
                    "missing": 0.1, "seed": 11, "extra_keys": {}}
        ids = fill(client, "sales", generator_rows(settings, 0, 1000))
        client.close()
        table = backend.table_name()
        generate_master(backend.connection, table, 2000, seed=3, reuse=False)
        connections("dims", {"conn_type": "semijoin_master", "extra": {"dialect": "sqlite", "path": backend.url[len("sqlite:///"):]}})
        connections("sales_redis", {"conn_type": "redis", "host": "127.0.0.1", "port": server.port, "password": PASSWORD})
        dag_id = f"redis_{uuid.uuid4().hex[:8]}"
        dag = make_dag(dag_id, {"join": (HYBRIDJOIN, dict(
            column="nk", master_static=True, master_table=table, master_key="nk", select=["name"], master_conn_id="dims",
            memory="2M", source={**SOURCE, "total_rows": 1000, "max_rows_per_batch": 400},
            sinks={"matched": {"path": str(tmp_path / "matched")}, "dead_letter": {"path": str(tmp_path / "dead")}},
            checkpoint=str(tmp_path / "checkpoint"), stop={"end_of_input": True}, trigger_interval_s=0.3,
        ))})
        run = dag.test()
        assert str(run.state) == "success"
        logged = "".join(capfd.readouterr())
        shown = json.dumps([xcoms(dag_id, "join", key) for key in ("return_value", "semijoin_info", "semijoin_metrics",
                                                                     "semijoin_history")])
        assert "redis://:***@127.0.0.1" in logged and "redis://:***@127.0.0.1" in shown
        for form in (PASSWORD, "S3ntinel-p%40ss", "S3ntinel"):
            assert form not in logged and form not in shown
        left = read_parquet_sink(str(tmp_path / "matched"))["sj_id"].to_pylist() + read_parquet_sink(str(tmp_path / "dead"))["sj_id"].to_pylist()
        assert sorted(left) == sorted(i.decode() for i in ids)
    finally:
        server.close()
