"""``semijoin bench --as-of`` (issue 55): as-of lookups through the core engine against the same
algorithm with equality and against one SQL join a micro-batch, on a tiny SQLite R."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from airflow_provider_semijoin.bench.asof import (
    AsOfBenchConfig, asof_stream, run_engine, run_inlist, run_sql, same_pairs, type2_table, write_type2)
from airflow_provider_semijoin.cli import main
from airflow_provider_semijoin.core.errors import ConfigError


def oracle(r, stream) -> Counter:
    """(tid, sk) of each tuple and the version valid at its time, by a loop over R's rows."""
    versions: dict[int, list[tuple]] = {}
    for sk, nk, start, end in zip(*(r[c].to_pylist() for c in ("sk", "nk", "valid_from", "valid_to"))):
        versions.setdefault(nk, []).append((sk, start, end))
    pairs = Counter()
    for tid, nk, t in zip(*(stream[c].to_pylist() for c in ("tid", "nk", "t"))):
        pairs.update((tid, sk) for sk, start, end in versions[nk] if start <= t and (end is None or t < end))
    return pairs


def test_the_as_of_bench_reports_every_way_and_the_as_of_results_agree_with_sql(tmp_path, capsys):
    out = tmp_path / "asof.json"
    code = main(["bench", "--as-of", "--master", f"sqlite:///{tmp_path / 'b.db'}", "--rows", "3000",
                 "--stream-rows", "4000", "--as-of-batch-rows", "500", "--memory", "1MB", "--out", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    assert report["same_as_sql"] == {"inlist": True, "hybridjoin": True, "cachejoin": True}
    assert report["keys"] == 1000 and 1000 <= report["r_rows"] <= 5000 and report["table"] == "asof_r3000_s0"
    rows = {(r["algorithm"], r["lookup"]): r for r in report["results"]}
    assert list(rows) == [("hybridjoin", "as-of"), ("hybridjoin", "equality"), ("cachejoin", "as-of"),
                          ("cachejoin", "equality"), ("sql", "as-of, one query a micro-batch"),
                          ("inlist", "as-of, IN list + pandas pick")]
    sql, inlist = rows["sql", "as-of, one query a micro-batch"], rows["inlist", "as-of, IN list + pandas pick"]
    assert inlist["tuples"] == 4000 and inlist["matched_pairs"] == inlist["matched_tuples"] == sql["matched_pairs"]
    assert inlist["x_inlist"] == sql["x_sql"] == 1.0
    assert inlist["x_sql"] == pytest.approx(inlist["tuples_per_s"] / sql["tuples_per_s"], rel=1e-2)
    for name in ("hybridjoin", "cachejoin"):
        as_of, equality = rows[name, "as-of"], rows[name, "equality"]
        assert as_of["tuples"] == equality["tuples"] == sql["tuples"] == 4000
        # one version a matched tuple as of its time; every version with equality
        assert as_of["matched_pairs"] == as_of["matched_tuples"] == sql["matched_pairs"] < 4000
        assert equality["matched_tuples"] == 4000 and equality["matched_pairs"] > 1.5 * as_of["matched_pairs"]
        for row in (as_of, equality):
            assert row["memory_ok"] and 0 < row["structure_bytes_peak"] <= 2**20
            assert row["tuples_per_s"] == pytest.approx(4000 / row["seconds"], rel=1e-3)
            assert row["x_equality"] == pytest.approx(row["tuples_per_s"] / equality["tuples_per_s"], rel=1e-2)
            assert row["x_sql"] == pytest.approx(row["tuples_per_s"] / sql["tuples_per_s"], rel=1e-2)
            assert row["x_inlist"] == pytest.approx(row["tuples_per_s"] / inlist["tuples_per_s"], rel=1e-2)
    printed = capsys.readouterr().out
    assert "hybridjoin as-of and sql: the same multiset of (tuple, sk)" in printed
    assert "cachejoin as-of and sql: the same multiset of (tuple, sk)" in printed
    assert "inlist and sql: the same multiset of (tuple, sk)" in printed


@pytest.mark.parametrize("algorithm", ["hybridjoin", "cachejoin"])
def test_the_engine_and_the_sql_give_the_version_valid_at_each_tuples_time(tmp_path, algorithm):
    config = AsOfBenchConfig(master=f"sqlite:///{tmp_path / 'b.db'}", rows=600, stream_rows=1500, batch_rows=200,
                             memory=2**20, algorithms=[algorithm], seed=3)
    r = type2_table(config.keys, config.seed)
    table = write_type2(config, r, lambda line: None)
    stream = asof_stream(config, r)
    expected = oracle(r, stream)
    _, *engine = run_engine(config, table, algorithm, stream, True)
    _, *sql = run_sql(config, table, stream)
    _, *inlist = run_inlist(config, table, stream)
    assert Counter(zip(*(a.tolist() for a in engine))) == expected == Counter(zip(*(a.tolist() for a in sql)))
    assert Counter(zip(*(a.tolist() for a in inlist))) == expected
    assert max(expected.values()) == 1 and 0 < len(expected) < 1500  # some tuples fall before a key's first version or in a gap


def test_the_type2_table_has_one_to_five_versions_a_key_with_gaps_and_one_current():
    r = type2_table(2000, 0)
    nk, start, end = r["nk"].to_numpy(), r["valid_from"].to_numpy(), r["valid_to"]
    keys, counts = np.unique(nk, return_counts=True)
    assert len(keys) == 2000 and set(counts) == {1, 2, 3, 4, 5}
    assert r["sk"].to_pylist() == list(range(1, r.num_rows + 1))
    last = np.r_[nk[1:] != nk[:-1], True]
    assert end.null_count == 2000 and np.array_equal(end.is_null().to_numpy(zero_copy_only=False), last)
    ends = end.fill_null(0).to_numpy()
    assert np.all(start[1:][~last[:-1]] > start[:-1][~last[:-1]])  # versions of a key in time order
    assert np.all(ends[~last] > start[~last]) and np.all(ends[~last] <= start[1:][~last[:-1]])
    assert 0.1 < np.mean(ends[~last] < start[1:][~last[:-1]]) < 0.3  # gaps between versions


def test_same_pairs_tells_a_multiset_from_a_set():
    a = np.array([1, 1, 2]), np.array([7, 7, 9])
    assert same_pairs(a, (np.array([2, 1, 1]), np.array([9, 7, 7])))
    assert not same_pairs(a, (np.array([1, 2]), np.array([7, 9])))
    assert not same_pairs(a, (np.array([1, 1, 2]), np.array([7, 8, 9])))


def test_the_as_of_bench_config_names_a_bad_field():
    with pytest.raises(ConfigError, match=r"^algorithms\[1\]: 'fast' is not one of"):
        AsOfBenchConfig(master="sqlite:///x.db", algorithms=["hybridjoin", "fast"])
    with pytest.raises(ConfigError, match=r"^rows: 2 is fewer than 3; expected at least one key's versions"):
        AsOfBenchConfig(master="sqlite:///x.db", rows=2)
    with pytest.raises(ConfigError, match=r"^batch_rows: "):
        AsOfBenchConfig(master="sqlite:///x.db", batch_rows=0)
