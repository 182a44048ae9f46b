"""Hooks: master-data stores and Spark masters from Airflow connections (AIRFLOW_CONN_* variables)."""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.stores import DatabaseURL, write_table
from airflow_provider_semijoin.hooks.master import MasterDataHook
from airflow_provider_semijoin.hooks.spark import SemiJoinSparkHook, package_zip

AIRFLOW_HOME = Path(os.environ["AIRFLOW_HOME"])  # set by conftest.py


ROWS = pa.table({"nk": [3, 1, 2], "sk": [30, 10, 20], "name": ["c", "a", "b"]})


def test_mysql_connection_opens_a_store_through_mysqlhook(backend, connections):
    table = backend.table_name()
    write_table(backend.connection, table, ROWS, primary_key="nk")
    if backend.name == "mysql":
        connections("dim_db", backend.url)  # a plain mysql:// URI: conn_type mysql -> MySqlHook
    else:
        connections("dim_db", {"conn_type": "semijoin_master", "extra": {"dialect": "sqlite", "path": backend.url[len("sqlite:///"):]}})
    hook = MasterDataHook("dim_db")
    with hook.open_store(table, "nk", ["sk"]) as store:
        page = store.lookup_many(np.array([1, 3, 4], dtype=np.int64))
        assert sorted(zip(page.keys.tolist(), page.rows["sk"].to_pylist())) == [(1, 10), (3, 30)]
        assert store.select == ["sk"]
    assert hook.dialect.name == backend.name


def test_url_keeps_the_password_and_describe_hides_it(connections):
    password = "p@ss:w/rd%"
    connections("dwh", f"mysql://loader:{quote(password, safe='')}@db.example:3307/warehouse")
    hook = MasterDataHook("dwh")
    parsed = DatabaseURL.parse(hook.get_url())
    assert (parsed.user, parsed.password, parsed.host, parsed.port, parsed.database) == (
        "loader", password, "db.example", 3307, "warehouse")
    assert hook.describe() == "mysql://loader:***@db.example:3307/warehouse"
    assert password not in hook.describe()


def test_mysql_login_failure_names_the_connection_not_the_password(connections, mysql_url):
    url = DatabaseURL.parse(mysql_url)
    connections("bad_login", f"mysql://{url.user}:Secret-{url.user}-x@{url.host}:{url.port}/{url.database}")
    shown = re.escape(f"(mysql://{url.user}:***@{url.host}:{url.port}/{url.database})")
    with pytest.raises(ConfigError, match=rf"^master_conn_id: cannot connect to MySQL through connection 'bad_login' {shown}: ") as caught:
        MasterDataHook("bad_login").get_conn()
    assert "Secret-" not in str(caught.value)


def test_sqlite_uri_connection(tmp_path, connections):
    path = tmp_path / "dims.db"
    connections("dims", f"sqlite:///{path}")
    assert MasterDataHook("dims").get_url() == f"sqlite:///{path}"


def test_no_connection_means_the_embedded_sqlite_file():
    hook = MasterDataHook()  # [semijoin] master_conn_id = semijoin_master_default, which is not defined
    assert hook.connection is None
    assert hook.get_url() == f"sqlite:///{AIRFLOW_HOME / 'semijoin' / 'master.db'}"
    assert (AIRFLOW_HOME / "semijoin").is_dir()


def test_an_undefined_named_connection_is_an_error():
    with pytest.raises(ConfigError, match=r"^master_conn_id: connection 'nowhere' is not defined .*AIRFLOW_CONN_NOWHERE\)$"):
        MasterDataHook("nowhere").get_url()


def test_a_connection_of_another_type_is_refused(connections):
    connections("pg", "postgres://u:p@h:5432/db")
    with pytest.raises(ConfigError, match=r"^master_conn_id: connection 'pg' has type 'postgres'; expected one of "
                                          r"\['mysql', 'mariadb', 'semijoin_master', 'sqlite'\]$"):
        MasterDataHook("pg").get_url()


def test_semijoin_master_connection_fields(connections):
    connections("m", {"conn_type": "semijoin_master", "host": "h", "schema": "w", "login": "u", "password": "pw",
                      "port": 3310, "extra": {"dialect": "mysql", "page_rows": "250"}})
    hook = MasterDataHook("m")
    assert hook.get_url() == "mysql://u:pw@h:3310/w"
    assert hook.page_rows == 250
    connections("m2", {"conn_type": "semijoin_master", "extra": {"dialect": "oracle"}})
    with pytest.raises(ConfigError, match=r"^master_conn_id: connection 'm2' has dialect 'oracle'; expected 'sqlite' or 'mysql'$"):
        MasterDataHook("m2").get_url()
    connections("m3", {"conn_type": "semijoin_master", "extra": {"dialect": "sqlite", "page_rows": "many"}})
    with pytest.raises(ConfigError, match=r"^master_conn_id: page_rows 'many' of connection 'm3' is not a positive integer$"):
        _ = MasterDataHook("m3").page_rows


@pytest.mark.parametrize(
    "value, master, local",
    [
        (None, "local[2]", True),  # no connection: [semijoin] local_master (local[2] in these tests)
        ({"conn_type": "spark", "host": "local[*]"}, "local[*]", True),
        ("spark://127.0.0.1:7077", "spark://127.0.0.1:7077", False),
        ({"conn_type": "spark", "host": "yarn"}, "yarn", False),
        ({"conn_type": "spark", "host": "k8s://https://kube:443"}, "k8s://https://kube:443", False),
    ],
)
def test_spark_master_from_the_connection(connections, value, master, local):
    if value is not None:
        connections("sp", value)
    hook = SemiJoinSparkHook("sp" if value is not None else None)
    assert (hook.master, hook.is_local) == (master, local)


def test_undefined_spark_connection_is_an_error():
    with pytest.raises(ConfigError, match=r"^spark_conn_id: connection 'cluster' is not defined"):
        SemiJoinSparkHook("cluster")


def test_local_session_is_the_shared_one(spark):
    session = SemiJoinSparkHook().get_session("t")
    assert session is spark or session.sparkContext is spark.sparkContext
    assert session.range(3).count() == 3


def test_package_zip_ships_the_package(tmp_path):
    archive = package_zip(tmp_path)
    names = zipfile.ZipFile(archive).namelist()
    assert "airflow_provider_semijoin/hooks/master.py" in names
    assert "airflow_provider_semijoin/core/joins/registry.py" in names
    assert not any("__pycache__" in n for n in names)
    assert package_zip(tmp_path).stat().st_mtime == archive.stat().st_mtime  # reused while up to date
