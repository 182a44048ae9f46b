"""``semijoin bench --cold``: whole ``semijoin join`` runs by wall clock, start-up included, for
the algorithms asked and the two IN-list baselines, each exactly once."""

from __future__ import annotations

import json

import pytest

from airflow_provider_semijoin.bench.cold import ColdConfig, _without_password
from airflow_provider_semijoin.cli import main
from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.stores.sql import PASSWORD_ENV


def test_cold_runs_every_algorithm_and_both_baselines_exactly_once(tmp_path, capsys):
    out = tmp_path / "cold.json"
    code = main(["bench", "--cold", "--master", f"sqlite:///{tmp_path / 'b.db'}", "--rows", "3000",
                 "--stream-rows", "2000", "--algorithms", "hybridjoin,cachejoin", "--shapes", "noperm",
                 "--memory", "1MB", "--out", str(out)])
    assert code == 0
    results = json.loads(out.read_text())["results"]
    assert [r["algorithm"] for r in results] == ["hybridjoin", "cachejoin", "inlist", "inlist-lru"]
    assert all(r["exactly_once"] and r["wall_s"] > 0 and r["wall_tps"] == pytest.approx(2000 / r["wall_s"]) for r in results)
    assert all(r["first_wall_s"] > 0 and r["first_wall_tps"] == pytest.approx(2000 / r["first_wall_s"]) for r in results)
    table = capsys.readouterr().out
    assert "| algorithm | wall s | tuples/s (wall) |" in table and "| first run: wall s | first run: x better" in table
    assert sum(line.startswith(("| hybridjoin |", "| cachejoin |", "| inlist |", "| inlist-lru |"))
               for line in table.splitlines()) == 4


def test_a_password_goes_to_the_child_through_the_environment_not_argv():
    url, env = _without_password("mysql://semijoin:s%40cret@127.0.0.1:3306/semijoin_bench")
    assert url == "mysql://semijoin@127.0.0.1:3306/semijoin_bench" and env[PASSWORD_ENV] == "s@cret"
    assert _without_password("sqlite:///b.db")[0] == "sqlite:///b.db"


def test_cold_config_names_a_bad_field():
    with pytest.raises(ConfigError, match=r"^algorithms\[0\]: 'fast' is not one of"):
        ColdConfig(master="sqlite:///x.db", algorithms=["fast"])
    with pytest.raises(ConfigError, match=r"^algorithms\[1\]: 'ssij@lru' is a variant, which the steady-state bench "
                                          r"alone measures; expected one of \["):
        ColdConfig(master="sqlite:///x.db", algorithms=["ssj", "ssij@lru"])
    with pytest.raises(ConfigError, match=r"^stream_rows: 0 is not a number of tuples >= 1"):
        ColdConfig(master="sqlite:///x.db", stream_rows=0)


@pytest.mark.parametrize("mode", ["--cold", "--micro", "--access"])
def test_a_bench_mode_that_runs_defaults_refuses_a_setting(mode, capsys):
    assert main(["bench", "--master", "sqlite:///x.db", mode, "--set", "hybridjoin.read_ahead=0"]) == 2
    assert capsys.readouterr().err == (f"semijoin: error: --set: {mode} takes no algorithm parameters; "
                                       "expected no --set (the steady-state bench and --spark take them)\n")
