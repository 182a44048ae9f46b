"""``semijoin bench --cold``: whole ``semijoin join`` runs by wall clock, start-up included, for
the algorithms asked and the two IN-list baselines, each exactly once."""

from __future__ import annotations

import json

import pytest

import numpy as np
import pyarrow as pa

from airflow_provider_semijoin.bench.cold import FLOOR_IN_KEYS, ColdConfig, _without_password, floor_reads
from airflow_provider_semijoin.core.joins.base import ReadCosts
from airflow_provider_semijoin.core.stores import DatabaseURL, store_for, write_table
from airflow_provider_semijoin.cli import main
from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.stores.sql import PASSWORD_ENV


def test_cold_runs_every_algorithm_and_both_baselines_exactly_once(tmp_path, capsys):
    out = tmp_path / "cold.json"
    code = main(["bench", "--cold", "--master", f"sqlite:///{tmp_path / 'b.db'}", "--rows", "3000",
                 "--stream-rows", "2000", "--algorithms", "hybridjoin,cachejoin,cachejoin@lru", "--shapes", "noperm",
                 "--set", "cachejoin.threshold=3", "--set", "cachejoin@lru.eviction=lru", "--memory", "1MB",
                 "--out", str(out)])
    assert code == 0
    results = json.loads(out.read_text())["results"]
    assert [r["algorithm"] for r in results] == ["hybridjoin", "cachejoin", "cachejoin@lru", "inlist", "inlist-lru"]
    # each child joined with its own settings: a variant with its algorithm's and then its own
    settings = {r["algorithm"]: (r["settings"].get("threshold"), r["settings"].get("eviction")) for r in results[1:3]}
    assert settings == {"cachejoin": (3, "lfu"), "cachejoin@lru": (3, "lru")}
    assert all(r["exactly_once"] and r["wall_s"] > 0 and r["wall_tps"] == pytest.approx(2000 / r["wall_s"]) for r in results)
    assert all(r["first_wall_s"] > 0 and r["first_wall_tps"] == pytest.approx(2000 / r["first_wall_s"]) for r in results)
    table = capsys.readouterr().out
    assert "| algorithm | wall s | tuples/s (wall) |" in table and "| first run: wall s | first run: x better" in table
    assert sum(line.startswith(("| hybridjoin |", "| cachejoin |", "| cachejoin@lru |", "| inlist |", "| inlist-lru |"))
               for line in table.splitlines()) == 5
    # the ceiling: the least time outside a join loop plus the fastest read of the stream's distinct keys
    [floor] = json.loads(out.read_text())["floors"]
    assert floor["shape"] == "noperm" and 0 < floor["distinct_keys"] <= 2000
    assert sorted(map(int, floor["floor_s"])) == [1, 2, 4] and all(s > 0 for s in floor["floor_s"].values())
    assert all(0 < r["outside_join_s"] < r["wall_s"] for r in results)
    least = min(r["outside_join_s"] for r in results) + min(floor["floor_s"].values())
    baseline = min(r["wall_s"] for r in results if r["algorithm"] in ("inlist", "inlist-lru"))
    assert f"no join of this stream ends here under {least:.2f} s: at most {baseline / least:.2f}x the better" in table
    assert f"the rows of the stream's {floor['distinct_keys']:,} distinct keys, the pages where a range read costs less" in table


def test_a_password_goes_to_the_child_through_the_environment_not_argv():
    url, env = _without_password("mysql://semijoin:s%40cret@127.0.0.1:3306/semijoin_bench")
    assert url == "mysql://semijoin@127.0.0.1:3306/semijoin_bench" and env[PASSWORD_ENV] == "s@cret"
    assert _without_password("sqlite:///b.db")[0] == "sqlite:///b.db"


def test_cold_config_names_a_bad_field():
    with pytest.raises(ConfigError, match=r"^algorithms\[0\]: 'fast' is not one of"):
        ColdConfig(master="sqlite:///x.db", algorithms=["fast"])
    with pytest.raises(ConfigError, match=r"^algorithms\[1\]: 'ssij@LRU': a variant is NAME@LABEL with LABEL of a-z"):
        ColdConfig(master="sqlite:///x.db", algorithms=["ssj", "ssij@LRU"])
    with pytest.raises(ConfigError, match=r"^--set ssij@lru: expected ALGORITHM.NAME=VALUE"):
        ColdConfig(master="sqlite:///x.db", algorithms=["ssij@lru"], params={"ssij@lru": "1"})
    with pytest.raises(ConfigError, match=r"^stream_rows: 0 is not a number of tuples >= 1"):
        ColdConfig(master="sqlite:///x.db", stream_rows=0)


@pytest.mark.parametrize("mode", ["--micro", "--access"])
def test_a_bench_mode_that_runs_defaults_refuses_a_setting(mode, capsys):
    assert main(["bench", "--master", "sqlite:///x.db", mode, "--set", "hybridjoin.read_ahead=0"]) == 2
    assert capsys.readouterr().err == (f"semijoin: error: --set: {mode} takes no algorithm parameters; "
                                       "expected no --set (the steady-state, cold and Spark benches take them)\n")


def test_the_floor_reads_dense_pages_by_range_and_the_rest_by_in(tmp_path):
    """Pages whose keys are all wanted cost less by range (T under the IN cost of a key), one read
    for each run of them; sparse keys go by IN queries of FLOOR_IN_KEYS; a key outside R is not
    read; together the reads hold every wanted key of R."""
    connection = DatabaseURL.parse(f"sqlite:///{tmp_path / 'r.db'}").connect()
    write_table(connection, "r", pa.table({"nk": np.arange(60_000), "v": np.arange(60_000)}), primary_key="nk")
    store = store_for(connection, "r", "nk")
    page_rows = store.page_map().page_rows
    sparse = np.arange(5_000, 60_000, 50)  # 10 keys a page of 500 rows: by IN
    keys = np.concatenate([np.arange(2 * page_rows), sparse, [10**9]])
    costs = ReadCosts(query_s=1e-4, unit_s=1e-6, in_query_s=1e-4, in_key_s=1e-5)
    reads = floor_reads(store, keys, costs)
    pages = [read(store) for read in reads]
    assert len(pages[0]) >= 2 * page_rows and all(len(p) <= FLOOR_IN_KEYS for p in pages[1:])
    assert len(reads) == 1 + -(-len(sparse) // FLOOR_IN_KEYS)
    got = np.concatenate([p.keys for p in pages])
    assert np.isin(keys[:-1], got).all() and 10**9 not in got
    # the same keys priced with IN cheaper than a row's range read: every key by IN
    dear = ReadCosts(query_s=1e-4, unit_s=1e-4, in_query_s=1e-4, in_key_s=1e-5)
    assert len(floor_reads(store, keys, dear)) == -(-(len(keys) - 1) // FLOOR_IN_KEYS)
    connection.close()
