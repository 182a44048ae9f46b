"""``semijoin bench`` at a tiny size and ``semijoin demo``: they run and check what they claim.

Speed is never asserted here: the benchmark measures it, tests only check that the report is
complete and consistent (each algorithm measured, within its memory budget, rates positive).
"""

from __future__ import annotations

import json

import pytest

from airflow_provider_semijoin.bench import BenchConfig
from airflow_provider_semijoin.cli import main
from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.joins import ALGORITHMS
from airflow_provider_semijoin.core.files import read_table


def test_bench_tiny_reports_every_algorithm_and_shape(tmp_path, capsys):
    out = tmp_path / "bench.json"
    args = ["bench", "--master", f"sqlite:///{tmp_path / 'b.db'}", "--rows", "5000", "--memory", "512KB",
            "--warmup", "0.2", "--window", "0.3", "--out", str(out), "--set", "hybridjoin-l.lookup_position=0.5"]
    assert main(args) == 0
    report = json.loads(out.read_text())
    results = report["results"]
    assert {(r["algorithm"], r["shape"]) for r in results} == {(a, s) for a in ALGORITHMS for s in ["noperm", "random"]}
    for r in results:
        assert r["service_rate_tps"] > 0 and r["tuples_in_window"] > 0
        assert (r["cache_hit_ratio"] is not None) == (r["algorithm"] in ("inlist-lru", "ssj", "cmeshjoin", "cachejoin", "cachejoin-l", "cachejoin-pq"))
        assert r["memory_ok"] and r["structure_bytes_peak"] <= 512 * 1024
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("noperm  hybridjoin ") for line in lines)
    assert report["config"]["params"] == {"hybridjoin-l.lookup_position": "0.5"}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"shapes": ["noperm", "zipfy"]}, r"shapes\[1\]: 'zipfy' is not one of"),
        ({"algorithms": ["hybridjoin", "hybrid"]}, r"algorithms\[1\]: 'hybrid' is not one of"),
        ({"params": {"page_rows": "5"}}, r"--set page_rows: expected ALGORITHM.NAME=VALUE"),
        ({"window_s": 0}, r"window: warm-up 10.0 s and window 0 s"),
    ],
)
def test_bench_config_errors_name_the_field(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        BenchConfig(master="sqlite:///x.db", **kwargs)


def test_demo_checks_exactly_once_and_the_oracle(tmp_path, capsys):
    assert main(["demo", "--dir", str(tmp_path), "--rows", "20000", "--stream-rows", "30000", "--memory", "512KB"]) == 0
    out = capsys.readouterr().out
    assert "exactly once: yes (lost 0, duplicated 0)" in out
    assert "equal to a plain hash join of the stream with all of R: yes" in out
    matched, unmatched = read_table(tmp_path / "matched.parquet"), read_table(tmp_path / "unmatched.parquet")
    assert matched.num_rows + unmatched.num_rows == 30000
    assert 0 < unmatched.num_rows < 0.05 * 30000  # 2% of keys are absent from R
