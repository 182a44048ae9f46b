"""``semijoin bench --micro``: the cache-hit path timed alone, each path checked for its matches."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from airflow_provider_semijoin.bench.micro import PATHS, HitPath, MicroConfig
from airflow_provider_semijoin.core.errors import ConfigError


def test_the_cli_reports_every_path_for_every_batch(tmp_path):
    report_file = tmp_path / "micro.json"
    done = subprocess.run(
        [sys.executable, "-m", "airflow_provider_semijoin.cli", "bench", "--micro", "--cache-keys", "5000",
         "--micro-batches", "1000,20000", "--out", str(report_file)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "cache-hit path on one core" in done.stdout and "cachejoin / pandas-index" in done.stdout
    report = json.loads(report_file.read_text())
    assert [r["batch"] for r in report["results"]] == [1000, 20000]
    for row in report["results"]:
        assert all(math.isfinite(row[p]) and row[p] > 0 for p in PATHS), row


@pytest.mark.parametrize("path", ["h_r", "cachejoin", "pandas_index", "arrow_join"])
def test_a_path_that_misses_a_key_fails_its_check(path):
    """Keys beyond R are not cached: every path notices that it did not match them all."""
    hit_path = HitPath(MicroConfig(cache_keys=2000, batches=(100,), repeat=1))
    keys = np.concatenate((hit_path.stream[:50], np.array([10**9, 10**9 + 1])))
    with pytest.raises(AssertionError, match=r"of 52 (keys|tuples)"):
        getattr(hit_path, path)(keys)


@pytest.mark.parametrize("change, message", [
    ({"cache_keys": 0}, r"cache_keys: 0 is not a number of cached keys >= 1"),
    ({"batches": ()}, r"batches: \(\) are not stream batch sizes >= 1"),
    ({"repeat": 0}, r"repeat: 0 is not a number of runs >= 1"),
])
def test_bad_settings_name_the_field(change, message):
    with pytest.raises(ConfigError, match=message):
        MicroConfig(**change)
